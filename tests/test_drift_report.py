"""`grade drift`: the Wilson interval, the acceptance rule, the report's comparisons, and the real command.

The command tests run the real CLI (`python -m grader drift`) on the real sample solution (or a copy of it
holding four of its tapes, to keep the suite's time down) against the real stand-in profiles, in the real
sandbox; the live-URL test points an arm at a real stand-in process on loopback.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import jsonschema
import pytest

from grader.drift_report.acceptance import CLASSES, load_acceptance
from grader.drift_report.model import Arm, Run, Ticket, build_report
from grader.drift_report.stats import Z_95, Rate, wilson
from grader.errors import BadInput
from grader.schemas import load_schema

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_solution"
GradeCli = Callable[..., subprocess.CompletedProcess[str]]


# --- the Wilson score interval ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Reference values of the 95% Wilson score interval, no continuity correction (81/263 is the worked
        # example in Newcombe 1998); the next test derives every bound independently.
        (0, 10, 0.0, 0.2775),
        (1, 10, 0.0179, 0.4042),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (2, 50, 0.0110, 0.1346),
        (0, 12, 0.0, 0.2425),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_wilson_interval_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    got_low, got_high = wilson(k, n)
    assert got_low == pytest.approx(low, abs=5e-5)
    assert got_high == pytest.approx(high, abs=5e-5)


@pytest.mark.parametrize("n", [1, 3, 7, 24, 100, 1000])
def test_wilson_bounds_are_where_the_score_test_turns_significant(n: int) -> None:
    """An independent derivation: the bounds are the p where |k/n - p| = z * sqrt(p(1-p)/n), by bisection."""

    def score(p: float, k: int) -> float:
        return abs(k / n - p) - Z_95 * math.sqrt(p * (1 - p) / n)

    def root(lo: float, hi: float, k: int) -> float:
        for _ in range(100):
            mid = (lo + hi) / 2
            # score > 0 outside the interval, < 0 inside; lo is outside, hi inside (or the reverse).
            if (score(mid, k) > 0) == (score(lo, k) > 0):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    for k in range(n + 1):
        low, high = wilson(k, n)
        p = k / n
        expected_low = 0.0 if k == 0 else root(0.0, p, k)
        expected_high = 1.0 if k == n else root(1.0, p, k)
        assert low == pytest.approx(expected_low, abs=1e-9)
        assert high == pytest.approx(expected_high, abs=1e-9)
        assert 0.0 <= low <= p <= high <= 1.0


def test_wilson_of_nothing_is_the_whole_range_and_bad_counts_are_refused() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_a_rate_prints_as_the_report_shows_it() -> None:
    assert str(Rate(0, 12)) == "0% (n=12) [0%, 24%]"
    assert str(Rate(2, 50)) == "4% (n=50) [1.1%, 13%]"
    assert Rate(1, 4).as_dict() == {"count": 1, "n": 4, "rate": 0.25, "interval": [0.045587, 0.699358]}


# --- the acceptance rule -----------------------------------------------------------------------------------


def test_the_bundled_rule_loads() -> None:
    rule = load_acceptance()
    assert rule.max_violation_rate == 0.005
    assert set(rule.zero) <= set(CLASSES) and rule.zero
    assert len(rule.sha256) == 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 2\nzero: [loud]\n", ["rule.yaml:1: unsupported version 2"]),
        ("zero: [loud]\n", ["rule.yaml:1: 'version' is missing"]),
        ("version: 1\nzero: [loud]\ncolour: red\n", ["rule.yaml:3: 'colour' is not an acceptance key"]),
        ("version: 1\nmax_violation_rate: 5\n", ["rule.yaml:2: 'max_violation_rate' must be a fraction"]),
        ("version: 1\nmax_loud_rate: yes\n", ["rule.yaml:2: 'max_loud_rate' must be a fraction"]),
        ("version: 1\nzero:\n  - loud\n  - bogus\n", ["rule.yaml:4: 'bogus' in 'zero' is not a class"]),
        ("version: 1\nzero: [loud, loud]\n", ["rule.yaml:2: 'loud' is listed twice"]),
        ("version: 1\nzero: loud\n", ["rule.yaml:2: 'zero' must be a list"]),
        ("version: 1\nzero: [loud]\nzero: [schema]\n", ["rule.yaml:3: 'zero' is given twice"]),
        ("version: 1\nname: ''\nzero: [loud]\n", ["rule.yaml:2: 'name' must be a non-empty string"]),
        ("version: 1\n", ["rule.yaml:1: the rule checks nothing"]),
        ("", ["rule.yaml:1: the acceptance rule is empty"]),
        ("- 1\n", ["rule.yaml:1: the acceptance rule must be a mapping"]),
        ("version: 1\nzero: [loud\n", ["rule.yaml:3: YAML syntax error"]),
        (
            "version: 3\nmax_changed_rate: -1\nzero: [nope]\n",
            [
                "rule.yaml:1: unsupported version 3",
                "rule.yaml:2: 'max_changed_rate' must be a fraction",
                "rule.yaml:3: 'nope' in 'zero' is not a class",
            ],
        ),
    ],
)
def test_a_bad_rule_is_one_line_per_problem_naming_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, expected: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("rule.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(BadInput) as caught:
        load_acceptance(Path("rule.yaml"))
    lines = list(caught.value.problems) or [str(caught.value)]
    assert len(lines) == len(expected)
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), line
        assert "\n" not in line


# --- the report's comparisons ------------------------------------------------------------------------------

_BILLING = {"intent": "billing", "needs_human": False}
_OTHER = {"intent": "other", "needs_human": False}


def _run(ticket: str, arm: str, outcome: str = "ok", verdict: dict | None = None, **more: object) -> Run:
    return Run(ticket=ticket, arm=arm, trial=1, outcome=outcome, verdict=verdict, **more)  # type: ignore[arg-type]


def _report(tickets: list[Ticket], runs: list[Run], rule_text: str, tmp_path: Path) -> dict:
    rule = tmp_path / "rule.yaml"
    rule.write_text(rule_text, encoding="utf-8")
    return build_report(
        target="t",
        commit=None,
        generated_at="2026-12-01T17:00:00Z",
        grader_version="0",
        arms={"control": Arm("baseline", "profile"), "candidate": Arm("drifted", "profile")},
        tickets=tickets,
        runs=runs,
        trials=1,
        acceptance=load_acceptance(rule),
        recording={"tapes": len(tickets), "dir": "cassettes", "served_model": None},
    )


def test_candidate_is_compared_with_the_control_and_the_control_with_the_recording(tmp_path: Path) -> None:
    tickets = [Ticket(f"T{i}", f"m{i}", _BILLING, recorded_calls=1) for i in range(1, 5)]
    runs = [
        # T1: the control itself drifted from the recording; the candidate agrees with the control.
        _run("T1", "control", verdict=_OTHER, calls=1),
        _run("T1", "candidate", verdict=_OTHER, calls=1),
        # T2: both as recorded.
        _run("T2", "control", verdict=_BILLING, calls=1),
        _run("T2", "candidate", verdict=_BILLING, calls=1),
        # T3: the candidate fails loudly after two calls (a retry).
        _run("T3", "control", verdict=_BILLING, calls=1),
        _run("T3", "candidate", "loud", calls=2, detail="exit 1: HTTP 429"),
        # T4: the candidate makes up a default after a refusal, and answered with a tool call.
        _run("T4", "control", verdict=_BILLING, calls=1, tools=()),
        _run("T4", "candidate", "violation", _OTHER, cls="made_up_default", calls=1, tools=("classify",)),
    ]
    report = _report(
        tickets, runs, "version: 1\nmax_violation_rate: 0.3\nzero: [made_up_default]\n", tmp_path
    )
    assert report["denominator"] == {"tickets": 4, "trials": 1, "runs_per_arm": 4}
    assert (report["noise_floor"]["count"], report["noise_floor"]["n"]) == (1, 4)  # T1's control only
    assert (report["difference"]["count"], report["difference"]["n"]) == (2, 4)  # T3, T4; not T1
    classes = report["summary"]["candidate"]["classes"]
    assert classes["made_up_default"] == 1 and classes["loud"] == 1
    assert classes["termination"] == 1 and classes["tool_shape"] == 1
    assert report["summary"]["control"]["violations"] == 0
    acceptance = report["acceptance"]
    assert acceptance["verdict"] == "reject"
    assert [(c["rule"], c["ok"]) for c in acceptance["checks"]] == [
        ("max_violation_rate", True),  # 1/4 = 25% <= 30%
        ("zero:made_up_default", False),
    ]
    jsonschema.Draft202012Validator(load_schema("grade-drift")).validate(report)


# --- the real command --------------------------------------------------------------------------------------


def _tape_digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()
    }


def _last_user_message(tape: Path) -> str:
    body = json.loads(tape.read_text(encoding="utf-8"))["request"]["body"]
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


_FOUR = ("credit card expired", "switch my subscription", "store in Lisbon", "app crashes")


@pytest.fixture(scope="module")
def four_tickets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample solution with four of its tapes: two the drifted profile leaves alone, two it drifts."""
    dest = tmp_path_factory.mktemp("drift") / "four"
    shutil.copytree(SAMPLE, dest)
    for tape in (dest / "cassettes").glob("*.json"):
        if not any(words in _last_user_message(tape) for words in _FOUR):
            tape.unlink()
    assert len(list((dest / "cassettes").glob("*.json"))) == 4
    return dest


@pytest.fixture(scope="module")
def four_json(four_tickets: Path, tmp_path_factory: pytest.TempPathFactory, grade_cache: Path) -> dict:
    """One real `grade drift --format json` run of the four tickets, baseline against drifted."""
    out = tmp_path_factory.mktemp("drift-json") / "report.json"
    done = _grade(
        ["drift", str(four_tickets), "--control", "baseline", "--candidate", "drifted", "--format", "json",
         "--output", str(out), "--cache-dir", str(grade_cache), "--quiet", "--model", "gpt-4o"],
        cwd=out.parent,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    assert done.stdout == ""
    report = json.loads(out.read_text(encoding="utf-8"))
    assert done.returncode == (0 if report["acceptance"]["verdict"] == "accept" else 3)
    return report


def _grade(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    full.pop("GRADE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.index
def test_the_sample_against_baseline_and_drifted(tmp_path: Path, grade_cache: Path) -> None:
    """Done when: the denominator, per-ticket verdicts, the noise floor with its interval, a verdict."""
    before = _tape_digests(SAMPLE / "cassettes")
    tapes = sorted((SAMPLE / "cassettes").glob("*.json"))
    done = _grade(
        [
            "drift",
            str(SAMPLE),
            "--control",
            "baseline",
            "--candidate",
            "drifted",
            "--cache-dir",
            str(grade_cache),
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    n = len({_last_user_message(t) for t in tapes})
    lines = text.splitlines()
    assert lines[1] == f"denominator: {n} tickets x 1 trial = {n} runs per arm"
    # Per-ticket verdicts: the baseline control says exactly what the recording says, ticket by ticket.
    rows = [line for line in lines if re.match(r"^T\d\d  ", line)]
    assert len(rows) == n
    for tape in tapes:
        answer = json.loads(
            json.loads(tape.read_text())["response"]["body"]["choices"][0]["message"]["content"]
        )
        verdict = answer["intent"] + ("+human" if answer["needs_human"] else "")
        message = _last_user_message(tape)
        row = next(r for r in rows if message[:40] in r)
        recorded, control = re.split(r"\s{2,}", row.split("…")[-1] if "…" in row else row)[-3:-1]
        assert (recorded, control) == (verdict, verdict), row
    assert any("(" in r.split("  ")[-1] for r in rows), "the drifted candidate shows the drift it met"
    # The noise floor: 0 of n, and its Wilson interval (for 0 of n the upper bound is z^2 / (n + z^2)).
    upper = round(100 * Z_95**2 / (n + Z_95**2))
    assert f"noise floor (control vs recording): 0% (n={n}) [0%, {upper}%]" in lines
    assert any(line.startswith("candidate vs control: ") and f"(n={n})" in line for line in lines)
    assert "acceptance: ACCEPT against " in text
    assert _tape_digests(SAMPLE / "cassettes") == before  # the committed tapes were never written


@pytest.mark.index
def test_the_json_report_validates_and_agrees_with_the_stand_in_truth(four_json: dict) -> None:
    report = four_json
    jsonschema.Draft202012Validator(
        load_schema("grade-drift"), format_checker=jsonschema.FormatChecker()
    ).validate(report)
    assert report["denominator"] == {"tickets": 4, "trials": 1, "runs_per_arm": 4}
    assert report["arms"]["control"] == {
        "spec": "baseline", "kind": "profile", "served_model": "gpt-4o-mini-2024-07-18"
    }  # fmt: skip
    assert report["arms"]["candidate"] == {
        "spec": "drifted", "kind": "profile", "served_model": "gpt-4o-mini-2025-06-30"
    }  # fmt: skip
    # --model names the model the candidate should be; its answers named another, and the notes say so.
    assert report["settings"]["model"] == "gpt-4o"
    assert (
        "--model gpt-4o: the candidate's answers said they came from gpt-4o-mini-2025-06-30"
        in report["notes"]
    )
    # Tokens come from the tapes each run wrote into its own scratch folder (CASSETTE_DIR).
    assert report["summary"]["control"]["tokens_runs"] == 4
    assert report["recording"]["tokens"] == report["summary"]["control"]["tokens"]
    drifted = 0
    for ticket in report["tickets"]:
        (control,) = ticket["control"]
        (candidate,) = ticket["candidate"]
        assert control["verdict"] == ticket["recorded"] == control["truth"]
        assert control["drift"] == ["none"]
        if candidate["drift"] == ["none"]:
            assert candidate["verdict"] == control["verdict"]
        else:
            drifted += 1
            # The sample's parser is right: a drifted answer is read correctly or fails loudly.
            assert candidate["outcome"] in ("ok", "loud"), candidate
            if candidate["outcome"] == "ok":
                assert candidate["verdict"] == candidate["truth"]
            else:
                assert candidate["detail"].startswith("exit ")
    assert drifted >= 1
    assert report["noise_floor"] == {
        "count": 0,
        "n": 4,
        "rate": 0.0,
        "interval": [0.0, pytest.approx(0.489891)],
    }
    changed = sum(
        t["candidate"][0]["outcome"] != "ok" or t["candidate"][0]["verdict"] != t["control"][0]["verdict"]
        for t in report["tickets"]
    )
    assert report["difference"]["count"] == changed


@pytest.mark.index
def test_a_rule_the_candidate_fails_exits_3_and_still_writes_the_report(
    four_tickets: Path, four_json: dict, tmp_path: Path, grade_cache: Path
) -> None:
    loud = sum(t["candidate"][0]["outcome"] == "loud" for t in four_json["tickets"])
    assert loud, "the drifted profile makes the sample fail loudly on at least one of these tickets"
    rule = tmp_path / "strict.yaml"
    rule.write_text("version: 1\nname: No loud failures\nzero: [loud]\n", encoding="utf-8")
    done = _grade(
        ["drift", str(four_tickets), "--control", "baseline", "--candidate", "drifted",
         "--format", "markdown", "--accept", str(rule), "--cache-dir", str(grade_cache)],
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "**Denominator: 4 tickets x 1 trial = 4 runs per arm.**" in done.stdout
    assert "**Acceptance: REJECT** against No loud failures" in done.stdout
    assert f"- ❌ loud {loud}/4, must be 0" in done.stdout
    assert "| noise floor (control vs recording) | 0% (n=4) \\[0%, 49%\\] |" in done.stdout
    assert done.stderr.splitlines()[-1].startswith("[done] ") and "acceptance: reject" in done.stderr


@pytest.fixture
def live_standin() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader.standin", "--port", "0", "--quiet", "--profile", "drifted"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=60)  # a generous deadline: a busy machine is slow, not wrong


@pytest.mark.index
def test_a_url_arm_uses_the_key_from_the_environment_and_says_what_it_cannot_know(
    four_tickets: Path, tmp_path: Path, grade_cache: Path, live_standin: str
) -> None:
    key = "sk-" + "drift" * 8  # the stand-in accepts any key; this one must never be printed
    done = _grade(
        ["drift", str(four_tickets), "--control", "baseline", "--candidate", live_standin, "--format", "json",
         "--cache-dir", str(grade_cache), "--quiet", "--keep-workspace"],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": key},
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    assert key not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    kept = Path(next(n for n in report["notes"] if n.startswith("workspace kept at ")).split(" at ", 1)[1])
    try:
        # The key reached the agent through its process environment only: no file of the run holds it.
        written = [
            p
            for p in kept.rglob("*")
            if p.is_file() and not p.is_symlink() and key.encode() in p.read_bytes()
        ]
        assert written == []
    finally:
        shutil.rmtree(kept, ignore_errors=True)
    assert (report["arms"]["candidate"]["spec"], report["arms"]["candidate"]["kind"]) == (live_standin, "url")
    assert all(
        t["candidate"][0]["truth"] is None and t["candidate"][0]["drift"] == [] for t in report["tickets"]
    )
    assert any("no ground truth" in note for note in report["notes"])
    assert any("not limited to the URL's host" in note for note in report["notes"])
    # Without the key, a live arm is refused before anything runs.
    missing = _grade(
        ["drift", str(four_tickets), "--control", "baseline", "--candidate", live_standin,
         "--cache-dir", str(grade_cache)],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": ""},
    )  # fmt: skip
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip() == (
        "grade: error: --candidate is a live endpoint: set OPENAI_API_KEY (the submission's api_key_env) "
        "to its key"
    )


@pytest.mark.parametrize(
    ("arms", "expected"),
    [
        (
            ["--control", "baseline", "--candidate", "nope"],
            "grade: error: --candidate: nope: no such profile file",
        ),
        (
            ["--control", "http://models.example/v1", "--candidate", "drifted"],
            "grade: error: --control 'http://models.example/v1': plain http would send the key in clear; "
            "use https",
        ),
        (["--control", "baseline"], "grade: error: the following arguments are required: --candidate"),
        (
            ["--control", "baseline", "--candidate", "drifted", "--trials", "0"],
            "grade: error: argument --trials",
        ),
    ],
)
def test_bad_arms_are_one_line_and_exit_2_before_anything_is_fetched(
    tmp_path: Path, arms: list[str], expected: str
) -> None:
    done = _grade(["drift", str(tmp_path / "does-not-exist"), *arms], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(expected), done.stderr


def test_a_bad_acceptance_rule_is_reported_before_the_target_is_touched(tmp_path: Path) -> None:
    rule = tmp_path / "drift.yaml"
    rule.write_text("version: 2\nzero: [bogus]\n", encoding="utf-8")
    done = _grade(
        ["drift", str(tmp_path / "does-not-exist"), "--control", "baseline", "--candidate", "drifted",
         "--accept", str(rule)],
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"grade: error: {rule}:1: unsupported version 2; use version: 1",
        f"grade: error: {rule}:2: 'bogus' in 'zero' is not a class; use one of {', '.join(CLASSES)}",
    ]


def test_a_submission_without_a_triage_command_is_refused_in_one_line(
    four_tickets: Path, tmp_path: Path
) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "pyproject.toml").write_text('[project]\nname = "bare"\nversion = "0"\n', encoding="utf-8")
    shutil.copytree(four_tickets / "cassettes", bare / "cassettes")
    done = _grade(["drift", str(bare), "--control", "baseline", "--candidate", "drifted"], cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"grade: error: {bare}: no triage command to re-run the tickets with; declare "
        "[tool.takehome] triage_command (docs/design.md)"
    ]


@pytest.mark.index
def test_replay_until_serves_the_first_calls_from_the_tapes_in_both_arms(
    four_tickets: Path, four_json: dict, tmp_path: Path, grade_cache: Path
) -> None:
    """Each run of the sample makes one call: with --replay-until 1 it comes from the committed tapes, so the
    drifted candidate says what the recording says, where without it some runs failed loudly."""
    assert any(t["candidate"][0]["outcome"] != "ok" for t in four_json["tickets"])
    before = _tape_digests(four_tickets / "cassettes")
    done = _grade(
        ["drift", str(four_tickets), "--control", "baseline", "--candidate", "drifted", "--replay-until", "1",
         "--format", "json", "--cache-dir", str(grade_cache), "--quiet"],
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["settings"]["replay_until"] == 1
    for ticket in report["tickets"]:
        for arm in ("control", "candidate"):
            (run,) = ticket[arm]
            assert (run["outcome"], run["verdict"]) == ("ok", ticket["recorded"])
            # The cassette layer's own count: one call, from the tape, none live.
            assert (run["calls"], run["live_calls"]) == (1, 0)
            assert "1 of 1 calls from the tapes" in run["detail"]
    assert report["difference"]["count"] == 0
    assert any(note.startswith("8 of 8 runs made no call to their arm") for note in report["notes"])
    assert _tape_digests(four_tickets / "cassettes") == before


@pytest.mark.index
def test_an_agent_that_prints_the_live_key_has_it_redacted_from_the_report(
    four_tickets: Path, tmp_path: Path, grade_cache: Path, live_standin: str
) -> None:
    leaky = tmp_path / "leaky"
    shutil.copytree(four_tickets, leaky)
    main = leaky / "support_triage_agent" / "__main__.py"
    text = main.read_text(encoding="utf-8")
    printed = "print(json.dumps(triage(args.message), ensure_ascii=False))"
    assert printed in text
    main.write_text(
        text.replace(
            printed,
            'print(json.dumps({"intent": "key " + os.environ["OPENAI_API_KEY"], "needs_human": False}))',
        ),
        encoding="utf-8",
    )
    key = "sk-" + "leak" * 10
    done = _grade(
        ["drift", str(leaky), "--control", "baseline", "--candidate", live_standin, "--format", "json",
         "--cache-dir", str(grade_cache), "--quiet"],
        cwd=tmp_path,
        env={"OPENAI_API_KEY": key},
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr
    assert key not in done.stdout + done.stderr
    report = json.loads(done.stdout)
    # Replaced where the run's output is read (drift_run's driver, as for canaries) or, failing that, here.
    intents = {t["candidate"][0]["verdict"]["intent"] for t in report["tickets"]}
    assert len(intents) == 1 and re.fullmatch(r"key \[(canary|redacted)\]", intents.pop())


@pytest.mark.index
def test_a_submission_that_cannot_be_installed_is_not_assessable(
    four_tickets: Path, tmp_path: Path, grade_cache: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(four_tickets, broken)
    pyproject = broken / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text(encoding="utf-8").replace(
            'dependencies = ["httpx>=0.27"]', 'dependencies = ["httpx>=0.27", "httpx==0.0.0.0.1"]'
        ),
        encoding="utf-8",
    )
    done = _grade(
        [
            "drift",
            str(broken),
            "--control",
            "baseline",
            "--candidate",
            "drifted",
            "--cache-dir",
            str(grade_cache),
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 4 and done.stdout == ""
    last = done.stderr.splitlines()[-1]
    assert last.startswith(
        "grade: not assessable: no arm can run: the submission's dependencies cannot be installed"
    )


def test_trials_pair_each_candidate_run_with_the_control_run_of_the_same_trial(tmp_path: Path) -> None:
    tickets = [Ticket("T1", "m1", _BILLING, recorded_calls=1)]
    runs = [
        Run(ticket="T1", arm="control", trial=1, outcome="ok", verdict=_BILLING, tokens=10),
        Run(ticket="T1", arm="candidate", trial=1, outcome="ok", verdict=_OTHER, tokens=12),
        Run(ticket="T1", arm="control", trial=2, outcome="ok", verdict=_OTHER, tokens=10),
        Run(ticket="T1", arm="candidate", trial=2, outcome="ok", verdict=_OTHER),  # no usage reported
    ]
    rule = tmp_path / "rule.yaml"
    rule.write_text("version: 1\nmax_changed_rate: 0.5\n", encoding="utf-8")
    report = build_report(
        target="t",
        commit=None,
        generated_at="2026-12-01T17:00:00Z",
        grader_version="0",
        arms={"control": Arm("baseline", "profile"), "candidate": Arm("drifted", "profile")},
        tickets=tickets,
        runs=runs,
        trials=2,
        acceptance=load_acceptance(rule),
        recording={"tapes": 1, "dir": "cassettes", "served_model": None},
    )
    assert report["denominator"] == {"tickets": 1, "trials": 2, "runs_per_arm": 2}
    assert [r["trial"] for r in report["tickets"][0]["candidate"]] == [1, 2]
    assert (report["noise_floor"]["count"], report["noise_floor"]["n"]) == (1, 2)  # trial 2's control
    assert (report["difference"]["count"], report["difference"]["n"]) == (1, 2)  # trial 1 only
    assert report["acceptance"]["verdict"] == "accept"  # 1/2 changed, at most 50%
    # Tokens: per arm over the runs that reported usage; the change only over pairs where both did.
    assert (report["summary"]["candidate"]["tokens"], report["summary"]["candidate"]["tokens_runs"]) == (
        12,
        1,
    )
    assert report["summary"]["delta"] == {
        "tokens": 2, "tokens_pairs": 1, "tokens_control": 10, "seconds_median": 0.0
    }  # fmt: skip
