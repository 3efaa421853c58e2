"""The check registry: docstring facts, registration rules, package discovery, catalogue and its docs copy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import grader.checks as checks
from grader.checks import Check, CheckResult, catalogue, register, registry
from grader.checks.__main__ import END, START, docs_section, with_catalogue

REPO = Path(__file__).resolve().parents[1]


def _replay_like(ctx):
    """Runs the suite offline.

    Longer description that is not part of the facts.

    Facts:
        passed: tests that passed
        failed: tests that failed
            in their call phase
        summary: e.g. "3 passed"

    Returns:
        notafact: the Returns section is not facts
    """
    return CheckResult(facts={})


@pytest.fixture
def empty_registry(monkeypatch):
    # Each test registers into its own map; the real registry is left untouched.
    monkeypatch.setattr(checks, "_REGISTRY", {})
    monkeypatch.setattr(checks, "_loaded", True)


def test_facts_come_from_the_docstring_facts_section():
    check = Check.from_function("replay-like", _replay_like)
    assert check.summary == "Runs the suite offline."
    assert check.facts == {
        "passed": "tests that passed",
        "failed": "tests that failed in their call phase",
        "summary": 'e.g. "3 passed"',
    }


def test_summary_fact_is_always_present():
    def bare(ctx):
        """Looks at something.

        Facts:
            count: how many
        """

    facts = Check.from_function("bare", bare).facts
    assert list(facts) == ["summary", "count"]


def test_a_check_without_a_docstring_is_refused():
    def nodoc(ctx):
        return CheckResult(facts={})

    with pytest.raises(ValueError, match="no docstring summary"):
        Check.from_function("nodoc", nodoc)


def test_register_adds_to_registry_and_refuses_a_second_function_for_the_same_id(empty_registry):
    register("replay-like")(_replay_like)
    assert list(registry()) == ["replay-like"]
    assert registry()["replay-like"].func is _replay_like
    register("replay-like")(_replay_like)  # re-import of the same function is harmless

    def other(ctx):
        """Another."""

    with pytest.raises(ValueError, match="registered twice"):
        register("replay-like")(other)


@pytest.mark.parametrize("bad", ["Replay", "replay_like", "1replay", "", "re play"])
def test_register_refuses_ids_that_are_not_lowercase_dashed(bad, empty_registry):
    with pytest.raises(ValueError, match="lowercase"):
        register(bad)


def test_registry_imports_every_public_module_of_the_package_once(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    counter = tmp_path / "imports.txt"
    (pkg / "fake_probe.py").write_text(
        textwrap.dedent(
            f'''
            from pathlib import Path
            from grader.checks import CheckResult, register

            with Path({str(counter)!r}).open("a") as fh:
                fh.write("imported\\n")

            @register("fake-probe")
            def probe(ctx):
                """A fake probe.

                Facts:
                    hits: how many
                """
                return CheckResult(facts={{"hits": 1, "summary": "1 hit"}})
            '''
        )
    )
    (pkg / "_private.py").write_text("raise RuntimeError('underscore modules are not checks')\n")
    monkeypatch.setattr(checks, "_REGISTRY", {})
    monkeypatch.setattr(checks, "_loaded", False)
    monkeypatch.setattr(checks, "__path__", [str(pkg)])
    monkeypatch.delitem(sys.modules, "grader.checks.fake_probe", raising=False)
    try:
        first = registry()
        second = registry()
    finally:
        sys.modules.pop("grader.checks.fake_probe", None)
    assert list(first) == ["fake-probe"] == list(second)
    assert first["fake-probe"].facts == {"summary": checks._SUMMARY_MEANING, "hits": "how many"}
    assert counter.read_text() == "imported\n"


def test_every_real_check_has_a_summary_and_documented_facts():
    found = registry()
    assert found, "no check module registered anything"
    for check in found.values():
        assert check.summary, check.id
        assert "summary" in check.facts, check.id
        assert all(meaning for meaning in check.facts.values()), check.id


def test_catalogue_text_and_markdown_list_each_fact(empty_registry):
    register("replay-like")(_replay_like)
    text = catalogue("text")
    assert text.splitlines()[0] == "replay-like: Runs the suite offline."
    assert "    failed   tests that failed in their call phase" in text
    markdown = catalogue("markdown")
    assert "### `replay-like`" in markdown
    assert "| `failed` | tests that failed in their call phase |" in markdown
    with pytest.raises(ValueError, match="unknown catalogue format"):
        catalogue("html")


def test_markdown_catalogue_escapes_pipes():
    def piped(ctx):
        """Reads a | b.

        Facts:
            mode: "a|b" or "c"
        """

    md = catalogue("markdown", {"piped": Check.from_function("piped", piped)})
    assert '| `mode` | "a\\|b" or "c" |' in md
    assert "Reads a \\| b." in md


def test_docs_catalogue_is_current():
    page = (REPO / "docs" / "rubric.md").read_text(encoding="utf-8")
    assert docs_section(page) == catalogue("markdown"), (
        "docs/rubric.md's check catalogue is stale; run: python -m grader.checks --update-docs"
    )


def test_update_docs_rewrites_only_the_marked_section(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nintro\n\n{START}\nold catalogue\n{END}\n\ntail\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "grader.checks", "--update-docs", str(page)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Title\n\nintro\n\n")
    assert text.endswith(f"{END}\n\ntail\n")
    assert "old catalogue" not in text
    assert docs_section(text) == catalogue("markdown")


def test_update_docs_without_markers_is_one_line_exit_2(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("no markers here\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "grader.checks", "--update-docs", str(page)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "markers" in result.stderr
    assert page.read_text() == "no markers here\n"
    with pytest.raises(ValueError):
        with_catalogue("nothing", "x")
