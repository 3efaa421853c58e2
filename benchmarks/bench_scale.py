"""Scale: a submission with 10,000 tapes, and one with a single 100 MB tape, graded end to end.

    python -m benchmarks --only scale [--quick]

Issue 14's target: each gets a report within 120 s of grader time at no more than 300 MB peak RSS.

- 10,000 tapes: sample_solution plus 9,976 valid, correctly keyed kit tapes for requests its suite never
  makes (the calibration corpus's ``add-unused-tapes`` mutation), committed in one git repository;
- 100 MB tape: sample_solution plus one valid kit tape of 100 MB (a long recorded answer), committed.

Each is graded by the real ``grade`` command (warm environment cache: the install is not what is measured).
Wall time is the grade's; peak RSS is the grader process's own (``VmHWM`` of the process that runs
``grader.cli.main``, read when it returns), so the submission's own suite, which runs in the sandbox under
its own limits, is not counted.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._common import Section, Series, Verdict

__all__ = ["run"]

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_solution"
TAPES = 10_000
BIG_MB = 100
LIMIT_S, LIMIT_MB = 120.0, 300.0

# Runs the grade in this process and prints the process's own peak RSS (KiB) as the last stderr line:
# VmHWM of this process's memory (new at exec), not ru_maxrss, which Linux carries over from the forking
# parent (this benchmark, which held a 100 MB tape in memory while writing it).
_WRAPPER = (
    "import re, sys\n"
    "from grader.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
    "print('maxrss-kib', hwm, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _repo(dest: Path, build: str, quick: bool) -> Path:
    sys.path.insert(0, str(ROOT))
    from grader.selftest.mutations import git, mutations

    shutil.copytree(SAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".venv"))
    git(dest, "init", "-q", "-b", "main")
    if build == "tapes":
        count = (1_000 if quick else TAPES) - len(list((dest / "cassettes").glob("*.json")))
        mutations()["add-unused-tapes"](dest, {}, count=count)
    else:
        _big_tape(dest, (10 if quick else BIG_MB) * 1_000_000)
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "take-home submission")
    return dest


def _big_tape(repo: Path, size: int) -> None:
    import hashlib

    template = json.loads(next((repo / "cassettes").glob("*.json")).read_text(encoding="utf-8"))
    template["request"]["body"]["messages"][-1]["content"] = "Summarize every order I ever placed."
    canonical = json.dumps(template["request"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    key = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
    template["key"] = key
    # A long recorded answer, as a model that rambled would give: words, not one repeated byte.
    words = "order shipped delivered refunded pending parcel invoice courier ".split()
    text = " ".join(words[i % len(words)] + str(i % 97) for i in range(size // 9))
    template["response"]["body"]["choices"][0]["message"]["content"] = text[:size]
    out = json.dumps(template, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (repo / "cassettes" / f"{key}.json").write_text(out, encoding="utf-8")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _grade(repo: Path, cache: Path, home: Path) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds of the grade and every process it ran, grader peak RSS MB, total)."""
    from tests.helpers.bake import clean_env

    cpu = _cpu()
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(repo), "--quiet", "--cache-dir", str(cache), "--format", "json"],
        cwd=ROOT,
        env=clean_env(HOME=str(home), PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 3):
        raise RuntimeError(f"grade {repo.name} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    own = next(
        int(line.split()[1]) for line in reversed(done.stderr.splitlines()) if line.startswith("maxrss-kib")
    )
    total = json.loads(done.stdout)["total"]
    return seconds, _cpu() - cpu, own / 1024, f"{total['points']}/{total['max']}"


def run(quick: bool = False, runs: int = 5) -> Section:
    section = Section(
        f"Scale: {TAPES:,} tapes, and one {BIG_MB} MB tape (≤ {LIMIT_S:.0f} s, ≤ {LIMIT_MB:.0f} MB peak RSS)"
    )
    rounds = 1 if quick else max(1, min(runs, 3))  # minutes per round: three rounds are enough for a bound
    cases = {"tapes": f"{TAPES:,} tapes", "big": f"one {BIG_MB} MB tape"}
    series: dict[str, tuple[Series, Series, Series]] = {
        name: (
            Series(f"grade, {what}: wall time", "s"),
            Series(f"grade, {what}: CPU time (grader + every command it ran)", "s"),
            Series(f"grade, {what}: grader peak RSS", "MB"),
        )
        for name, what in cases.items()
    }
    scores: dict[str, set[str]] = {name: set() for name in cases}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        cache = tmp / "cache"
        cache.mkdir()
        cache.chmod(0o755)
        repos = {name: _repo(tmp / name, name, quick) for name in cases}
        _grade(repos["tapes"], cache, tmp)  # fills the environment cache: not measured
        for round_ in range(rounds):
            for name in cases if round_ % 2 == 0 else list(cases)[::-1]:
                seconds, cpu, own, score = _grade(repos[name], cache, tmp)
                wall, cpu_series, rss = series[name]
                wall.values.append(seconds)
                cpu_series.values.append(cpu)
                rss.values.append(own)
                scores[name].add(score)
            print(f"  scale round {round_ + 1}/{rounds} done", file=sys.stderr)
    for name, what in cases.items():
        wall, cpu_series, rss = series[name]
        section.series += [wall, cpu_series, rss]
        worst_s, worst_mb = wall.high, rss.high
        section.verdicts.append(
            Verdict(
                f"{what}: report within {LIMIT_S:.0f} s at ≤ {LIMIT_MB:.0f} MB peak RSS (worst round)",
                f"{worst_s:.1f} s wall ({cpu_series.high:.1f} s CPU), {worst_mb:.0f} MB"
                f"{' (--quick: smaller sizes)' if quick else ''}",
                worst_s <= LIMIT_S and worst_mb <= LIMIT_MB,
            )
        )
    section.method = [
        f"{TAPES:,} tapes: sample_solution plus valid, correctly keyed kit tapes its suite never asks for "
        "(the `add-unused-tapes` mutation), one commit",
        f"{BIG_MB} MB tape: sample_solution plus one valid kit tape whose recorded answer is {BIG_MB} MB of "
        "words, one commit",
        "`grade <repo> --format json` with a warm environment cache (filled by an unmeasured first grade); "
        "wall time of the whole grade; peak RSS: `VmHWM` of the grader's own process when `main` returns",
        f"{rounds} rounds, the two submissions alternating; the verdict takes the worst round",
        "scores: " + "; ".join(f"{cases[n]} {', '.join(sorted(s))}" for n, s in scores.items()),
    ]
    return section


if __name__ == "__main__":  # pragma: no cover
    section = run(quick="--quick" in sys.argv)
    for s in section.series:
        print(f"{s.label}: {s.cell()}")
    for v in section.verdicts:
        print(f"{v.mark} {v.target}: {v.measured}")
    os._exit(0)
