"""Bringing back tests a module hides before collection (grader/unshadow.py; red team 20, F1), in a copy."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from grader import unshadow

SOURCE = (
    "def test_a():\n"  # 1
    "    assert False\n"  # 2
    "x = 1; del test_a\n"  # 3: a del after another statement on the line
    "def test_b(): pass\n"  # 4
    "def test_b(): pass\n"  # 5
    "class TestK:\n"  # 6
    "    def test_c(self): pass\n"  # 7
    "    test_c, other = None, 1\n"  # 8: not a plain Name target list: left as is
    "    def test_d(self): pass\n"  # 9
    "    test_d = None\n"  # 10
    "def test_e(): pass\n"  # 11
    "test_e = wrap(test_e)\n"  # 12: a wrapper, left alone
    "def test_f(): pass  # caf\u00e9\n"  # 13
    "del test_f\n"  # 14
    "def test_f(): pass\n"  # 15: after an undone del, a second definition of the first
)


def _tests(text: str) -> set[str]:
    tree = ast.parse(text)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"{cls.name}.{n.name}" for n in cls.body if isinstance(n, ast.FunctionDef)}
    return names


def test_revive_brings_back_every_hidden_test_and_keeps_line_numbers(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    module = tmp_path / "tests" / "test_m.py"
    module.write_text(SOURCE, encoding="utf-8")

    undone = unshadow.revive(tmp_path, "tests/test_m.py")

    text = module.read_text(encoding="utf-8")
    assert text.count("\n") == SOURCE.count("\n")
    assert {(s.kind, s.line) for s in undone} == {
        ("del", 3),
        ("redefines", 5),
        ("reassigns", 10),
        ("del", 14),
        ("redefines", 15),
    }, undone
    # The rewritten module still imports, as pytest would import it.
    spec = importlib.util.spec_from_file_location("test_m_revived", module)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    loaded.wrap = lambda f: None  # type: ignore[attr-defined]
    spec.loader.exec_module(loaded)
    namespace = vars(loaded)
    alive = {k for k, v in namespace.items() if k.startswith("test_") and callable(v)}
    assert {"test_a", "test_b", "test_b__hidden_L4", "test_f", "test_f__hidden_L13"} <= alive, alive
    assert "test_e" not in alive  # the wrapper is the suite's own business
    klass = namespace["TestK"]
    assert callable(getattr(klass, "test_d", None)), text


def test_a_module_hiding_nothing_is_left_untouched(tmp_path: Path) -> None:
    module = tmp_path / "test_ok.py"
    module.write_text("def helper(): pass\ndel helper\ndef test_x(): pass\n", encoding="utf-8")
    before = module.stat().st_mtime_ns
    assert unshadow.revive(tmp_path, "test_ok.py") == []
    assert module.stat().st_mtime_ns == before


def test_a_link_is_not_rewritten(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text(SOURCE, encoding="utf-8")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "test_m.py").symlink_to(outside)
    assert unshadow.revive(copy, "test_m.py") == []
    assert outside.read_text(encoding="utf-8") == SOURCE


def test_shadows_lists_in_source_order() -> None:
    found = unshadow.shadows(ast.parse(SOURCE))
    assert [s.line for s in found] == sorted(s.line for s in found)
    assert any(s.wraps and s.name == "test_e" for s in found)
