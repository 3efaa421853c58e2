"""`grade batch`: a real batch of mixed submissions (copies of sample_solution with small mutations, plus
targets nobody can reach) graded in parallel by the real `grade` command into one output folder."""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import socket
import string
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from grader.batch import read_batch_file
from grader.errors import BadInput
from tests.helpers.git import GIT_ENV as _GIT_ENV
from tests.helpers.sample_marks import default_scores, default_total

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_solution"
_IGNORE = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".venv", ".ruff_cache", "*.pyc")


def copy_sample(dest: Path, *, git: bool = True, mutate: Callable[[Path], None] | None = None) -> Path:
    """A copy of sample_solution, mutated, committed to a fresh git repo (or left a plain folder)."""
    shutil.copytree(SAMPLE, dest, ignore=_IGNORE)
    if mutate is not None:
        mutate(dest)
    if git:
        env = {**os.environ, **_GIT_ENV, "HOME": str(dest.parent)}
        for argv in (
            ["git", "init", "-q", "-b", "main"],
            ["git", "add", "-A"],
            ["git", "commit", "-qm", "work"],
        ):
            subprocess.run(argv, cwd=dest, env=env, check=True, capture_output=True)
    return dest


def failing_test(repo: Path) -> None:
    (repo / "tests" / "test_zz_broken.py").write_text("def test_broken():\n    assert 1 + 1 == 3\n")


def no_tapes(repo: Path) -> None:
    for tape in (repo / "cassettes").glob("*.json"):
        tape.unlink()


def no_replay_doc(repo: Path) -> None:
    (repo / "REPLAY.md").unlink()


def tapes_without_metadata(repo: Path) -> None:
    for tape in (repo / "cassettes").glob("*.json"):
        data = json.loads(tape.read_text())
        data.pop("meta", None)
        tape.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def leaked_key(repo: Path) -> None:
    # A fake key in the real OpenAI project-key shape, committed in a config file.
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "-_"
    part = "".join(rng.choice(alphabet) for _ in range(74))
    (repo / "settings.env").write_text(f"OPENAI_API_KEY=sk-proj-{part}T3BlbkFJ{part[::-1]}\n")


def broken_module(repo: Path) -> None:
    (repo / "support_triage_agent" / "__init__.py").write_text("this is not python (\n")


def no_makefile(repo: Path) -> None:
    (repo / "Makefile").unlink()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_grade(args: list[str], *, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("GRADE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_summary(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "summary.csv", newline="", encoding="utf-8") as handle:
        return {row["candidate"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """12 candidates: good ones in every target form, mutated ones, and two unreachable URLs."""
    work = tmp_path_factory.mktemp("batch")
    subs = work / "subs"
    subs.mkdir()
    good = copy_sample(subs / "good")
    archive = subs / "good-archive.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(copy_sample(subs / "packed", git=False), arcname="packed")
    targets = {
        "alice": str(good),
        "bob": str(copy_sample(subs / "plain", git=False)),
        "carol": str(archive),
        "dave": str(copy_sample(subs / "failing", mutate=failing_test)),
        "erin": str(copy_sample(subs / "notapes", mutate=no_tapes)),
        "frank": str(copy_sample(subs / "nodoc", mutate=no_replay_doc)),
        "grace": str(copy_sample(subs / "nometa", mutate=tapes_without_metadata)),
        "heidi": str(copy_sample(subs / "leak", mutate=leaked_key)),
        "ivan": str(copy_sample(subs / "broken", mutate=broken_module)),
        "judy": str(copy_sample(subs / "nomake", mutate=no_makefile)),
        "mallory": "file:///nonexistent/repo.git",
        "oscar": f"git://127.0.0.1:{closed_port()}/triage.git",
    }
    listing = work / "candidates.csv"
    lines = [
        "# hiring round 1",
        "candidate,target",
        *(f"{name},{target}" for name, target in targets.items()),
    ]
    listing.write_text("\n".join(lines) + "\n")
    out = work / "out"
    result = run_grade(
        ["batch", str(listing), "--jobs", "2", "--output", str(out), "--timeout", "120"], cwd=work
    )
    return out, result


@pytest.mark.index
def test_batch_of_twelve_lists_everyone_and_marks_the_unreachable(
    batch: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, result = batch
    assert result.returncode == 0, result.stderr
    summary = read_summary(out)
    assert len(summary) == 12
    for name in ("mallory", "oscar"):
        assert summary[name]["status"] == "not assessable"
        assert summary[name]["reason"], summary[name]
        # No total, every row n/a (docs/reviewer.md), no report.
        assert (summary[name]["points"], summary[name]["max"], summary[name]["percent"]) == ("", "", "")
        assert {summary[name][row_id] for row_id in default_scores()} == {"n/a"}, summary[name]
        assert summary[name]["report"] == ""
    md = (out / "summary.md").read_text()
    for name in summary:
        assert f"| {name} |" in md
    assert md.count("not assessable:") == 2
    graded = [name for name, row in summary.items() if row["status"] == "graded"]
    assert len(graded) == 10
    # Each graded line links to a full report that exists, next to its stored raw evidence.
    for name in graded:
        report = out / summary[name]["report"]
        assert report.is_file(), report
        assert f"]({summary[name]['report']})" in md
        stored = json.loads((report.parent / "run.json").read_text())
        assert stored["status"] == "graded" and stored["rubric"]["sha256"]
        assert (report.parent / "results.json").is_file() and (report.parent / "report.json").is_file()
        kept = {p.name for p in (report.parent / "logs").iterdir()}
        assert any(name.endswith("-replay.junit.xml") for name in kept), "JUnit kept, named by its run"
        # Every run's logs, each under its own name (all runs write `run.audit.jsonl`: once, they collided).
        assert sum(name.endswith(".audit.jsonl") for name in kept) > 3, kept


@pytest.mark.index
def test_every_target_form_of_the_good_submission_gets_the_same_marks(
    batch: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """The sample's marks under the default rubric (model-metadata 2: recorded against the stand-in), for
    each way of pointing at it."""
    summary = read_summary(batch[0])
    points, most = default_total()
    for name in ("alice", "bob", "carol"):
        row = summary[name]
        assert {row_id: row[row_id] for row_id in default_scores()} == {
            row_id: str(score) for row_id, score in default_scores().items()
        }, row
        assert (float(row["points"]), float(row["max"])) == (points, most), row


@pytest.mark.index
@pytest.mark.parametrize(
    ("candidate", "row"),
    [
        ("dave", "offline-replay"),
        ("erin", "offline-replay"),
        ("frank", "replay-doc"),
        ("grace", "model-metadata"),
        ("heidi", "no-credentials"),
        ("ivan", "offline-replay"),
        ("judy", "make-targets"),
    ],
)
def test_each_mutation_costs_its_row(
    batch: tuple[Path, subprocess.CompletedProcess[str]], candidate: str, row: str
) -> None:
    summary = read_summary(batch[0])
    assert summary["alice"][row] == str(default_scores()[row])
    assert int(summary[candidate][row]) < int(summary["alice"][row]), summary[candidate]
    assert float(summary[candidate]["percent"]) < float(summary["alice"]["percent"])


@pytest.mark.index
def test_progress_names_each_candidate_and_the_end(
    batch: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, result = batch
    assert "mallory  not assessable:" in result.stderr
    assert "alice  [replay]" in result.stderr
    assert "12 candidates: 10 graded, 2 not assessable" in result.stderr
    assert "\x1b[" not in result.stderr  # not a terminal: plain lines
    assert result.stdout == ""


def test_refuses_to_write_into_a_used_folder(
    batch: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, _ = batch
    listing = tmp_path / "list.txt"
    listing.write_text(f"{SAMPLE}\n")
    before = sorted(p.name for p in out.iterdir())
    result = run_grade(["batch", str(listing), "--output", str(out)], cwd=tmp_path)
    assert result.returncode == 2
    assert "not empty" in result.stderr and result.stderr.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == before


# ----------------------------------------------------------------------------------- the batch file


def test_plain_list_skips_comments_and_names_candidates(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(
        "# round 2\n\nhttps://github.com/alice/triage.git\n  /srv/subs/bob  \nhttps://github.com/alice/triage.git#v2\n"
        "carol.tar.gz\n"
    )
    entries = read_batch_file(listing)
    assert [(e.candidate, e.target, e.line) for e in entries] == [
        ("alice-triage", "https://github.com/alice/triage.git", 3),
        ("bob", "/srv/subs/bob", 4),
        ("alice-triage-2", "https://github.com/alice/triage.git#v2", 5),
        ("carol", "carol.tar.gz", 6),
    ]


def test_csv_uses_the_candidate_column_and_a_repo_column(tmp_path: Path) -> None:
    listing = tmp_path / "c.csv"
    listing.write_text('email,Candidate,repo\na@x,"Ann Lee",https://example.com/a.git\nb@x,../b/c,./b\n')
    entries = read_batch_file(listing)
    assert [(e.candidate, e.target, e.folder) for e in entries] == [
        ("Ann Lee", "https://example.com/a.git", "Ann-Lee"),
        ("../b/c", "./b", "b-c"),  # a name never becomes a path outside the output folder
    ]


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("candidate,email\nann,a@x\n", ":1:", "'target' or 'repo'"),
        ("candidate,target\nann,./a\n,./b\n", ":3:", "candidate column is empty"),
        ("candidate,target\nann,./a\nbob,\n", ":3:", "no target"),
        ("candidate,target\nann,./a\nANN,./b\n", ":3:", "appears twice (first on line 2)"),
        ("# nothing\n\n", ":1:", "no targets"),
        ("candidate,target\n", ":1:", "no candidates"),
    ],
)
def test_bad_file_is_one_line_with_file_and_line(tmp_path: Path, text: str, where: str, words: str) -> None:
    listing = tmp_path / "bad.csv"
    listing.write_text(text)
    with pytest.raises(BadInput) as caught:
        read_batch_file(listing)
    assert f"{listing}{where}" in str(caught.value) and words in str(caught.value)
    result = run_grade(["batch", str(listing), "--output", str(tmp_path / "o")], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("grade: error: ") and result.stderr.count("\n") == 1
    assert f"{listing}{where}" in result.stderr
    assert not (tmp_path / "o").exists()


def test_missing_file_and_non_utf8_are_bad_input(tmp_path: Path) -> None:
    result = run_grade(["batch", str(tmp_path / "nope.txt")], cwd=tmp_path)
    assert result.returncode == 2 and "batch file not found" in result.stderr
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"./a\n./caf\xe9\n")
    with pytest.raises(BadInput, match=r"latin\.txt:2: not UTF-8"):
        read_batch_file(latin)


_RACE = """
import threading
from grader import install

found, barrier = [], threading.Barrier(16)


def find():
    barrier.wait()
    try:
        found.append(install._uv_bin())
    except Exception as exc:
        found.append(repr(exc))


threads = [threading.Thread(target=find) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(set(found)), found[0])
"""


def test_grades_started_at_once_each_find_the_installer() -> None:
    # CI lost a batch candidate to "TypeError: can only concatenate str (not NoneType)": two grades looked
    # for uv at once in a fresh interpreter (sysconfig's lazy fill, gh-92452). A fresh interpreter each time.
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _RACE], capture_output=True, text=True, check=True, cwd=ROOT
        )
        kinds, first = done.stdout.split(maxsplit=1)
        assert (kinds, "Error" in first) == ("1", False), done.stdout


_BROKEN_GRADER = """
import sys
from grader import batch, cli


def broken(*args, **kwargs):
    raise RuntimeError("a bug in the grader")


batch.grade = broken
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("debug", [False, True])
def test_a_grader_bug_costs_one_candidate_and_debug_shows_where(tmp_path: Path, debug: bool) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text(f"{SAMPLE}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("GRADE_DEBUG", None)
    if debug:
        env["GRADE_DEBUG"] = "1"
    argv = [sys.executable, "-c", _BROKEN_GRADER, "batch", str(listing), "--output", str(tmp_path / "out")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((tmp_path / "out" / "summary.csv").open()))
    assert rows[0]["reason"] == "internal error in the grader: RuntimeError: a bug in the grader"
    assert ("Traceback" in done.stderr) is debug, done.stderr
