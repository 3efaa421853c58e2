"""The benchmark's own bookkeeping: how it counts a grade's pytest sessions, and where a subset run writes."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.__main__ import BEGIN, END, _partial_markers, _write
from benchmarks.bench_grading import sandboxed_runs


def _run(logs: Path, folder: str, events: list[dict[str, object]]) -> None:
    (logs / folder).mkdir()
    lines = "".join(json.dumps(e) + "\n" for e in events)
    (logs / folder / "run.audit.jsonl").write_text(lines, encoding="utf-8")


def test_sessions_are_counted_per_run_even_when_pids_and_file_names_repeat(tmp_path: Path) -> None:
    # Every run's audit log is logs/<random>/run.audit.jsonl and pids restart at 1 in each run's pid
    # namespace: the replay suite and the withheld rerun both had pytest as pid 4 and were counted once.
    logs = tmp_path / "logs"
    logs.mkdir()
    pytest_open = {
        "event": "open",
        "path": "tests/conftest.py",
        "where": "/venv/_pytest/pathlib.py:1",
        "pid": 4,
    }
    agent_open = {"event": "open", "path": "pkg/__init__.py", "where": "<frozen importlib>:1", "pid": 2}
    _run(logs, "aaa", [pytest_open])
    _run(logs, "bbb", [agent_open])
    _run(logs, "ccc", [pytest_open, {**pytest_open, "pid": 9}, {**agent_open, "pid": 30}])
    (logs / "index.tsv").write_text(
        "aaa\t02-replay.audit.jsonl\nzzz\t03-unseen.misses.jsonl\nbbb\t04-unseen-message.audit.jsonl\n"
        "ccc\t06-withheld-tapes.audit.jsonl\nddd\t07-no-output.audit.jsonl\n",
        encoding="utf-8",
    )
    runs = sandboxed_runs(tmp_path)
    assert [r.label for r in runs] == ["02-replay", "04-unseen-message", "06-withheld-tapes", "07-no-output"]
    assert [r.pytest for r in runs] == [1, 0, 2, 0]
    assert [r.pythons for r in runs] == [1, 1, 3, 0]
    assert sum(r.pytest for r in runs) == 3


def test_a_subset_run_writes_its_own_block_and_leaves_the_full_runs_block(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    full = f"{BEGIN}\n\nfull run numbers\n\n{END}"
    doc.write_text(f"# Benchmarks\n\nintro\n\n{full}\n\n## Analysis\n\nhand-written\n", encoding="utf-8")
    markers = _partial_markers(["warm-grade"])
    _write(doc, f"{markers[0]}\nfirst subset\n{markers[1]}", markers)
    _write(doc, f"{markers[0]}\nsecond subset\n{markers[1]}", markers)
    text = doc.read_text(encoding="utf-8")
    assert full in text and "hand-written" in text
    assert "second subset" in text and "first subset" not in text
    assert text.index(END) < text.index(markers[0]) < text.index("## Analysis")
