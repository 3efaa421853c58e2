"""grader.tapes: every recorder's format parses; hostile files are reported, never followed or crashed on."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.tapes import MAX_PARSE_BYTES, canonical_key, load_tapes
from tests.helpers.context import folder_context

FIXTURES = Path(__file__).parent / "fixtures"
TAPES = FIXTURES / "tapes"
CORPUS = FIXTURES / "corpus"  # real vcrpy cassettes, vendored with their LICENSE and source


def _by_name(tapes):
    return {Path(t.path).name: t for t in tapes}


def test_real_vcrpy_corpus_parses_with_models_endpoints_and_dates():
    openai_tapes = load_tapes(CORPUS / "simonw-llm-openai-plugin", Path("cassettes"))
    router_tapes = load_tapes(CORPUS / "simonw-llm-openrouter", Path("cassettes"))
    assert len(openai_tapes) == 8 and len(router_tapes) == 5
    assert {t.format for t in openai_tapes + router_tapes} == {"vcr"}, [t.error for t in openai_tapes]

    options = _by_name(openai_tapes)["test_options[options0].yaml"]
    assert options.model == "gpt-4o-mini"
    # the response body is a gzip !!binary blob: the served model is only visible once inflated
    assert options.served_model == "gpt-4o-mini-2024-07-18"
    assert options.endpoint == "api.openai.com"
    assert options.recorded_at == "2025-03-21T03:25:44Z"
    assert options.interactions[0].status == 200
    assert options.interactions[0].line == 2

    streamed = _by_name(openai_tapes)["test_async_model.yaml"]
    assert streamed.served_model == "gpt-4o-mini-2024-07-18"  # from the SSE text
    assert streamed.interactions[0].response_text.startswith("event: response.created")

    prompt = _by_name(router_tapes)["test_prompt.yaml"]
    assert prompt.endpoint == "openrouter.ai"
    assert [i.model for i in prompt.interactions] == [None, "openai/gpt-4o"]  # GET /models, then the prompt
    assert prompt.model == "openai/gpt-4o"
    assert _by_name(router_tapes)["test_llm_models.yaml"].model is None  # a model list names no model


def test_kit_tape_fields_and_key_match_the_spec():
    tapes = load_tapes(TAPES, Path("kit/good"))
    assert len(tapes) == 2
    for tape in tapes:
        assert tape.format == "kit"
        assert (tape.model, tape.endpoint, tape.recorded_at) == (
            "gpt-4o-mini",
            "api.openai.com",
            "2026-11-29T10:04:11Z",
        )
        assert tape.served_model == "gpt-4o-mini-2024-07-18"
        assert Path(tape.path).name == f"{tape.key}.json"
        request = json.loads((TAPES / tape.path).read_text(encoding="utf-8"))["request"]
        spec = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert canonical_key(request["method"], request["path"], request["body"]) == (
            hashlib.sha256(spec.encode("utf-8")).hexdigest()
        )


def test_kit_tape_without_meta_names_its_model_from_the_request_only():
    (tape,) = load_tapes(TAPES, Path("kit/missing_meta"))
    assert tape.format == "kit"
    assert tape.model == "gpt-4o-mini"
    assert tape.endpoint is None and tape.recorded_at is None


def test_gzip_binary_body_is_inflated_and_json_parsed():
    (tape,) = [t for t in load_tapes(TAPES, Path("vcr")) if t.path.endswith("gzip_binary.yaml")]
    body = tape.interactions[0].response_body
    assert body["choices"][0]["message"]["content"] == "bonjour"
    assert tape.served_model == "gpt-4o-mini-2024-07-18"
    assert tape.recorded_at == "2025-11-29T10:04:11Z"


def test_gemini_model_comes_from_the_url_path():
    (tape,) = [t for t in load_tapes(TAPES, Path("vcr")) if t.path.endswith("gemini.yaml")]
    assert tape.model == "gemini-1.5-flash"
    assert tape.served_model == "gemini-1.5-flash-002"
    assert tape.endpoint == "generativelanguage.googleapis.com"
    assert tape.recorded_at == "2024-10-01T08:00:00Z"


def test_generic_json_records_best_effort():
    (tape,) = load_tapes(TAPES, Path("generic"))
    assert tape.format == "json"
    assert tape.model == "claude-3-5-haiku-latest"
    assert tape.served_model == "claude-3-5-haiku-20241022"
    assert tape.endpoint == "api.anthropic.com"
    assert tape.recorded_at == "2025-06-02T12:00:00Z"
    assert tape.interactions[0].status == 200


def test_invalid_json_and_yaml_are_reported_with_their_line():
    tapes = _by_name(load_tapes(TAPES, Path("invalid")))
    assert tapes["broken.json"].format == "invalid"
    assert "invalid JSON at line 5" in tapes["broken.json"].error
    assert tapes["broken.yaml"].format == "invalid"
    assert "invalid YAML at line" in tapes["broken.yaml"].error


def test_symlinks_are_reported_and_never_read(tmp_path):
    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    (cassettes / "passwd.json").symlink_to("/etc/passwd")
    # A FIFO hangs any reader until a writer appears: following this link would block the test forever.
    os.mkfifo(tmp_path / "fifo")
    (cassettes / "hang.yaml").symlink_to(tmp_path / "fifo")
    (cassettes / "linked_dir").symlink_to("/etc", target_is_directory=True)

    tapes = _by_name(load_tapes(tmp_path, Path("cassettes")))
    assert set(tapes) == {"passwd.json", "hang.yaml", "linked_dir"}
    for tape in tapes.values():
        assert tape.format == "invalid"
        assert tape.error.startswith("symlink")
        assert tape.text == "" and tape.size == 0


def test_a_symlinked_cassette_dir_is_not_entered(tmp_path):
    (tmp_path / "cassettes").symlink_to("/etc", target_is_directory=True)
    (tape,) = load_tapes(tmp_path, Path("cassettes"))
    assert tape.format == "invalid" and tape.error.startswith("symlink")
    assert load_tapes(tmp_path, Path("../outside"))[0].error == "outside the repository"


def test_huge_tape_is_sized_but_not_parsed(tmp_path):
    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    with (cassettes / "huge.json").open("wb") as handle:
        handle.truncate(100_000_000)  # sparse: no 100 MB written, but that is its size
    (tape,) = load_tapes(tmp_path, Path("cassettes"))
    assert tape.size == 100_000_000 > MAX_PARSE_BYTES
    assert tape.format == "invalid" and "too large to parse" in tape.error
    assert tape.text == ""


def test_a_tape_that_parses_into_millions_of_values_is_refused_unparsed(tmp_path, monkeypatch):
    # Red team 12, F4: 15 MB of `[{},{},...]` under a byte cap built 5 million dicts (450 MB of the grader).
    from grader import tapes as tapes_module

    folder = tmp_path / "cassettes"
    folder.mkdir()
    pad = "[" + ",".join(["{}"] * 1_000_001) + "]"
    (folder / "a-pad.json").write_text('{"version": 1, "key": "a", "request": {}, "pad": ' + pad + "}")
    (folder / "b-ok.json").write_text('{"version": 1, "key": "b", "request": {"body": {"n": [1, 2, 3]}}}')
    found = _by_name(load_tapes(tmp_path, Path("cassettes")))
    assert found["a-pad.json"].format == "invalid"
    assert found["a-pad.json"].error == "holds more than 1,000,000 values: not parsed"
    assert found["b-ok.json"].format == "kit", found["b-ok.json"].error

    # And across tapes: past the grade's total, the rest are refused too, each saying why.
    monkeypatch.setattr(tapes_module, "_MAX_TOTAL_VALUES", 40)
    for n in range(5):
        body = ",".join(["{}"] * 8)
        (folder / f"c{n}.json").write_text(f'{{"version": 1, "key": "c{n}", "request": {{"pad": [{body}]}}}}')
    found = _by_name(load_tapes(tmp_path, Path("cassettes")))
    refused = [name for name, tape in found.items() if name.startswith("c") and tape.format == "invalid"]
    assert refused and refused != [f"c{n}.json" for n in range(5)], refused
    assert "the most one grade parses" in found[refused[0]].error


def test_non_utf8_names_and_contents_are_tolerated(tmp_path):
    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    shutil.copy(TAPES / "kit" / "good" / os.listdir(TAPES / "kit" / "good")[0], cassettes / "ok.json")
    latin1 = b'{"version": 1, "request": {"method": "POST", "path": "/v1/x", "body": {"model": "caf\xe9"}}}'
    (cassettes / os.fsdecode(b"caf\xe9.json")).write_bytes(latin1)
    tapes = load_tapes(tmp_path, Path("cassettes"))
    assert len(tapes) == 2
    weird = next(t for t in tapes if "caf" in t.path)
    assert weird.path == "cassettes/caf\\xe9.json"  # printable, and safe to write into a UTF-8 report
    assert weird.format == "kit" and weird.model == "caf\ufffd"


def test_discovery_folders_when_no_cassette_dir_is_declared(tmp_path):
    target = tmp_path / "tests" / "cassettes" / "test_x"
    target.mkdir(parents=True)
    shutil.copy(TAPES / "vcr" / "gemini.yaml", target / "gemini.yaml")
    (tmp_path / "tests" / "cassettes" / "README.md").write_text("not a tape\n")
    (tape,) = load_tapes(tmp_path, None)
    assert tape.path == "tests/cassettes/test_x/gemini.yaml"
    assert tape.format == "vcr"


def test_a_json_file_that_is_no_record_is_invalid_not_a_crash(tmp_path):
    (tmp_path / "cassettes").mkdir()
    (tmp_path / "cassettes" / "package.json").write_text('{"name": "x", "scripts": {}}')
    (tmp_path / "cassettes" / "list.yaml").write_text("- 1\n- 2\n")
    for tape in load_tapes(tmp_path, Path("cassettes")):
        assert tape.format == "invalid" and "not a request/response record" in tape.error


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(body=st.dictionaries(st.text(max_size=6), _JSON, max_size=6))
def test_canonical_key_ignores_key_order(body):
    reordered = dict(reversed(list(body.items())))
    assert canonical_key("POST", "/v1/chat/completions", body) == canonical_key(
        "POST", "/v1/chat/completions", reordered
    )


@pytest.mark.parametrize("change", [{"model": "gpt-4o"}, {"temperature": 0.0}])
def test_canonical_key_changes_with_the_request(change):
    body = {"model": "gpt-4o-mini", "temperature": 0}
    assert canonical_key("POST", "/p", body) != canonical_key("POST", "/p", {**body, **change})


def test_checks_asking_for_the_tapes_at_once_share_one_load(tmp_path: Path) -> None:
    # --jobs 2 runs metadata and hygiene side by side: the tapes must be parsed and held once, not twice.
    import threading

    from grader.tapes import tapes_of

    folder = tmp_path / "cassettes"
    folder.mkdir()
    for i in range(300):
        (folder / f"{i:04d}.json").write_text('{"version": 1, "key": "k", "request": {}}\n', encoding="utf-8")
    ctx = folder_context(tmp_path, cassette_dir=Path("cassettes"))
    start = threading.Barrier(4)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(tapes_of(ctx))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 4 and all(tapes is got[0] for tapes in got)
    assert len(got[0]) == 300
