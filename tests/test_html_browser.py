"""The HTML report in a real headless browser (Debian's chromium): the row table and an evidence link render,
and a submission's file named like a script tag stays text.

Skipped when chromium is absent, except on CI (``CI`` set), where a missing browser is a failure: .ci/run
installs it, and a silent skip there would hide a broken page.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from grader.report import render
from tests.test_formats import REPO, XSS_FILE, grade_json, make_leaky_submission

_BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in _BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed; .ci/run installs Debian's chromium for this test")
    pytest.skip("chromium is not installed (apt-get install -y chromium); CI installs it and runs this test")


def _chromium(
    browser: str, page: Path, profile: Path, *extra: str, prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [
        *(prefix or []),
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *extra,
        page.as_uri(),
    ]
    env = {**os.environ, "HOME": str(profile)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, check=False)


class _Dom(HTMLParser):
    """What the rendered DOM holds: rows of table#rows, links, script elements and the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.table_rows: list[str] = []
        self.links: list[str] = []
        self.scripts = 0
        self.text: list[str] = []
        self._in_rows = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "table" and values.get("id") == "rows":
            self._in_rows = True
        if tag == "tr" and self._in_rows and values.get("data-row"):
            self.table_rows.append(values["data-row"] or "")
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")
        if tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_rows = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("html-browser")
    rubric = shutil.copy(REPO / "rubric" / "default.yaml", root / "rubric.yaml")
    return grade_json(make_leaky_submission(root), "--rubric", str(rubric))


@pytest.mark.index
def test_the_page_renders_the_row_table_and_evidence_links_in_chromium(report, tmp_path: Path) -> None:
    browser = _browser()
    page = tmp_path / "report.html"
    page.write_text(render(report, "html"), encoding="utf-8")

    proc = _chromium(browser, page, tmp_path / "profile", "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    dom.close()

    assert dom.table_rows == [row["id"] for row in report["rows"]]
    assert "repo/%3Cscript%3Ealert%281%29%3C/script%3E.py#L3" in dom.links  # the leaked key's file:line
    assert any(link.startswith("repo/REPLAY.md#L") for link in dom.links)  # a detail line's file:line
    assert dom.scripts == 0  # the script-tag file name did not become an element
    text = "".join(dom.text)
    assert XSS_FILE in text
    assert report["rows"][0]["evidence"].split(";")[0] in text


@pytest.mark.index
def test_the_page_paints_offline(report, tmp_path: Path) -> None:
    """Painted inside an empty network namespace: nothing the page needs comes from anywhere else."""
    browser = _browser()
    offline = ["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else []
    shots = {}
    for name, html in (("report", render(report, "html")), ("blank", "<!DOCTYPE html><title>x</title>")):
        page = tmp_path / f"{name}.html"
        page.write_text(html, encoding="utf-8")
        shots[name] = tmp_path / f"{name}.png"
        proc = _chromium(
            browser,
            page,
            tmp_path / f"profile-{name}",
            f"--screenshot={shots[name]}",
            "--window-size=1280,1600",
            prefix=offline,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert shots[name].read_bytes().startswith(b"\x89PNG")
    # A page with a table, colours and text compresses far worse than a white one.
    assert shots["report"].stat().st_size > 3 * shots["blank"].stat().st_size
    keep = os.environ.get("HTML_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shots["report"], keep)
