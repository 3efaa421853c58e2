"""Credential scanner: rules from grader/rules/secrets.toml over the working tree, git history, tapes and
captured command output. Findings carry only a redacted secret.

Typical use::

    scanner = Scanner()
    findings = scanner.scan_tree(repo) + scanner.scan_history(repo)
"""

from __future__ import annotations

from pathlib import Path

from grader.secrets.findings import SecretFinding
from grader.secrets.history import HistoryError, is_git_repo, scan_history_with
from grader.secrets.redact import redact
from grader.secrets.rules import Rule, RuleError, load_rules
from grader.secrets.scanner import Scanner, ScanStats
from grader.secrets.tree import scan_tree_with

__all__ = [
    "HistoryError",
    "Rule",
    "RuleError",
    "ScanStats",
    "Scanner",
    "SecretFinding",
    "is_git_repo",
    "load_rules",
    "redact",
    "scan_history",
    "scan_text",
    "scan_tree",
]


def _scanner(rules: list[Rule] | None) -> Scanner:
    return Scanner(rules)


def scan_text(text: str, *, source: str, rules: list[Rule] | None = None) -> list[SecretFinding]:
    """Findings in captured text (a command's output), located as ``source:line``."""
    return _scanner(rules).scan_text(text, source=source)


def scan_tree(
    repo: Path, *, tape_dirs: tuple[str, ...] = (), rules: list[Rule] | None = None
) -> list[SecretFinding]:
    """Findings in the working tree (links not followed, .git skipped); tapes get kind "tape"."""
    return scan_tree_with(_scanner(rules), Path(repo), tape_dirs=tape_dirs)


def scan_history(
    repo: Path, *, tape_dirs: tuple[str, ...] = (), rules: list[Rule] | None = None
) -> list[SecretFinding]:
    """Findings in every blob of every ref, one per secret, located at the commit that introduced it."""
    return scan_history_with(_scanner(rules), Path(repo), tape_dirs=tape_dirs)
