"""A stored run keeps the logs the grader named, one per run, and nothing a run put beside them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader import runstore


def _run_folder(logs: Path, folder: str, label: str, suffix: str, text: str) -> Path:
    (logs / folder).mkdir(exist_ok=True)
    with open(logs / "index.tsv", "a", encoding="utf-8") as index:
        index.write(f"{folder}\t{label}{suffix}\n")
    (logs / folder / f"run{suffix}").write_text(text, encoding="utf-8")
    return logs / folder


def test_each_runs_logs_are_stored_under_its_label_and_planted_files_are_not(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    replay = _run_folder(logs, "q1w2e3", "01-replay", ".results.jsonl", "replay results\n")
    (replay / "run.junit.xml").write_text("<testsuites/>", encoding="utf-8")
    _run_folder(logs, "a8s7d6", "02-replay", ".audit.jsonl", "replay audit\n")
    demo = _run_folder(logs, "z9x8c7", "03-make-demo", ".audit.jsonl", "demo audit\n")
    # What a run wrote into the folder it was handed (red team 13): sparse files, report-like names.
    for n in range(50):
        with open(demo / f"flood-{n}.bin", "wb") as handle:
            handle.truncate(16 * 1024 * 1024)
    (demo / "report.md").write_text("total: 57/57\n", encoding="utf-8")
    (demo / "run.json").write_text("{}", encoding="utf-8")
    os.symlink("/etc/passwd", demo / "run.misses.jsonl")  # a grader name, as a link: never followed

    dest = tmp_path / "stored"
    runstore._copy_logs(logs, dest)
    stored = {p.name: p.read_text(encoding="utf-8") for p in dest.iterdir()}
    assert set(stored) == {
        "index.tsv",
        "01-replay.results.jsonl",
        "01-replay.junit.xml",
        "02-replay.audit.jsonl",
        "03-make-demo.audit.jsonl",
    }
    assert stored["02-replay.audit.jsonl"] == "replay audit\n"
    assert stored["03-make-demo.audit.jsonl"] == "demo audit\n"


def test_what_is_stored_of_the_logs_is_capped_in_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for n in range(10):
        folder = _run_folder(logs, f"f{n}", f"{n:02d}-run", ".audit.jsonl", "")
        with open(folder / "run.audit.jsonl", "wb") as handle:
            handle.truncate(1000)  # sparse: written back as real bytes when copied
    monkeypatch.setattr(runstore, "_MAX_LOG_TOTAL", 3500)
    dest = tmp_path / "stored"
    runstore._copy_logs(logs, dest)
    assert sum(p.stat().st_size for p in dest.iterdir() if p.name != "index.tsv") <= 3500
