"""REPLAY.md's endpoint host and recording date, held to what the tapes' own metadata says (red-team G10).

A stand-in recording documented as "recorded against api.openai.com with my own key, on 2025-03-14" covered
every topic and contradicted nothing the row checked. The tapes already say where and when they were recorded
(`grader.tapes` reads it from every format: the kit's ``meta``, a vcrpy request URI and response ``date``
header, hand-rolled fields by meaning), so a claim the tapes contradict is reported like a model no tape
carries. The rule is data (``cross_check`` in grader/rules/replay_doc.json, which says what counts as a
claim); grader/checks/replay_doc.py picks the lines a claim may be read from.

Calibrated to flag only what cannot be honest: the document names hosts and none is one the tapes name (a
document naming both the stand-in and the production host is not caught); it gives recording dates and none
is within a day of one the tapes hold. A date in a model snapshot (``gpt-4o-2024-08-06``) or an API version
is never a recording date, and a date counts only on a line or under a heading about the recording.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from grader.loopback import is_loopback
from grader.recordings import endpoint_host, timestamp
from grader.tapes import Tape

__all__ = ["ClaimLine", "claimed_dates", "claimed_hosts", "date_contradiction", "host_contradiction"]

ClaimLine = tuple[int, str, str]  # (1-based line, its text, the title of the section it is under)

_DOC_RULE: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "rules" / "replay_doc.json").read_text("utf-8")
)
_RULE: dict[str, Any] = _DOC_RULE["cross_check"]
_HOST = re.compile(_RULE["host"])
_PROVIDERS: tuple[str, ...] = tuple(h.lower() for h in _RULE["provider_hosts"])
_HOST_LINE = re.compile(_RULE["host_line"])
_HOST_HEADING = re.compile(_RULE["host_heading"])
_HOST_NOT_LINE = re.compile(_RULE["host_not_line"])
_NOT_A_CLAIM = re.compile(_RULE["not_a_claim"])
_DATE_LINE = re.compile(_RULE["date_line"])
_DATE_HEADING = re.compile(_RULE["date_heading"])
_DATE_WORD = re.compile(_RULE["date_word"])
_SLACK = timedelta(days=int(_RULE["date_slack_days"]))
# The document is the submission's: an enormous one must not make the comparisons quadratic.
_MAX_CLAIMS = int(_RULE["max_claims"])
_WINDOW = int(_RULE["negation_window"])
# A date as the recording date topic reads one (model snapshots and API versions are not matched).
_DATE = re.compile(
    next(t for t in _DOC_RULE["topics"] if t["name"] == "recording date")["substance"]["needs"][0]["pattern"]
)
_MONTHS = {name: n for n, name in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_LOOPBACK = "loopback"  # every loopback host is one host: 127.0.0.1 on a tape, localhost in the document


def claimed_hosts(lines: list[ClaimLine]) -> list[tuple[int, str]]:
    """(line, host as written) of each endpoint host the document claims: a model provider's API host or a
    loopback host, on a line or under a heading about the endpoint or the recording, not negated."""
    out: list[tuple[int, str]] = []
    for number, text, heading in lines:
        if not (_HOST_LINE.search(text) or _HOST_HEADING.search(heading)) or _HOST_NOT_LINE.search(text):
            continue  # "`make serve`: a replay-only endpoint on 127.0.0.1:8787" is not where tapes came from
        for match in _HOST.finditer(text):
            host = match.group(1).lower().strip("[]")
            if _NOT_A_CLAIM.search(text[max(0, match.start() - _WINDOW) : match.start()]):
                continue  # "not against api.openai.com", "e.g. `api.openai.com`"
            if is_loopback(host) or _provider(host):
                out.append((number, match.group(1)))
                if len(out) >= _MAX_CLAIMS:
                    return out
    return out


def claimed_dates(lines: list[ClaimLine]) -> list[tuple[int, str, list[tuple[date, date]]]]:
    """(line, date as written, the days it may mean) of each recording date the document gives: a date
    on a line about the recording, or under a recording heading where the heading or the line speaks of a
    date."""
    out: list[tuple[int, str, list[tuple[date, date]]]] = []
    for number, text, heading in lines:
        about = _DATE_LINE.search(text) or (
            _DATE_HEADING.search(heading) and (_DATE_WORD.search(heading) or _DATE_WORD.search(text))
        )
        if not about:
            continue
        for match in _DATE.finditer(text):
            spans = _spans(match.group(0))
            if spans:
                out.append((number, match.group(0), spans))
                if len(out) >= _MAX_CLAIMS:
                    return out
    return out


def host_contradiction(lines: list[ClaimLine], tapes: list[Tape], rel: str) -> tuple[str, str] | None:
    """(message, REPLAY.md:N) when the document names endpoint hosts and none is one the tapes name."""
    claims = claimed_hosts(lines)
    recorded = _tape_hosts(tapes)
    if not claims or not recorded:
        return None
    if any(_same_host(_key(host), key) for _, host in claims for key in recorded):
        return None
    shown = _listed(sorted({host for _, host in claims}, key=str.lower))
    hosts = sorted({shown_host for shown_host, _ in recorded.values()})
    example = next(iter(recorded.values()))[1]
    plural = "s" if len({h.lower() for _, h in claims}) > 1 else ""
    message = (
        f"names endpoint host{plural} {shown}, but the tapes were recorded against {_listed(hosts)} "
        f"(e.g. {example})"
    )
    return message, f"{rel}:{claims[0][0]}"


def date_contradiction(lines: list[ClaimLine], tapes: list[Tape], rel: str) -> tuple[str, str] | None:
    """(message, REPLAY.md:N) when the document gives recording dates and none is within the slack (a day,
    for time zones) of a day the tapes were recorded."""
    claims = claimed_dates(lines)
    days = _tape_days(tapes)
    if not claims or not days:
        return None
    ordered = sorted(days)
    for _, _, spans in claims:
        for first, last in spans:
            near = bisect_left(ordered, first - _SLACK)  # the first tape day not before the claim's slack
            if near < len(ordered) and ordered[near] <= last + _SLACK:
                return None
    recorded = (
        "on " + ", ".join(d.isoformat() for d in ordered)
        if len(ordered) <= 3
        else f"between {ordered[0].isoformat()} and {ordered[-1].isoformat()} ({len(ordered)} days)"
    )
    said = _listed(list(dict.fromkeys(shown for _, shown, _ in claims)))
    example = days[ordered[0]]
    message = f"says the tapes were recorded on {said}, but they were recorded {recorded} (e.g. {example})"
    return message, f"{rel}:{claims[0][0]}"


def _provider(host: str) -> bool:
    for known in _PROVIDERS:
        if host == known or (known.startswith("*.") and host.endswith(known[1:])):
            return True
    return False


def _key(host: str) -> str:
    return _LOOPBACK if is_loopback(host) else host.lower().strip("[]").rstrip(".")


def _same_host(claimed: str, recorded: str) -> bool:
    """Equal, or one a subdomain of the other (``openai.com`` and ``api.openai.com``)."""
    return claimed == recorded or recorded.endswith("." + claimed) or claimed.endswith("." + recorded)


def _tape_hosts(tapes: list[Tape]) -> dict[str, tuple[str, str]]:
    """Host key -> (host as the tape names it, "path (where it was read)"), from each tape's endpoint and
    each interaction's request URL and endpoint field."""
    out: dict[str, tuple[str, str]] = {}
    for tape in tapes:
        found: list[tuple[str | None, str]] = [(tape.endpoint, tape.sources.get("endpoint", "endpoint"))]
        for inter in tape.interactions:
            found.append((urlsplit(inter.url).hostname if inter.url else None, "request URL"))
            if "endpoint" in inter.found:
                found.append((inter.found["endpoint"].value, inter.found["endpoint"].where))
        for value, where in found:
            host = _tape_host(value)
            if host:
                out.setdefault(_key(host), (host, f"{tape.path}, {where}"))
    return out


def _tape_host(value: str | None) -> str | None:
    """The host a tape's endpoint value names (a loopback one as written: ``::1`` has no dot)."""
    if not value:
        return None
    if is_loopback(value):
        try:
            return urlsplit(value if "://" in value else f"//{value}").hostname or value
        except ValueError:  # a malformed bracketed address
            return value
    return endpoint_host(value)


def _tape_days(tapes: list[Tape]) -> dict[date, str]:
    """Day -> "path (where it was read)", from each tape's recording time and each interaction's recorded
    time field or response ``date`` header (a vcrpy cassette's only clock)."""
    out: dict[date, str] = {}
    for tape in tapes:
        found: list[tuple[str | None, str]] = [
            (tape.recorded_at, tape.sources.get("recorded_at", "recorded_at"))
        ]
        for inter in tape.interactions:
            if "recorded_at" in inter.found:
                found.append((inter.found["recorded_at"].value, inter.found["recorded_at"].where))
            for header in inter.response_headers.get("date", [])[:1]:
                found.append((timestamp(header), "response date header"))
        for value, where in found:
            day = _iso_day(value)
            if day is not None:
                out.setdefault(day, f"{tape.path}, {where}")
    return out


def _iso_day(value: str | None) -> date | None:
    try:
        return date.fromisoformat(value[:10]) if value else None
    except ValueError:
        return None


def _spans(text: str) -> list[tuple[date, date]]:
    """The days a written date may mean: one day, both readings of ``1/12/2026``, or a whole month."""
    numbers = [int(n) for n in re.findall(r"\d+", text)]
    month_name = re.search(r"[A-Za-z]{3,}", text)
    if month_name:
        month = _MONTHS.get(month_name.group(0)[:3].lower())
        year = next((n for n in numbers if n >= 1900), None)
        days = [n for n in numbers if n < 100]
        if month is None or year is None:
            return []
        if days:
            return _valid([(year, month, days[0])])
        start = date(year, month, 1)
        end = (start + timedelta(days=31)).replace(day=1) - timedelta(days=1)
        return [(start, end)]
    if len(numbers) != 3:
        return []
    if numbers[0] >= 1900:
        return _valid([(numbers[0], numbers[1], numbers[2])])
    first, second, year = numbers
    return _valid([(year, second, first), (year, first, second)])


def _valid(candidates: list[tuple[int, int, int]]) -> list[tuple[date, date]]:
    out = []
    for year, month, day in candidates:
        try:
            when = date(year, month, day)
        except ValueError:
            continue
        out.append((when, when))
    return out


def _listed(items: list[str]) -> str:
    return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
