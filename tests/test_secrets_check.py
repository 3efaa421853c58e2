"""The `secrets` check on real git repositories: facts, findings, summary, and no secret in any output."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from grader.checks import Check
from grader.checks.secrets import secrets
from grader.context import Context
from grader.rubric import load_rubric, score
from grader.secrets.samples import expand
from tests.helpers.context import folder_context

TAPE_KEY = expand("sk-proj-{{b64url:74}}T3BlbkFJ{{b64url:74}}", "check:tape")
OLD_KEY = expand("AKIA{{upper32:16}}", "check:aws")
OUT_KEY = expand("sk-ant-api03-{{b64url:93}}AA", "check:output")
ALL = (TAPE_KEY, OLD_KEY, OUT_KEY)


def _git(repo: Path, *args: str) -> None:
    env = {
        "GIT_AUTHOR_NAME": "C",
        "GIT_AUTHOR_EMAIL": "c@example.invalid",
        "GIT_COMMITTER_NAME": "C",
        "GIT_COMMITTER_EMAIL": "c@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(repo),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)


def _ctx(repo: Path, outputs: list[tuple[str, str]] | None = None) -> Context:
    ctx = folder_context(repo, cassette_dir=Path("cassettes"))
    ctx.outputs.extend(outputs or [])
    return ctx


def _clean_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "sub"
    (repo / "cassettes").mkdir(parents=True)
    (repo / "cassettes" / "a1.json").write_text(
        '{"version": 1, "request": {}, "response": {"status": 200}}\n'
    )
    (repo / "app.py").write_text('import os\nKEY = os.environ["OPENAI_API_KEY"]\n')
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


def test_a_clean_submission_has_zero_findings_and_a_scope_summary(tmp_path: Path) -> None:
    result = secrets(_ctx(_clean_repo(tmp_path), [("make test", "2 passed\n")]))
    facts = result.facts
    assert facts["findings"] == 0
    assert facts["summary"] == "no credentials in 2 files, 1 commit, 1 tape and 1 command output"
    assert facts["rules_loaded"] >= 20
    assert facts["bytes_scanned"] > 0
    assert result.findings == [] and result.not_assessable is None


def test_keys_in_a_tape_in_history_and_in_output_are_each_counted(tmp_path: Path) -> None:
    repo = _clean_repo(tmp_path)
    (repo / "settings.ini").write_text(f"aws_access_key_id = {OLD_KEY}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "settings")
    (repo / "settings.ini").unlink()
    (repo / "cassettes" / "b2.json").write_text(
        json.dumps(
            {"request": {"headers": {"Authorization": f"Bearer {TAPE_KEY}"}}, "response": {}}, indent=2
        )
    )
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "tape; drop settings  # gitleaks:allow")
    (repo / ".gitleaksignore").write_text("settings.ini\ncassettes/b2.json\n")
    output = f"Traceback ...\nAuthenticationError: bad key {OUT_KEY}\n"

    result = secrets(_ctx(repo, [("python -m triage 'hi'", output)]))
    facts = result.facts
    assert (facts["in_tree"], facts["in_tapes"], facts["in_history"], facts["in_output"]) == (0, 1, 2, 1)
    assert facts["findings"] == 4
    locations = sorted(f.location for f in result.findings)
    assert "cassettes/b2.json:4" in locations
    assert "python -m triage 'hi':2" in locations
    assert any(loc.endswith(":settings.ini:1") for loc in locations)
    assert str(facts["summary"]).startswith("4 credentials: ")
    assert "[redacted]" in str(facts["summary"])


def test_no_full_secret_appears_in_facts_findings_or_details(tmp_path: Path) -> None:
    repo = _clean_repo(tmp_path)
    (repo / "cassettes" / "leak.json").write_text(f'{{"key": "{TAPE_KEY}", "aws": "{OLD_KEY}"}}\n')
    result = secrets(_ctx(repo, [("make demo", OUT_KEY)]))
    rendered = json.dumps(
        {"facts": result.facts, "findings": [asdict(f) for f in result.findings], "details": result.details}
    )
    assert result.facts["findings"] == 3
    for key in ALL:
        assert key not in rendered
        assert key[8:24] not in rendered  # not even a middle slice of it


def test_documented_facts_match_reported_facts(tmp_path: Path) -> None:
    documented = Check.from_function("secrets", secrets).facts
    reported = secrets(_ctx(_clean_repo(tmp_path))).facts
    assert set(documented) == set(reported)


def test_a_directory_without_git_is_scanned_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_text(OLD_KEY)
    result = secrets(_ctx(tmp_path))
    assert result.facts["in_tree"] == 1 and result.facts["commits_scanned"] == 0
    assert "no git history: only the working tree was scanned" in result.details


def test_keys_in_the_shapes_compatible_providers_issue_are_found_in_a_tracked_env(tmp_path: Path) -> None:
    # What OpenAI-compatible providers (DeepSeek, gateways) and Together issue: no checksum marker.
    hex_sk = expand("sk-{{hex:32}}", "check:compatible-sk")
    together = expand("{{hex:64}}", "check:together-hex")
    repo = _clean_repo(tmp_path)
    (repo / ".env").write_text(
        f"OPENAI_BASE_URL=https://api.deepseek.com\nOPENAI_API_KEY={hex_sk}\nTOGETHER_API_KEY={together}\n"
    )
    _git(repo, "add", ".env")
    _git(repo, "commit", "-q", "-m", "config")
    result = secrets(_ctx(repo))
    at_head = {(f.rule, f.location) for f in result.findings if f.location.startswith(".env:")}
    assert at_head == {
        ("openai-compatible-hex-key", ".env:2"),
        ("credential-assignment-api-key", ".env:3"),
    }
    shown = json.dumps([asdict(f) for f in result.findings]) + json.dumps(result.facts)
    assert hex_sk not in shown and together not in shown


def test_placeholders_in_a_tracked_env_stay_clean(tmp_path: Path) -> None:
    repo = _clean_repo(tmp_path)
    (repo / ".env").write_text(
        "OPENAI_API_KEY=sk-...\nANTHROPIC_API_KEY=test_key\nMISTRAL_API_KEY=unused-in-replay\n"
        "COHERE_API_KEY=<your-key>\nTOGETHER_API_KEY=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nAPI_TOKEN=changeme\n"
    )
    _git(repo, "add", ".env")
    _git(repo, "commit", "-q", "-m", "config")
    assert secrets(_ctx(repo)).findings == []


def test_a_file_the_scan_could_not_read_to_its_end_keeps_the_row_below_full_marks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team 5, G1: no finding in a file read only in part is not "no credential": the default rubric
    gives 2, and the evidence names the file for a reviewer."""
    from grader.secrets import tree

    repo = _clean_repo(tmp_path)
    monkeypatch.setattr(tree, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(tree, "READ_CAP", 4000)
    (repo / "server.log").write_bytes(b"a plain line of a log\n" * 400)  # 8,800 bytes: past the cap
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "log")

    result = secrets(_ctx(repo))

    assert result.facts["findings"] == 0 and result.facts["unscanned"] >= 1
    assert "not fully scanned, a reviewer must look: server.log" in result.facts["summary"]
    (row,) = [r for r in score(load_rubric(), {"secrets": result}) if r.id == "no-credentials"]
    assert row.score == 2, row
    monkeypatch.setattr(tree, "READ_CAP", 1 << 28)
    (row,) = [r for r in score(load_rubric(), {"secrets": secrets(_ctx(repo))}) if r.id == "no-credentials"]
    assert row.score == 3, row


def test_red_team_6_a_key_in_a_committed_zip_or_a_file_name_is_not_full_marks(tmp_path: Path) -> None:
    """Red team 6, H2 and H5: the key only inside `debug/record-session.zip` (Python zipfile, deflated), or
    only as a file's name, scored no-credentials full marks; each is now a finding in the tree and in
    history, and the row is below the rubric's maximum."""
    import io
    import zipfile

    rubric = load_rubric()
    for case in ("zip", "name"):
        repo = _clean_repo(tmp_path / case)
        (repo / "debug").mkdir()
        if case == "zip":
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr("debug/dev.env", f"OPENAI_API_KEY={TAPE_KEY}\n")
            (repo / "debug" / "record-session.zip").write_bytes(buffer.getvalue())
            where = "debug/record-session.zip:debug/dev.env:1"
        else:
            (repo / "debug" / f"{TAPE_KEY}.txt").write_text("ok\n")
            where = "debug/sk-proj-…[redacted]:0"  # the part of the name holding the key, redacted
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "debug")
        result = secrets(_ctx(repo))
        assert (result.facts["in_tree"], result.facts["in_history"]) == (1, 1), case
        assert where in result.facts["summary"]
        assert TAPE_KEY not in json.dumps(asdict(result))
        (row,) = [r for r in score(rubric, {"secrets": result}) if r.id == "no-credentials"]
        assert row.score < row.max, row
