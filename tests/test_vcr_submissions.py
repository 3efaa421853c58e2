"""vcrpy-based submissions (no [tool.takehome]) graded end to end with the real `grade` CLI.

The fixtures are built by tests/vcr_builders.py: a triage agent calling the OpenAI chat-completions API with
httpx, its cassettes genuinely recorded by vcrpy against the kit's stand-in server, committed to a git repo.
The grader installs each submission's declared test dependencies (pytest-recording or pytest-vcr) from the
package index into a session-wide cache, then replays in its sandbox.

- pytest-recording with ``--record-mode=none`` (in pyproject addopts, with ``--strict-markers``): the suite
  only passes if the grader loads the plugin explicitly under PYTEST_DISABLE_PLUGIN_AUTOLOAD (otherwise the
  option is unknown and the ``vcr`` marker unregistered). A withheld cassette fails loudly.
- pytest-vcr with its default ``once`` mode: a withheld cassette falls through to the network.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.manifest import read_manifest
from grader.tapes import load_tapes
from tests.conftest import REPO_ROOT
from tests.helpers.bake import clean_env, standin
from tests.vcr_builders import MESSAGES, MODEL, VcrSubmission, build_vcr_submission

pytestmark = pytest.mark.slow

Report = dict[str, Any]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, VcrSubmission]]:
    """Every submission this module grades, recorded against one stand-in server."""
    root = tmp_path_factory.mktemp("vcr-submissions")
    with standin() as base_url:
        yield {
            "recording": build_vcr_submission(root / "recording", "recording", base_url),
            "vcr": build_vcr_submission(root / "vcr", "vcr", base_url),
            "vcr-none": build_vcr_submission(root / "vcr-none", "vcr", base_url, record_mode="none"),
            "leaky": build_vcr_submission(root / "leaky", "recording", base_url, keep_authorization=True),
        }


@pytest.fixture(scope="module")
def grade_json(grade_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Report]:
    """Grade a repo once with the real CLI (`python -m grader --format json`); reports are memoized."""
    reports: dict[Path, Report] = {}

    def grade(repo: Path) -> Report:
        if repo not in reports:
            out = tmp_path_factory.mktemp("report") / "report.json"
            done = subprocess.run(
                [
                    *(sys.executable, "-m", "grader", "--format", "json", "--quiet"),
                    *("--cache-dir", str(grade_cache), "--timeout", "120", "--output", str(out), str(repo)),
                ],
                cwd=REPO_ROOT,
                env=clean_env(),
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert done.returncode == 0, done.stderr[-2000:]
            reports[repo] = json.loads(out.read_text(encoding="utf-8"))
        return reports[repo]

    return grade


def _row(report: Report, row_id: str) -> dict[str, Any]:
    return next(row for row in report["rows"] if row["id"] == row_id)


def _said(row: dict[str, Any]) -> str:
    return "\n".join([row["evidence"], *row.get("details", [])])


@pytest.mark.index
@pytest.mark.parametrize("name", ["recording", "vcr"])
def test_vcr_submission_replays_offline(name: str, built, grade_json) -> None:
    report = grade_json(built[name].repo)
    row = _row(report, "offline-replay")
    facts = report["facts"]["replay"]
    assert row["score"] == 3, _said(row)
    assert facts["passed"] == len(MESSAGES) and facts["failed"] == 0
    assert facts["network_attempts"] == 0


def test_no_manifest_means_discovered_cassette_folder(built) -> None:
    manifest = read_manifest(built["recording"].repo)
    assert not manifest.declared
    assert manifest.cassette_dir == Path("tests/cassettes")
    assert manifest.cassette_dir_source == "discovered"


def test_vcrpy_documented_layout_is_discovered(built, tmp_path: Path) -> None:
    """vcrpy's README records into fixtures/vcr_cassettes/: found without a manifest, tapes read as vcr."""
    source = built["recording"]
    repo = tmp_path / "repo"
    shutil.copytree(source.repo, repo, ignore=shutil.ignore_patterns(".git"))
    (repo / "fixtures").mkdir()
    (repo / "tests/cassettes/test_triage").rename(repo / "fixtures/vcr_cassettes")
    shutil.rmtree(repo / "tests/cassettes")
    manifest = read_manifest(repo)
    assert manifest.cassette_dir == Path("fixtures/vcr_cassettes")
    tapes = load_tapes(repo, manifest.cassette_dir)
    assert [t.format for t in tapes] == ["vcr"] * len(MESSAGES)
    assert {t.model for t in tapes} == {MODEL}


@pytest.mark.index
def test_pytest_recording_none_mode_is_a_loud_miss(built, grade_json) -> None:
    report = grade_json(built["recording"].repo)
    row = _row(report, "loud-miss")
    facts = report["facts"]["loud-miss"]
    assert row["score"] == 3, _said(row)
    assert facts["withheld"] == len(MESSAGES)
    assert facts["withheld_failed"] == len(MESSAGES) and facts["withheld_passed"] == 0
    assert facts["named_miss"] is True
    assert facts["network_attempts"] == 0


@pytest.mark.index
def test_pytest_vcr_once_mode_falls_through_to_the_network(built, grade_json) -> None:
    sub = built["vcr"]
    report = grade_json(sub.repo)
    row = _row(report, "loud-miss")
    facts = report["facts"]["loud-miss"]
    assert row["score"] <= 1, _said(row)
    assert facts["loud"] is False
    assert facts["network_attempts"] >= 1
    # The line that tried to connect is the agent's own httpx call, not a frame inside vcrpy or httpcore.
    assert f"{sub.client_file}:{sub.request_line}" in _said(row)
    assert "record_mode='none'" in _said(row)


@pytest.mark.index
def test_pytest_vcr_with_record_mode_none_is_loud(built, grade_json) -> None:
    """Judged by behaviour, not by plugin name: pytest-vcr configured to never record is loud too."""
    report = grade_json(built["vcr-none"].repo)
    row = _row(report, "loud-miss")
    assert row["score"] == 3, _said(row)
    assert report["facts"]["loud-miss"]["network_attempts"] == 0


@pytest.mark.index
@pytest.mark.parametrize("name", ["recording", "vcr"])
def test_model_and_date_come_from_the_vcr_yaml(name: str, built, grade_json) -> None:
    sub = built[name]
    report = grade_json(sub.repo)
    row = _row(report, "model-metadata")
    facts = report["facts"]["metadata"]
    # Everything is named. The builder recorded against the stand-in and rewrote the host to api.openai.com;
    # the stand-in's own answers give it away, and the default rubric stops the row at 2 and says so.
    assert row["score"] == 2, _said(row)
    assert row["evidence"].startswith(
        f"all {len(sub.cassettes)} tapes were recorded against a loopback endpoint "
        "(the kit's stand-in, by its own answers, whatever endpoint the tapes name), not a real model"
    ), _said(row)
    assert facts["tapes"] == facts["with_endpoint"] == facts["loopback_tapes"]
    assert facts["models"] == [MODEL]
    assert facts["tapes"] == facts["with_model"] == facts["with_time"] == len(sub.cassettes)
    # Each tape's recording time is the `date` header vcrpy stored with the response.
    tapes = {t.path: t for t in load_tapes(sub.repo, Path("tests/cassettes"))}
    for rel in sub.cassettes:
        stored = yaml.safe_load((sub.repo / rel).read_text(encoding="utf-8"))
        date = stored["interactions"][0]["response"]["headers"]["date"][0]
        tape = tapes[rel.as_posix()]
        assert tape.endpoint == "api.openai.com"
        served = json.loads(stored["interactions"][0]["response"]["body"]["string"])["model"]
        assert tape.served_model == served
        assert tape.recorded_at == _iso(date)


def _iso(http_date: str) -> str:
    return parsedate_to_datetime(http_date).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.index
@pytest.mark.parametrize("name", ["recording", "vcr"])
def test_filtered_authorization_is_not_a_finding(name: str, built, grade_json) -> None:
    sub = built[name]
    assert not [p for p in sub.repo.rglob("*") if p.is_file() and sub.fake_key.encode() in p.read_bytes()]
    report = grade_json(sub.repo)
    hygiene, creds = _row(report, "cassette-hygiene"), _row(report, "no-credentials")
    assert hygiene["score"] == 3, _said(hygiene)
    assert report["facts"]["hygiene"]["credential_headers"] == 0
    assert report["facts"]["hygiene"]["unused"] == 0
    assert creds["score"] == 3, _said(creds)


@pytest.mark.index
def test_unfiltered_authorization_is_found(built, grade_json) -> None:
    """The control for the test above: the same recording without the filter stores the key, and is caught."""
    sub = built["leaky"]
    first = sub.cassettes[0].as_posix()
    assert sub.fake_key in (sub.repo / first).read_text(encoding="utf-8")
    report = grade_json(sub.repo)
    hygiene = _row(report, "cassette-hygiene")
    assert report["facts"]["hygiene"]["credential_headers"] == len(sub.cassettes)
    assert hygiene["score"] <= 1, _said(hygiene)
    assert f"{first}:" in _said(hygiene)
    creds = _row(report, "no-credentials")
    assert creds["score"] == 0 and f"{first}:" in _said(creds)
    assert sub.fake_key not in json.dumps(report)


@pytest.mark.index
def test_unplayed_cassette_is_unused(built, grade_json, tmp_path: Path) -> None:
    """A cassette no test opens is reported by hygiene, by file (vcrpy layout: one cassette per test)."""
    source = built["recording"]
    repo = tmp_path / "repo"
    shutil.copytree(source.repo, repo)
    stale = repo / "tests/cassettes/test_triage/test_removed_feature.yaml"
    shutil.copy(repo / source.cassettes[0], stale)
    _commit(repo)
    report = grade_json(repo)
    assert report["facts"]["hygiene"]["unused"] == 1
    assert "tests/cassettes/test_triage/test_removed_feature.yaml" in _said(_row(report, "cassette-hygiene"))


@pytest.mark.index
@pytest.mark.parametrize("name", ["recording", "vcr"])
def test_interactions_no_test_plays_are_unplayed(name: str, built, grade_json, tmp_path: Path) -> None:
    """An opened cassette that still holds an interaction from an earlier run is not pruned: vcrpy's play
    counts, logged by the guard plugin, say which interaction no test played, by file and line."""
    source = built[name]
    repo = tmp_path / "repo"
    shutil.copytree(source.repo, repo)
    stale_from, keep = repo / source.cassettes[1], repo / source.cassettes[0]
    cassette = yaml.safe_load(keep.read_text(encoding="utf-8"))
    # Appended: vcrpy matches on method and URI by default and plays the first unplayed match.
    cassette["interactions"] += yaml.safe_load(stale_from.read_text(encoding="utf-8"))["interactions"]
    keep.write_text(yaml.safe_dump(cassette, sort_keys=False), encoding="utf-8")
    stale_line = [n for n, line in enumerate(keep.read_text().splitlines(), 1) if line == "- request:"][1]
    _commit(repo)

    report = grade_json(repo)

    hygiene, row = report["facts"]["hygiene"], _row(report, "cassette-hygiene")
    assert report["facts"]["replay"]["failed"] == 0
    assert hygiene["unplayed"] == 1 and hygiene["unused"] == 0, hygiene
    assert (
        f"{source.cassettes[0].as_posix()}:{stale_line} 1 of 2 recorded interactions never played"
        in _said(row)
    )
    assert row["score"] == 2, _said(row)
    assert "0 unused (1 unplayed interaction in opened cassettes)" in row["evidence"]


@pytest.mark.index
def test_every_interaction_played_is_no_unplayed(built, grade_json) -> None:
    report = grade_json(built["recording"].repo)
    assert report["facts"]["hygiene"]["unplayed"] == 0
    assert _row(report, "cassette-hygiene")["score"] == 3


def _commit(repo: Path) -> None:
    env = {
        "GIT_AUTHOR_NAME": "Candidate",
        "GIT_AUTHOR_EMAIL": "candidate@example.invalid",
        "GIT_COMMITTER_NAME": "Candidate",
        "GIT_COMMITTER_EMAIL": "candidate@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(repo),
        "PATH": "/usr/bin:/bin",
    }
    for argv in (["git", "add", "-A"], ["git", "-c", "commit.gpgsign=false", "commit", "-qm", "stale tape"]):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True, timeout=60)
