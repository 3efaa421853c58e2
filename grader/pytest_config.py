"""A submission's pytest configuration, read once for every check that asks what it sets.

pytest takes its options from the first of pytest.ini, .pytest.ini, pyproject.toml
(``[tool.pytest.ini_options]``), tox.ini and setup.cfg that has a pytest section. The grader reads every
one of them: a check that asks "does the configuration narrow the suite" or "does it switch a plugin off"
must see an option wherever the submission wrote it, since which file pytest picks can depend on where it
is started.
"""

from __future__ import annotations

import configparser
import sys
from pathlib import Path

from grader.safeio import read_bytes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["addopts_text", "ini_sections"]

_CAP = 2_000_000
# (file, its pytest section) in pytest's own order of preference
_INI_FILES = (
    ("pytest.ini", "pytest"),
    (".pytest.ini", "pytest"),  # the hidden spelling pytest also reads first (red team 4, F6)
    ("tox.ini", "pytest"),
    ("setup.cfg", "tool:pytest"),
)


def ini_sections(repo: Path) -> list[tuple[str, dict[str, object]]]:
    """(file name, its pytest options) for every configuration file with a pytest section, in the order
    pytest prefers them (pyproject.toml's values may be lists; the ini files' are strings)."""
    sections: list[tuple[str, dict[str, object]]] = []
    data = _toml(repo)
    tool = data.get("tool") if isinstance(data, dict) else None
    pytest_table = tool.get("pytest") if isinstance(tool, dict) else None
    ini = pytest_table.get("ini_options") if isinstance(pytest_table, dict) else None
    for name, section in _INI_FILES:
        if name == "tox.ini" and isinstance(ini, dict):
            sections.append(("pyproject.toml", ini))  # after pytest.ini, before tox.ini
        raw = _text(repo, name)
        if not raw:
            continue
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(raw)
        except configparser.Error:
            continue  # pytest would refuse it too; the suite's run says so
        if parser.has_section(section):
            sections.append((name, dict(parser.items(section))))
    return sections


def addopts_text(options: dict[str, object]) -> str:
    """One section's ``addopts`` as one line (a TOML list joined by spaces)."""
    addopts = options.get("addopts")
    if isinstance(addopts, list):
        return " ".join(str(a) for a in addopts)
    return addopts if isinstance(addopts, str) else ""


def _toml(repo: Path) -> object:
    text = _text(repo, "pyproject.toml")
    if not text:
        return {}
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):  # a nesting bomb is malformed TOML too
        return {}


def _text(repo: Path, name: str) -> str | None:
    try:  # never through a link, never a FIFO, capped
        return read_bytes(repo / name, cap=_CAP, root=repo).decode("utf-8", "replace")
    except OSError:
        return None
