"""The replay-doc check: REPLAY.md says what was recorded, what was normalized and why, what replay proves.

The patterns are data, grader/rules/replay_doc.json; the baked project's `make check` (tools/selfcheck.py)
reads a byte copy of it and follows this module step by step, so a candidate sees the count and the lines this
check will report (tests/test_selfcheck.py feeds both the same REPLAY.md variants).

Heuristics (a document is prose; these are deliberately simple and reported line by line for the reviewer):
- The file is ``REPLAY.md`` in any letter case, in the repo root or ``docs/``; a symlink is not read.
- The document is split into sections at Markdown headings (`#` and underlined). A topic's places are the
  sections under a heading matching its heading pattern and the paragraphs with a line matching its keyword
  pattern (a paragraph ending in ':' takes the table or list after it; a paragraph naming a model, a date or
  an API address is a place for that topic without the keyword). A section that still holds unfilled
  template text (`TODO`, `TBD`, `FIXME`, `<fill ...>`) is no place for anything; a model named under a
  "does not prove" heading is not the model recorded; "it does not prove X" is not what replay proves.
- A topic is covered only when one of its places says something a reviewer could check (each topic's
  ``substance`` in the rule): the endpoint a host, URL or API path; the model a model name (a known
  family's shape, a backticked id with a digit, or a model the tapes carry); the recording date a date; the
  normalized fields a named field (backticked, quoted, snake_case, a header) and a reason (because, so,
  otherwise, would, differs...; or a list or table line with three words beside the name; "nothing is
  normalized" with a reason counts); what replay proves a sentence of three content words; what it does not
  prove such a sentence, which must itself be negative under a heading shared with what replay proves.
  Named without substance, a topic is reported with what it lacks, at the line naming it.
- Listed normalized fields are the backticked names (`user`) on list or table lines of the normalization
  section (or, without one, on lines that mention normalizing/dropping). A field has a reason when its line
  still has three words once the backticked names are removed. One without leaves the topic uncovered.
- Contradictions: a field the document says is dropped/removed/ignored that a stored request still carries
  (kit-format tapes only: they store exactly what was hashed; vcrpy stores the raw request whatever its
  matcher ignores); a model the document names (outside a "does not prove" / limitations section) that no
  tape carries, requested or served; endpoint hosts the document claims, none of which a tape was recorded
  against; recording dates it gives, none within a day of one a tape holds (grader/checks/replay_claims.py:
  what counts as a claim, and how each tape format says where and when it was recorded).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.checks import CheckResult, Finding, register
from grader.checks.replay_claims import ClaimLine, date_contradiction, host_contradiction
from grader.inert import visible
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
_SETEXT = re.compile(_RULE["setext"])  # the line under a "Title\n=====" or "Title\n-----" heading
_BACKTICKED = re.compile(_RULE["backticked"])
_LISTISH = re.compile(_RULE["listish"])
_DROP_WORDS = re.compile(_RULE["drop_words"])
_MODEL_NAME = re.compile(_RULE["model_name"])
_NORMALIZED_LINES = re.compile(_RULE["normalized_lines"])
_FENCES = tuple(_RULE["fence"])

# topic -> (heading pattern, keyword pattern for lines anywhere)
_TOPICS: dict[str, tuple[str, str]] = {t["name"]: (t["heading"], t["keyword"]) for t in _RULE["topics"]}
# topic -> what one of its places must say to cover it (see the module docstring)
_SUBSTANCE: dict[str, dict[str, Any]] = {t["name"]: t["substance"] for t in _RULE["topics"]}
_NEEDS: dict[str, list[tuple[re.Pattern[str], dict[str, Any]]]] = {
    name: [(re.compile(need["pattern"]), need) for need in rule["needs"]] for name, rule in _SUBSTANCE.items()
}
_CONTENT_WORD = re.compile(_RULE["content_word"])
_FILLER = frozenset(_RULE["filler_words"].split())
_SENTENCE_END = re.compile(_RULE["sentence_end"])
_REASON_WORDS = int(_RULE["reason_words"])


@dataclass
class _Place:
    """Where a document may speak to a topic: a section under its heading, or a paragraph naming it."""

    line: int  # the heading's line, or the line naming the topic
    lines: list[tuple[int, str]]  # the heading and the section's lines, or the paragraph's lines
    shared: bool = False  # under a heading that also names the topic its rule says it shares one with
    under_heading: bool = False  # lines[0] is the heading (a title is no sentence of substance)


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
    and what it does not. A topic counts only where the document says something checkable about it (a host
    or URL, a model name, a date, a named field with a reason, a sentence of substance), wherever it is
    written. Cross-checked against the tapes: dropped fields, models, the endpoint host and the recording
    date (see the module docstring for the heuristics).
    The patterns are grader/rules/replay_doc.json; the baked project's `make check` reads a copy of it and
    reports the same count and the same lines.

    Facts:
        exists: REPLAY.md found (repo root or docs/, any letter case)
        missing_sections: topics not covered (a normalized field without a reason, or a topic named with
            nothing checkable, counts as one)
        contradictions: claims the tapes contradict (a dropped field still stored, a model no tape carries,
            endpoint hosts none of which the tapes were recorded against, recording dates none of which is
            within a day of a tape's; each cited at its REPLAY.md line with what the tapes say)
        sections_found: topics covered, in document order of the checklist
        summary: one line, e.g. "REPLAY.md covers 6/6 topics, 0 contradictions"; a topic named without
            substance is listed with what it lacks and its line ("model at REPLAY.md:5 — no model name")
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
    text = visible(text)  # `TO\u200bDO` is a TODO as the reader sees it (red team 32)
    rel = path.relative_to(ctx.repo).as_posix()
    sections = _sections(text)
    details: list[str] = []
    findings: list[Finding] = []

    covered: dict[str, int] = {}
    hollow: dict[str, tuple[int, str]] = {}  # topic -> (line, what its places lack)
    models = _models_pattern(_carried_models(tapes_of(ctx)))
    for topic in _TOPICS:
        said = _says(sections, topic, models)
        if isinstance(said, int):
            covered[topic] = said
        elif said is not None:
            hollow[topic] = said

    # What the document claims is dropped counts wherever it is written (a contradiction is one even in a
    # stub); coverage counts only filled-in sections.
    fields, _, _ = _normalized_fields(sections)
    _, unexplained, norm_found = _normalized_fields([s for s in sections if not _unfilled(s)])
    if norm_found and "normalized fields" not in covered:
        covered["normalized fields"] = norm_found  # "- `user` dropped: identifies the caller", no heading
        hollow.pop("normalized fields", None)
    if unexplained:  # any listed field without a reason: the topic is not covered, whatever else is said
        covered.pop("normalized fields", None)
        hollow.pop("normalized fields", None)
        names = ", ".join(name for name, _ in unexplained)
        details.append(f"{rel}:{unexplained[0][1]} normalized fields without a reason: {names}")
    for topic, (heading_rx, _) in _TOPICS.items():
        if topic in covered:
            details.append(f"{rel}:{covered[topic]} covers {topic}")
            continue
        if topic == "normalized fields" and unexplained:
            line, _ = _unfilled_line(sections, heading_rx)
            why = f"{', '.join(name for name, _ in unexplained)} listed without a reason"
        elif topic in hollow:
            line, why = hollow[topic]
        else:
            # Point where the topic was meant to go: the first unfilled line of its section, as `make check`.
            line, why = _unfilled_line(sections, heading_rx)
        findings.append(Finding("replay-doc", f"does not cover {topic}: {why}", f"{rel}:{line}"))

    kit = [t for t in tapes_of(ctx) if t.format == "kit"]
    contradictions = _stored_dropped_fields(fields, kit, rel) + _unknown_models(sections, tapes_of(ctx), rel)
    claims = _claim_lines(sections)
    for claim in (
        host_contradiction(claims, tapes_of(ctx), rel),
        date_contradiction(claims, tapes_of(ctx), rel),
    ):
        if claim is not None:
            contradictions.append(claim)
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
    facts["summary"] = _summary(rel, covered, hollow, len(contradictions))
    return CheckResult(facts=facts, findings=findings, details=details)


def _summary(
    rel: str, covered: dict[str, int], hollow: dict[str, tuple[int, str]], contradictions: int
) -> str:
    """The row's evidence: the count, then what is missing and what is named with nothing checkable."""
    parts = []
    missing = [t for t in _TOPICS if t not in covered and t not in hollow]
    if missing:
        parts.append(f"missing: {', '.join(missing)}")
    if hollow:
        said = "; ".join(f"{t} at {rel}:{hollow[t][0]} — {hollow[t][1]}" for t in _TOPICS if t in hollow)
        parts.append(f"without substance: {said}")
    return f"{rel} covers {len(covered)}/{len(_TOPICS)} topics, {contradictions} contradictions" + (
        f" ({'; '.join(parts)})" if parts else ""
    )


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


def _title(text: str) -> str:
    """An ATX heading's title: its closing run of #s (after a space, or the whole title) and the blanks
    around it left out, in code rather than in the rule's pattern (red team 6, H3: the pattern
    `(.*?)\\s*#*\\s*$` backtracked for minutes on one heading line padded with blanks)."""
    title = text.rstrip()
    bare = title.rstrip("#")
    if bare != title and (not bare or bare[-1] in " \t"):
        title = bare.rstrip()
    return title


def _sections(text: str) -> list[_Section]:
    sections = [_Section(title="", line=0)]
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(_FENCES):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if match:
            sections.append(_Section(title=_title(match.group(2)), line=number, level=len(match.group(1))))
        elif not in_code and _SETEXT.match(line) and _setext_title(sections[-1].lines):
            start, title = sections[-1].lines.pop()
            sections.append(_Section(title=title.strip(), line=start, level=1 if "=" in line else 2))
        else:
            sections[-1].lines.append((number, line))
    return sections


def _setext_title(lines: list[tuple[int, str]]) -> bool:
    """Whether the last line read can be underlined into a heading: a line of text, not a list or table."""
    if not lines or not lines[-1][1].strip():
        return False
    return not _LISTISH.match(lines[-1][1]) and not _HEADING.match(lines[-1][1])


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


def _says(
    sections: list[_Section], topic: str, models: re.Pattern[str] | None
) -> int | tuple[int, str] | None:
    """The line where the document says something checkable about ``topic``; else (the first place it is
    named, what that place lacks); None when nothing names it."""
    places = _places(sections, topic)
    verdicts = [_substance(place, topic, models) for place in places]
    for verdict in verdicts:
        if isinstance(verdict, int):
            return verdict
    return (places[0].line, str(verdicts[0])) if places else None


def _places(sections: list[_Section], topic: str) -> list[_Place]:
    """The topic's sections (by heading; a `#` title last), then the paragraphs that name it, in order.
    A section with a TODO left is a stub, whatever its heading promises: no place for anything."""
    heading_rx, keyword_rx = _TOPICS[topic]
    rule = _SUBSTANCE[topic]
    shares = _TOPICS[rule["shares_heading_with"]][0] if "shares_heading_with" in rule else None
    locate = rule.get("locate") or (rule["needs"][0]["pattern"] if rule.get("locates") else None)
    # "A newer model (gpt-4.1) needs a new recording", under "does not prove", is not the model recorded.
    outside = _TOPICS[rule["not_under"]][0] if "not_under" in rule else None
    filled = [
        s
        for s in sections
        if not _unfilled(s) and not (outside and re.search(outside, s.title, re.IGNORECASE))
    ]
    places = []
    for section in sorted(filled, key=lambda s: s.level == 1):
        title = _plain(section.title)
        if section.line and re.search(heading_rx, title, re.IGNORECASE):
            shared = shares is not None and bool(re.search(shares, title, re.IGNORECASE))
            lines = [(section.line, section.title), *section.lines]
            places.append(_Place(section.line, lines, shared, under_heading=True))
    for section in filled:
        paragraphs = _paragraphs(section.lines)
        for index, paragraph in enumerate(paragraphs):
            for number, line in paragraph:
                text = _plain(line)
                if re.search(keyword_rx, text, re.IGNORECASE) or (locate and re.search(locate, text)):
                    # "Left out of the key:" introduces the table or list after it.
                    follows = paragraphs[index + 1] if paragraph[-1][1].rstrip().endswith(":") else []
                    places.append(_Place(number, [(n, t) for n, t in paragraph if n >= number] + follows))
                    break
    return places


def _paragraphs(lines: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    out: list[list[tuple[int, str]]] = [[]]
    for number, line in lines:
        if line.strip():
            out[-1].append((number, line))
        elif out[-1]:
            out.append([])
    return [p for p in out if p]


def _substance(place: _Place, topic: str, models: re.Pattern[str] | None) -> int | str:
    """The line of the place that says what ``topic`` needs, or what the place lacks."""
    rule = _SUBSTANCE[topic]
    needs = _NEEDS[topic]
    if rule["unit"] == "sentence":
        # The heading or the line naming the topic says which topic a sentence is about, unless the heading
        # names two ("What replay proves and what it does not"): then the sentence itself must (`needs`).
        body = place.lines[1:] if place.under_heading else place.lines
        unless = _TOPICS[rule["unless_naming"]][1] if "unless_naming" in rule else None
        wordy = [
            (n, s)
            for n, s in _sentences(body)
            if _content_words(s) >= rule["min_words"] and not (unless and re.search(unless, s, re.IGNORECASE))
        ]
        for number, sentence in wordy:
            if not place.shared or all(rx.search(sentence) for rx, _ in needs):
                return number
        return str(rule["lacks"] if not wordy else needs[0][1]["lacks"])
    first: int | None = None
    for index, (rx, need) in enumerate(needs):
        found = next((n for n, line in place.lines if rx.search(_plain(line))), None)
        if found is None and index == 0 and models is not None and rule.get("tape_models"):
            found = next((n for n, line in place.lines if models.search(line.lower())), None)
        if found is None and need.get("or_explained_list_line"):
            found = next((n for n, line in place.lines if _explained_list_line(line)), None)
        if found is None:
            return str(need["lacks"])
        first = found if first is None else first
    return first if first is not None else place.line


def _sentences(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(line, sentence): a blank line or a list item starts a new block; blocks split at full stops."""
    blocks: list[list[tuple[int, str]]] = []
    fresh = True
    for number, line in lines:
        if not line.strip():
            fresh = True
            continue
        if fresh or _LISTISH.match(line):
            blocks.append([])
        blocks[-1].append((number, _plain(line).strip()))
        fresh = False
    out = []
    for block in blocks:
        text, starts = "", []
        for number, line in block:
            starts.append((len(text), number))
            text += line + " "
        begin = 0
        for end in [m.start() for m in _SENTENCE_END.finditer(text)] + [len(text)]:
            if text[begin:end].strip():
                out.append((max(n for offset, n in starts if offset <= begin), text[begin:end].strip()))
            begin = end
    return out


def _content_words(sentence: str) -> int:
    return sum(1 for word in _CONTENT_WORD.findall(sentence) if word.lower() not in _FILLER)


def _explained_list_line(line: str) -> bool:
    """A list or table line naming a field with words beside it ("- `user`: identifies the caller")."""
    if not _LISTISH.match(line) or not _BACKTICKED.search(line):
        return False
    rest = re.sub(r"[|:*\-+—–,()]", " ", _BACKTICKED.sub(" ", line))
    return len(re.findall(r"[A-Za-z]{2,}", rest)) >= _REASON_WORDS


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
        explained = _explained_list_line(line)
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


def _carried_models(tapes: list[Tape]) -> set[str]:
    """Every model a tape names, requested or served, lower-cased."""
    carried: set[str] = set()
    for tape in tapes:
        carried |= {m.lower() for m in (tape.model, tape.served_model) if m}
        for inter in tape.interactions:
            carried |= {m.lower() for m in (inter.model, inter.served_model) if m}
    return carried


def _models_pattern(carried: set[str]) -> re.Pattern[str] | None:
    """One pattern for the models the tapes carry: a document naming one of them names the model. Capped
    (tapes are the submission's): the first 200 names of at most 200 characters, in sorted order."""
    names = sorted(m for m in carried if len(m) <= 200)[:200]
    if not names:
        return None
    return re.compile("|".join(rf"(?<![\w.-]){re.escape(m)}(?![\w-])" for m in names))


def _claim_lines(sections: list[_Section]) -> list[ClaimLine]:
    """The lines a claim about the recording's host or date is read from: filled-in sections outside the
    "does not prove" ones, fenced code left out (a command or an example tape is not a claim)."""
    limits_rx = _TOPICS["what replay does not prove"][0]
    out: list[ClaimLine] = []
    for section in sections:
        if _unfilled(section) or (
            section.line and re.search(limits_rx, _plain(section.title), re.IGNORECASE)
        ):
            continue
        in_code = False
        for number, line in section.lines:
            if line.lstrip().startswith(_FENCES):
                in_code = not in_code
            elif not in_code:
                out.append((number, _plain(line), _plain(section.title)))
    return out


def _unknown_models(sections: list[_Section], tapes: list[Tape], rel: str) -> list[tuple[str, str]]:
    carried = _carried_models(tapes)
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
