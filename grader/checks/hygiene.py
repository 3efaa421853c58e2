"""The cassette-hygiene check: tapes are used, unique, small, readable and free of credential headers."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from grader.checks import CheckResult, Finding, register
from grader.details import row_details
from grader.secrets import Scanner
from grader.tapes import Interaction, Tape, canonical_key, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["hygiene"]

_MB = 1_000_000
_DEFAULT_MAX_INTERACTIONS = 20
_MAX_LISTED = 20


@register("hygiene")
def hygiene(ctx: Context) -> CheckResult:
    """Tapes are pruned, small and free of credential headers.

    Unused means never opened during the replay run (the audit hook's record of opened files). Inside a
    vcrpy cassette that was opened, an interaction no test played is unplayed: the guard plugin logs which
    interactions vcrpy played each time it closes a cassette (a cassette used by several tests counts what
    any of them played; one that vcrpy loaded merged with others is not judged). Other multi-interaction
    formats have no such record: an opened file counts as used.
    When the replay run is not available, ``unused`` cannot be decided: it is reported as 0 with a detail
    line, and ``manual`` is set so the row goes to a reviewer instead of scoring a guess; every other fact is
    static and still reported.
    Duplicates: kit tapes whose stored requests re-hash to the same canonical request (across all files; the
    format is one file per request); vcrpy/JSON interactions with the same method, URI and body inside one
    file (vcrpy keeps one cassette per test, so the same request in two tests' cassettes is by design).
    A conversation blob is a file holding more interactions than ``thresholds.cassette_max_interactions``
    (default 20). Credential headers are reported by name and location, never by value; a header holds a
    credential when the no-credentials row's rules find one in its ``name: value`` line, so the rows agree.

    Facts:
        tapes: tape files found, invalid ones included
        unused: tapes never opened during the replay run
        unplayed: interactions in opened vcrpy cassettes that no test of the replay run played
        duplicates: extra copies of an already stored request
        conversation_blobs: files holding too many interactions to review as one tape
        credential_headers: request headers stored with a credential in them, as the secret rules judge it
            (grader/rules/secrets.toml: Authorization, x-api-key, api-key... or any provider key format)
        invalid: tapes that could not be parsed (bad JSON/YAML, symlink, too large, unknown shape)
        total_mb: size of all tapes in MB (10^6 bytes), 2 decimals
        largest_mb: size of the largest tape in MB, 2 decimals
        summary: one line with the counts and sizes
    """
    tapes = tapes_of(ctx)
    findings: list[Finding] = []
    details: list[str] = []
    unused, unplayed, why_unknown = _use(ctx, tapes, findings, details)
    invalid, duplicates, blobs, credentials = _contents(tapes, ctx.thresholds, findings, details)
    total_mb, largest_mb = _sizes(tapes, ctx.thresholds, details)
    facts: dict[str, Any] = {
        "tapes": len(tapes),
        "unused": unused,
        "unplayed": unplayed,
        "duplicates": duplicates,
        "conversation_blobs": blobs,
        "credential_headers": credentials,
        "invalid": invalid,
        "total_mb": total_mb,
        "largest_mb": largest_mb,
    }
    facts["summary"] = _summary(facts, unknown=bool(why_unknown))
    details = [f"{f.location} {f.message}" for f in findings] + details
    manual = None
    if why_unknown and tapes:
        manual = f"{facts['summary']}. Unused tapes could not be decided ({why_unknown}): check by hand."
    return CheckResult(facts=facts, findings=findings, details=details, manual=manual)


def _use(
    ctx: Context, tapes: list[Tape], findings: list[Finding], details: list[str]
) -> tuple[int, int, str | None]:
    """Tapes the replay run never opened and vcrpy interactions it never played, as findings and details:
    (unused tapes, unplayed interactions, why use could not be decided or None)."""
    opened_at, plays, why_unknown = _replayed(ctx)
    opened: set[str] | None = None
    if opened_at is not None:
        opened, inventory = _replay_opens(opened_at, tapes)
        for site in inventory[:_MAX_LISTED]:
            details.append(
                f"opens at {site} not counted as use: that test reads every tape (a check of the "
                "recordings, not a replay)"
            )
    # An invalid tape is reported as invalid only: it cannot be replayed whether opened or not.
    unused = [
        t for t in tapes if opened is not None and t.format != "invalid" and _norm(t.path) not in opened
    ]
    if why_unknown:
        details.append(f"unused tapes not decided: the replay run is not available ({why_unknown})")
    if opened is not None:  # what "0 unused" rests on: each tape the run opened, folded here (10,000 tapes)
        details += row_details(
            [
                f"{t.path}:1 opened by the replay run"
                for t in tapes
                if t.format != "invalid" and _norm(t.path) in opened
            ],
            [],
        )
    for tape in unused[:_MAX_LISTED]:
        findings.append(Finding("cassette-hygiene", "tape never opened by the replay run", f"{tape.path}:1"))
    _more(details, unused, "unused tapes", "never opened by the replay run")

    unplayed = _unplayed(tapes, plays)
    for tape, missing, total, line in unplayed[:_MAX_LISTED]:
        message = f"{missing} of {total} recorded interactions never played by the replay run"
        findings.append(Finding("cassette-hygiene", message, f"{tape.path}:{line}"))
    _more(details, unplayed, "cassettes", "with unplayed interactions")
    return len(unused), sum(missing for _, missing, _, _ in unplayed), why_unknown


def _contents(
    tapes: list[Tape], thresholds: Mapping[str, float], findings: list[Finding], details: list[str]
) -> tuple[int, int, int, int]:
    """What the tapes hold, as findings: (invalid tapes, duplicate requests, conversation blobs,
    credential headers)."""
    invalid = [t for t in tapes if t.format == "invalid"]
    for tape in invalid:
        line = _error_line(tape.error or "")
        findings.append(Finding("cassette-hygiene", f"invalid tape: {tape.error}", f"{tape.path}:{line}"))

    duplicates = _duplicates(tapes)
    for tape, inter, first in duplicates[:_MAX_LISTED]:
        where = f"{tape.path}:{inter.line or 1}"
        findings.append(Finding("cassette-hygiene", f"duplicate of the request stored at {first}", where))
    _more(details, duplicates, "duplicates", "")
    requests = sum(len(t.interactions) for t in tapes)
    if tapes and not duplicates:
        details.append(f"no request stored twice: {requests} stored requests compared (kit tapes by key)")

    limit = int(thresholds.get("cassette_max_interactions", _DEFAULT_MAX_INTERACTIONS))
    blobs = [t for t in tapes if len(t.interactions) > limit]
    for tape in blobs:
        message = f"{len(tape.interactions)} interactions in one file (more than {limit})"
        findings.append(Finding("cassette-hygiene", message, f"{tape.path}:1"))
    fullest = max(tapes, key=lambda t: len(t.interactions), default=None)
    if fullest is not None and not blobs:
        details.append(
            f"{fullest.path}:1 holds the most interactions, {len(fullest.interactions)} "
            f"(a conversation blob holds more than {limit})"
        )

    credentials = list(_credential_headers(tapes))
    for name, where in credentials:
        findings.append(Finding("cassette-hygiene", f"credential header {name!r} stored with a value", where))
    if tapes and not credentials:
        headers = sum(len(i.request_headers) for t in tapes for i in t.interactions)
        details.append(f"no request header holds a credential: {headers} stored request headers read")
    return len(invalid), len(duplicates), len(blobs), len(credentials)


def _sizes(tapes: list[Tape], thresholds: Mapping[str, float], details: list[str]) -> tuple[float, float]:
    """(total MB, largest MB), with a detail line for each size above its threshold."""
    sizes = [t.size for t in tapes]
    total_mb = round(sum(sizes) / _MB, 2)
    largest_mb = round(max(sizes, default=0) / _MB, 2)
    largest = max(tapes, key=lambda t: t.size, default=None)
    total_cap = thresholds.get("cassette_total_mb")
    largest_cap = thresholds.get("cassette_largest_mb")
    if total_cap is not None and total_mb > float(total_cap):
        details.append(f"tapes total {total_mb} MB, above the {total_cap} MB threshold")
    if largest is not None and largest_cap is not None and largest_mb > float(largest_cap):
        details.append(f"{largest.path} is {largest_mb} MB, above the {largest_cap} MB threshold")
    elif largest is not None:
        details.append(
            f"{largest.path}:1 is the largest tape: {largest.size} bytes ({largest_mb} MB; threshold "
            f"{largest_cap} MB); all {len(tapes)} tapes {total_mb} MB (threshold {total_cap} MB)"
        )
    return total_mb, largest_mb


def _replay_opens(opened_at: dict[str, set[str]], tapes: list[Tape]) -> tuple[set[str], list[str]]:
    """(tapes opened as a replay, the test-file call sites left out because each read every tape).

    A suite may lint its recordings (``for p in RECORDINGS.glob("*.json"): ...``); those reads open stale
    tapes too, so they say nothing about use. A call site in a test file that opened every tape is such a
    read when some other site opened tapes as well; a replay layer in the package that preloads every tape
    is not left out (all of them count as used, as before).
    """
    wanted = {_norm(t.path) for t in tapes if t.format != "invalid"}
    sites: dict[str, set[str]] = {}
    for path, where in opened_at.items():
        for site in where:
            sites.setdefault(site, set()).add(path)
    inventory = sorted(
        site
        for site, paths in sites.items()
        if len(wanted) > 1 and wanted <= paths and _in_tests(site.rpartition(":")[0])
    )
    if not inventory or len(inventory) == len(sites):
        return set(opened_at), []
    return {p for site, paths in sites.items() if site not in inventory for p in paths}, inventory


def _in_tests(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    return bool(parts) and (
        parts[0] in ("tests", "test")
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def _replayed(
    ctx: Context,
) -> tuple[dict[str, set[str]] | None, dict[str, tuple[int, set[int]]], str | None]:
    """(repo-relative paths the replay run opened, each with its call sites; vcrpy plays by repo-relative
    path; None), or (None, {}, reason) when there was no run."""
    if ctx.env is None:
        if ctx.install_failed:
            # The submission's own dependencies cannot be installed: no run opened any tape, and that is
            # the evidence (every tape unused), not a reason to leave the row to a reviewer.
            return {}, {}, None
        return None, {}, ctx.install_error or "no installed environment"
    try:
        run = ctx.replay_run()
    except Exception as exc:  # NotAssessable and anything else: the static facts still stand
        return None, {}, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    plays: dict[str, tuple[int, set[int]]] = {}
    ran_in = ctx.checkout  # the suite ran in the working copy, not the pristine one
    roots = {os.path.join(os.path.abspath(ran_in), ""), os.path.join(os.path.realpath(ran_in), "")}
    for path, play in (run.guard.vcr_plays if run.guard is not None else {}).items():
        if not os.path.isabs(path):  # the guard logs a cassette inside the run's folder relative to it
            plays[_norm(path)] = play
            continue
        for root in roots:
            if path.startswith(root):
                plays[_norm(path[len(root) :])] = play
                break
    opened_at: dict[str, set[str]] = {}
    for path in run.audit.opened:
        opened_at.setdefault(_norm(path), set()).update(run.audit.opened_at.get(path) or {"?"})
    return opened_at, plays, None


def _unplayed(tapes: list[Tape], plays: dict[str, tuple[int, set[int]]]) -> list[tuple[Tape, int, int, int]]:
    """(tape, unplayed interactions, interactions, line of the first unplayed one) per vcrpy cassette."""
    out = []
    for tape in tapes:
        play = plays.get(_norm(tape.path)) if tape.format != "invalid" else None
        if play is None:
            continue
        total, played = play
        # vcrpy's cassette must be this file and only it: pytest-recording merges a test's shared cassettes
        # (@pytest.mark.vcr("shared.yaml")) into the one named after the test, whose count then differs.
        if total != len(tape.interactions):
            continue
        missing = [i for i in range(total) if i not in played]
        if missing:
            out.append((tape, len(missing), total, tape.interactions[missing[0]].line or 1))
    return out


def _norm(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def _error_line(error: str) -> int:
    match = re.search(r"at line (\d+)", error)
    return int(match.group(1)) if match else 1


def _duplicates(tapes: list[Tape]) -> list[tuple[Tape, Interaction, str]]:
    """(tape, interaction, where the first copy is) for every copy after the first."""
    seen: dict[str, str] = {}
    out = []
    for tape in tapes:
        if tape.format == "kit":
            inter = tape.interactions[0]
            ident = "kit:" + canonical_key(inter.method, inter.path, inter.request_body)
            if ident in seen:
                out.append((tape, inter, seen[ident]))
            else:
                seen[ident] = f"{tape.path}:1"
            continue
        local: dict[str, str] = {}
        for inter in tape.interactions:
            ident = json.dumps([inter.method, inter.url or inter.path, inter.request_body], sort_keys=True)
            if ident in local:
                out.append((tape, inter, local[ident]))
            else:
                local[ident] = f"{tape.path}:{inter.line or 1}"
    return out


def _credential_headers(tapes: list[Tape]) -> Iterator[tuple[str, str]]:
    """(header name, "file:line") for each request header stored with a credential, as the secret rules
    define it (`Scanner.header_holds_credential`: the same verdict as the no-credentials row's)."""
    scanner = Scanner()
    for tape in tapes:
        for inter in tape.interactions:
            for name, values in inter.request_headers.items():
                if any(scanner.header_holds_credential(name, value) for value in values):
                    line = tape.find_line(name, start=inter.line or 1) or inter.line or 1
                    yield name, f"{tape.path}:{line}"


def _more(details: list[str], items: list[Any], label: str, what: str) -> None:
    if len(items) > _MAX_LISTED:
        details.append(f"... and {len(items) - _MAX_LISTED} more {label} {what}".rstrip())


def _summary(facts: dict[str, Any], *, unknown: bool) -> str:
    if not facts["tapes"]:
        return "no tapes found"
    unused = "unused not decided" if unknown else f"{facts['unused']} unused"
    if facts["unplayed"]:
        n = facts["unplayed"]
        unused += f" ({n} unplayed interaction{'s' if n != 1 else ''} in opened cassettes)"
    return (
        f"{facts['tapes']} tapes, {facts['total_mb']} MB (largest {facts['largest_mb']} MB); {unused}, "
        f"{facts['duplicates']} duplicates, {facts['invalid']} invalid, "
        f"{facts['conversation_blobs']} conversation blobs, {facts['credential_headers']} credential headers"
    )
