"""HTML: one self-contained page per report (inline CSS, no script, no external asset), readable offline.

The header holds target, commit, rubric and total; a table holds one line per row (id, title, score,
weight, evidence); then the details of each row and the findings. Every ``file:line`` (or ``sha:file:line``)
in details and findings is a link to ``repo/<file>#L<line>``, relative to the page: keep the graded checkout
beside the report as ``repo/`` (``grade --keep-workspace`` keeps one; ``git clone`` the submission there
otherwise) and the links open the files offline. Absolute paths and paths with ``..`` are never linked.

Every string from the report is escaped: test names, file names and evidence come from the submission.
A Content-Security-Policy meta tag forbids scripts and remote loads as a second fence.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any
from urllib.parse import quote

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


def _linked_location(location: str) -> str:
    href = link_target(location)
    text = escape(location)
    if href is None:
        return f"<code>{text}</code>"
    commit = parse_location(location).commit
    title = f' title="{escape(f"found in commit {commit}; the link opens the checkout beside this page")}"'
    return f'<a class="loc" href="{escape(href)}"{title if commit else ""}><code>{text}</code></a>'


def _linkify(text: str) -> str:
    """Escaped ``text`` with every file:line in it turned into a link."""
    out, last = [], 0
    for match in _LOCATION.finditer(text):
        token = match.group(0)
        extension = token.rsplit(":", 1)[0].rsplit(".", 1)[-1].lower()
        if extension in _HOST_ENDINGS or link_target(token) is None:
            continue
        out += [escape(text[last : match.start()]), _linked_location(token)]
        last = match.end()
    out.append(escape(text[last:]))
    return "".join(out)


def _score_class(row: dict[str, Any]) -> str:
    state = row_state(row)
    return f"s{row['score']}" if state == "scored" else state


def _anchor(row_id: Any) -> str:
    return "row-" + re.sub(r"[^a-z0-9-]", "-", str(row_id).lower())


def _header(report: dict[str, Any]) -> list[str]:
    rubric = report.get("rubric") or {}
    isolation = report.get("isolation") or {}
    sha = str(rubric.get("sha256", ""))
    network, credentials = isolation.get("network", "?"), isolation.get("credentials", "?")
    items = (
        ("Target", escape(str(report.get("target", "")))),
        ("Commit", f"<code>{escape(str(report.get('commit') or short_commit(report)))}</code>"),
        ("Total", f'<strong id="total">{escape(total_line(report))}</strong>'),
        ("Rubric", f"{escape(str(rubric.get('name', '')))} <code>{escape(sha[:12])}</code>"),
        ("Isolation", escape(f"network {network}, credentials {credentials}")),
        (
            "Graded",
            escape(f"{report.get('graded_at', '')} by grader {report.get('grader_version', '')}"),
        ),
    )
    out = ["<header>", "<h1>Grade report</h1>", '<dl class="meta">']
    out += [f"<dt>{name}</dt><dd>{value}</dd>" for name, value in items]
    out += ["</dl>", "</header>"]
    return out


def _row_table(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "<h2>Rows</h2>",
        '<table id="rows">',
        '<thead><tr><th>Row</th><th>Title</th><th class="num">Score</th><th class="num">Weight</th>'
        "<th>Evidence</th></tr></thead>",
        "<tbody>",
    ]
    for row in rows:
        row_id = escape(str(row["id"]))
        link = f'<a href="#{_anchor(row["id"])}">{row_id}</a>' if row.get("details") else row_id
        title = escape(str(row.get("title", "")))
        out.append(
            f'<tr data-row="{row_id}"><td class="id"><code>{link}</code></td><td>{title}</td>'
            f'<td class="num {_score_class(row)}">{escape(score_cell(row))}</td>'
            f'<td class="num">{escape(number(row.get("weight", 1)))}</td>'
            f"<td>{_linkify(str(row.get('evidence', '')))}</td></tr>"
        )
    out += ["</tbody>", "</table>"]
    return out


def _details(rows: list[dict[str, Any]]) -> list[str]:
    detailed = [row for row in rows if row.get("details")]
    if not detailed:
        return []
    out = ['<section id="details">', "<h2>Details</h2>"]
    for row in detailed:
        out.append(
            f'<h3 id="{_anchor(row["id"])}"><code>{escape(str(row["id"]))}</code>: '
            f"{escape(str(row.get('title', '')))} ({escape(score_cell(row))})</h3>"
        )
        out.append('<ul class="details">')
        out += [f"<li>{_linkify(str(line))}</li>" for line in row["details"]]
        out.append("</ul>")
    out.append("</section>")
    return out


def _findings(findings: list[dict[str, Any]]) -> list[str]:
    if not findings:
        return []
    out = [
        '<section id="findings">',
        "<h2>Findings</h2>",
        "<table><thead><tr><th>Check</th><th>Rule</th><th>Location</th><th>Message</th></tr></thead>",
        "<tbody>",
    ]
    for finding in findings:
        out.append(
            f"<tr><td>{escape(str(finding.get('check', '')))}</td>"
            f"<td><code>{escape(str(finding.get('rule', '')))}</code></td>"
            f"<td>{_linked_location(str(finding.get('location', '')))}</td>"
            f"<td>{escape(str(finding.get('message', '')))}</td></tr>"
        )
    out += ["</tbody></table>", "</section>"]
    return out


def render(report: dict[str, Any]) -> str:
    """The report as one HTML5 page (UTF-8, trailing newline)."""
    rows = report.get("rows") or []
    notes = report.get("notes") or []
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Grade report: {escape(str(report.get('target', '')))}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        *_header(report),
        "<main>",
        *_row_table(rows),
        *_details(rows),
        *_findings(report.get("findings") or []),
    ]
    if notes:
        out += ['<section id="notes">', "<h2>Notes</h2>", "<ul>"]
        out += [f"<li>{_linkify(str(note))}</li>" for note in notes]
        out += ["</ul>", "</section>"]
    out += [
        "</main>",
        "<footer>Links to <code>file:line</code> open <code>repo/&lt;file&gt;</code> next to this page: "
        "keep the graded checkout there as <code>repo/</code>. "
        "Manual rows need a reviewer; <em>n/a</em> rows could not be assessed.</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(out) + "\n"
