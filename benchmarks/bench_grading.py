"""Grading: `grade sample_solution` cold and warm vs its pytest sessions' floor; `grade batch` at 1, 2 jobs.

    python -m benchmarks --only grading [--quick]
    python -m benchmarks --only warm-grade    # the same without `grade batch` (the slow half)

- cold: ``grade sample_solution --cache-dir <new empty folder>`` (no cached environment: uv creates the venv
  and installs; uv's own download cache under that folder starts empty too, so packages come from the index);
- warm: the same command on the folder the previous cold run filled, at the default ``--jobs`` (2: checks two
  at a time) and at ``--jobs 1`` (one by one; its report's timings give the per-stage breakdown);
- bare: ``unshare -n <that venv>/bin/python -m pytest -q -p no:cacheprovider`` in a fresh copy of
  sample_solution, no credentials in the environment: what the suite costs with no grader around it; three
  runs per round (before, between and after the two warm grades), the round's value their median;
- floor: what the design cannot go below: bare × the pytest sessions the grade runs ÷ the cores. The
  sessions are counted in the same round, from the ``--jobs 1`` run's kept workspace (``--keep-workspace``):
  ``logs/index.tsv`` names every sandboxed command, and in each command's audit log every process in which
  pytest's own code opened a file is one session (for the sample: the replay suite, the tapes-withheld rerun,
  the canary's ``make record``); the report lists every sandboxed command with its sessions and processes;
- without the drift probe: the warm grade again with the default rubric less its ``model-drift`` row (the
  drift check then does not run), so the difference is what the probe adds;
- batch: ``grade batch`` on 12 fixture submissions (the ones ``tests/test_batch.py`` builds: copies of
  sample_solution, some mutated, two unreachable targets) at ``--jobs 1`` and ``--jobs 2``, warm cache.

Wall time throughout: this is what a reviewer waits for. Each round runs every configuration once.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import Section, Series, Verdict, ratio
from ._cpu import CpuMeter

__all__ = ["SandboxedRun", "run", "sandboxed_runs"]

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_solution"


def _env(home: Path) -> dict[str, str]:
    """This environment (the index's certificates and settings included) minus anything credential-like."""
    from tests.helpers.bake import clean_env

    return clean_env(HOME=str(home))


# CPU of each timed command and everything it starts (benchmarks/_cpu.py); NaN where it cannot be measured.
# Made by `run` (a cgroup folder of its own, removed at the end).
_METER: CpuMeter | None = None


def _meter() -> CpuMeter:
    global _METER
    if _METER is None or (_METER.folder is not None and not _METER.folder.exists()):
        _METER = CpuMeter("bench-grading")
    return _METER


def _grade(args: list[str], home: Path, timeout: float = 1800) -> tuple[float, Any, float]:
    start, cpu = time.perf_counter(), _meter().seconds()
    result = subprocess.run(
        _meter().wrap([sys.executable, "-m", "grader", *args]),
        cwd=home,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seconds, cpu = time.perf_counter() - start, _meter().seconds() - cpu
    if result.returncode not in (0, 3):
        tail = result.stderr.strip()[-500:]
        raise RuntimeError(f"grade {' '.join(args)} exited {result.returncode}: {tail}")
    return seconds, result, cpu


def _fresh_cache(tmp: Path, name: str) -> Path:
    cache = tmp / name
    cache.mkdir()
    cache.chmod(0o755)  # as root the sandbox drops to nobody, who must reach the venv
    return cache


def _venv_python(cache: Path) -> Path:
    found = [p for p in cache.glob("*/bin/python") if "cache" not in p.parts[-3]]
    if len(found) != 1:
        raise RuntimeError(f"expected one environment in {cache}, found {found}")
    return found[0]


def _bare_pytest(python: Path, tmp: Path, n: str) -> tuple[float, float]:
    repo = tmp / f"bare-{n}"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    env = _env(tmp)
    env.update(
        PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}", CASSETTE_MODE="replay", PYTHONPATH=str(repo)
    )
    argv = _meter().wrap(["unshare", "-n", str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    start, cpu = time.perf_counter(), _meter().seconds()
    result = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    seconds, cpu = time.perf_counter() - start, _meter().seconds() - cpu
    if result.returncode != 0:
        raise RuntimeError(f"bare pytest failed: {result.stdout[-500:]}")
    return seconds, cpu


def _candidates(tmp: Path) -> Path:
    """The 12 fixture submissions of tests/test_batch.py, as a batch file."""
    sys.path.insert(0, str(ROOT))
    from tests import test_batch as fx

    subs = tmp / "subs"
    subs.mkdir()
    good = fx.copy_sample(subs / "good")
    archive = subs / "good-archive.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(fx.copy_sample(subs / "packed", git=False), arcname="packed")
    targets = {
        "alice": str(good),
        "bob": str(fx.copy_sample(subs / "plain", git=False)),
        "carol": str(archive),
        "dave": str(fx.copy_sample(subs / "failing", mutate=fx.failing_test)),
        "erin": str(fx.copy_sample(subs / "notapes", mutate=fx.no_tapes)),
        "frank": str(fx.copy_sample(subs / "nodoc", mutate=fx.no_replay_doc)),
        "grace": str(fx.copy_sample(subs / "nometa", mutate=fx.tapes_without_metadata)),
        "heidi": str(fx.copy_sample(subs / "leak", mutate=fx.leaked_key)),
        "ivan": str(fx.copy_sample(subs / "broken", mutate=fx.broken_module)),
        "judy": str(fx.copy_sample(subs / "nomake", mutate=fx.no_makefile)),
        "mallory": "file:///nonexistent/repo.git",
        "oscar": f"git://127.0.0.1:{fx.closed_port()}/triage.git",
    }
    listing = tmp / "candidates.csv"
    listing.write_text("candidate,target\n" + "".join(f"{k},{v}\n" for k, v in targets.items()))
    return listing


def _timings(report: Path) -> dict[str, Any]:
    return json.loads(report.read_text()).get("timings", {})


def _kept_workspace(report: Path) -> Path:
    """The folder a ``--keep-workspace`` grade left, from its report's notes."""
    prefix = "workspace kept at "
    for note in json.loads(report.read_text()).get("notes", []):
        if note.startswith(prefix):
            return Path(note[len(prefix) :].strip())
    raise RuntimeError(f"{report}: no 'workspace kept at' note")


@dataclass(frozen=True)
class SandboxedRun:
    """One sandboxed command a grade ran, read from its kept workspace's logs."""

    label: str  # the run's label in logs/index.tsv, e.g. "02-replay"
    pytest: int  # processes in it where pytest's own code opened a file: its pytest sessions
    pythons: int  # Python processes in it the audit hook saw doing anything (a driver's children included)


def sandboxed_runs(workspace: Path) -> list[SandboxedRun]:
    """Every sandboxed command of a kept workspace, in the order it started (``logs/index.tsv``).

    Each run has a folder of its own under ``logs/`` named at random (the run must not tell one run from
    another) holding ``run.audit.jsonl``, and the index maps the folder to the run's label. Counting by file
    name alone, as this bench once did, merged runs whose audit logs share that name and whose pids
    (numbered from 1 in each run's pid namespace) coincide.
    """
    runs: list[SandboxedRun] = []
    index = workspace / "logs" / "index.tsv"
    for line in index.read_text(encoding="utf-8").splitlines():
        folder, _, name = line.partition("\t")
        if not name.endswith(".audit.jsonl"):
            continue
        log = workspace / "logs" / folder / "run.audit.jsonl"
        pids: set[object] = set()
        pytest: set[object] = set()
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        for raw in text.splitlines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            if isinstance(event, dict):
                pids.add(event.get("pid"))
                if "/_pytest/" in str(event.get("where", "")):
                    pytest.add(event.get("pid"))
        runs.append(SandboxedRun(name.removesuffix(".audit.jsonl"), len(pytest), len(pids)))
    return runs


def _described(runs: list[SandboxedRun]) -> str:
    """``02-replay (pytest ×1, 1 py)``: each run's label, its pytest sessions, its Python processes."""
    return ", ".join(f"{r.label} ({f'pytest ×{r.pytest}, ' if r.pytest else ''}{r.pythons} py)" for r in runs)


def _rubric_without_drift(tmp: Path) -> Path:
    """The default rubric less its model-drift row: a warm grade with it does not run the drift probe."""
    import yaml

    from grader.rubric import default_rubric_path

    data = yaml.safe_load(default_rubric_path().read_text(encoding="utf-8"))
    data["rows"] = [row for row in data["rows"] if row["id"] != "model-drift"]
    data["name"] = f"{data['name']} without model-drift"
    path = tmp / "no-drift.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run(quick: bool = False, runs: int = 5, batch: bool = True) -> Section:
    """The section; ``batch=False`` (``--only warm-grade``) leaves out `grade batch` and its target."""
    title = "Grading: grade vs bare offline pytest" + ("; grade batch --jobs 1 vs --jobs 2" if batch else "")
    section = Section(title)
    cold = Series("grade sample_solution, cold (empty cache)", "s")
    warm = Series("grade sample_solution, warm (default --jobs 2)", "s")
    warm1 = Series("grade sample_solution, warm, --jobs 1 (checks one by one)", "s")
    nodrift = Series("grade sample_solution, warm (default --jobs 2), without the drift probe", "s")
    bare = Series("bare offline pytest, same venv", "s")
    floor = Series("floor: bare × pytest sessions the grade runs ÷ cores", "s")
    sessions: set[int] = set()
    commands: set[str] = set()  # the sandboxed runs of each round's --jobs 1 grade, described
    cores = _cores()
    cpus = {
        "default": Series("CPU of the warm grade (default --jobs 2), every process it started", "s"),
        "no-drift": Series("CPU of the warm grade without the drift probe", "s"),
        "1": Series("CPU of the warm grade at --jobs 1", "s"),
    }
    bare_cpu = Series("CPU of the bare offline pytest", "s")
    least = Series("least wall time the warm grade's CPU allows: its CPU ÷ cores", "s")
    floor_cpu = Series("floor in CPU: bare pytest's CPU × pytest sessions ÷ cores", "s")
    batch1 = Series("grade batch, 12 submissions, --jobs 1", "s")
    batch2 = Series("grade batch, 12 submissions, --jobs 2", "s")
    stages: dict[str, Series] = {}
    scores: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        listing = _candidates(tmp) if batch else None
        no_drift = _rubric_without_drift(tmp)
        for round_ in range(runs):
            cache = _fresh_cache(tmp, f"cache-{round_}")
            seconds, _, _cpu = _grade([str(SAMPLE), "--quiet", "--cache-dir", str(cache)], tmp)
            cold.values.append(seconds)
            warm_runs = [("default", warm), ("1", warm1), ("no-drift", nodrift)]
            round_sessions = 0
            # The baseline is short (~0.5 s): one burst of load elsewhere can double a single run of it, so
            # three bare runs a round, before, between and after the warm grades; the round takes the median.
            python = _venv_python(cache)
            bare_runs = [_bare_pytest(python, tmp, f"{round_}-0")]
            for jobs, series in warm_runs if round_ % 2 == 0 else warm_runs[::-1]:
                report = tmp / f"warm-{round_}-{jobs}.json"
                argv = [str(SAMPLE), "--quiet", "--cache-dir", str(cache), "--format", "json", "-o"]
                argv += [str(report), *(["--jobs", jobs] if jobs == "1" else [])]
                if jobs == "no-drift":
                    argv += ["--rubric", str(no_drift)]
                if jobs == "1":
                    argv += ["--keep-workspace"]
                seconds, _, cpu = _grade(argv, tmp)
                series.values.append(seconds)
                cpus[jobs].values.append(cpu)
                data = json.loads(report.read_text())
                scores.add(f"{data['total']['points']}/{data['total']['max']}")
                if jobs == "1":
                    kept = _kept_workspace(report)
                    runs_seen = sandboxed_runs(kept)
                    round_sessions = sum(r.pytest for r in runs_seen)
                    sessions.add(round_sessions)
                    commands.add(_described(runs_seen))
                    shutil.rmtree(kept, ignore_errors=True)
                    for stage, value in _timings(report).items():
                        label = f"  warm grade stage, --jobs 1: {stage}"
                        stages.setdefault(stage, Series(label, "s", note="breakdown"))
                        stages[stage].values.append(float(value))
                bare_runs.append(_bare_pytest(python, tmp, f"{round_}-{len(bare_runs)}"))
            bare.values.append(statistics.median(wall for wall, _ in bare_runs))
            bare_cpu.values.append(statistics.median(cpu for _, cpu in bare_runs))
            floor.values.append(bare.values[-1] * round_sessions / cores)
            least.values.append(cpus["default"].values[-1] / cores)
            floor_cpu.values.append(bare_cpu.values[-1] * round_sessions / cores)
            if batch and (not quick or round_ == 0):
                order = [("1", batch1), ("2", batch2)]
                for jobs, series in order if round_ % 2 == 0 else order[::-1]:
                    out = tmp / f"batch-{round_}-{jobs}"
                    argv = ["batch", str(listing), "--jobs", jobs, "--output", str(out), "--quiet"]
                    seconds, _, _cpu = _grade([*argv, "--cache-dir", str(cache), "--timeout", "120"], tmp)
                    series.values.append(seconds)
                    shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
            print(f"  grading round {round_ + 1}/{runs} done", file=sys.stderr)
    cpu_measured = _meter().available
    _meter().close()
    section.method = [
        "`python -m grader` (the `grade` command) from the bench venv, as root, `--cache-dir` a new 0755 "
        "folder per round for the cold run, reused by that round's warm run, bare run and batches",
        "bare: `unshare -n <cached venv>/bin/python -m pytest -q -p no:cacheprovider` in a copy of "
        "sample_solution (CASSETTE_MODE=replay, no credentials); three runs per round (before, between and "
        "after the warm grades), the round's value is their median",
        "warm: the default `--jobs` (2), `--jobs 1`, and the default `--jobs` with the default rubric less "
        "its model-drift row (no drift probe), in alternating order; stages: the `timings` of the "
        "`--jobs 1` run's JSON report (checks one after another, so they add up)",
        f"floor: bare × pytest sessions ÷ cores; sessions counted per round in the `--jobs 1` run's kept "
        f"workspace (`logs/index.tsv` names each sandboxed command; in its audit log, each process where "
        f"pytest's own code opened a file is a session): {', '.join(map(str, sorted(sessions))) or 'none'}; "
        f"cores (this process's CPU affinity): {cores}",
        *(
            f"sandboxed commands of a warm `--jobs 1` grade, each with its pytest sessions and the Python "
            f"processes its audit log saw: {described}"
            for described in sorted(commands)
        ),
        *(
            [
                "batch: the 12 submissions `tests/test_batch.py` builds (10 local copies, good and mutated, "
                "in folder/git/archive form; 2 unreachable URLs), `grade batch FILE --jobs J --timeout 120`; "
                "the order of the two alternates between rounds"
            ]
            if batch
            else ["`grade batch` not run (`--only warm-grade`)"]
        ),
        f"scores of the warm runs: {', '.join(sorted(scores))}",
        "CPU: user + system time of every process the command started, sandboxed ones included, from a "
        "cgroup of the bench's own (`benchmarks/_cpu.py`)"
        + ("" if cpu_measured else ": not measured on this machine (no cgroup the bench may create)"),
        f"{runs} rounds; wall time unless it says CPU; median (min–max)",
    ]
    added = Series("what the drift probe adds to a warm grade (with − without, same round)", "s")
    added.values = [w - n for w, n in zip(warm.values, nodrift.values, strict=True)]
    section.series = [cold, warm, nodrift, added, warm1, bare, floor]
    if cpu_measured:
        section.series += [*cpus.values(), bare_cpu, least, floor_cpu]
    section.series += list(stages.values())
    if batch:
        section.series += [batch1, batch2]
    r = ratio(warm, floor)
    cpu_note = (
        f"; in CPU, without any other load: {ratio(least, floor_cpu):.2f}× (the grade's CPU against bare "
        f"pytest's CPU × sessions: no scheduling on {cores} cores goes below that)"
        if cpu_measured
        else ""
    )
    section.verdicts.append(
        Verdict(
            "warm grade ≤ 1.25× the floor of the sessions the design runs (bare pytest × sessions ÷ cores)",
            f"{r:.2f}× with the drift probe ({ratio(nodrift, floor):.2f}× without it; the probe adds "
            f"{added.median:.2f} s; at --jobs 1: {ratio(warm1, floor):.2f}×; "
            f"{ratio(warm, bare):.1f}× one bare pytest; sessions {', '.join(map(str, sorted(sessions)))}, "
            f"cores {cores}{cpu_note})",
            r <= 1.25,
        )
    )
    section.verdicts.append(
        Verdict("cold grade ≤ 30 s", f"{cold.median:.1f} s", cold.median <= 30),
    )
    if batch:
        speedup = ratio(batch1, batch2)
        section.verdicts.append(
            Verdict("batch --jobs 2 ≥ 1.6× faster than --jobs 1", f"{speedup:.2f}×", speedup >= 1.6)
        )
    return section
