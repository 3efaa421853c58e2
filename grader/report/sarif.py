"""SARIF 2.1.0: the report's findings as code-scanning results (GitHub code scanning, IDE SARIF viewers).

One run; the tool is ``cassette-grader`` with one rule per finding kind, id ``<check>/<rule>`` (for
example ``secrets/openai-project-key`` or ``replay/network-attempt``): check ids and rule names are stable
across rubric edits, row ids are not. A finding's ``file:line`` becomes a physical location relative to the
repository root (``%SRCROOT%``); a history finding's ``sha:file:line`` keeps the commit in the result's
properties. Messages are the report's, which the checks have already redacted. ``partialFingerprints``
hash rule id, location and message, so the same finding keeps its identity across runs and code
scanning does not re-open it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

__all__ = ["SCHEMA_URI", "Location", "parse_location", "render", "to_sarif"]

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_TOOL = "cassette-grader"
_FINGERPRINT_KEY = "cassetteGrader/v1"

# A leaked credential is an error wherever it sits; everything else a check reports is a warning.
_LEVELS = {"secrets": "error"}
# GitHub shows a result with a numeric "security-severity" as a security alert (9.0+ is "critical").
_SECURITY = {"secrets": ("9.0", ["security", "secret"])}
_SHA = re.compile(r"[0-9a-f]{7,64}")


@dataclass(frozen=True)
class Location:
    """A finding's ``location`` split up: ``path`` (repo-relative file or a label), ``line`` (0 = none)."""

    path: str
    line: int = 0
    commit: str | None = None


def parse_location(text: str) -> Location:
    """``file:line`` or ``commit:file:line`` (the checks' two forms); anything else is a bare path."""
    text = str(text or "").strip()
    rest, sep, tail = text.rpartition(":")
    if not sep or not tail.isdigit() or not rest:
        return Location(path=text)
    head, sep, path = rest.partition(":")
    if sep and path and _SHA.fullmatch(head):
        return Location(path=path, line=int(tail), commit=head)
    return Location(path=rest, line=int(tail))


def _rule_id(finding: dict[str, Any]) -> str:
    return f"{finding.get('check') or 'grader'}/{finding.get('rule') or 'finding'}"


def _fingerprint(rule_id: str, location: str, message: str) -> str:
    data = "\0".join((rule_id, location, message)).encode("utf-8", "replace")
    return hashlib.sha256(data).hexdigest()[:32]


def _rule(rule_id: str, finding: dict[str, Any]) -> dict[str, Any]:
    check = str(finding.get("check") or "grader")
    rule: dict[str, Any] = {
        "id": rule_id,
        "name": rule_id,
        "shortDescription": {"text": f"{finding.get('rule') or 'finding'} (reported by the {check} check)"},
        "defaultConfiguration": {"level": _LEVELS.get(check, "warning")},
        "properties": {"check": check},
    }
    if check in _SECURITY:
        severity, tags = _SECURITY[check]
        rule["properties"].update({"security-severity": severity, "tags": tags})
    return rule


def _location(where: Location) -> list[dict[str, Any]]:
    if not where.path or where.path == "?":
        return []
    physical: dict[str, Any] = {
        "artifactLocation": {"uri": quote(where.path.lstrip("/"), safe="/"), "uriBaseId": "%SRCROOT%"}
    }
    if where.line >= 1:
        physical["region"] = {"startLine": where.line}
    return [{"physicalLocation": physical}]


def _result(finding: dict[str, Any], rule_index: int, rule_id: str) -> dict[str, Any]:
    location_text = str(finding.get("location") or "")
    message = str(finding.get("message") or finding.get("rule") or "finding")
    where = parse_location(location_text)
    result: dict[str, Any] = {
        "ruleId": rule_id,
        "ruleIndex": rule_index,
        "level": _LEVELS.get(str(finding.get("check")), "warning"),
        "message": {"text": message},
        "locations": _location(where),
        "partialFingerprints": {_FINGERPRINT_KEY: _fingerprint(rule_id, location_text, message)},
        "properties": {"check": str(finding.get("check") or ""), "location": location_text},
    }
    if where.commit:
        result["properties"]["commit"] = where.commit
    return result


def _provenance(report: dict[str, Any]) -> list[dict[str, Any]]:
    target = str(report.get("target") or "").split("#", 1)[0]
    commit = str(report.get("commit") or "")
    if not target.startswith("https://") or not commit:
        return []
    return [{"repositoryUri": target, "revisionId": commit}]


def to_sarif(report: dict[str, Any]) -> dict[str, Any]:
    """The SARIF log (a dict) for a grade-report/1 dict."""
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    results = []
    for finding in report.get("findings") or []:
        rule_id = _rule_id(finding)
        if rule_id not in index:
            index[rule_id] = len(rules)
            rules.append(_rule(rule_id, finding))
        results.append(_result(finding, index[rule_id], rule_id))
    total = report.get("total") or {}
    rubric = report.get("rubric") or {}
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": _TOOL,
                "version": str(report.get("grader_version") or "0"),
                "rules": rules,
            }
        },
        "automationDetails": {"id": f"{_TOOL}/"},
        "columnKind": "unicodeCodePoints",
        "invocations": [{"executionSuccessful": True}],
        "results": results,
        "properties": {
            "target": str(report.get("target") or ""),
            "commit": str(report.get("commit") or ""),
            "rubric": str(rubric.get("name") or ""),
            "rubricSha256": str(rubric.get("sha256") or ""),
            "total": {k: total[k] for k in ("points", "max", "percent") if k in total},
        },
    }
    if report.get("graded_at"):
        run["invocations"][0]["endTimeUtc"] = str(report["graded_at"])
    provenance = _provenance(report)
    if provenance:
        run["versionControlProvenance"] = provenance
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(report: dict[str, Any]) -> str:
    """The SARIF log as pretty-printed JSON with a trailing newline."""
    return json.dumps(to_sarif(report), indent=2, ensure_ascii=False) + "\n"
