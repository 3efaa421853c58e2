"""A recording the kit's stand-in answered stays a stand-in recording when its metadata is rewritten to name
a real endpoint (a red-team pass set `meta.endpoint` to api.openai.com in every tape: 52/54 -> 54/54)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from grader.checks.metadata import metadata
from grader.tapes import tapes_of
from tests.helpers.context import folder_context

SAMPLE = Path(__file__).resolve().parents[1] / "sample_solution"
CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"


def _rewritten(tmp_path: Path) -> Path:
    repo = tmp_path / "sub"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
    for path in (repo / "cassettes").glob("*.json"):
        tape = json.loads(path.read_text(encoding="utf-8"))
        tape["meta"]["endpoint"] = "api.openai.com"
        path.write_text(json.dumps(tape, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return repo


def test_stand_in_answers_are_known_whatever_endpoint_the_tapes_name(tmp_path: Path) -> None:
    repo = _rewritten(tmp_path)
    result = metadata(folder_context(repo))
    tapes = result.facts["tapes"]
    assert tapes and result.facts["loopback_tapes"] == tapes, result.facts
    assert "hold the kit stand-in's own answers" in result.details[0], result.details
    assert f"all {tapes} tapes were recorded against a loopback endpoint" in result.facts["summary"]


def test_real_recordings_are_not_taken_for_the_stand_in(tmp_path: Path) -> None:
    # Recorded by their authors against the real OpenAI and OpenRouter APIs (tests/fixtures/corpus).
    for project in ("simonw-llm-openai-plugin", "simonw-llm-openrouter"):
        repo = tmp_path / project
        shutil.copytree(CORPUS / project / "cassettes", repo / "cassettes")
        assert tapes_of(folder_context(repo, cassette_dir=Path("cassettes")))
        result = metadata(folder_context(repo, cassette_dir=Path("cassettes")))
        assert result.facts["tapes"] > 0 and result.facts["loopback_tapes"] == 0, result.details
