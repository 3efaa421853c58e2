"""A hiring round fanned out over runners: `grade batch FILE --shard I/N` on each, `grade merge` to gather,
`grade rescore` on the merged folder; the result equals one `grade batch FILE` of the same candidates.

The steps are the ones docs/examples/batch-shards.yml runs. Cheap on purpose: a two-row rubric over checks
that read files only (tape metadata, REPLAY.md), so each candidate costs an acquire and a cached install.
No `index` marker: neither row needs the install, so an offline run (where an install into an empty cache
fails) scores them as an online one does, the single batch and the shards alike; checked with `unshare -n`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_batch import copy_sample, no_replay_doc, run_grade, tapes_without_metadata

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT / "rubric" / "default.yaml").read_text()
WORKFLOW = ROOT / "docs" / "examples" / "batch-shards.yml"


def cheap_rubric() -> str:
    """The default rubric's header and its model-metadata and replay-doc rows."""
    rows = []
    for row_id in ("model-metadata", "replay-doc"):
        start = DEFAULT.index(f"  - id: {row_id}\n")
        following = DEFAULT.find("  - id: ", start + 1)
        rows.append(DEFAULT[start : following if following != -1 else len(DEFAULT)].rstrip() + "\n\n")
    return DEFAULT[: DEFAULT.index("rows:")] + "rows:\n" + "".join(rows)


def summary_rows(out: Path) -> list[dict[str, str]]:
    with open(out / "summary.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def workflow_step(job: str, name: str) -> str:
    """The shell script of one step of the example workflow."""
    jobs = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]
    return next(step["run"] for step in jobs[job]["steps"] if step.get("name") == name)


def run_step(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a workflow step as Actions would (bash -eo pipefail), with `grade` on PATH and the expressions
    GitHub would substitute replaced by the values given as ``${{ ... }}`` -> value in ``env``."""
    for expression in re.findall(r"\$\{\{[^}]*\}\}", script):
        key = expression[3:-2].strip()
        script = script.replace(expression, env[key])
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GRADE_")}
    environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}"
    environ.update({k: v for k, v in env.items() if "." not in k})
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def round_(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Five candidates graded once as one batch and once through the example workflow's steps: three
    shards, then the gather job's merge and publish."""
    work = tmp_path_factory.mktemp("round")
    subs = work / "subs"
    subs.mkdir()
    listing = work / "candidates.csv"
    listing.write_text(
        "candidate,target\n"
        f"alice,{copy_sample(subs / 'alice')}\n"
        f"bob,{copy_sample(subs / 'bob', git=False)}\n"
        f"carol,{copy_sample(subs / 'carol', mutate=no_replay_doc)}\n"
        f"dave,{copy_sample(subs / 'dave', mutate=tapes_without_metadata)}\n"
        "mallory,file:///nonexistent/repo.git\n"
    )
    rubric = work / "rubric.yaml"
    rubric.write_text(cheap_rubric())
    single = run_grade(
        ["batch", str(listing), "--rubric", str(rubric), "--jobs", "2", "--output", str(work / "single")],
        cwd=work,
    )
    assert single.returncode == 0, single.stderr

    runners = work / "runners"
    gather = work / "gather"
    (gather / "shards").mkdir(parents=True)
    grade_shard = workflow_step("shard", "Grade this shard")
    for index in (1, 2, 3):
        runner = runners / str(index)
        runner.mkdir(parents=True)
        done = run_step(
            grade_shard,
            runner,
            CANDIDATES=str(listing),
            RUBRIC=str(rubric),
            **{"matrix.shard": str(index), "strategy.job-total": "3"},
        )
        assert done.returncode == 0, done.stderr
        assert f"(shard {index}/3 of 5)" in done.stderr
        # upload-artifact + download-artifact: the folder lands as shards/<artifact name>/.
        shutil.copytree(runner / f"shard-{index}", gather / "shards" / f"shard-{index}")
    merged = run_step(workflow_step("gather", "Merge the shards"), gather)
    assert merged.returncode == 0, merged.stderr
    assert "merged 3 shards: 5 candidates, 4 graded, 1 not assessable" in merged.stderr
    page = work / "step-summary.md"
    published = run_step(
        workflow_step("gather", "Publish the summary"), gather, GITHUB_STEP_SUMMARY=str(page)
    )
    assert published.returncode == 0, published.stderr
    return {
        "work": work,
        "shards": gather / "shards",
        "single": work / "single",
        "merged": gather / "round",
        "page": page,
    }


def test_shards_are_deterministic_disjoint_slices(round_: dict[str, Path]) -> None:
    shards = round_["shards"]
    slices = [[row["candidate"] for row in summary_rows(shards / f"shard-{i}")] for i in (1, 2, 3)]
    assert slices == [["alice", "dave"], ["bob", "mallory"], ["carol"]]
    manifest = json.loads((shards / "shard-2" / "batch.json").read_text())
    assert (
        manifest["shard"]["index"] == 2
        and manifest["shard"]["count"] == 3
        and manifest["shard"]["listed"] == 5
    )


def test_merged_round_equals_one_batch(round_: dict[str, Path]) -> None:
    single, merged = round_["single"], round_["merged"]
    assert summary_rows(merged) == summary_rows(single)
    assert (merged / "summary.md").read_text() == (single / "summary.md").read_text()
    assert round_["page"].read_text() == (merged / "summary.md").read_text()  # published on the run's page
    rows = {row["candidate"]: row for row in summary_rows(merged)}
    # alice is the sample: replay-doc 3, model-metadata 2 (its tapes came from the stand-in).
    assert (rows["alice"]["replay-doc"], rows["alice"]["model-metadata"]) == ("3", "2")
    assert rows["mallory"]["status"] == "not assessable"
    assert rows["carol"]["replay-doc"] != "3" and int(rows["dave"]["model-metadata"]) < 2
    for row in summary_rows(merged):
        if row["report"]:
            assert (merged / row["report"]).is_file()


def test_rescore_on_the_merged_round_equals_rescore_on_one_batch(
    round_: dict[str, Path], tmp_path: Path
) -> None:
    new = tmp_path / "new.yaml"
    new.write_text(cheap_rubric().replace("    weight: 2\n", "    weight: 5\n", 1))
    outputs = {}
    for name in ("single", "merged"):
        copy = Path(shutil.copytree(round_[name], tmp_path / name))
        done = run_grade(["rescore", str(copy), "--rubric", str(new)], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        # The history folder is named by the time of each re-score: the one thing allowed to differ.
        stdout = re.sub(r"history/[^/\s]+/", "history/<stamp>/", done.stdout)
        outputs[name] = (stdout, summary_rows(copy), (copy / "summary.md").read_text())
    assert outputs["merged"] == outputs["single"]
    moved = [" ".join(line.split()) for line in outputs["merged"][0].splitlines()]
    assert "alice model-metadata weight 2 -> 5 (score 2)" in moved


def _refused(args: list[str], cwd: Path, words: str) -> None:
    done = run_grade(args, cwd=cwd)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("grade: error: ") and words in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


def test_merge_refuses_a_missing_duplicate_or_foreign_shard(round_: dict[str, Path], tmp_path: Path) -> None:
    work = round_["shards"]
    shard = [str(work / f"shard-{i}") for i in (1, 2, 3)]
    _refused(["merge", str(tmp_path / "a"), shard[0], shard[1]], tmp_path, "shard 3 of 3 missing")
    # The same folder twice, and two folders holding the same slice: each named, with what to do.
    _refused(
        ["merge", str(tmp_path / "b"), shard[0], shard[1], shard[0], shard[2]],
        tmp_path,
        f"the shard folder {shard[0]} is given twice (it is shard 1 of 3); pass each shard folder once",
    )
    again = str(shutil.copytree(work / "shard-1", tmp_path / "shard-1-again"))
    _refused(
        ["merge", str(tmp_path / "b"), shard[0], again, shard[1], shard[2]],
        tmp_path,
        f"{shard[0]} and {again} are both shard 1 of 3 (the same slice graded twice); pass only one of them",
    )
    assert not (tmp_path / "b").exists()
    _refused(["merge", str(tmp_path / "c"), str(round_["single"])], tmp_path, "not a shard")
    # A shard graded from another batch file or another rubric is not part of this round.
    other = Path(shutil.copytree(work / "shard-3", tmp_path / "other"))
    manifest = json.loads((other / "batch.json").read_text())
    manifest["shard"]["source_sha256"] = "0" * 64
    (other / "batch.json").write_text(json.dumps(manifest))
    _refused(["merge", str(tmp_path / "d"), shard[0], shard[1], str(other)], tmp_path, "another batch file")
    other = Path(shutil.copytree(work / "shard-3", tmp_path / "other-rubric"))
    (other / "rubric.yaml").write_text(cheap_rubric() + "# edited\n")
    _refused(["merge", str(tmp_path / "e"), shard[0], shard[1], str(other)], tmp_path, "was it edited?")
    manifest = json.loads((other / "batch.json").read_text())
    manifest["rubric"]["sha256"] = hashlib.sha256((other / "rubric.yaml").read_bytes()).hexdigest()
    (other / "batch.json").write_text(json.dumps(manifest))
    _refused(["merge", str(tmp_path / "f"), shard[0], shard[1], str(other)], tmp_path, "another rubric")
    _refused(["merge", str(round_["merged"]), *shard], tmp_path, "not empty")
    # A candidate's stored report edited after grading (a better total) is refused, naming the file.
    edited = Path(shutil.copytree(work / "shard-2", tmp_path / "edited-report"))
    (run,) = [d for d in edited.iterdir() if (d / "report.json").is_file()][:1]
    report = json.loads((run / "report.json").read_text())
    report["total"]["points"] = report["total"]["max"]
    (run / "report.json").write_text(json.dumps(report))
    _refused(
        ["merge", str(tmp_path / "g"), shard[0], str(edited), shard[2]],
        tmp_path,
        "report.json: does not match",
    )
    for name in "abcdefg":
        assert not (tmp_path / name).exists()


@pytest.mark.parametrize("value", ["0/3", "4/3", "2", "a/b", "1/0"])
def test_bad_shard_is_bad_input(tmp_path: Path, value: str) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("./a\n")
    _refused(["batch", str(listing), "--shard", value, "-o", str(tmp_path / "o")], tmp_path, "--shard")
    assert not (tmp_path / "o").exists()


def test_the_example_workflow_runs_these_steps() -> None:
    """The documented workflow shards, uploads, merges and publishes with the commands tested above."""
    text = WORKFLOW.read_text(encoding="utf-8")
    assert re.search(
        r"grade batch \S+ --shard \"?\$\{\{ matrix\.shard \}\}/\$\{\{ strategy\.job-total \}\}", text
    )
    assert "actions/upload-artifact" in text and "actions/download-artifact" in text
    assert re.search(r"grade merge \S+ shards/\*", text)
    assert "summary.md" in text and "GITHUB_STEP_SUMMARY" in text
