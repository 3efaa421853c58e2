"""The static detectors (metadata, hygiene, keys, replay-doc, boundary) on small fixture repositories.

Contexts are real ones over a folder (tests/helpers/context.py); the key probe runs a real subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from grader.checks import registry
from grader.checks.boundary import boundary
from grader.checks.hygiene import hygiene
from grader.checks.keys import _differ_fields, keys, probe_cases
from grader.checks.metadata import metadata
from grader.checks.replay_doc import replay_doc
from grader.rubric import load_rubric, score
from tests.helpers.context import FakeContext, folder_context, replay_run, run_result

FIXTURES = Path(__file__).parent / "fixtures"
TAPES = FIXTURES / "tapes"
REHEARSAL = Path(__file__).resolve().parents[1] / "rubric" / "rehearsal.yaml"
CORPUS = FIXTURES / "corpus"  # real vcrpy cassettes, vendored with their LICENSE and source
THRESHOLDS = {"cassette_total_mb": 5, "cassette_largest_mb": 1}
SECRET = "sk-proj-" + "Q7fT2kLm9XzA4bNc8RdE1vWy5UhJ3pGs6"


def _ctx(repo, *, cassette_dir="cassettes", opened=None, key_function=None, default_model=None, run=None):
    """A context over ``repo``; `opened` None means the replay run is not available (nothing installed)."""
    installed = opened is not None or run is not None
    replay = (
        replay_run(opened=opened)
        if opened is not None
        else RuntimeError("install failed: no matching distribution for numpy==0.0")
    )
    return FakeContext(
        repo,
        replay=replay,
        runner=run,
        installed=installed,
        install_error="install failed",
        thresholds=dict(THRESHOLDS),
        cassette_dir=Path(cassette_dir) if cassette_dir else None,
        key_function=key_function,
        default_model=default_model,
    )


def _key(method, path, body):
    text = json.dumps({"method": method, "path": path, "body": body}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _write_kit(folder: Path, text: str, *, name: str | None = None, extra: dict | None = None) -> str:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], "temperature": 0}
    body.update(extra or {})
    key = _key("POST", "/v1/chat/completions", body)
    tape = {
        "version": 1,
        "key": name or key,
        "request": {"method": "POST", "path": "/v1/chat/completions", "body": body},
        "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": {"choices": []}},
        "meta": {"model": "gpt-4o-mini", "endpoint": "api.openai.com", "recorded_at": "2026-01-02T03:04:05Z"},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name or key}.json").write_text(json.dumps(tape, indent=2, sort_keys=True) + "\n")
    return f"{folder.name}/{name or key}.json"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_every_detector_is_registered_with_the_rubric_fact_names():
    checks = registry()
    assert set(checks["metadata"].facts) >= {"tapes", "with_model", "with_endpoint", "with_time", "summary"}
    assert set(checks["hygiene"].facts) >= {
        "tapes", "unused", "duplicates", "invalid", "credential_headers", "total_mb", "largest_mb",
    }  # fmt: skip
    assert set(checks["keys"].facts) >= {"probes_failed", "mismatched", "probes_run", "key_function"}
    assert set(checks["replay-doc"].facts) >= {"exists", "missing_sections", "contradictions"}
    assert set(checks["boundary"].facts) >= {"client_modules", "agent_imports_cassette", "client_module_list"}


# --------------------------------------------------------------------------------------------- metadata


def test_metadata_counts_what_each_tape_names(tmp_path):
    cassettes = tmp_path / "cassettes"
    for folder in ("good", "missing_meta"):
        for tape in (TAPES / "kit" / folder).iterdir():
            cassettes.mkdir(exist_ok=True)
            shutil.copy(tape, cassettes / tape.name)
    result = metadata(_ctx(tmp_path, default_model="gpt-4o"))
    facts = result.facts
    assert (facts["tapes"], facts["with_model"], facts["with_endpoint"], facts["with_time"]) == (3, 3, 2, 2)
    assert facts["models"] == ["gpt-4o-mini"]
    assert facts["disagreeing"] == 3
    assert any("9bee249f2ee1a029.json:1 names no endpoint" in d for d in result.details)
    assert "3/3 tapes name a model (gpt-4o-mini)" in facts["summary"]


def test_metadata_says_when_tapes_never_met_a_real_model_endpoint(tmp_path):
    real = _write_kit(tmp_path / "cassettes", "real")
    local = tmp_path / _write_kit(tmp_path / "cassettes", "local")
    tape = json.loads(local.read_text())
    tape["meta"]["endpoint"] = "127.0.0.1"
    local.write_text(json.dumps(tape))
    result = metadata(_ctx(tmp_path))
    assert result.facts["loopback_tapes"] == 1 and result.facts["with_endpoint"] == 2
    assert result.facts["summary"].startswith(
        "1 of 2 tapes was recorded against a loopback endpoint "
        "(127.0.0.1: a local stand-in such as the kit's), not a real model; "
    )
    assert any("127.0.0.1" in line and str(local.relative_to(tmp_path)) in line for line in result.details)
    assert real not in " ".join(line for line in result.details if "loopback" in line or "127.0.0.1" in line)


def _local_only(folder: Path, count: int) -> None:
    for n in range(count):
        tape_path = folder.parent / _write_kit(folder, f"ticket {n}")
        tape = json.loads(tape_path.read_text())
        tape["meta"]["endpoint"] = "127.0.0.1"
        tape_path.write_text(json.dumps(tape))


@pytest.mark.parametrize(("local", "real"), [(3, 0), (1, 2)])
def test_default_rubric_stops_a_loopback_recording_at_2_and_rehearsal_does_not(tmp_path, local, real):
    """Provenance (issue #13 item 6): tapes a stand-in answered, all or some, never reach model-metadata 3
    under the default rubric, and the evidence says why; the rehearsal rubric accepts them."""
    _local_only(tmp_path / "cassettes", local)
    for n in range(real):
        _write_kit(tmp_path / "cassettes", f"real ticket {n}")
    result = metadata(_ctx(tmp_path))
    default = {row.id: row for row in score(load_rubric(), {"metadata": result})}["model-metadata"]
    rehearsal = {row.id: row for row in score(load_rubric(REHEARSAL), {"metadata": result})}["model-metadata"]
    which = "all 3 tapes were" if not real else "1 of 3 tapes was"
    assert default.score == 2 and default.evidence.startswith(
        f"{which} recorded against a loopback endpoint (127.0.0.1: a local stand-in such as the kit's), "
        "not a real model"
    ), default
    assert rehearsal.score == 3 and rehearsal.evidence == default.evidence


def test_default_rubric_gives_a_real_recording_model_metadata_3(tmp_path):
    for n in range(2):
        _write_kit(tmp_path / "cassettes", f"real ticket {n}")
    result = metadata(_ctx(tmp_path))
    row = {row.id: row for row in score(load_rubric(), {"metadata": result})}["model-metadata"]
    assert result.facts["loopback_tapes"] == 0 and "loopback" not in row.evidence
    assert row.score == 3, row


def test_metadata_on_the_real_vcrpy_corpus(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    shutil.copytree(CORPUS / "simonw-llm-openai-plugin" / "cassettes", repo / "tests" / "cassettes" / "a")
    shutil.copytree(CORPUS / "simonw-llm-openrouter" / "cassettes", repo / "tests" / "cassettes" / "b")
    facts = metadata(_ctx(repo, cassette_dir="tests/cassettes", default_model="gpt-4o-mini")).facts
    # 13 files; the OpenRouter model listing (a GET) names no model
    counts = (facts["tapes"], facts["with_model"], facts["with_endpoint"], facts["with_time"])
    assert counts == (13, 12, 13, 13)
    assert {"gpt-4o-mini", "openai/gpt-4o", "openai/gpt-4.1-mini"} <= set(facts["models"])
    assert facts["models"] == sorted(facts["models"])


def test_metadata_leaves_invalid_tapes_to_hygiene(tmp_path):
    _copy(TAPES / "invalid", tmp_path / "cassettes")
    result = metadata(_ctx(tmp_path))
    assert result.facts["tapes"] == 0
    assert result.facts["summary"] == "no readable tapes (2 invalid)"


# --------------------------------------------------------------------------------------------- hygiene


def test_hygiene_300_unused_tapes_and_a_duplicate(tmp_path):
    cassettes = tmp_path / "cassettes"
    paths = [_write_kit(cassettes, f"question {i}") for i in range(302)]
    # the same request stored again under another (wrong) name
    shutil.copy(tmp_path / paths[0], cassettes / ("0" * 16 + ".json"))
    opened = {paths[0], "./" + paths[1], "cassettes/" + "0" * 16 + ".json"}
    result = hygiene(_ctx(tmp_path, opened=opened))
    facts = result.facts
    assert facts["tapes"] == 303
    assert facts["unused"] == 300
    assert facts["duplicates"] == 1
    assert facts["invalid"] == facts["credential_headers"] == facts["conversation_blobs"] == 0
    assert result.manual is None
    assert any(d.startswith("... and 280 more unused tapes") for d in result.details)
    assert "300 unused, 1 duplicates" in facts["summary"]


def test_hygiene_credential_header_reported_by_name_and_line_never_value(tmp_path):
    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    text = (TAPES / "vcr" / "gzip_binary.yaml").read_text()
    (cassettes / "leaky.yaml").write_text(text.replace("- DUMMY", f"- Bearer {SECRET}"))
    shutil.copy(TAPES / "vcr" / "gzip_binary.yaml", cassettes / "redacted.yaml")  # "DUMMY" is a placeholder
    result = hygiene(_ctx(tmp_path, opened={"cassettes/leaky.yaml", "cassettes/redacted.yaml"}))
    assert result.facts["credential_headers"] == 1
    (finding,) = [f for f in result.findings if "credential" in f.message]
    assert finding.location == "cassettes/leaky.yaml:5"
    assert "authorization" in finding.message
    everything = json.dumps([result.facts, result.details, [vars(f) for f in result.findings]])
    assert SECRET not in everything and SECRET[8:20] not in everything


def test_hygiene_invalid_sizes_and_blobs(tmp_path):
    _copy(TAPES / "invalid", tmp_path / "cassettes")
    with (tmp_path / "cassettes" / "huge.yaml").open("wb") as handle:
        handle.truncate(2_345_678)
    (tmp_path / "cassettes" / "link.json").symlink_to("/etc/passwd")
    blob = {"interactions": [{"request": {"method": "POST", "uri": f"https://x.test/{i}"}, "response": {}}
                             for i in range(25)]}  # fmt: skip
    (tmp_path / "cassettes" / "blob.json").write_text(json.dumps(blob))
    result = hygiene(_ctx(tmp_path, opened=set()))
    facts = result.facts
    assert facts["invalid"] == 4  # broken.json, broken.yaml, link.json and huge.yaml (NUL bytes)
    assert facts["conversation_blobs"] == 1
    assert facts["largest_mb"] == 2.35
    files = [p for p in (tmp_path / "cassettes").iterdir() if not p.is_symlink()]
    assert facts["total_mb"] == round(sum(p.stat().st_size for p in files) / 1e6, 2) >= 2.35
    locations = {f.location for f in result.findings}
    assert "cassettes/broken.json:5" in locations
    assert any("above the 1 MB threshold" in d for d in result.details)


def test_hygiene_without_a_replay_run_goes_to_a_reviewer(tmp_path):
    _write_kit(tmp_path / "cassettes", "hello")
    result = hygiene(_ctx(tmp_path, opened=None))
    assert result.facts["unused"] == 0
    assert result.manual and "could not be decided" in result.manual
    assert "unused not decided" in result.facts["summary"]
    assert any("install failed" in d for d in result.details)


# --------------------------------------------------------------------------------------------- keys


def _sandbox_run(repo: Path):
    """A ctx.run stand-in: a real subprocess with the submission importable, as the sandbox would run it."""

    def run(argv):
        argv = [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(repo)}
        proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=60)
        return run_result(argv, proc.returncode, proc.stdout, proc.stderr)

    return run


_GOOD_KEY_FUNCTION = """
import hashlib, json
DROP = {"user", "metadata", "request_id", "stream_options"}
def _clean(v):
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items() if k != "cache_control"}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v
def key_for(payload):
    body = _clean({k: v for k, v in payload.items() if k not in DROP})
    text = json.dumps({"method": "POST", "path": "/v1/chat/completions", "body": body},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
"""
_NAIVE_KEY_FUNCTION = """
import hashlib, json
def key_for(payload):
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]
"""


def _key_repo(tmp_path: Path, source: str) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "cassette.py").write_text(source)
    _write_kit(tmp_path / "cassettes", "hello")
    return tmp_path


def test_keys_hand_edited_tape_is_a_mismatch(tmp_path):
    cassettes = _copy(TAPES / "kit" / "good", tmp_path / "cassettes")
    shutil.copy(TAPES / "kit" / "hand_edited" / "c35a312e54b6369e.json", cassettes)
    result = keys(_ctx(tmp_path))
    assert (result.facts["tapes_checked"], result.facts["mismatched"]) == (3, 1)
    (finding,) = result.findings
    assert finding.location == "cassettes/c35a312e54b6369e.json:2"  # the "key" line
    assert "edited after recording" in finding.message
    assert result.facts["probes_run"] == 0 and result.facts["key_function"] == ""
    assert "no key_function in [tool.takehome]: probes not available" in result.facts["summary"]


def test_keys_renamed_tape_is_a_mismatch(tmp_path):
    path = _write_kit(tmp_path / "cassettes", "hi")
    os.rename(tmp_path / path, tmp_path / "cassettes" / "feedfacefeedface.json")
    result = keys(_ctx(tmp_path))
    assert result.facts["mismatched"] == 1
    assert "is not the file name" in result.findings[0].message


def test_keys_probes_pass_for_a_canonical_key_function(tmp_path):
    repo = _key_repo(tmp_path, _GOOD_KEY_FUNCTION)
    result = keys(_ctx(repo, key_function="pkg.cassette:key_for", run=_sandbox_run(repo)))
    facts = result.facts
    assert facts["probes_run"] == len(probe_cases()) and facts["probes_failed"] == 0, result.details
    assert facts["mismatched"] == 0 and facts["key_function"] == "pkg.cassette:key_for"


def test_keys_probes_catch_a_key_over_raw_json(tmp_path):
    repo = _key_repo(tmp_path, _NAIVE_KEY_FUNCTION)
    result = keys(_ctx(repo, key_function="pkg.cassette:key_for", run=_sandbox_run(repo)))
    # every "must not change the key" probe fails: 6 kinds x 4 seeds; the "must change" ones pass
    assert result.facts["probes_failed"] == 24
    messages = {f.message.split(" (seed")[0] for f in result.findings}
    assert len(messages) == 6
    assert {"reordered keys changes the key", "an added user field changes the key"} <= messages
    assert result.findings[0].location == "pkg/cassette.py:1"
    # One detail line per kind of probe, at the key function's `def`, with the pairs that came out right.
    line = 1 + next(
        n for n, text in enumerate(_NAIVE_KEY_FUNCTION.splitlines()) if text.startswith("def key_for")
    )
    probes = [d for d in result.details if " probe: " in d]
    assert f"pkg/cassette.py:{line} probe: reordered keys must keep the key: 0/4 seeded pairs did" in probes
    assert f"pkg/cassette.py:{line} probe: another model must change the key: 4/4 seeded pairs did" in probes
    assert len(probes) == len({what for *_, what, _ in probe_cases()})
    # The tape that re-hashes is listed as such.
    assert any(
        d.startswith("cassettes/") and d.endswith(":2 re-hashes to its own name") for d in result.details
    )


SAMPLE_PACKAGE = Path(__file__).resolve().parents[1] / "sample_solution" / "support_triage_agent"
_SAMPLE_KEY_FUNCTION = "support_triage_agent.cassette:key_for"
# Red team 6, H6: the sample's own `_normalize` with one rule more, dropping the system prompt in both wire
# formats from the request it keys and stores; a re-recording under it re-hashes to every tape's name.
_NORMALIZE_ANCHOR = "    if deep:\n        out = _drop_anywhere(out, _DROPPED_ANYWHERE, fired)\n"
_DROP_SYSTEM = """    out.pop("system", None)
    if isinstance(out.get("messages"), list):
        out["messages"] = [m for m in out["messages"] if not (isinstance(m, dict) and m["role"] == "system")]
"""
_SYSTEM_PROBES = (
    "another system message",
    "the system message removed",
    "another top-level system string",
    "another top-level system text block",
)


def _sample_key_repo(tmp_path: Path, *, drop_system: bool) -> Path:
    package = shutil.copytree(SAMPLE_PACKAGE, tmp_path / "support_triage_agent")
    if drop_system:
        source = (package / "cassette.py").read_text()
        assert source.count(_NORMALIZE_ANCHOR) == 1
        (package / "cassette.py").write_text(
            source.replace(_NORMALIZE_ANCHOR, _DROP_SYSTEM + _NORMALIZE_ANCHOR)
        )
    _write_kit(
        tmp_path / "cassettes", "hello"
    )  # stored with no system message, as the re-recording stores it
    return tmp_path


def test_keys_the_samples_key_function_passes_every_probe(tmp_path):
    repo = _sample_key_repo(tmp_path, drop_system=False)
    result = keys(_ctx(repo, key_function=_SAMPLE_KEY_FUNCTION, run=_sandbox_run(repo)))
    assert result.facts["probes_run"] == len(probe_cases()) and result.facts["probes_failed"] == 0, (
        result.details
    )
    kinds = {what for *_, what, _ in probe_cases()}
    assert (
        set(_SYSTEM_PROBES) <= kinds and {"another max_tokens", "added tools", "a streamed request"} <= kinds
    )


def test_keys_a_key_function_dropping_the_system_prompt_keyed_and_stored_fails_the_system_probes(tmp_path):
    repo = _sample_key_repo(tmp_path, drop_system=True)
    result = keys(_ctx(repo, key_function=_SAMPLE_KEY_FUNCTION, run=_sandbox_run(repo)))
    facts = result.facts
    # The stored request re-hashes (what it dropped is not stored either): only the probes can tell.
    assert (facts["tapes_checked"], facts["mismatched"]) == (1, 0)
    seeds = len({seed for *_, seed in probe_cases()})
    assert facts["differ_failed"] == len(_SYSTEM_PROBES) * seeds and facts["volatile_failed"] == 0
    assert {f.message.split(" (seed")[0] for f in result.findings} == {
        f"{what} does not change the key" for what in _SYSTEM_PROBES
    }
    assert {f.location for f in result.findings} == {"support_triage_agent/cassette.py:1"}
    source = (repo / "support_triage_agent" / "cassette.py").read_text().splitlines()
    line = 1 + next(n for n, text in enumerate(source) if text.startswith("def key_for"))
    where = f"support_triage_agent/cassette.py:{line} probe:"
    assert f"{where} another top-level system text block must change the key: 0/{seeds} seeded pairs did" in (
        result.details
    )
    assert f"{where} another model must change the key: {seeds}/{seeds} seeded pairs did" in result.details
    row = {r.id: r for r in score(load_rubric(), {"keys": result})}["canonical-keys"]
    assert row.score == 1, row  # its tapes re-hash (not 0); a key dropping the prompt is never 2


def test_keys_a_probe_rule_naming_a_field_the_take_home_lets_a_key_drop_is_refused(tmp_path):
    rules = tmp_path / "key_probes.toml"
    rules.write_text('version = 1\n[[differ]]\nwhat = "another user"\nset = { user = "u-2" }\n')
    with pytest.raises(ValueError, match=r"key_probes.toml: \[\[differ\]\] entry 1: user may be left out"):
        _differ_fields(rules)


def test_keys_probe_of_an_unimportable_key_function_fails_once(tmp_path):
    repo = _key_repo(tmp_path, "raise ImportError('boom')\n")
    result = keys(_ctx(repo, key_function="pkg.cassette:key_for", run=_sandbox_run(repo)))
    assert (result.facts["probes_run"], result.facts["probes_failed"]) == (0, 1)
    assert "cannot import pkg.cassette:key_for" in result.findings[0].message


def test_keys_vcr_submission_with_vcrpys_default_matcher_ignores_the_body(tmp_path):
    _copy(TAPES / "vcr", tmp_path / "cassettes")
    result = keys(_ctx(tmp_path))
    assert result.facts["tapes_checked"] == 0 and result.manual is None
    assert result.facts["ignores_body"] is True
    assert any("ignores the request body" in line for line in result.details)


def test_keys_vcr_submission_matching_on_the_body_is_not_flagged(tmp_path):
    _copy(TAPES / "vcr", tmp_path / "cassettes")
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture(scope='module')\ndef vcr_config():\n"
        "    return {'match_on': ['method', 'uri', 'body']}\n"
    )
    assert keys(_ctx(tmp_path)).facts["ignores_body"] is False


def test_keys_vcr_matcher_named_by_a_constant_is_not_called_the_default(tmp_path):
    # helpdesk-triage (independent corpus) keeps `MATCH_ON = [..., "canonical_body"]` and passes the name.
    _copy(TAPES / "vcr", tmp_path / "cassettes")
    (tmp_path / "replay.py").write_text(
        'MATCH_ON = ["method", "uri", "canonical_body"]\n\ndef config():\n    return {"match_on": MATCH_ON}\n'
    )
    assert keys(_ctx(tmp_path)).facts["ignores_body"] is False


_OWN_LAYER = """
import hashlib, json
VOLATILE = {"user"}
def request_key(request):
    body = {k: v for k, v in json.loads(request.content).items() if k not in VOLATILE}
    return hashlib.sha256(json.dumps([request.method, body], sort_keys=True).encode()).hexdigest()[:20]
"""
_RAW_BYTES_LAYER = """
import hashlib
def request_key(method, url, body):
    return hashlib.sha256(method.encode() + url.encode() + body).hexdigest()
"""


def _own_layer_repo(tmp_path: Path, source: str) -> Path:
    (tmp_path / "bot").mkdir()
    (tmp_path / "bot" / "__init__.py").write_text("")
    (tmp_path / "bot" / "tapes.py").write_text(source)
    (tmp_path / "recordings").mkdir()
    record = {
        "recorded_at": "2026-11-30T10:00:00Z",
        "request": {"method": "POST", "url": "https://api.openai.com/v1/chat/completions",
                    "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}},
        "response": {"status": 200, "body": {"model": "gpt-4o-mini-2024-07-18", "choices": []}},
    }  # fmt: skip
    (tmp_path / "recordings" / "a.json").write_text(json.dumps(record))
    return tmp_path


def test_keys_probe_the_submissions_own_key_function_called_as_its_parameters_suggest(tmp_path):
    repo = _own_layer_repo(tmp_path, _OWN_LAYER)
    result = keys(_ctx(repo, cassette_dir="recordings", run=_sandbox_run(repo)))
    facts = result.facts
    assert facts["key_function"] == "bot.tapes:request_key (httpx.Request)", result.details
    assert (
        facts["probes_run"] == len(probe_cases(whitespace=True))
        and facts["volatile_failed"] == 0
        and facts["differ_failed"] == 0
    )
    assert facts["optional_failed"] > 0  # metadata, request_id: the kit drops them, the brief does not ask
    assert any("not required by the take-home" in f.message for f in result.findings)


def test_keys_a_key_over_raw_request_bytes_breaks_the_take_homes_rules(tmp_path):
    repo = _own_layer_repo(tmp_path, _RAW_BYTES_LAYER)
    facts = keys(_ctx(repo, cassette_dir="recordings", run=_sandbox_run(repo))).facts
    assert facts["key_function"] == "bot.tapes:request_key (method, url, bytes)"
    # key order, whitespace and the user tag each change the key, for every seed
    assert facts["volatile_failed"] == 12 and facts["differ_failed"] == 0


# --------------------------------------------------------------------------------------------- replay-doc

GOOD_DOC = """# Replaying the triage agent

## Endpoint and model
Recorded against `api.openai.com` (`/v1/chat/completions`) with model gpt-4o-mini.

## Recording date
Recorded on 2026-01-02.

## Normalized fields
- `user`: dropped because it identifies the caller, not the question
- `stream_options` — dropped, it only asks for usage numbers in the stream
- `content`: one text part is rewritten to the plain string so both spellings share a tape

## What replay proves
The agent's parsing and routing behave the same on the recorded answers.

## What replay does not prove
It does not prove that a newer model (say gpt-4.1) answers the same way.
"""


def test_replay_doc_missing(tmp_path):
    result = replay_doc(_ctx(tmp_path))
    assert result.facts["exists"] is False
    assert result.facts["missing_sections"] == 6
    assert "no REPLAY.md" in result.facts["summary"]


def test_replay_doc_complete_and_consistent(tmp_path):
    _write_kit(tmp_path / "cassettes", "hi")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "Replay.md").write_text(GOOD_DOC)
    result = replay_doc(_ctx(tmp_path))
    facts = result.facts
    assert facts["exists"] is True
    assert (facts["missing_sections"], facts["contradictions"]) == (0, 0), result.details
    assert facts["sections_found"][0] == "endpoint" and len(facts["sections_found"]) == 6
    # Cited where the substance is: the first named field of the section, under its heading (line 9).
    assert "docs/Replay.md:10 covers normalized fields" in result.details


def test_replay_doc_contradicting_the_tapes(tmp_path):
    _write_kit(tmp_path / "cassettes", "hi", extra={"user": "u-1"})
    doc = GOOD_DOC.replace("with model gpt-4o-mini", "with model gpt-4o")
    (tmp_path / "REPLAY.md").write_text(doc)
    result = replay_doc(_ctx(tmp_path))
    assert result.facts["contradictions"] == 2
    where = {f.location: f.message for f in result.findings}
    assert "says `user` is dropped" in where["REPLAY.md:10"]
    assert "names model gpt-4o," in where["REPLAY.md:4"]
    # gpt-4.1 is named only under "does not prove": not a claim about the tapes


def test_replay_doc_field_without_reason_and_missing_topics(tmp_path):
    doc = "# Notes\n\n## Normalization\n- `user`\n- `metadata`: dropped since it is tracing only\n"
    (tmp_path / "REPLAY.md").write_text(doc)
    result = replay_doc(_ctx(tmp_path))
    assert "normalized fields" not in result.facts["sections_found"]
    assert "REPLAY.md:4 normalized fields without a reason: user" in result.details
    assert result.facts["missing_sections"] >= 4


SAMPLE = Path(__file__).resolve().parents[1] / "sample_solution"
INDEPENDENT = Path(__file__).resolve().parents[1] / "grader" / "selftest" / "independent.yaml"

# Red-team F10: the kit's baseline with REPLAY.md cut down to six headings, each with an empty sentence.
DOC_EMPTY = """# REPLAY.md

## Endpoint

The endpoint.

## Model

The model.

## Recording date

See recorded_at.

## Normalized fields

Normalized.

## What replay proves

It proves it.

## What replay does not prove

It does not prove the rest.
"""

# The day the sample's tapes were recorded, as a person writes it: the honest shapes below give it, and the
# row holds a recording date to the tapes' (a re-recorded sample moves it; the documents follow).
_SAMPLE_DAY = date.fromisoformat(
    json.loads(next(iter(sorted((SAMPLE / "cassettes").glob("*.json")))).read_text())["meta"]["recorded_at"][
        :10
    ]
)

# Honest documents by people who never saw the template: no `##` headings, other words, other shapes.
HONEST_SHAPES = {
    "prose, no headings": f"""\
Everything in cassettes/ was captured in one pass on {_SAMPLE_DAY:%d %B %Y} against a local server at
http://127.0.0.1:8000 speaking the OpenAI wire format; we asked for gpt-4o-mini and it answered as
gpt-4o-mini-2024-07-18. Before a request is hashed we drop `user` and `metadata`, since they identify
whoever ran it and change from run to run, and `stream_options`, which only asks for usage numbers.
A green run tells you that the triage code builds the same requests and turns the recorded replies into
the labelled answers without a network or a key. It cannot tell you whether a real model would answer the
same way today, and it says nothing about rate limits, timeouts or tickets that were never recorded.
""",
    "tables under underlined titles": f"""\
Recording notes
===============

| | |
|---|---|
| Server | 127.0.0.1 (the kit's stand-in, OpenAI-compatible) |
| Asked for | gpt-4o-mini |
| Answered by | gpt-4o-mini-2024-07-18 |
| Taped | {_SAMPLE_DAY:%b %d, %Y} |

Left out of the match key:

| name | reason |
|---|---|
| user | differs per person, not part of the question |
| request_id | new on every attempt |

Limits
------

* A pass means parsing and validation behave on these exact replies, offline.
* Nothing here says today's model would agree; errors and rate limits were never taped.
""",
}


def _sample_with_doc(tmp_path: Path, doc: str) -> Path:
    """The sample's tapes (the kit's baseline) with ``doc`` as its REPLAY.md."""
    shutil.copytree(SAMPLE / "cassettes", tmp_path / "cassettes")
    (tmp_path / "REPLAY.md").write_text(doc, encoding="utf-8")
    return tmp_path


def _replay_doc_row(result):
    rubric = load_rubric()
    row = next(r for r in score(rubric, {"replay-doc": result}) if r.id == "replay-doc")
    return row, rubric.max


def _line(doc: str, needle: str) -> int:
    return next(n for n, line in enumerate(doc.splitlines(), 1) if needle in line)


def test_replay_doc_headings_with_nothing_checkable_cover_nothing(tmp_path):
    result = replay_doc(folder_context(_sample_with_doc(tmp_path, DOC_EMPTY)))
    row, top = _replay_doc_row(result)
    # Nothing a reviewer could check: the same as a stub whose sections still say TODO.
    assert (row.score, result.facts["sections_found"]) == (0, []), row.evidence
    assert row.score < top
    lacks = {
        "endpoint": ("## Endpoint", "no host, URL or API path"),
        "model": ("## Model", "no model name"),
        "recording date": ("## Recording date", "no date"),
        "normalized fields": ("## Normalized fields", "no field named"),
        "what replay proves": ("## What replay proves", "no sentence with 3 words of substance"),
        "what replay does not prove": (
            "## What replay does not prove",
            "no sentence with 3 words of substance",
        ),
    }
    expected = [
        (f"REPLAY.md:{_line(DOC_EMPTY, heading)}", f"does not cover {topic}: {why}")
        for topic, (heading, why) in lacks.items()
    ]
    assert [(f.location, f.message) for f in result.findings] == expected
    # The evidence line itself says which topics lack substance, why, and where.
    said = "; ".join(f"{t} at REPLAY.md:{_line(DOC_EMPTY, h)} — {w}" for t, (h, w) in lacks.items())
    assert row.evidence == f"REPLAY.md covers 0/6 topics, 0 contradictions (without substance: {said})"


@pytest.mark.parametrize("shape", list(HONEST_SHAPES))
def test_replay_doc_an_honest_doc_in_another_shape_covers_everything(tmp_path, shape):
    result = replay_doc(folder_context(_sample_with_doc(tmp_path, HONEST_SHAPES[shape])))
    row, top = _replay_doc_row(result)
    assert row.score == top, (row.evidence, [f.message for f in result.findings])
    assert result.facts["contradictions"] == 0


@pytest.mark.parametrize(
    ("topic", "old", "new", "why"),
    [
        ("endpoint", "against `api.openai.com` (`/v1/chat/completions`)", "against the provider's endpoint",
         "no host, URL or API path"),
        ("model", "with model gpt-4o-mini.", "with the default model.", "no model name"),
        ("recording date", "Recorded on 2026-01-02.", "Recorded on the day of the last prompt change.",
         "no date"),
        ("normalized fields", GOOD_DOC[GOOD_DOC.index("- `user`"):GOOD_DOC.index("## What replay proves")],
         "We normalize what needs normalizing.\n\n", "no field named"),
        ("what replay proves", "The agent's parsing and routing behave the same on the recorded answers.",
         "It proves it.", "no sentence with 3 words of substance"),
        ("what replay does not prove", "## What replay proves\n",
         "## What replay proves and what it does not\n", "no sentence saying what it does not prove"),
    ],
)  # fmt: skip
def test_replay_doc_a_topic_named_without_substance_is_not_covered(tmp_path, topic, old, new, why):
    _write_kit(tmp_path / "cassettes", "hi")
    doc = GOOD_DOC.replace(old, new, 1)
    if topic == "what replay does not prove":  # one shared heading, and no sentence under it says a limit
        doc = doc[: doc.index("## What replay does not prove")]
    assert doc != GOOD_DOC
    (tmp_path / "REPLAY.md").write_text(doc)
    result = replay_doc(_ctx(tmp_path))
    assert topic not in result.facts["sections_found"]
    assert result.facts["missing_sections"] == 1, result.facts["summary"]
    (finding,) = [f for f in result.findings if f.message.startswith("does not cover")]
    assert finding.message == f"does not cover {topic}: {why}"
    assert f"without substance: {topic} at {finding.location} — {why})" in result.facts["summary"]
    row, top = _replay_doc_row(result)
    assert row.score < top


def test_replay_doc_a_model_the_tapes_carry_names_the_model(tmp_path):
    """A house model's name has no family shape; the tapes recorded it, so naming it says which model."""
    _write_kit(tmp_path / "cassettes", "hi", extra={"model": "acme-large"})
    doc = GOOD_DOC.replace("with model gpt-4o-mini.", "with model acme-large.", 1)
    (tmp_path / "REPLAY.md").write_text(doc)
    assert "model" in replay_doc(_ctx(tmp_path)).facts["sections_found"]
    (tmp_path / "REPLAY.md").write_text(doc.replace("acme-large", "acme-huge"))
    assert "model" not in replay_doc(_ctx(tmp_path)).facts["sections_found"]


def test_replay_doc_lands_in_the_independent_reviewers_bands(tmp_path):
    """The twelve independent submissions (grader/selftest/independent/), the replay-doc row alone: each
    in the band its blind reviewer wrote (the full grade of each is tests/test_independent_corpus.py)."""
    from grader.selftest import load_corpus

    out = []
    for case in load_corpus(INDEPENDENT):
        repo = tmp_path / case.id
        bundle = INDEPENDENT.with_name("independent") / case.bundle
        subprocess.run(["git", "clone", "-q", str(bundle), str(repo)], check=True, capture_output=True)
        row, _ = _replay_doc_row(replay_doc(folder_context(repo, root=tmp_path / f"{case.id}-logs")))
        low, high = case.band("replay-doc")
        if not low <= row.score <= high:
            out.append(f"{case.id}: {row.score} not in [{low}, {high}]: {row.evidence}")
    assert not out, "\n".join(out)


# --------------------------------------------------------------------------------------------- boundary


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


def test_boundary_one_client_module_clean_agent(tmp_path):
    repo = _package(tmp_path, {
        "triage/__init__.py": "",
        "triage/cassette.py": "class CassetteTransport: ...\n",
        "triage/client.py": "import httpx as h\nfrom openai import OpenAI as O\n"
                            "from .cassette import CassetteTransport as T\n"
                            "def make():\n    return O(http_client=h.Client(transport=T()))\n",
        "triage/agent.py": "from triage.client import make\n",
        "triage/__main__.py": "from .cassette import CassetteTransport\n",
        "tests/test_agent.py": "import httpx\nfrom triage import cassette\nhttpx.Client()\n",
        "triage/broken.py": "def (:\n",
    })  # fmt: skip
    result = boundary(folder_context(repo))
    assert result.facts["client_modules"] == 1
    assert result.facts["client_module_list"] == ["triage/client.py:5"]
    assert result.facts["agent_imports_cassette"] == 0
    assert any(d.startswith("triage/broken.py not parsed: SyntaxError") for d in result.details)


def test_boundary_two_client_modules_and_agent_importing_the_cassette(tmp_path):
    repo = _package(tmp_path, {
        "src/bot/__init__.py": "",
        "src/bot/cassette.py": "",
        "src/bot/llm.py": "import anthropic\nc = anthropic.Anthropic()\n",
        "src/bot/fetch.py": "import urllib.request\n\ndef get(u):\n    return urllib.request.urlopen(u)\n",
        "src/bot/agent.py": "from . import cassette\n\ndef triage(m):\n    return cassette\n",
        "src/bot/router.py": "from bot.cassette import Thing\n",
    })  # fmt: skip
    result = boundary(folder_context(repo))
    facts = result.facts
    assert facts["client_modules"] == 2
    assert facts["client_module_list"] == ["src/bot/fetch.py:4", "src/bot/llm.py:2"]
    assert facts["agent_imports_cassette"] == 2
    assert {f.location for f in result.findings if "cassette" in f.message} == {
        "src/bot/agent.py:1",
        "src/bot/router.py:1",
    }


@pytest.mark.parametrize(
    "source",
    ["import requests\nrequests.post('x')\n", "from aiohttp import ClientSession\nClientSession()\n",
     "import httpx2\nhttpx2.AsyncClient()\n"],
)  # fmt: skip
def test_boundary_recognises_other_clients(tmp_path, source):
    repo = _package(tmp_path, {"app.py": source})
    assert boundary(folder_context(repo)).facts["client_modules"] == 1


def test_unplayed_counts_only_cassettes_vcrpy_loaded_alone() -> None:
    from grader.checks.hygiene import _unplayed
    from grader.tapes import Interaction, Tape

    tape = Tape(
        path="tests/cassettes/t.yaml", format="vcr", interactions=[Interaction(line=2), Interaction(line=30)]
    )
    assert [(m, t, line) for _, m, t, line in _unplayed([tape], {"tests/cassettes/t.yaml": (2, {0})})] == [
        (1, 2, 30)
    ]
    assert _unplayed([tape], {"tests/cassettes/t.yaml": (2, {0, 1})}) == []
    # Merged with a shared cassette by pytest-recording (4 interactions in vcrpy's view): not judged.
    assert _unplayed([tape], {"tests/cassettes/t.yaml": (4, {0})}) == []


@pytest.mark.parametrize(
    "line",
    [
        'import importlib\n_tapes = importlib.import_module(f"{__package__}.cassette")\n',
        'from importlib import import_module as im\n_tapes = im(__package__ + ".cassette")\n',
        'import importlib\n_tapes = importlib.import_module(".cassette", package=__package__)\n',
        '_tapes = __import__("bot.cassette")\n',
        'import importlib\nBASE = "bot"\n_tapes = importlib.import_module(BASE + ".cassette")\n',
    ],
)
def test_boundary_sees_an_agent_importing_the_cassette_by_name(tmp_path, line):
    # Red team 5, G8: the same import spelled as a call to importlib was not seen.
    repo = _package(tmp_path, {
        "bot/__init__.py": "",
        "bot/cassette.py": "MODES = ()\n",
        "bot/agent.py": line + "\ndef triage(m):\n    return _tapes.MODES\n",
    })  # fmt: skip
    result = boundary(folder_context(repo))
    assert result.facts["agent_imports_cassette"] == 1
    lineno = line.count("\n")
    assert [f.location for f in result.findings] == [f"bot/agent.py:{lineno}"]


def test_boundary_dynamic_imports_of_other_modules_are_not_the_cassette(tmp_path):
    repo = _package(tmp_path, {
        "bot/__init__.py": "",
        "bot/cassette.py": "",
        "bot/agent.py": "import importlib\nfrom importlib import import_module\n"
                        "a = importlib.import_module(f'{__package__}.rules')\n"
                        "b = import_module(name_from_config())\n"
                        "c = import_module(f'{__package__}.{which}')\n",
    })  # fmt: skip
    assert boundary(folder_context(repo)).facts["agent_imports_cassette"] == 0


@pytest.mark.parametrize(
    ("source", "call"),
    [
        ("import socket\n\ndef ask():\n    return socket.create_connection(('api.openai.com', 443))\n",
         "socket.create_connection"),
        ("import asyncio\n\nasync def ask():\n"
         "    return await asyncio.open_connection('api.openai.com', 443)\n", "asyncio.open_connection"),
        ("import subprocess\n\ndef ask(url):\n    return subprocess.run(['curl', '-s', url], check=True)\n",
         "subprocess.run of curl"),
        ("import os\n\ndef ask(url):\n    return os.popen('/usr/bin/wget -qO- ' + url)\n",
         "os.popen of wget"),
    ],
)  # fmt: skip
def test_boundary_counts_a_client_built_by_hand(tmp_path, source, call):
    # Red team 6, H7: a second transport over a raw socket, asyncio streams or a curl child was not counted.
    repo = _package(tmp_path, {
        "bot/__init__.py": "",
        "bot/client.py": "import httpx\n\ndef make():\n    return httpx.Client()\n",
        "bot/fallback.py": source,
    })  # fmt: skip
    result = boundary(folder_context(repo))
    assert result.facts["client_modules"] == 2, result.facts
    assert any(d.startswith("bot/fallback.py:") and f"({call})" in d for d in result.details), result.details


def test_boundary_a_subprocess_that_is_not_a_network_program_is_no_client(tmp_path):
    repo = _package(tmp_path, {
        "tools/check.py": "import subprocess, sys\n\ndef run():\n"
                          "    subprocess.run([sys.executable, '-m', 'pytest'])\n"
                          "    subprocess.run(['git', 'log'])\n"
                          "    subprocess.run('make test', shell=True)\n",
    })  # fmt: skip
    assert boundary(folder_context(repo)).facts["client_modules"] == 0


# Red team 19, F3: clients the rule list did not name (each kept the row at 3 where `httpx.Client` cost 1).
_UNNAMED_CLIENTS = {
    "httpx.HTTPTransport": "import httpx\n\ndef go():\n    t = httpx.HTTPTransport()\n"
    "    return t.handle_request(httpx.Request('POST', 'https://api.openai.com/v1/x'))\n",
    "httpcore.request": "import httpcore\n\ndef go():\n    return httpcore.request('POST', 'https://h/x')\n",
    "urllib3.PoolManager": "import urllib3\n\ndef go():\n"
    "    return urllib3.PoolManager().request('GET', 'u')\n",
    "xmlrpc.client.ServerProxy": "import xmlrpc.client\n\ndef go():\n"
    "    return xmlrpc.client.ServerProxy('https://h/RPC2').ping()\n",
    "ftplib.FTP": "import ftplib\n\ndef go():\n    return ftplib.FTP('ftp.example.com')\n",
    "multiprocessing.connection.Client": "from multiprocessing.connection import Client\n\ndef go():\n"
    "    return Client(('h', 443))\n",
    "loop.create_connection()": "import asyncio\n\nasync def go():\n    loop = asyncio.get_running_loop()\n"
    "    return await loop.create_connection(asyncio.Protocol, 'h', 443)\n",
    "ctx.wrap_socket()": "import socket, ssl\n\ndef go():\n    ctx = ssl.create_default_context()\n"
    "    return ctx.wrap_socket(socket.socket(), server_hostname='h')\n",
    "requests.post": "import importlib\n\ndef go():\n"
    "    return importlib.import_module('requests').post('https://h/x', json={})\n",
}


@pytest.mark.parametrize("call", sorted(_UNNAMED_CLIENTS))
def test_boundary_counts_clients_under_httpx_and_in_the_standard_library(tmp_path, call):
    repo = _package(tmp_path, {
        "bot/__init__.py": "",
        "bot/client.py": "import httpx\n\ndef make():\n    return httpx.Client()\n",
        "bot/usage.py": _UNNAMED_CLIENTS[call],
    })  # fmt: skip
    result = boundary(folder_context(repo))
    assert result.facts["client_modules"] == 2, result.details
    assert any(d.startswith("bot/usage.py:") and f"({call})" in d for d in result.details), result.details


def test_boundary_a_replay_layer_owns_the_transport_it_wraps_whatever_its_name(tmp_path):
    """The control: independent submissions call their replay layer tapes.py or recorder.py; building the
    live httpx transport there (record mode) or in the cassette module is no second client, nor is a
    server's TLS."""
    layer = (
        "import httpx\n\nclass Replay(httpx.BaseTransport):\n    def __init__(self):\n"
        "        self.live = httpx.HTTPTransport()\n\n    def handle_request(self, request):\n"
        "        return self.live.handle_request(request)\n"
    )
    repo = _package(tmp_path, {
        "bot/__init__.py": "",
        "bot/client.py": "import httpx\nfrom .recorder import Replay\n\ndef make():\n"
                         "    return httpx.Client(transport=Replay())\n",
        "bot/recorder.py": layer,
        "bot/cassette.py": "import httpx\n\nLIVE = httpx.AsyncHTTPTransport()\n",
        "bot/serve.py": "import socket, ssl\n\ndef listen(ctx, s):\n"
                        "    return ctx.wrap_socket(s, server_side=True)\n",
    })  # fmt: skip
    result = boundary(folder_context(repo))
    assert result.facts["client_module_list"] == ["bot/client.py:5"], result.details


@pytest.mark.parametrize("line", ["from .client import CassetteTransport", "from bot.shim import Tapes as T"])
def test_boundary_sees_the_cassette_layer_taken_through_a_re_export(tmp_path, line):
    """Red team 19, F4: `from .client import CassetteTransport`, the client module re-exporting it, kept the
    agent's import of the cassette layer unseen; also through two re-exports under another name."""
    repo = _package(tmp_path, {
        "bot/__init__.py": "",
        "bot/cassette.py": "class CassetteTransport: ...\n",
        "bot/client.py": "import httpx\nfrom .cassette import CassetteTransport\n\ndef make():\n"
                         "    return httpx.Client(transport=CassetteTransport())\n",
        "bot/shim.py": "from .client import CassetteTransport as Tapes\n",
        "bot/agent.py": f"{line}\nfrom .client import make\n\ndef triage(m):\n    return make()\n",
    })  # fmt: skip
    result = boundary(folder_context(repo))
    # shim.py is a module of its own re-exporting the layer: agent logic importing it too.
    assert result.facts["agent_imports_cassette"] == 2, result.details
    assert {f.location for f in result.findings} == {"bot/agent.py:1", "bot/shim.py:1"}, result.details


def test_boundary_an_agent_importing_other_names_of_the_client_module_is_fine(tmp_path):
    repo = _package(tmp_path, {
        "bot/__init__.py": "from .cassette import CassetteTransport\n",
        "bot/cassette.py": "class CassetteTransport: ...\n",
        "bot/client.py": "import httpx\nfrom .cassette import CassetteTransport\n\ndef make():\n"
                         "    return httpx.Client(transport=CassetteTransport())\n",
        "bot/agent.py": "from .client import make\nfrom bot import client\n\n"
                        "def triage(m):\n    return make()\n",
    })  # fmt: skip
    assert boundary(folder_context(repo)).facts["agent_imports_cassette"] == 0


def test_replay_doc_unfilled_text_written_with_invisible_characters_is_still_unfilled(tmp_path):
    """Red team 32, F-F: the template's REPLAY.md left as generated, each `TODO` written `TO\u200bDO`
    (a zero-width space): replay-doc went from 0 to 2. What draws nothing is not read."""
    from tests.helpers.bake import bake

    stub = (bake(tmp_path / "bake") / "REPLAY.md").read_text(encoding="utf-8")
    assert stub.count("TODO") >= 5
    plain = replay_doc(folder_context(_sample_with_doc(tmp_path / "plain", stub)))
    hidden = stub.replace("TODO", "TO\u200bDO").replace("TBD", "T\u2060BD")
    disguised = replay_doc(folder_context(_sample_with_doc(tmp_path / "disguised", hidden)))

    assert disguised.facts["sections_found"] == plain.facts["sections_found"], disguised.details
    assert _replay_doc_row(disguised)[0].score == _replay_doc_row(plain)[0].score
