"""The replay-doc check: REPLAY.md says what was recorded, what was normalized and why, what replay proves.

The patterns are data, grader/rules/replay_doc.json; the baked project's `make check` (tools/selfcheck.py)
reads a byte copy of it and follows this module step by step, so a candidate sees the count and the lines this
check will report (tests/test_selfcheck.py feeds both the same REPLAY.md variants).

Heuristics (a document is prose; these are deliberately simple and reported line by line for the reviewer):
- The file is ``REPLAY.md`` in any letter case, in the repo root or ``docs/``; a symlink is not read.
- The document is split into sections at Markdown headings. A topic is covered when a heading matches the
  topic's heading pattern, or, failing that, when a line anywhere matches its keyword pattern. A section that
  still holds unfilled template text (`TODO`, `TBD`, `FIXME`, `<fill ...>`) covers nothing.
- Normalized fields are the backticked names (`user`) on list or table lines of the normalization section
  (or, without one, on lines that mention normalizing/dropping). A field has a reason when its line still has
  three words once the backticked names are removed. Any field without one counts as a missing section.
- Contradictions, checked against kit-format tapes only (they store exactly what was hashed; vcrpy stores the
  raw request whatever its matcher ignores): a field the document says is dropped/removed/ignored that a
  stored request still carries; a model the document names (outside a "does not prove" / limitations
  section) that no tape carries, requested or served.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.checks import CheckResult, Finding, register
from grader.safeio import read_bytes
from grader.tapes import Tape, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["replay_doc"]

# The rule is data shared with the baked project's `make check` (tools/selfcheck.py reads its byte-identical
# copy, tools/replay_doc.json), so the preview counts the same topics and cites the same lines as this check.
_RULE: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "rules" / "replay_doc.json").read_text("utf-8")
)
_MAX_BYTES = int(_RULE["max_bytes"])
# Unfilled template text: what a stub asks the author to replace.
_UNFILLED = re.compile(_RULE["unfilled"])
_HEADING = re.compile(_RULE["heading"])
_BACKTICKED = re.compile(_RULE["backticked"])
_LISTISH = re.compile(_RULE["listish"])
_DROP_WORDS = re.compile(_RULE["drop_words"])
_MODEL_NAME = re.compile(_RULE["model_name"])
_NORMALIZED_LINES = re.compile(_RULE["normalized_lines"])
_FENCES = tuple(_RULE["fence"])

# topic -> (heading pattern, keyword pattern for lines anywhere)
_TOPICS: dict[str, tuple[str, str]] = {t["name"]: (t["heading"], t["keyword"]) for t in _RULE["topics"]}


@dataclass
class _Section:
    title: str
    line: int  # 1-based line of the heading (0 for text before the first heading)
    lines: list[tuple[int, str]] = field(default_factory=list)
    level: int = 0  # number of #s (0 for text before the first heading)


@register("replay-doc")
def replay_doc(ctx: Context) -> CheckResult:
    """REPLAY.md says what was recorded and what was normalized, and why.

    Topics: endpoint family, model, recording date, normalized fields each with a reason, what replay proves
    and what it does not. Cross-checked against the kit-format tapes (see the module docstring for the
    heuristics). The patterns are grader/rules/replay_doc.json; the baked project's `make check` reads a copy
    of it and reports the same count and the same lines.

    Facts:
        exists: REPLAY.md found (repo root or docs/, any letter case)
        missing_sections: topics not covered (a normalized field without a reason counts as one)
        contradictions: claims the tapes contradict (a dropped field still stored, a model no tape carries)
        sections_found: topics covered, in document order of the checklist
        summary: one line, e.g. "REPLAY.md covers 6/6 topics, 0 contradictions"
    """
    found = _find_doc(Path(ctx.repo))
    if isinstance(found, str) or found is None:
        reason = found if isinstance(found, str) else "no REPLAY.md in the repo root or docs/"
        facts: dict[str, Any] = {
            "exists": False,
            "missing_sections": len(_TOPICS),
            "contradictions": 0,
            "sections_found": [],
            "summary": reason,
        }
        finding = Finding("replay-doc", reason, "REPLAY.md:1")
        return CheckResult(facts=facts, findings=[finding], details=[reason])

    path, text = found
    rel = path.relative_to(ctx.repo).as_posix()
    sections = _sections(text)
    details: list[str] = []
    findings: list[Finding] = []

    covered: dict[str, int] = {}
    for topic, (heading_rx, keyword_rx) in _TOPICS.items():
        line = _covers(sections, heading_rx, keyword_rx)
        if line is not None:
            covered[topic] = line

    # What the document claims is dropped counts wherever it is written (a contradiction is one even in a
    # stub); coverage counts only filled-in sections.
    fields, _, _ = _normalized_fields(sections)
    _, unexplained, norm_found = _normalized_fields([s for s in sections if not _unfilled(s)])
    if norm_found and "normalized fields" not in covered:
        covered["normalized fields"] = norm_found
    if unexplained and "normalized fields" in covered:
        del covered["normalized fields"]
        names = ", ".join(name for name, _ in unexplained)
        details.append(f"{rel}:{unexplained[0][1]} normalized fields without a reason: {names}")
    for topic, (heading_rx, _) in _TOPICS.items():
        if topic in covered:
            details.append(f"{rel}:{covered[topic]} covers {topic}")
        else:
            # Point where the topic was meant to go: the first unfilled line of its section, as `make check`.
            line, why = _unfilled_line(sections, heading_rx)
            if topic == "normalized fields" and unexplained:
                why = f"{', '.join(name for name, _ in unexplained)} listed without a reason"
            findings.append(Finding("replay-doc", f"does not cover {topic}: {why}", f"{rel}:{line}"))

    kit = [t for t in tapes_of(ctx) if t.format == "kit"]
    contradictions = _stored_dropped_fields(fields, kit, rel) + _unknown_models(sections, tapes_of(ctx), rel)
    for message, where in contradictions:
        findings.append(Finding("replay-doc", message, where))
        details.append(f"{where} {message}")

    found_topics = [t for t in _TOPICS if t in covered]
    facts = {
        "exists": True,
        "missing_sections": len(_TOPICS) - len(found_topics),
        "contradictions": len(contradictions),
        "sections_found": found_topics,
    }
    facts["summary"] = (
        f"{rel} covers {len(found_topics)}/{len(_TOPICS)} topics, {len(contradictions)} contradictions"
        + (
            f" (missing: {', '.join(t for t in _TOPICS if t not in covered)})"
            if len(found_topics) < len(_TOPICS)
            else ""
        )
    )
    return CheckResult(facts=facts, findings=findings, details=details)


def _find_doc(repo: Path) -> tuple[Path, str] | str | None:
    for folder in (repo / name for name in _RULE["folders"]):
        if folder.is_symlink() or not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if entry.name.lower() != _RULE["file_name"]:
                continue
            if entry.is_symlink():
                return f"{entry.relative_to(repo).as_posix()} is a symlink; not read"
            try:  # a regular file only, never a FIFO (grader/safeio.py)
                raw = read_bytes(entry, cap=_MAX_BYTES, root=repo, truncate=True)
            except OSError:
                continue
            return entry, raw.decode("utf-8", "replace")
    return None


def _sections(text: str) -> list[_Section]:
    sections = [_Section(title="", line=0)]
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(_FENCES):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if match:
            sections.append(_Section(title=match.group(2), line=number, level=len(match.group(1))))
        else:
            sections[-1].lines.append((number, line))
    return sections


def _unfilled_line(sections: list[_Section], heading_rx: str) -> tuple[int, str]:
    """(the line a missing topic is cited at, why it is missing). A `#` title ("... replays its model calls")
    is the place only when no section heading names the topic: the stub's intro is not where it goes."""
    for section in sorted(sections, key=lambda s: s.level == 1):
        if section.line and re.search(heading_rx, _plain(section.title), re.IGNORECASE):
            todo = next((n for n, line in section.lines if _UNFILLED.search(line)), None)
            if todo:
                return todo, "its section still holds unfilled text (TODO, TBD, FIXME or <fill ...>)"
            return section.line, "its section says nothing about it"
    return 1, "no heading or filled-in line names it"


def _unfilled(section: _Section) -> bool:
    return any(_UNFILLED.search(line) for _, line in section.lines)


_EMPHASIS = re.compile(_RULE["emphasis"])


def _plain(text: str) -> str:
    """Markdown emphasis removed: ``does **not** prove`` reads as ``does not prove``."""
    return _EMPHASIS.sub("", text)


def _covers(sections: list[_Section], heading_rx: str, keyword_rx: str) -> int | None:
    # A section with a TODO left is a stub, whatever its heading promises; the stub's own sentences never
    # cover a topic.
    filled = [s for s in sections if not _unfilled(s)]
    for section in filled:
        if section.line and re.search(heading_rx, _plain(section.title), re.IGNORECASE):
            return section.line
    for section in filled:
        for number, line in section.lines:
            if re.search(keyword_rx, _plain(line), re.IGNORECASE):
                return number
    return None


def _normalized_fields(
    sections: list[_Section],
) -> tuple[list[tuple[str, int, bool]], list[tuple[str, int]], int | None]:
    """([(field, line, claimed dropped)], [(field without a reason, line)], line of the first field)."""
    heading_rx = _TOPICS["normalized fields"][0]
    chosen = [s for s in sections if s.line and re.search(heading_rx, s.title, re.IGNORECASE)]
    candidates: list[tuple[int, str, bool]] = []
    if chosen:
        for section in chosen:
            section_drops = bool(_DROP_WORDS.search(section.title))
            candidates += [(n, line, section_drops) for n, line in section.lines]
    else:
        for section in sections:
            candidates += [(n, line, False) for n, line in section.lines if _NORMALIZED_LINES.search(line)]
    fields: list[tuple[str, int, bool]] = []
    unexplained: list[tuple[str, int]] = []
    for number, line, section_drops in candidates:
        if not _LISTISH.match(line):
            continue
        names = _BACKTICKED.findall(line)
        if not names:
            continue
        rest = _BACKTICKED.sub(" ", line)
        rest = re.sub(r"[|:*\-+—–,()]", " ", rest)
        explained = len(re.findall(r"[A-Za-z]{2,}", rest)) >= 3
        drops = section_drops or bool(_DROP_WORDS.search(line))
        for name in names:
            fields.append((name, number, drops))
            if not explained:
                unexplained.append((name, number))
    first = fields[0][1] if fields else None
    return fields, unexplained, first


def _stored_dropped_fields(
    fields: list[tuple[str, int, bool]], kit: list[Tape], rel: str
) -> list[tuple[str, str]]:
    out = []
    for name, line, drops in fields:
        if not drops:
            continue
        holders = [t for t in kit if _has_key(t.interactions[0].request_body, name)]
        if holders:
            message = f"says `{name}` is dropped, but {holders[0].path} stores it"
            if len(holders) > 1:
                message += f" (and {len(holders) - 1} more tapes)"
            out.append((message, f"{rel}:{line}"))
    return out


def _has_key(value: Any, name: str, depth: int = 0) -> bool:
    if depth > 50:
        return False
    if isinstance(value, dict):
        return name in value or any(_has_key(v, name, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_key(v, name, depth + 1) for v in value)
    return False


def _unknown_models(sections: list[_Section], tapes: list[Tape], rel: str) -> list[tuple[str, str]]:
    carried: set[str] = set()
    for tape in tapes:
        carried |= {m for m in (tape.model, tape.served_model) if m}
        for inter in tape.interactions:
            carried |= {m for m in (inter.model, inter.served_model) if m}
    if not carried:
        return []  # nothing to compare with: no tape names a model (the metadata check reports that)
    lowered = {m.lower() for m in carried} | {m.lower().rsplit("/", 1)[-1] for m in carried}
    limits_rx = _TOPICS["what replay does not prove"][0]
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for section in sections:
        if section.line and re.search(limits_rx, section.title, re.IGNORECASE):
            continue  # "switching to gpt-4o needs a new recording" is not a claim about the tapes
        for number, line in section.lines:
            for match in _MODEL_NAME.finditer(line):
                shown = match.group(1).rstrip(".-")  # a sentence's full stop is not part of the name
                name = shown.lower()
                if name in seen or name in lowered or name.rsplit("/", 1)[-1] in lowered:
                    continue
                seen.add(name)
                out.append((f"names model {shown}, which no tape carries", f"{rel}:{number}"))
    return out
