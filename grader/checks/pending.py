"""Placeholders for default-rubric checks not built yet: each reports `manual` with what to read.

A placeholder is registered only when no real module registered that id. `registry()` imports this
package's modules in name order, so this module first imports every sibling (a no-op for those already
imported) and only then fills the gaps; a real check therefore wins whatever its module is called.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

import grader.checks as _checks
from grader.checks import CheckResult, register

if TYPE_CHECKING:
    from grader.checks import CheckFunc
    from grader.context import Context

# id -> (summary, what the reviewer should look at)
PENDING: dict[str, tuple[str, str]] = {
    "secrets": (
        "Credentials in the tree, the git history, the tapes and the grader's run output.",
        "grep the tree, `git log -p` and the cassettes for API keys and Authorization headers",
    ),
    "loud-miss": (
        "A missing tape fails loudly instead of reaching the network or inventing an answer.",
        "delete a cassette and run `make test`: the failure must name the missing tape; nothing may connect",
    ),
    "metadata": (
        "Every tape names its model, endpoint and recording time.",
        "open a few cassettes and look for the model, the served model, the endpoint and the recording time",
    ),
    "hygiene": (
        "Tapes are pruned, small and free of credential headers.",
        "look for unused or duplicate tapes, oversized files and stored Authorization/api-key headers",
    ),
    "keys": (
        "Tape keys are canonical and every tape re-hashes to its own name.",
        "re-hash a tape's stored request with the documented normalization and compare it with its file name",
    ),
    "replay-doc": (
        "REPLAY.md says what was recorded and what was normalized, and why.",
        "read REPLAY.md: the model and endpoint recorded, the normalization rules and the reason for each",
    ),
    "boundary": (
        "One module builds network clients; agent logic does not know about tapes.",
        "find where HTTP/SDK clients are built; agent code should not import the cassette module",
    ),
}


def _placeholder(check_id: str, summary: str, look_at: str) -> CheckFunc:
    def check(ctx: Context) -> CheckResult:
        return CheckResult(facts={"summary": f"manual: {look_at}"}, manual=f"{check_id}: {look_at}")

    first = f"Not automated yet (manual). {summary}"
    check.__doc__ = f"{first}\n\nFacts:\n    summary: what a reviewer should look at\n"
    check.__name__ = check.__qualname__ = f"pending_{check_id.replace('-', '_')}"
    return check


def _register_missing() -> None:
    for module in pkgutil.iter_modules(_checks.__path__):
        if not module.name.startswith("_") and module.name != __name__.rsplit(".", 1)[-1]:
            importlib.import_module(f"{_checks.__name__}.{module.name}")
    registered = _checks._REGISTRY
    for check_id, (summary, look_at) in PENDING.items():
        if check_id not in registered:
            register(check_id)(_placeholder(check_id, summary, look_at))


_register_missing()
