"""The check registry: check id -> function(ctx) -> CheckResult, and how the pipeline schedules it.

Each module in this package registers its checks with ``@register("id")``. A check's docstring is the
single source of what it reports: the first line is its summary and the Google-style ``Facts:`` section lists
the facts (``name: meaning``) that rubric expressions may use. ``grade checks``, docs/rubric.md and the rubric
validator all read those parsed facts from here.

The registration is also the single source of how a check runs (grader/grading.py reads nothing else):
``phase`` puts it first, among the others, or last; ``probes`` names the function that starts, before the
first check, the background probes the check later waits for (docs/architecture.md, "Add a check").
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from grader.context import Context

__all__ = [
    "PHASES",
    "Check",
    "CheckResult",
    "Finding",
    "Phase",
    "ProbeStarter",
    "catalogue",
    "register",
    "registry",
]

SUMMARY_FACT = "summary"
_SUMMARY_MEANING = "one-line human summary of the result"


@dataclass
class Finding:
    """One concrete problem a check found, pointing at where it is."""

    rule: str
    message: str
    location: str  # "file:line" or "commit:file:line"


@dataclass
class CheckResult:
    """What a check reports: facts for the rubric, findings and detail lines for the reviewer."""

    facts: dict[str, object]
    findings: list[Finding] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    manual: str | None = None  # the check cannot decide; a reviewer should look at this text
    not_assessable: str | None = None  # infrastructure failure, with the reason
    # The check itself crashed on this submission (the exception's line). Scored 0, never left out of the
    # total: what a submission can make the grader trip over must not shrink the denominator it is judged on.
    crashed: str | None = None


CheckFunc = Callable[["Context"], CheckResult]
# Starts a check's background probes (`Context.start_probe`); the check takes their results with
# `Context.probe_result`, and runs a probe itself when it was never started (``--jobs 1``).
ProbeStarter = Callable[["Context"], None]

# "first": runs before every other check (others reuse what it memoizes); "last": after every other check
# (it reads what the others ran); "normal": in between, in the rubric's order or in parallel (--jobs).
Phase = Literal["first", "normal", "last"]
PHASES: tuple[Phase, ...] = ("first", "normal", "last")


@dataclass(frozen=True)
class Check:
    """A registered check: its id, function, one-line summary, documented facts (name -> meaning), and how
    the pipeline runs it (its phase, the starter of its background probes)."""

    id: str
    func: CheckFunc
    summary: str
    facts: dict[str, str]
    phase: Phase = "normal"
    probes: ProbeStarter | None = None

    @classmethod
    def from_function(
        cls, check_id: str, func: CheckFunc, *, phase: Phase = "normal", probes: ProbeStarter | None = None
    ) -> Check:
        """Build a Check from a function, reading summary and facts from its docstring."""
        summary, facts = _parse_docstring(func.__doc__ or "")
        if not summary:
            where = f"{func.__module__}.{func.__qualname__}"
            raise ValueError(f"check {check_id!r} ({where}) has no docstring summary")
        if phase not in PHASES:
            raise ValueError(f"check {check_id!r}: phase {phase!r} must be one of {', '.join(PHASES)}")
        return cls(id=check_id, func=func, summary=summary, facts=facts, phase=phase, probes=probes)


_REGISTRY: dict[str, Check] = {}
_loaded = False

_CHECK_ID = re.compile(r"^[a-z][a-z0-9-]*$")
_SECTION = re.compile(r"^(\w[\w ]*):\s*$")
_FACT_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$")


def register(
    check_id: str, *, phase: Phase = "normal", probes: ProbeStarter | None = None
) -> Callable[[CheckFunc], CheckFunc]:
    """Decorator: register ``func`` as the check ``check_id`` (lowercase, digits and dashes).

    ``phase``: "first", "normal" (the default) or "last" (see `Phase`). ``probes``: a function that starts
    the check's background probes; with ``--jobs`` above 1 the pipeline calls it before the first check,
    and runs the check after the other checks of its phase, since it mostly waits for those probes.
    """
    if not _CHECK_ID.match(check_id):
        raise ValueError(f"check id {check_id!r} must be lowercase letters, digits and dashes")

    def decorate(func: CheckFunc) -> CheckFunc:
        existing = _REGISTRY.get(check_id)
        if existing is not None and existing.func is not func:
            raise ValueError(
                f"check id {check_id!r} registered twice: {existing.func.__module__} and {func.__module__}"
            )
        _REGISTRY[check_id] = Check.from_function(check_id, func, phase=phase, probes=probes)
        return func

    return decorate


def registry() -> dict[str, Check]:
    """Every registered check, by id (sorted). Imports each module of this package once."""
    global _loaded
    if not _loaded:
        # Import errors propagate on purpose: a broken check module must not silently drop its rows.
        for module in pkgutil.iter_modules(__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{__name__}.{module.name}")
        _loaded = True
    return dict(sorted(_REGISTRY.items()))


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    lines = inspect.cleandoc(doc).splitlines()
    summary = lines[0].strip() if lines else ""
    facts: dict[str, str] = {}
    in_facts = False
    fact_indent: int | None = None
    current: str | None = None
    for line in lines[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            in_facts = _SECTION.match(line) is not None and line.strip() == "Facts:"
            fact_indent, current = None, None
            continue
        if not in_facts:
            continue
        if fact_indent is None:
            fact_indent = indent
        text = line.strip()
        match = _FACT_LINE.match(text)
        if indent == fact_indent and match:
            current = match.group(1)
            facts[current] = match.group(2).strip()
        elif indent > fact_indent and current is not None:
            facts[current] = f"{facts[current]} {text}".strip()
    # Every check reports a one-line summary (the default rubric's evidence is ``{{ summary }}``).
    if SUMMARY_FACT not in facts:
        facts = {SUMMARY_FACT: _SUMMARY_MEANING, **facts}
    return summary, facts


def catalogue(fmt: str = "text", checks: dict[str, Check] | None = None) -> str:
    """Every check with its facts, as ``text`` (for ``grade checks``) or ``markdown`` (for docs/rubric.md)."""
    checks = registry() if checks is None else checks
    if fmt == "text":
        return _catalogue_text(checks)
    if fmt == "markdown":
        return _catalogue_markdown(checks)
    raise ValueError(f"unknown catalogue format {fmt!r}; use 'text' or 'markdown'")


def _catalogue_text(checks: dict[str, Check]) -> str:
    out: list[str] = []
    for check in checks.values():
        out.append(f"{check.id}: {check.summary}")
        width = max((len(name) for name in check.facts), default=0)
        for name, meaning in check.facts.items():
            out.append(f"    {name.ljust(width)}  {meaning}")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "no checks registered\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _catalogue_markdown(checks: dict[str, Check]) -> str:
    out: list[str] = []
    for check in checks.values():
        out += [f"### `{check.id}`", "", _md_cell(check.summary), "", "| fact | meaning |", "| --- | --- |"]
        out += [f"| `{name}` | {_md_cell(meaning)} |" for name, meaning in check.facts.items()]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "_No checks registered._\n"
