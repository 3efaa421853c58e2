"""A submission's pytest configuration, read once for every check that asks what it sets.

pytest takes its options from the first of pytest.toml, .pytest.toml, pytest.ini, .pytest.ini,
pyproject.toml (``[tool.pytest]``, ``[tool.pytest.ini_options]``), tox.ini and setup.cfg that has a pytest
section. The grader reads every one of them: a check that asks "does the configuration narrow the suite"
or "does it switch a plugin off" must see an option wherever the submission wrote it, since which file
pytest picks can depend on where it is started.
"""

from __future__ import annotations

import configparser
from pathlib import Path

from grader._toml import tomllib
from grader.safeio import read_bytes

__all__ = ["addopts_text", "ini_sections", "is_test_module"]

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
    pytest prefers them (TOML values may be lists; the ini files' are strings).

    pytest 9 also reads native TOML: ``pytest.toml`` and ``.pytest.toml`` (a ``[pytest]`` table) before the
    ini files, and ``[tool.pytest]`` in pyproject.toml beside ``[tool.pytest.ini_options]`` (red team 4,
    F6b: tests left out through those went unnoticed).
    """
    sections: list[tuple[str, dict[str, object]]] = []
    for name in ("pytest.toml", ".pytest.toml"):
        table = _table(_toml(repo, name), "pytest")
        if table is not None:
            sections.append((name, table))
    tool = _table(_toml(repo, "pyproject.toml"), "tool")
    native = _table(tool, "pytest")
    ini = _table(native, "ini_options")
    for name, section in _INI_FILES:
        if name == "tox.ini":  # pyproject.toml: after pytest.ini, before tox.ini
            if ini is not None:
                sections.append(("pyproject.toml", ini))
            if native is not None and set(native) - {"ini_options"}:
                sections.append(("pyproject.toml", {k: v for k, v in native.items() if k != "ini_options"}))
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


def _table(data: object, key: str) -> dict[str, object] | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else None


def addopts_text(options: dict[str, object]) -> str:
    """One section's ``addopts`` as one line (a TOML list joined by spaces)."""
    addopts = options.get("addopts")
    if isinstance(addopts, list):
        return " ".join(str(a) for a in addopts)
    return addopts if isinstance(addopts, str) else ""


def _toml(repo: Path, name: str) -> object:
    text = _text(repo, name)
    if not text:
        return {}
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError):  # a nesting bomb, a 5,000-digit integer: malformed TOML too
        return {}


def _text(repo: Path, name: str) -> str | None:
    try:  # never through a link, never a FIFO, capped
        return read_bytes(repo / name, cap=_CAP, root=repo).decode("utf-8", "replace")
    except OSError:
        return None


def is_test_module(name: str) -> bool:
    """Whether pytest's default ``python_files`` (``test_*.py *_test.py``) collects a file of this name."""
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
