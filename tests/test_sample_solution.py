"""sample_solution: a genuinely recorded submission (against the stand-in) that earns full marks under
rubric/rehearsal.yaml and stays in step with the template."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from grader.checks.keys import probe_cases
from grader.schemas import load_schema
from tests.helpers.bake import bake, clean_env, record_with_standin, run, unshare_works
from tests.helpers.sample_marks import (
    LOOPBACK_EVIDENCE,
    REHEARSAL,
    STANDIN_CAPPED_ROW,
    default_scores,
    default_total,
)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_solution"
PACKAGE = "support_triage_agent"
# What the candidate is asked to change: the prompt and agent logic, their own tests, the docs and the tapes.
CANDIDATE_OWNED = {
    f"{PACKAGE}/agent.py",
    "README.md",
    "REPLAY.md",
    ".cookiecutter.json",
}
CANDIDATE_OWNED_DIRS = ("cassettes/",)
CANDIDATE_TEST_FILES = {"tests/test_agent.py"}  # tests the candidate added beside the template's


def _tree(root: Path) -> dict[str, bytes]:
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and "__pycache__" not in rel and not rel.startswith((".pytest_cache", ".git/")):
            files[rel] = path.read_bytes()
    return files


def _sample_answers() -> dict[str, str]:
    answers = json.loads((SAMPLE / ".cookiecutter.json").read_text(encoding="utf-8"))
    return {k: v for k, v in answers.items() if not k.startswith("_")}


def _tapes(folder: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}


def test_sample_has_not_drifted_from_the_template(tmp_path: Path) -> None:
    baked = _tree(bake(tmp_path, **_sample_answers()))
    sample = _tree(SAMPLE)
    drifted = [
        rel
        for rel, data in baked.items()
        if rel not in CANDIDATE_OWNED and not rel.startswith(CANDIDATE_OWNED_DIRS) and sample.get(rel) != data
    ]
    assert not drifted, f"sample_solution differs from a fresh bake in files candidates keep as-is: {drifted}"
    extra = set(sample) - set(baked) - CANDIDATE_TEST_FILES
    assert {rel for rel in extra if not rel.startswith(CANDIDATE_OWNED_DIRS)} == set()


def test_sample_is_recorded_pruned_and_documented() -> None:
    tapes = _tapes(SAMPLE / "cassettes")
    tickets = (SAMPLE / "data" / "tickets.jsonl").read_text(encoding="utf-8").splitlines()
    assert len([t for t in tickets if t.strip()]) >= 20
    assert len(tapes) == len([t for t in tickets if t.strip()]), "one tape per labelled ticket, none unused"
    for name, tape in tapes.items():
        assert name == f"{tape['key']}.json"
        assert tape["meta"]["model"] and tape["meta"]["served_model"] and tape["meta"]["recorded_at"]
    replay_doc = (SAMPLE / "REPLAY.md").read_text(encoding="utf-8")
    assert "TODO" not in replay_doc
    assert "grader.standin" in replay_doc, "REPLAY.md must say the stand-in served the recording"


def test_sample_tests_and_demo_pass_offline_without_credentials(tmp_path: Path) -> None:
    repo = tmp_path / "sample"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns(".pytest_cache", "__pycache__"))
    env = clean_env(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
    if not unshare_works():
        print("unshare -n refused: the sample's replay relies on pytest-socket alone here")
    for target in ("test", "demo"):
        result = run(["make", target, f"PYTHON={sys.executable}"], repo, env, offline=True)
        assert result.returncode == 0, f"make {target}:\n{result.stdout}\n{result.stderr}"
    assert "24/24 agree with their labels" in result.stdout


@pytest.mark.slow
def test_rerecording_reproduces_the_tapes(tmp_path: Path) -> None:
    """What `nox -s rerecord-sample` does: the sample's own `make record` against the stand-in."""
    repo = tmp_path / "sample"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns(".pytest_cache", "__pycache__"))
    shutil.rmtree(repo / "cassettes")
    (repo / "cassettes").mkdir()
    result = record_with_standin(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    old, new = _tapes(SAMPLE / "cassettes"), _tapes(repo / "cassettes")
    assert sorted(new) == sorted(old)
    for name, tape in new.items():
        tape["meta"].pop("recorded_at")
        old[name]["meta"].pop("recorded_at")
        assert tape == old[name], f"{name} differs after re-recording"


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize(
    ("jobs", "rubric"),
    # Checks running at once must not disturb each other's runs; each rubric's claim is checked once.
    [("1", "default"), ("2", "rehearsal")],
)
def test_grading_the_sample_scores_full_marks_under_the_rehearsal_rubric(
    tmp_path: Path, grade_cache: Path, jobs: str, rubric: str
) -> None:
    """The sample was recorded against the stand-in: full marks under rubric/rehearsal.yaml (the rubric the
    docs name for it); under the default rubric every row but model-metadata, which says why it is 2."""
    out = tmp_path / "report.json"
    chosen = ["--rubric", str(REHEARSAL)] if rubric == "rehearsal" else []
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            str(SAMPLE),
            *chosen,
            "--format",
            "json",
            "--output",
            str(out),
            "--jobs",
            jobs,
        ],
        cwd=tmp_path,
        env={**clean_env(), "XDG_CACHE_HOME": str(grade_cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.validate(report, load_schema("grade-report"))
    scores = {row["id"]: (row["status"], row["score"], row["evidence"]) for row in report["rows"]}
    assert all(status == "scored" for status, _, _ in scores.values()), scores
    if rubric == "rehearsal":
        assert report["rubric"]["name"] == "Cassette take-home (rehearsal against the stand-in)"
        assert all(score == 3 for _, score, _ in scores.values()), scores
        assert report["total"]["percent"] == 100.0
    else:
        assert {row_id: score for row_id, (_, score, _) in scores.items()} == default_scores(), scores
        tapes = len(_tapes(SAMPLE / "cassettes"))
        assert scores[STANDIN_CAPPED_ROW][2].startswith(f"all {tapes} {LOOPBACK_EVIDENCE}"), scores
        assert (report["total"]["points"], report["total"]["max"]) == default_total()
    # Its tape chain is read and intact; its `make serve` replays and answers an unseen request with 422.
    assert report["facts"]["keys"]["chain"] and report["facts"]["keys"]["chain_tampered"] == 0
    assert report["facts"]["keys"]["chain_entries"] == len(_tapes(SAMPLE / "cassettes"))
    serve = report["facts"]["loud-miss"]
    assert serve["serve_replayed"] and serve["serve_unseen_status"] == 422 and serve["serve_names_key"]
    # Rows whose evidence is counts ("84 probes, 0 failed") show what they counted, at places one can open.
    rows = {row["id"]: row for row in report["rows"]}
    for row_id in ("canonical-keys", "cassette-hygiene", "make-targets"):
        details = rows[row_id]["details"]
        assert details, row_id
        places = [p for line in details for p in _PLACE.findall(line)]
        assert places, (row_id, details)
        for path, line in places:
            assert (SAMPLE / path).is_file(), (row_id, path)
            assert 1 <= int(line) <= len((SAMPLE / path).read_text().splitlines()), (row_id, path, line)
    keys = rows["canonical-keys"]["details"]
    assert sum("probe: " in line for line in keys) == len({w for *_, w, _ in probe_cases()})
    assert any("re-hashes to its own name" in line for line in keys)
    assert any(line.startswith("Makefile:") and " demo: " in line for line in rows["make-targets"]["details"])


_PLACE = re.compile(r"(?<![\w/.])((?:[\w.-]+/)*(?:[\w.-]+\.(?:py|json|log|md|toml)|Makefile)):(\d+)")
