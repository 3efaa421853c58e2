"""HTML: one self-contained page per report (inline CSS, no script, no external asset), readable offline.

The header holds target, commit, rubric and total; a table holds one line per row (id, title, score,
weight, evidence); then the details of each row and the findings. Every ``file:line`` (or ``sha:file:line``)
in details and findings is a link to ``repo/<file>#L<line>``, relative to the page: keep the graded checkout
beside the report as ``repo/`` (``grade --keep-workspace`` keeps one; ``git clone`` the submission there
otherwise) and the links open the files offline. Absolute paths and paths with ``..`` are never linked.

The page is a Jinja2 template rendered with autoescaping on: every string from the report is escaped
unless this module built it as markup itself (the file:line links, from escaped pieces). Test names, file
names and evidence come from the submission. A Content-Security-Policy meta tag forbids scripts and remote
loads as a second fence.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, StrictUndefined, Template
from markupsafe import Markup, escape

from grader.report._common import number, row_state, score_cell, short_commit, total_line
from grader.report.sarif import parse_location

__all__ = ["link_target", "render"]

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:72rem;
padding:0 1rem;color:#1b1f24;background:#fff}
h1{font-size:1.5rem;margin:0 0 .5rem}h2{font-size:1.2rem;margin-top:2rem}
h3{font-size:1rem;margin:1.2rem 0 .3rem}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1rem;margin:0}
dl.meta dt{font-weight:600}dl.meta dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #d0d7de;padding:.35rem .5rem;
text-align:left;vertical-align:top;overflow-wrap:anywhere}th{background:#f6f8fa}
td.num,th.num,td.id{text-align:right;white-space:nowrap}td.id{text-align:left}
code{font:13px ui-monospace,SFMono-Regular,Menlo,monospace}
.s3{background:#dafbe1}.s2{background:#fff8c5}.s1,.s0{background:#ffebe9}.manual,.na{background:#eaeef2}
ul.details{margin:.2rem 0;padding-left:1.3rem}a{color:#0969da}
footer{margin-top:2rem;color:#57606a;font-size:.9em}
"""
# `file:line` or `sha:file:line` inside free text, starting a word. The file needs an extension; a
# host:port (api.openai.com:443) is not a file: common host endings are skipped, `//host` starts no word.
_LOCATION = re.compile(
    r"(?<![^\s(\[,;=])(?:[0-9a-f]{7,40}:)?"
    r"(?:[\w.-]+/)*(?:[\w.-]*[\w-])?\.[A-Za-z][A-Za-z0-9]{0,7}"
    r":[0-9]+\b"
)
_HOST_ENDINGS = {"com", "org", "net", "io", "ai", "dev", "invalid", "internal", "local", "localhost", "test"}


def link_target(location: str) -> str | None:
    """The relative href for a finding location, or None when it must not be linked."""
    where = parse_location(location)
    path = where.path
    if not path or where.line < 1 or path.startswith(("/", "\\")) or ":" in path:
        return None
    if any(part in ("..", "") for part in path.split("/")):
        return None
    return f"repo/{quote(path, safe='/')}#L{where.line}"


def _linked_location(location: str) -> Markup:
    href = link_target(location)
    if href is None:
        return Markup("<code>{}</code>").format(location)
    commit = parse_location(location).commit
    if commit:
        title = f"found in commit {commit}; the link opens the checkout beside this page"
        return Markup('<a class="loc" href="{}" title="{}"><code>{}</code></a>').format(href, title, location)
    return Markup('<a class="loc" href="{}"><code>{}</code></a>').format(href, location)


def _linkify(text: Any) -> Markup:
    """Escaped ``text`` with every file:line in it turned into a link."""
    text = str(text)
    out, last = [], 0
    for match in _LOCATION.finditer(text):
        token = match.group(0)
        extension = token.rsplit(":", 1)[0].rsplit(".", 1)[-1].lower()
        if extension in _HOST_ENDINGS or link_target(token) is None:
            continue
        out += [escape(text[last : match.start()]), _linked_location(token)]
        last = match.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


def _score_class(row: dict[str, Any]) -> str:
    state = row_state(row)
    return f"s{row['score']}" if state == "scored" else state


def _anchor(row_id: Any) -> str:
    return "row-" + re.sub(r"[^a-z0-9-]", "-", str(row_id).lower())


# One template; autoescape is on, so only what `_linkify`/`_linked_location` return (Markup) is not escaped.
_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Grade report: {{ report.target }}</title>
<style>{{ style | safe }}</style>
</head>
<body>
<header>
<h1>Grade report</h1>
<dl class="meta">
<dt>Target</dt><dd>{{ report.target }}</dd>
<dt>Commit</dt><dd><code>{{ commit }}</code></dd>
<dt>Total</dt><dd><strong id="total">{{ total }}</strong></dd>
<dt>Rubric</dt><dd>{{ rubric.name }} <code>{{ rubric_sha }}</code></dd>
<dt>Isolation</dt><dd>network {{ isolation.network }}, credentials {{ isolation.credentials }}</dd>
<dt>Graded</dt><dd>{{ report.graded_at }} by grader {{ report.grader_version }}</dd>
</dl>
</header>
<main>
<h2>Rows</h2>
<table id="rows">
<thead><tr><th>Row</th><th>Title</th><th class="num">Score</th><th class="num">Weight</th>
<th>Evidence</th></tr></thead>
<tbody>
{% for row in rows -%}
<tr data-row="{{ row.id }}"><td class="id"><code>
{%- if row.details %}<a href="#{{ row.anchor }}">{{ row.id }}</a>{% else %}{{ row.id }}{% endif -%}
</code></td><td>{{ row.title }}</td><td class="num {{ row.score_class }}">{{ row.score }}</td>
<td class="num">{{ row.weight }}</td><td>{{ row.evidence | linkify }}</td></tr>
{% endfor -%}
</tbody>
</table>
{% if detailed -%}
<section id="details">
<h2>Details</h2>
{% for row in detailed -%}
<h3 id="{{ row.anchor }}"><code>{{ row.id }}</code>: {{ row.title }} ({{ row.score }})</h3>
<ul class="details">
{% for line in row.details %}<li>{{ line | linkify }}</li>
{% endfor -%}
</ul>
{% endfor -%}
</section>
{% endif -%}
{% if findings -%}
<section id="findings">
<h2>Findings</h2>
<table><thead><tr><th>Check</th><th>Rule</th><th>Location</th><th>Message</th></tr></thead>
<tbody>
{% for f in findings -%}
<tr><td>{{ f.check }}</td><td><code>{{ f.rule }}</code></td><td>{{ f.location | location }}</td>
<td>{{ f.message }}</td></tr>
{% endfor -%}
</tbody></table>
</section>
{% endif -%}
{% if notes -%}
<section id="notes">
<h2>Notes</h2>
<ul>
{% for note in notes %}<li>{{ note | linkify }}</li>
{% endfor -%}
</ul>
</section>
{% endif -%}
</main>
<footer>Links to <code>file:line</code> open <code>repo/&lt;file&gt;</code> next to this page: \
keep the graded checkout there as <code>repo/</code>. \
Manual rows need a reviewer; <em>n/a</em> rows could not be assessed.</footer>
</body>
</html>
"""


@cache
def _template() -> Template:
    env = Environment(autoescape=True, undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["linkify"] = _linkify
    env.filters["location"] = lambda location: _linked_location(str(location))
    return env.from_string(_PAGE)


def _row_view(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(row.get("id", "")),
        "anchor": _anchor(row.get("id", "")),
        "title": str(row.get("title", "")),
        "score": score_cell(row),
        "score_class": _score_class(row),
        "weight": number(row.get("weight", 1)),
        "evidence": str(row.get("evidence", "")),
        "details": [str(line) for line in row.get("details") or []],
    }


def render(report: dict[str, Any]) -> str:
    """The report as one HTML5 page (UTF-8, trailing newline)."""
    rubric = report.get("rubric") or {}
    isolation = report.get("isolation") or {}
    rows = [_row_view(row) for row in report.get("rows") or []]
    findings = [
        {key: str(finding.get(key, "")) for key in ("check", "rule", "location", "message")}
        for finding in report.get("findings") or []
    ]
    page = _template().render(
        csp=_CSP,
        style=_STYLE,  # our constant; `safe` in the template (quotes in CSS must stay quotes)
        report={
            "target": str(report.get("target", "")),
            "graded_at": str(report.get("graded_at", "")),
            "grader_version": str(report.get("grader_version", "")),
        },
        commit=str(report.get("commit") or short_commit(report)),
        total=total_line(report),
        rubric={"name": str(rubric.get("name", ""))},
        rubric_sha=str(rubric.get("sha256", ""))[:12],
        isolation={
            "network": str(isolation.get("network", "?")),
            "credentials": str(isolation.get("credentials", "?")),
        },
        rows=rows,
        detailed=[row for row in rows if row["details"]],
        findings=findings,
        notes=[str(note) for note in report.get("notes") or []],
    )
    return page if page.endswith("\n") else page + "\n"
