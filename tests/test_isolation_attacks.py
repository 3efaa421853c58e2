"""Attacks on the filesystem boundary, through the real `grade` command: a real batch of two where one
candidate goes after the other's checkout, and a reviewer shell whose address-space limit is below ours."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader import sandbox
from tests.helpers.processes import wait_for
from tests.helpers.sample_marks import default_scores, default_total
from tests.test_batch import copy_sample, read_summary, run_grade

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
needs_bwrap = pytest.mark.skipif(
    sandbox.isolation().filesystem != "bwrap", reason="bwrap cannot run on this machine"
)

# A test the attacker adds to its suite. While its replay runs it looks for other candidates' checkouts the
# ways a stranger would: through every /proc entry (working folders, environments), by listing /tmp, and by
# guessing the layout from its own path; it plants a key in every one it finds and deletes its tapes. It also
# leaves files outside its workspace and a daemon that escaped its session.
_ATTACK = textwrap.dedent(
    """
    import glob, os, subprocess, time

    KEY = "OPENAI_API_KEY=sk-proj-" + "Ab3dE" * 15 + "T3BlbkFJ" + "xY9zQ" * 15 + "\\n"
    STRAYS = ("/tmp/kit-attack-stray", "/var/tmp/kit-attack-stray", "/dev/shm/kit-attack-stray")


    def _theirs():
        found = set()
        for link in glob.glob("/proc/[0-9]*/cwd"):
            try:
                found.add(os.readlink(link))
            except OSError:
                pass
        for env in glob.glob("/proc/[0-9]*/environ"):
            try:
                data = open(env, "rb").read()
            except OSError:
                continue
            for item in data.split(b"\\0"):
                name, _, value = item.partition(b"=")
                if name in (b"PWD", b"PY_AUDIT_ROOT", b"HOME"):
                    found.add(value.decode(errors="replace"))
        here = os.getcwd()
        guessed = os.path.dirname(os.path.dirname(here)) + "/*/repo"
        for pattern in ("/tmp/*/repo", "/tmp/grade-*/*", "/var/tmp/*/repo", guessed):
            found.update(glob.glob(pattern))
        mine = os.path.realpath(here)
        return {p for p in found if os.path.isdir(p) and os.path.realpath(p) != mine}


    def test_neighbour():
        if os.path.basename(os.getcwd()) != "repo":
            return  # only the replay run attacks: the probes' runs stay quick
        for stray in STRAYS:
            try:
                with open(stray, "w") as handle:
                    handle.write("left behind\\n")
            except OSError:
                pass
        subprocess.Popen(["sleep", "9791"], start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for path in _theirs():
                tapes = glob.glob(os.path.join(path, "cassettes", "*.json"))
                if not tapes:
                    continue
                try:
                    with open(os.path.join(path, "settings.env"), "w") as handle:
                        handle.write(KEY)
                except OSError:
                    pass
                for tape in tapes:
                    try:
                        os.remove(tape)
                    except OSError:
                        pass
            time.sleep(0.2)
    """
)


def _attacker(repo: Path) -> None:
    (repo / "tests" / "test_zz_neighbour.py").write_text(_ATTACK)


@pytest.mark.index
@needs_bwrap
def test_a_candidate_cannot_reach_its_neighbour_in_a_batch(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    listing = tmp_path / "candidates.csv"
    rows = [
        f"mallory,{copy_sample(subs / 'mallory', mutate=_attacker)}",
        f"alice,{copy_sample(subs / 'alice')}",
    ]
    listing.write_text("candidate,target\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    done = run_grade(
        ["batch", str(listing), "--jobs", "2", "--out", str(out), "--timeout", "120"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = read_summary(out)
    # The neighbour keeps the sample's marks: no planted key, no lost tape.
    assert {row_id: summary["alice"][row_id] for row_id in default_scores()} == {
        row_id: str(score) for row_id, score in default_scores().items()
    }, summary["alice"]
    # Nothing the attacker wrote outside its workspace, and nothing it started, outlived the batch.
    for stray in ("/tmp/kit-attack-stray", "/var/tmp/kit-attack-stray", "/dev/shm/kit-attack-stray"):
        assert not Path(stray).exists(), stray

    def alive() -> bool:
        return subprocess.run(["pgrep", "-f", "sleep 9791"], capture_output=True, check=False).returncode == 0

    assert wait_for(lambda: not alive()), "the attacker's sleeper outlived the batch"
    report = json.loads(next(out.glob("alice*/report.json")).read_text())
    assert report["isolation"]["filesystem"] == "bwrap"


@pytest.mark.index
def test_a_host_address_space_limit_below_ours_costs_the_candidate_nothing(tmp_path: Path) -> None:
    # A reviewer shell with `ulimit -v 3145728` (3 GiB): the sandbox used to ask for 4 GiB, fail, and the
    # sample solution scored 29 points instead of its marks.
    host = 3 * 1024**3
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        ["prlimit", f"--as={host}", "--", sys.executable, "-m", "grader", str(ROOT / "sample_solution"),
         "--format", "json", "-q", "-o", str(report_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(report_path.read_text())
    assert (report["total"]["points"], report["total"]["max"]) == default_total()
    assert report["isolation"]["limits"]["address_space"] == host
    assert report["isolation"]["limits"]["lowered_by_host"] == ["address_space"]
    assert f"sandbox limits lowered to this host's hard limits: address_space {host}" in report["notes"]


def test_a_host_limit_too_low_for_any_suite_is_not_assessable(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        ["prlimit", f"--as={900 * 1024**2}", "--", sys.executable, "-m", "grader",
         str(ROOT / "sample_solution"), "--format", "json", "-q", "-o", str(report_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert done.stderr.count("\n") == 1 and "address space limit" in done.stderr
    report = json.loads(report_path.read_text())
    assert {row["status"] for row in report["rows"]} == {"not-assessable"}
