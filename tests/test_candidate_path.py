"""The candidate's path as docs/candidate.md tells it: rehearse `make record` against the stand-in in either
flavour, see a wrong base URL named in the error, and see a one-space prompt change explained by the miss.

Real parts only: a baked project, the stand-in as a subprocess (`python -m grader.standin`), `make`.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from tests.helpers.bake import ROOT, bake, baked_venv, clean_env, run
from tests.helpers.processes import end_group

DOCS = (ROOT / "docs" / "candidate.md").read_text(encoding="utf-8")


@contextmanager
def standin_process() -> Iterator[tuple[str, list[str]]]:
    """The stand-in as a candidate starts it: yields its stdout URL and the flavour lines it logs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader.standin", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        start_new_session=True,  # its own group, ended as a whole
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = proc.stdout.readline().strip()
        flavours = [proc.stderr.readline().strip(), proc.stderr.readline().strip()]
        yield url, flavours
    finally:
        end_group(proc)


def _exports(line: str) -> dict[str, str]:
    return dict(re.findall(r"([A-Z_]+)=(\S+)", line))


def _package(project: Path) -> str:
    return tomllib.loads((project / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"][
        "wheel"
    ]["packages"][0]


@pytest.mark.index
@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_record_against_the_standin_with_the_variables_it_prints(tmp_path: Path, provider: str) -> None:
    project = bake(tmp_path, provider=provider)
    venv = baked_venv()
    flavour = "Anthropic" if provider == "anthropic" else "OpenAI"
    with standin_process() as (url, flavours):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        line = next(f for f in flavours if f.startswith(f"standin: {flavour} flavour:"))
        variables = _exports(line)
        recorded = run(["make", "record"], project, venv.env(**variables))
    assert recorded.returncode == 0, recorded.stdout[-2000:] + recorded.stderr[-2000:]
    tapes = list((project / "cassettes").glob("*.json"))
    assert tapes, "make record wrote no tape"
    assert {json.loads(t.read_text())["meta"]["endpoint"] for t in tapes} == {"127.0.0.1"}
    replayed = run(["make", "test"], project, venv.env(), offline=True)
    assert replayed.returncode == 0, replayed.stdout[-2000:]
    # The variables the stand-in prints are the ones the candidate guide tells them to set.
    base = variables["ANTHROPIC_BASE_URL" if provider == "anthropic" else "OPENAI_BASE_URL"]
    port = url.rsplit(":", 1)[1].split("/")[0]
    assert base.replace(port, "8765") in DOCS


@pytest.mark.index
def test_a_doubled_v1_is_named_with_method_url_and_fix(tmp_path: Path) -> None:
    """The mistake the guide warns about: the stdout URL (…/v1) given as ANTHROPIC_BASE_URL."""
    project = bake(tmp_path, provider="anthropic")
    venv = baked_venv()
    with standin_process() as (url, _):
        env = venv.env(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="standin", CASSETTE_MODE="record")
        result = run(["python", "-m", _package(project), "my parcel never arrived"], project, env)
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert f"HTTP 404 to POST {url}/v1/messages" in line, line
    assert "set ANTHROPIC_BASE_URL without the trailing /v1" in line


@pytest.mark.index
def test_an_unreachable_endpoint_is_named(tmp_path: Path) -> None:
    project = bake(tmp_path)
    env = baked_venv().env(
        OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="standin", CASSETTE_MODE="record"
    )
    result = run(["python", "-m", _package(project), "hello"], project, env)
    assert result.returncode == 1
    assert "cannot reach the model endpoint: POST http://127.0.0.1:9/v1/chat/completions" in result.stderr


@pytest.mark.index
def test_a_one_space_prompt_change_names_the_nearest_tape_and_the_space(tmp_path: Path) -> None:
    project = bake(tmp_path)
    venv = baked_venv()
    with standin_process() as (url, _):
        recorded = run(["make", "record"], project, venv.env(OPENAI_BASE_URL=url, OPENAI_API_KEY="standin"))
    assert recorded.returncode == 0, recorded.stdout[-2000:]
    tapes = {p.stem for p in (project / "cassettes").glob("*.json")}
    agent = project / _package(project) / "agent.py"
    text = agent.read_text()
    last_line = 'otherwise false}."\n)'
    assert last_line in text
    # One trailing space in the system prompt: the candidate's one-space prompt edit.
    agent.write_text(text.replace(last_line, 'otherwise false}. "\n)'))

    ledger = tmp_path / "misses.jsonl"
    result = run(["make", "test"], project, venv.env(CASSETTE_MISS_LOG=str(ledger)), offline=True)
    assert result.returncode != 0
    assert "nearest recorded: " in result.stdout
    assert "differs in messages[0].content: trailing space" in result.stdout
    misses = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert len(misses) == len(tapes)
    assert all(
        m["nearest"] in tapes and m["differs"] == ["messages[0].content: trailing space"] for m in misses
    )
    # Many misses, one closing line that names the cause, just above pytest's totals.
    lines = result.stdout.rstrip().splitlines()
    assert lines[-2] == (
        f"cassette: {len(misses)} miss(es); nearest tapes differ in: messages[0].content: trailing space "
        f"({len(misses)}x); every miss is in {ledger}; undo the change or run `make record`"
    )
    assert sum(1 for line in lines if line.startswith("cassette: ")) == 1


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_baked_metadata_matches_the_guide(tmp_path: Path, provider: str) -> None:
    project = bake(tmp_path, provider=provider)
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert meta["requires-python"] == ">=3.10"
    assert "\\u003e" not in (project / "pyproject.toml").read_text()
    assert "Python ≥ 3.10" in DOCS and '`requires-python = ">=3.10"`' in DOCS


@pytest.mark.index
@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_the_baked_readme_alone_says_where_the_standin_runs_and_how_to_record(
    tmp_path: Path, provider: str
) -> None:
    """Following only the baked README (issue #16): the stand-in is started from the kit, in the kit's venv
    (the baked project does not have the grader), and the line it gives records against it."""
    project = bake(tmp_path, provider=provider)
    readme = (project / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("```sh\ncd <kit>") :].split("```", 2)[1]
    setup, serve = [line.split("#")[0].strip() for line in block.splitlines()[1:3]]
    assert setup == "cd <kit> && python3 -m venv .venv && .venv/bin/pip install -q -e ."
    assert serve == ".venv/bin/python -m grader.standin --port 8765"
    # Every mention of the module is that kit-venv command: never a bare `python -m grader.standin`.
    assert readme.count("grader.standin") == 1
    record = next(line for line in readme.splitlines() if line.startswith("Then, back here: `"))
    record = record.split("`")[1]
    assert record.endswith(" make record")

    # Run the serve line as written, in the kit (its venv, when the kit has one here; else this interpreter).
    kit_python = ROOT / ".venv" / "bin" / "python"
    argv = serve.split()
    argv[0] = str(kit_python) if kit_python.exists() else sys.executable
    argv[-1] = "0"  # any free port, read back from its first line
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip().split(":")[2].split("/")[0]
        variables = _exports(record.replace("8765", port))
        recorded = run(["make", "record"], project, baked_venv().env(**variables))
    finally:
        proc.terminate()
        proc.wait(timeout=60)  # a generous deadline: a busy machine is slow, not wrong
    assert recorded.returncode == 0, recorded.stdout[-2000:] + recorded.stderr[-2000:]
    tapes = list((project / "cassettes").glob("*.json"))
    assert tapes and {json.loads(t.read_text())["meta"]["endpoint"] for t in tapes} == {"127.0.0.1"}


# Pairs of (sent, recorded) requests that reach every branch of the baked cassette layer's difference
# wording; each produces the differences a candidate reads in a miss.
_POST = {"method": "POST", "path": "/v1/chat/completions"}
_TEXTS = ["hi ", "hi   ", "hi\n", "hi\n\n", "hi \n", " hi", "   hi", "\nhi", "\n\nhi", " \nhi"]
_PAIRS = [
    *[({**_POST, "body": {"c": t}}, {**_POST, "body": {"c": "hi"}}) for t in _TEXTS],
    *[({**_POST, "body": {"c": "hi"}}, {**_POST, "body": {"c": t}}) for t in _TEXTS],
    ({**_POST, "body": {"c": "a  b"}}, {**_POST, "body": {"c": "a b"}}),
    ({**_POST, "body": {"c": "Hi"}}, {**_POST, "body": {"c": "hi"}}),
    ({**_POST, "body": {"c": "hello"}}, {**_POST, "body": {"c": "help!"}}),
    ({**_POST, "body": {"temperature": 0.0}}, {**_POST, "body": {"temperature": 0}}),
    ({**_POST, "body": {"x": 1}}, {**_POST, "body": {}}),
    ({**_POST, "body": {}}, {**_POST, "body": {"x": 1}}),
    ({**_POST, "body": {"m": [1, 2]}}, {**_POST, "body": {"m": [1]}}),
    ({**_POST, "body": {"m": [1]}}, {**_POST, "body": {"m": [1, 2]}}),
    ({**_POST, "body": "a"}, {**_POST, "body": 1}),
    ({"method": "GET", "path": "/v1/models", "body": {}}, {**_POST, "body": {}}),
]
_WORDINGS_BLOCK = DOCS.split("<!-- miss-wordings")[1].split("<!-- /miss-wordings -->")[0]


def _documented_wordings() -> list[str]:
    found = []
    for line in _WORDINGS_BLOCK.splitlines():
        if line.startswith("| `"):
            found += [w for w in re.findall(r"`([^`]+)`", line.split(" | ")[0]) if w != "missing"]
    return found


def _as_regex(wording: str) -> re.Pattern[str]:
    rx = re.escape(wording).replace("'…'", "'.*'")
    rx = re.sub(r"\bFIELD\b", r"[\\w.\\[\\]]+", rx)
    rx = re.sub(r"\bN\b", r"\\d+", rx)
    rx = re.sub(r"\b[XY]\b", ".+", rx)
    return re.compile(rx, re.DOTALL)


def _wording_literals(source: str, functions: set[str]) -> list[str]:
    """The string constants (f-strings' literal parts too) inside the named functions of a module."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name in functions:
            out += [
                c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
    return out


def test_every_miss_wording_the_baked_code_produces_is_documented_and_back(tmp_path: Path) -> None:
    project = bake(tmp_path)
    package = _package(project)
    code = (
        f"import json, sys\nfrom {package}.cassette import request_differences\n"
        "pairs = json.loads(sys.argv[1])\n"
        "print(json.dumps([d for sent, recorded in pairs for d in request_differences(sent, recorded)]))"
    )
    result = run(["python", "-c", code, json.dumps(_PAIRS)], project, baked_venv().env())
    assert result.returncode == 0, result.stderr
    produced = json.loads(result.stdout)
    documented = {w: _as_regex(w) for w in _documented_wordings()}

    def documented_as(text: str) -> list[str]:
        return [w for w, rx in documented.items() if rx.fullmatch(text)]

    # Each wording the code gave is in the table; "... missing" is any trailing/leading form, then "missing".
    unlisted = [d for d in produced if not documented_as(d) and not documented_as(d.removesuffix(" missing"))]
    assert not unlisted, f"not in docs/candidate.md's table: {unlisted}"
    # Each wording in the table is one the code gives.
    never = [w for w, rx in documented.items() if not any(rx.fullmatch(d) for d in produced)]
    assert not never, f"docs/candidate.md documents wordings the code never produces: {never}"

    # And statically: every word the wording code (and `make serve`'s 422 message) is made of is in the docs,
    # so a new wording that no pair above reaches still fails here.
    cassette = (project / package / "cassette.py").read_text(encoding="utf-8")
    serve = (project / package / "serve.py").read_text(encoding="utf-8")
    literals = _wording_literals(cassette, {"_differences", "_diff", "_text_difference", "_spaces"})
    literals += [s for s in _wording_literals(serve, {"miss"}) if "miss" in s or "recorded" in s]
    assert literals
    words = {w for s in literals for w in re.findall(r"[a-z]{3,}", s)}
    prose = DOCS[DOCS.index("`make serve` answers the same miss") :]
    assert sorted(w for w in words if w not in prose) == []
