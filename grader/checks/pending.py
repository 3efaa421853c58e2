"""Placeholders for default-rubric checks not built yet: each reports `manual` with what to read.

A placeholder is registered only when no real module registered that id. `registry()` imports this
package's modules in name order, so this module first imports every sibling (a no-op for those already
imported) and only then fills the gaps; a real check therefore wins whatever its module is called.

A placeholder declares the facts the default rubric's rows name, so that rubric still validates; the row
is `manual` (score null), so those facts are never evaluated.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grader.checks as _checks
from grader.checks import CheckResult, register

if TYPE_CHECKING:
    from grader.checks import CheckFunc
    from grader.context import Context

__all__ = ["Pending"]


@dataclass(frozen=True)
class Pending:
    summary: str
    look_at: str  # what a reviewer should do by hand
    facts: tuple[str, ...]  # "name: meaning" lines the default rubric's row refers to


PENDING: dict[str, Pending] = {
    "secrets": Pending(
        "Credentials in the tree, the git history, the tapes and the grader's run output.",
        "grep the tree, `git log -p` and the cassettes for API keys and Authorization headers",
        ("findings: credentials found",),
    ),
    "loud-miss": Pending(
        "A missing tape fails loudly instead of reaching the network or inventing an answer.",
        "delete a cassette and run `make test`: the failure must name the missing tape; nothing may connect",
        (
            "loud: a missing tape failed loudly, naming the tape",
            "network_attempts: connection attempts during the probe",
            "silent_fallbacks: answers invented instead of failing",
        ),
    ),
    "metadata": Pending(
        "Every tape names its model, endpoint and recording time.",
        "open a few cassettes and look for the model, the served model, the endpoint and the recording time",
        (
            "tapes: tape files found",
            "with_model: tapes naming their model",
            "with_endpoint: tapes naming their endpoint",
            "with_time: tapes naming their recording time",
        ),
    ),
    "hygiene": Pending(
        "Tapes are pruned, small and free of credential headers.",
        "look for unused or duplicate tapes, oversized files and stored Authorization/api-key headers",
        (
            "tapes: tape files found",
            "unused: tapes no test replays",
            "duplicates: tapes with identical requests",
            "invalid: unreadable tapes",
            "credential_headers: stored credential headers",
            "total_mb: size of all tapes",
            "largest_mb: size of the largest tape",
        ),
    ),
    "keys": Pending(
        "Tape keys are canonical and every tape re-hashes to its own name.",
        "re-hash a tape's stored request with the documented normalization and compare it with its file name",
        (
            "probes_failed: key-function probes that failed",
            "mismatched: tapes whose request does not re-hash to their name",
        ),
    ),
    "replay-doc": Pending(
        "REPLAY.md says what was recorded and what was normalized, and why.",
        "read REPLAY.md: the model and endpoint recorded, the normalization rules and the reason for each",
        (
            "exists: REPLAY.md exists",
            "missing_sections: required sections missing",
            "contradictions: statements the tapes contradict",
        ),
    ),
    "boundary": Pending(
        "One module builds network clients; agent logic does not know about tapes.",
        "find where HTTP/SDK clients are built; agent code should not import the cassette module",
        (
            "client_modules: modules that build network clients",
            "agent_imports_cassette: agent modules importing the cassette layer",
        ),
    ),
}


def _placeholder(check_id: str, pending: Pending) -> CheckFunc:
    def check(ctx: Context) -> CheckResult:
        return CheckResult(
            facts={"summary": f"manual: {pending.look_at}"}, manual=f"not automated yet: {pending.look_at}"
        )

    facts = "".join(f"    {line} (not computed yet)\n" for line in pending.facts)
    check.__doc__ = (
        f"Not automated yet (manual). {pending.summary}\n\n"
        f"Facts:\n    summary: what a reviewer should look at\n{facts}"
    )
    check.__name__ = check.__qualname__ = f"pending_{check_id.replace('-', '_')}"
    return check


def _register_missing() -> None:
    for module in pkgutil.iter_modules(_checks.__path__):
        if not module.name.startswith("_") and module.name != __name__.rsplit(".", 1)[-1]:
            importlib.import_module(f"{_checks.__name__}.{module.name}")
    for check_id, pending in PENDING.items():
        if check_id not in _checks._REGISTRY:
            register(check_id)(_placeholder(check_id, pending))


_register_missing()
