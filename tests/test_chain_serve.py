"""A baked repository's tape chain (`make verify`) and replay server (`make serve`), end to end.

Real parts: the template baked with cookiecutter, `make record` against the stand-in server, the baked
`make verify`, the grader's own chain reader (the `keys` check), and `make serve` in a fresh network namespace
with only loopback up, reached by the real openai and anthropic SDKs and by headless Chromium.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from grader.checks.keys import keys
from tests.helpers.bake import bake, baked_venv, run, standin, unshare_works
from tests.helpers.context import folder_context
from tests.helpers.git import GIT_ENV

pytestmark = [pytest.mark.slow, pytest.mark.index]

DUMMY_KEY = "sk-chain-serve-dummy-0123456789"
ENV_NAMES = {
    "openai-compatible": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}
UNSEEN = "Has anyone seen my grey cat? She left through the window."
_BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _record_env(provider: str, url: str) -> dict[str, str]:
    key_env, url_env = ENV_NAMES[provider]
    base = url.removesuffix("/v1") if provider == "anthropic" else url
    return baked_venv().env(**{key_env: DUMMY_KEY, url_env: base})


# Records one streamed request through the baked cassette transport (the agent itself never streams).
_RECORD_STREAM = """
import json, sys, httpx
from {pkg}.cassette import CassetteTransport
from {pkg}.client import endpoint, request_body
body = {{**request_body("Answer briefly.", "Where is my order #4411?"), "stream": True}}
target = endpoint()
with httpx.Client(transport=CassetteTransport("cassettes", mode="record")) as client:
    with client.stream("POST", target.url, json=body, headers=target.headers) as reply:
        reply.raise_for_status()
        reply.read()
"""


@pytest.fixture(scope="module", params=sorted(ENV_NAMES))
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    provider = request.param
    path = bake(tmp_path_factory.mktemp(provider), project_name="Chain Serve", provider=provider)
    with standin() as url:
        env = _record_env(provider, url)
        result = run(["make", "record"], path, env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        streamed = run(["python", "-c", _RECORD_STREAM.format(pkg="chain_serve")], path, env)
        assert streamed.returncode == 0, streamed.stderr[-3000:]
    return path


def _copy(project: Path, tmp_path: Path) -> Path:
    dest = tmp_path / project.name
    shutil.copytree(project, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return dest


def _chain(repo: Path) -> list[dict]:
    return [json.loads(line) for line in (repo / "cassettes/CHAIN.log").read_text().splitlines()]


def _tapes(repo: Path) -> list[Path]:
    return sorted((repo / "cassettes").glob("*.json"))


def _verify(repo: Path) -> subprocess.CompletedProcess[str]:
    return run(["make", "-s", "verify"], repo, baked_venv().env(), offline=True)


def _keys_check(repo: Path):
    return keys(folder_context(repo, cassette_dir=Path("cassettes"), key_function=None))


# ------------------------------------------------------------------------------------------------ chain


def test_the_chain_survives_record_prune_and_rerecord(project: Path, tmp_path: Path) -> None:
    repo = _copy(project, tmp_path)
    tickets = len((repo / "data/tickets.jsonl").read_text().splitlines())
    before = _chain(repo)
    assert [e["op"] for e in before] == ["record"] * (tickets + 1)  # the tickets, then the streamed tape
    streamed = before[-1]["tape"]
    ok = _verify(repo)
    assert ok.returncode == 0 and ok.stdout.startswith(f"ok ({tickets + 1} tapes, head "), (
        ok.stdout + ok.stderr
    )

    provider = json.loads((repo / ".cookiecutter.json").read_text())["provider"]
    with standin() as url:
        again = run(["make", "record"], repo, _record_env(provider, url))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    after = _chain(repo)
    assert after[: len(before)] == before, "re-recording rewrote the chain instead of appending to it"
    added = after[len(before) :]
    [pruned] = [e for e in added if e["op"] == "prune"]
    assert (pruned["tape"], pruned["reason"], pruned["removed"]) == (streamed, "unused", before[-1]["sha256"])
    assert all(e["op"] == "rerecord" and e["replaced"] for e in added if e is not pruned)
    ok = _verify(repo)
    assert ok.returncode == 0 and ok.stdout.startswith(f"ok ({tickets} tapes, head "), ok.stdout + ok.stderr
    assert _keys_check(repo).facts["chain_tampered"] == 0


def test_an_edited_answer_fails_verify_and_the_grader_names_it(project: Path, tmp_path: Path) -> None:
    repo = _copy(project, tmp_path)
    victim = _tapes(repo)[0]
    text = victim.read_text()
    edited = re.sub(r'(\\"needs_human\\": )(true|false)', lambda m: m.group(1) + "frue", text, count=1)
    assert len(edited) == len(text) and edited != text
    victim.write_text(edited)

    result = _verify(repo)
    assert result.returncode != 0
    assert f"cassettes/{victim.name}:1: tape {victim.stem} was edited after it was recorded" in result.stderr

    check = _keys_check(repo)
    assert check.facts["chain_tampered"] == 1
    [finding] = [f for f in check.findings if f.rule == "tape-chain"]
    assert (
        finding.location == f"cassettes/{victim.name}:1" and "edited after it was recorded" in finding.message
    )


def test_a_deleted_chain_line_fails_verify_and_the_grader_names_it(project: Path, tmp_path: Path) -> None:
    repo = _copy(project, tmp_path)
    chain = repo / "cassettes/CHAIN.log"
    lines = chain.read_text().splitlines(keepends=True)
    removed = json.loads(lines.pop(2))["tape"]
    follower = json.loads(lines[2])["tape"]
    chain.write_text("".join(lines))

    result = _verify(repo)
    assert result.returncode != 0
    assert "cassettes/CHAIN.log:3: does not follow the line before it" in result.stderr
    assert f"tape {follower}" in result.stderr
    assert f"cassettes/{removed}.json:1: tape {removed} is not in the chain" in result.stderr

    check = _keys_check(repo)
    assert check.facts["chain_tampered"] == 1 and check.facts["chain_unlisted"] == 1
    where = {f.location: f.message for f in check.findings if f.rule == "tape-chain"}
    assert "chain broken" in where["cassettes/CHAIN.log:3"]
    assert "not in cassettes/CHAIN.log" in where[f"cassettes/{removed}.json:1"]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout


def _rechain(chain: Path, tape: str, digest: str) -> int:
    """Rewrite the chain as if ``tape`` had always held ``digest``, every later link recomputed; the line."""
    lines, prev, changed = chain.read_text().splitlines(), "0" * 64, 0
    for number, line in enumerate(lines, 1):
        entry = {**json.loads(line), "prev": prev}
        if entry["tape"] == tape and entry["op"] != "prune":
            entry["sha256"], changed = digest, number
        lines[number - 1] = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        prev = hashlib.sha256(lines[number - 1].encode()).hexdigest()
    chain.write_text("".join(line + "\n" for line in lines))
    return changed


def test_a_rechained_edit_passes_verify_but_shows_as_a_rewritten_chain(project: Path, tmp_path: Path) -> None:
    repo = _copy(project, tmp_path)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "recorded")
    victim = _tapes(repo)[0]
    tape = json.loads(victim.read_text())
    tape["meta"]["model"] += "-x"  # any edit; re-chained on purpose below
    victim.write_text(json.dumps(tape, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    digest = hashlib.sha256(
        json.dumps(tape, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    line = _rechain(repo / "cassettes/CHAIN.log", victim.stem, digest)
    assert _verify(repo).returncode == 0  # a chain only catches an edit nobody re-chained
    _git(repo, "commit", "-q", "-am", "improve the demo")
    sha = _git(repo, "rev-parse", "--short=7", "HEAD").strip()

    check = _keys_check(repo)
    assert check.facts["chain_tampered"] == 0 and check.facts["chain_rewrites"] == 1
    [finding] = [f for f in check.findings if f.rule == "tape-chain"]
    assert finding.location == f"{sha}:cassettes/CHAIN.log:{line}" and "rewritten" in finding.message


# ------------------------------------------------------------------------------------------------ serve

# Starts `make serve` on a free port, waits for the URL it prints, runs "$@" with that URL appended, then
# stops it. Run under `unshare -n`: `lo` is brought up first and is the only interface there is.
_WITH_SERVER = """
ip link set lo up || exit 90
setsid make -s serve SERVE_PORT=0 >"$SERVE_OUT" 2>"$SERVE_ERR" </dev/null &
server=$!
i=0
while ! grep -q "^http://" "$SERVE_OUT" && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
url=$(grep -m1 "^http://" "$SERVE_OUT") || { cat "$SERVE_ERR" >&2; exit 91; }
"$@" "$url"
status=$?
kill -- -"$server" 2>/dev/null
exit "$status"
"""

_SDK_CLIENT = """
import json, sys
provider, tapes, unseen, url = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
if provider == "anthropic":
    import anthropic
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    def ask(body, stream):
        # This SDK names no sampling parameter: temperature rides in extra_body, into the same JSON body.
        known = {k: v for k, v in body.items() if k in ("model", "max_tokens", "system", "messages")}
        extra = {k: v for k, v in body.items() if k not in known}
        if stream:
            events = client.messages.create(**known, extra_body=extra, stream=True)
            return "".join(
                e.delta.text for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            )
        reply = client.messages.create(**known, extra_body=extra)
        return "".join(b.text for b in reply.content if b.type == "text")
else:
    import openai
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    def ask(body, stream):
        if stream:
            chunks = client.chat.completions.create(**body, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return client.chat.completions.create(**body).choices[0].message.content
out = {"url": url, "answers": []}
for tape in tapes:
    body = dict(tape["request"]["body"])
    stream = body.pop("stream", False)
    out["answers"].append({"key": tape["key"], "text": ask(body, stream)})
body = dict(tapes[0]["request"]["body"])
body.pop("stream", None)
body["messages"] = [*body["messages"][:-1], {"role": "user", "content": unseen}]
try:
    ask(body, False)
    out["unseen"] = {"status": 200}
except Exception as exc:
    out["unseen"] = {"status": getattr(exc, "status_code", None), "error": str(exc)}
print(json.dumps(out))
"""


def _serve(repo: Path, tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    if not unshare_works():
        pytest.skip("unshare -n is refused here: the no-outbound-connection claim cannot be shown")
    env = baked_venv().env(SERVE_OUT=str(tmp_path / "serve.out"), SERVE_ERR=str(tmp_path / "serve.err"))
    argv = ["unshare", "-n", "/bin/sh", "-c", _WITH_SERVER, "sh", *command]
    return subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def _answer_text(tape: dict) -> str:
    """The text of a tape's recorded answer, from its JSON body or its SSE events."""
    response = tape["response"]
    if "body" in response:
        body = response["body"]
        if "choices" in body:
            return body["choices"][0]["message"]["content"]
        return "".join(block["text"] for block in body["content"] if block.get("type") == "text")
    text = ""
    for line in response["text"].splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        event = json.loads(line[5:])
        if event.get("choices"):
            text += event["choices"][0].get("delta", {}).get("content") or ""
        elif event.get("type") == "content_block_delta":
            text += event["delta"].get("text", "")
    return text


def _unseen_key(repo: Path, message: str) -> str:
    code = (
        "import sys\nfrom chain_serve.agent import SYSTEM_PROMPT\nfrom chain_serve.cassette import key_for\n"
        "from chain_serve.client import request_body\n"
        "print(key_for(request_body(SYSTEM_PROMPT, sys.argv[1])))"
    )
    result = run(["python", "-c", code, message], repo, baked_venv().env())
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_make_serve_answers_the_real_sdk_offline_and_422s_the_unseen(project: Path, tmp_path: Path) -> None:
    provider = json.loads((project / ".cookiecutter.json").read_text())["provider"]
    tapes = [json.loads(p.read_text()) for p in _tapes(project)]
    streamed = [t for t in tapes if t["request"]["body"].get("stream")]
    plain = [t for t in tapes if not t["request"]["body"].get("stream")][:2]
    assert len(streamed) == 1
    chosen = plain + streamed
    result = _serve(
        project,
        tmp_path,
        sys.executable,
        "-c",
        _SDK_CLIENT,
        provider,
        json.dumps(chosen),
        UNSEEN,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["url"].startswith("http://127.0.0.1:")
    assert out["url"].endswith("/v1") == (provider != "anthropic")
    assert [a["text"] for a in out["answers"]] == [_answer_text(t) for t in chosen]
    assert all(a["text"] for a in out["answers"])

    # The agent's own request for an unseen message: 422, and the error names its key.
    key = _unseen_key(project, UNSEEN)
    assert out["unseen"]["status"] == 422, out["unseen"]
    assert f"no tape {key}" in out["unseen"]["error"] and "nearest recorded request" in out["unseen"]["error"]
    assert not (project / "cassettes" / f"{key}.json").exists()


def _browser() -> str:
    for name in _BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed; .ci/run installs Debian's chromium for this test")
    pytest.skip("chromium is not installed (apt-get install -y chromium); CI installs it and runs this test")


def test_the_page_in_chromium_shows_a_recorded_answer_and_the_422(project: Path, tmp_path: Path) -> None:
    browser = _browser()
    ticket = json.loads((project / "data/tickets.jsonl").read_text().splitlines()[0])
    profile = tmp_path / "profile"
    # One shell run: both pages are dumped by Chromium inside the namespace, separated by a marker line.
    script = (
        'root="${1%/v1}"; '
        f'for q in "{quote(ticket["message"])}" "{quote(UNSEEN)}"; do '
        f'HOME="{profile}" "{browser}" --headless --no-sandbox --disable-gpu --disable-background-networking '
        f'--disable-component-update --disable-sync --no-first-run --user-data-dir="{profile}" '
        '--dump-dom "$root/?message=$q" 2>/dev/null; echo "@@PAGE-END@@"; done'
    )
    result = _serve(project, tmp_path, "/bin/sh", "-c", script, "sh")
    assert result.returncode == 0, result.stderr[-3000:]
    recorded_page, unseen_page = result.stdout.split("@@PAGE-END@@")[:2]

    result_box = recorded_page.split('id="result"', 1)[1].split("</section>", 1)[0]
    assert 'data-status="200"' in result_box and "replayed" in result_box
    assert f'class="intent">{ticket["intent"]}<' in result_box
    assert f'class="needs-human">{json.dumps(ticket["needs_human"])}<' in result_box
    tickets = recorded_page.split('id="tickets"', 1)[1]
    assert tickets.count("<tr>") == len((project / "data/tickets.jsonl").read_text().splitlines()) + 1

    key = _unseen_key(project, UNSEEN)
    result_box = unseen_page.split('id="result"', 1)[1].split("</section>", 1)[0]
    assert 'data-status="422"' in result_box
    assert f'HTTP 422, cassette miss: key <code class="key">{key}</code>' in result_box
    assert "<script" not in recorded_page + unseen_page


# ----------------------------------------------------------------------------------------------- grader

SAMPLE = Path(__file__).resolve().parent.parent / "sample_solution"
_NEVER_MISS = """
    def miss(self, key: str, request: dict[str, Any]) -> Reply:  # a server that makes an answer up
        return self.cassette.replay(self.cassette.exchange("POST", "/v1/chat/completions", HOST, FIRST, {}))
"""


def _grade(target: Path, tmp_path: Path, grade_cache: Path) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "grader", str(target), "--format", "json", "--output", str(out)],
        cwd=tmp_path,
        env={**baked_venv().env(), "XDG_CACHE_HOME": str(grade_cache)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_server_that_answers_an_unseen_request_is_a_silent_fallback(
    tmp_path: Path, grade_cache: Path
) -> None:
    repo = tmp_path / "fallback"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    serve = repo / "support_triage_agent/serve.py"
    first = json.loads(_tapes(repo)[0].read_text())["request"]["body"]
    source = serve.read_text().replace(
        "    def miss(self, key: str, request: dict[str, Any]) -> Reply:",
        "    def _real_miss(self, key: str, request: dict[str, Any]) -> Reply:",
    )
    source = source.replace(
        "class Replayer:", f"FIRST = {json.dumps(json.dumps(first))}.encode()\n\n\nclass Replayer:"
    )
    source = source.replace(
        "    def triage(self, message: str)",
        _NEVER_MISS.lstrip("\n") + "\n    def triage(self, message: str)",
    )
    serve.write_text(source)

    report = _grade(repo, tmp_path, grade_cache)
    facts = report["facts"]["loud-miss"]
    assert facts["serve_probed"] and facts["serve_replayed"] and facts["serve_unseen_status"] == 200
    assert not facts["serve_names_key"] and facts["silent_fallbacks"] == 1
    row = next(r for r in report["rows"] if r["id"] == "loud-miss")
    assert row["score"] < 3 and "answers an unseen request with HTTP 200" in row["evidence"]
    serve_line = next(
        n for n, s in enumerate((repo / "Makefile").read_text().splitlines(), 1) if s.startswith("serve:")
    )
    assert (
        f"Makefile:{serve_line}: `make serve` answered a request no tape holds with HTTP 200 instead of 422"
        in row["details"]
    )


_FLOOD_SERVER = """
import socket
import threading


def handle(conn):
    try:
        conn.settimeout(30)
        data = b""
        while b"\\r\\n\\r\\n" not in data:
            part = conn.recv(65536)
            if not part:
                break
            data += part
        conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n")
        conn.sendall(b"Content-Length: 40000000000\\r\\n\\r\\n")
        for _ in range(3 * 1024):
            conn.sendall(b"\\0" * (1 << 20))
    except OSError:
        pass
    finally:
        conn.close()


server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(16)
print(f"http://127.0.0.1:{server.getsockname()[1]}/v1", flush=True)
while True:
    threading.Thread(target=handle, args=(server.accept()[0],), daemon=True).start()
"""


def test_a_server_that_floods_the_probe_fails_it_instead_of_leaving_it_out(
    tmp_path: Path, grade_cache: Path
) -> None:
    # Red team 19, F1: a 40 GB-declared answer killed the probe's client; the probe was then "not available"
    # and a server that makes answers up for its real clients kept loud-miss 3.
    repo = tmp_path / "flood"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    (repo / "support_triage_agent/serve_flood.py").write_text(_FLOOD_SERVER.lstrip(), encoding="utf-8")
    makefile = repo / "Makefile"
    text = makefile.read_text(encoding="utf-8")
    served = "-m $(PACKAGE).serve "
    assert served in text
    makefile.write_text(text.replace(served, "-m $(PACKAGE).serve_flood "), encoding="utf-8")

    report = _grade(repo, tmp_path, grade_cache)

    facts = report["facts"]["loud-miss"]
    row = next(r for r in report["rows"] if r["id"] == "loud-miss")
    assert facts["serve_probed"] and facts["serve_unseen_status"] != 422, facts
    assert not facts["loud"] and row["score"] < 3, row
    assert not [d for d in row["details"] if "serve probe not available" in d], row["details"]


def test_the_untouched_template_gains_nothing_from_chain_or_server(tmp_path: Path, grade_cache: Path) -> None:
    # The baseline is the same bake without the server and the template's chain and serve tests: those tests
    # pass before anything is recorded, and offline-replay counts passed against failed tests.
    fresh = bake(tmp_path / "bake", project_name="Fresh Triage")
    stripped = bake(tmp_path / "stripped", project_name="Fresh Triage")
    (stripped / "fresh_triage/serve.py").unlink()
    (stripped / "tests/test_serve.py").unlink()
    (stripped / "tests/test_chain.py").unlink()
    makefile = stripped / "Makefile"
    lines = makefile.read_text().splitlines(keepends=True)
    start = next(n for n, line in enumerate(lines) if line.startswith("serve:"))
    del lines[start : start + 3]  # the target, its recipe and the blank line after it
    makefile.write_text("".join(lines))

    report = _grade(fresh, tmp_path / "fresh-report", grade_cache)
    assert report["facts"]["keys"]["chain"] is False and report["facts"]["keys"]["chain_tampered"] == 0
    assert report["facts"]["loud-miss"]["serve_probed"] is False
    baseline = _grade(stripped, tmp_path / "stripped-report", grade_cache)
    scores = {row["id"]: row["score"] for row in report["rows"]}
    assert scores == {row["id"]: row["score"] for row in baseline["rows"]}
    assert report["total"]["points"] == baseline["total"]["points"]


def test_the_agent_pointed_at_make_serve_reports_a_miss_whole_and_exits_2(
    project: Path, tmp_path: Path
) -> None:
    """The newcomer walk: the `try:` command `make serve` prints, with a message nobody recorded, ended
    mid-sentence (`differs in messages[0].conte`) and exited 1. A replay server's 422 is a cassette miss:
    told whole, exit 2 as any miss."""
    script = tmp_path / "try.sh"
    script.write_text(
        'export CASSETTE_MODE=passthrough OPENAI_BASE_URL="$1" ANTHROPIC_BASE_URL="$1"\n'
        "export OPENAI_API_KEY=unused ANTHROPIC_API_KEY=unused\n"
        f'python -m chain_serve {shlex.quote(UNSEEN)}; echo "exit=$?"\n'
    )
    result = _serve(project, tmp_path, "/bin/sh", str(script))
    assert "exit=2" in result.stdout, result.stdout + result.stderr
    key = _unseen_key(project, UNSEEN)
    error = next(x for x in result.stderr.splitlines() if x.startswith("triage: error: "))
    assert f"no tape {key}" in error and "nearest recorded request" in error, error
    assert error.endswith("this server only replays recorded requests"), error
