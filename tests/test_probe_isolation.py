"""Grader-side helpers run beside the candidate's run, never where its code can read them (red-team R9, R13).

Each test grades a copy of the sample solution with a few lines added, with the real grader, in the real
sandbox: an agent that looks for the drift probe's truth log wherever its run can read (its HOME, the
temporary folders, the staged tools, every process's command line) and prints the label the model meant;
a `make serve` that looks for the serve probe's requests the same way and answers 422 only to a request
found there, a made-up 200 to any other; a `make serve` that dies on a request no tape holds. Each is
graded against what an honest submission with the same flaw scores (its control), with the default
rubric's own rows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grader import sandbox
from grader.grading import grade
from grader.rubric import load_rubric
from grader.sandbox import isolation

SAMPLE = Path(__file__).resolve().parent.parent / "sample_solution"
PACKAGE = "support_triage_agent"

needs_netns = pytest.mark.skipif(
    isolation().network != "namespace+pytest-socket", reason="needs a network namespace"
)

# Where a run could find a grader's file, by name or by a process's command line: the places the red team
# looked (its HOME two levels down) and every other place a sandboxed run can list.
_LOOK_FOR = """

def _grader_files(name):
    import glob
    import os

    roots = [os.path.expanduser("~"), os.environ.get("TMPDIR", ""), "/tmp", os.path.dirname(os.getcwd())]
    for value in os.environ.values():
        for part in value.split(os.pathsep):
            if part.startswith("/") and part.count("/") > 1 and not part.startswith(("/usr", "/proc")):
                roots += [part, os.path.dirname(part)]
    found, seen = [], 0
    for root in dict.fromkeys(r for r in roots if r and os.path.isdir(r)):
        for folder, _dirs, files in os.walk(root):
            seen += len(files)
            found += [os.path.join(folder, f) for f in files if f == name]
            if seen > 50000:
                break
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            words = open(cmdline, "rb").read().decode("utf-8", "replace").split("\\0")
        except OSError:
            continue
        found += [w for w in words if w.endswith(name)]
        found += [os.path.join(w, name) for w in words if w.startswith("/") and os.path.isdir(w)]
    return [f for f in dict.fromkeys(found) if os.path.isfile(f)]
"""

_SECOND_OPINION = '''

def _second_opinion():
    """The label the grader's stand-in meant, read from its truth log if this run can read one."""
    for path in _grader_files("truth.jsonl"):
        try:
            last = json.loads(open(path, encoding="utf-8").read().splitlines()[-1])
            return {"intent": last["intent"], "needs_human": last["needs_human"]}
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return None
'''

_EXPECTED_MISS = '''

    def _expected_miss(self, body):
        """Keep the strict 422 for a request found in a file of the grader's; make an answer up otherwise."""
        try:
            content = json.loads(body)["messages"][-1]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return False
        for path in _grader_files("requests.json") + _grader_files("plan.json"):
            try:
                if content in open(path, encoding="utf-8").read():
                    return True
            except OSError:
                continue
        return False
'''

# A chat completion with a label nobody meant: what a server that makes answers up sends.
_MADE_UP = json.dumps(
    {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": json.dumps({"intent": "other", "needs_human": False}),
                },
            }
        ],
    }
)


def _copy(tmp_path: Path, name: str) -> Path:
    repo = tmp_path / name
    shutil.copytree(
        SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".ruff_cache")
    )
    return repo


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def _rows(*ids: str) -> Any:
    rubric = load_rubric()
    return replace(rubric, rows=tuple(r for r in rubric.rows if r.id in ids))


def _row(report: dict[str, Any], row_id: str) -> dict[str, Any]:
    return next(r for r in report["rows"] if r["id"] == row_id)


# --- R9: the drift probe's truth log --------------------------------------------------------------------


def _lenient(tmp_path: Path, name: str) -> Path:
    """The sample with a parser that guesses "other" when the model's answer does not parse (the control)."""
    repo = _copy(tmp_path, name)
    _edit(
        repo / PACKAGE / "agent.py",
        "    return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))",
        "    text = complete(SYSTEM_PROMPT, clean_message(message), client=client)\n"
        "    try:\n"
        "        return parse_answer(text)\n"
        "    except TriageError:\n"
        '        return {"intent": "other", "needs_human": False}',
    )
    return repo


@needs_netns
def test_an_agent_cannot_read_the_drift_probes_truth_log(tmp_path: Path, grade_cache: Path) -> None:
    control = _lenient(tmp_path, "lenient")
    attack = _lenient(tmp_path, "truth-reader")
    main = attack / PACKAGE / "__main__.py"
    _edit(
        main,
        "        print(json.dumps(triage(args.message), ensure_ascii=False))",
        "        result = triage(args.message)\n"
        "        print(json.dumps(_second_opinion() or result, ensure_ascii=False))",
    )
    # Before the entry point's functions: the module ends by calling main().
    _edit(main, "def _run(", _LOOK_FOR.lstrip("\n") + _SECOND_OPINION + "\n\ndef _run(")

    rubric = _rows("model-drift")
    honest = grade(str(control), rubric=rubric, timeout=120, cache_root=grade_cache, jobs=2)
    forged = grade(str(attack), rubric=rubric, timeout=120, cache_root=grade_cache, jobs=2)

    want, got = honest["facts"]["drift"], forged["facts"]["drift"]
    assert want["probe"] == "ran" and want["violations"] > 0, want
    # Nothing to read: the attack guesses exactly as its control does, and is scored so.
    assert got["probe"] == "ran" and got["violations"] == want["violations"], (want, got)
    row = _row(forged, "model-drift")
    assert row["score"] == _row(honest, "model-drift")["score"] < row["max"], row
    assert "violation" in row["evidence"], row


# --- R13: the serve probe's requests --------------------------------------------------------------------


def _serve(repo: Path) -> Path:
    return repo / PACKAGE / "serve.py"


def _serving_only(serve: Path) -> None:
    """A flag set by ``make serve``'s entry point only, so the suite's own tests of the server still see the
    honest 422 (else the withheld-tape run, not the server, would decide the row)."""
    _edit(serve, "class Replayer:", "SERVING = False\n\n\nclass Replayer:")
    _edit(
        serve,
        "    args = parser.parse_args(argv)\n",
        "    args = parser.parse_args(argv)\n    global SERVING\n    SERVING = True\n",
    )


def _making_up(tmp_path: Path, name: str, *, unless_listed: bool) -> Path:
    """The sample whose server makes an answer up for any request no tape holds (the control), or, with
    ``unless_listed``, only for one it cannot find in a file of the grader's (the attack)."""
    repo = _copy(tmp_path, name)
    serve = _serve(repo)
    guard = " and not self._expected_miss(body)" if unless_listed else ""
    _serving_only(serve)
    _edit(
        serve,
        "        return self.miss(exchange.key, exchange.stored_request), exchange.key",
        f"        if SERVING{guard}:\n"
        f"            fake = {_MADE_UP!r}.encode()\n"
        '            return Reply(200, {"content-type": "application/json"}, content=fake), exchange.key\n'
        "        return self.miss(exchange.key, exchange.stored_request), exchange.key",
    )
    if unless_listed:
        _edit(
            serve,
            "    def miss(self, key: str",
            _EXPECTED_MISS.lstrip("\n") + "\n    def miss(self, key: str",
        )
        _edit(serve, "class Replayer:", _LOOK_FOR.lstrip("\n") + "\n\nclass Replayer:")
    return repo


@needs_netns
def test_a_server_cannot_find_the_serve_probes_requests(tmp_path: Path, grade_cache: Path) -> None:
    control = _making_up(tmp_path, "making-up", unless_listed=False)
    attack = _making_up(tmp_path, "requests-reader", unless_listed=True)

    rubric = _rows("loud-miss")
    honest = grade(str(control), rubric=rubric, timeout=120, cache_root=grade_cache, jobs=2)
    forged = grade(str(attack), rubric=rubric, timeout=120, cache_root=grade_cache, jobs=2)

    want, got = honest["facts"]["loud-miss"], forged["facts"]["loud-miss"]
    assert want["serve_probed"] and want["serve_unseen_status"] == 200, want
    # The probe's unseen request is in no file the server can read: it gets the made-up 200 like any other.
    assert got["serve_probed"] and got["serve_replayed"] and got["serve_unseen_status"] == 200, got
    row = _row(forged, "loud-miss")
    assert row["score"] == _row(honest, "loud-miss")["score"] < row["max"], row
    assert "answers an unseen request with HTTP 200" in row["evidence"], row


@needs_netns
def test_a_server_that_dies_on_an_unseen_request_is_not_loud(tmp_path: Path, grade_cache: Path) -> None:
    repo = _copy(tmp_path, "dies-on-miss")
    _serving_only(_serve(repo))
    _edit(
        _serve(repo),
        "        return self.miss(exchange.key, exchange.stored_request), exchange.key",
        "        if SERVING:\n"
        "            os._exit(1)  # no answer at all for a request no tape holds\n"
        "        return self.miss(exchange.key, exchange.stored_request), exchange.key",
    )
    _edit(
        _serve(repo),
        "from __future__ import annotations\n",
        "from __future__ import annotations\n\nimport os\n",
    )

    report = grade(str(repo), rubric=_rows("loud-miss"), timeout=120, cache_root=grade_cache, jobs=2)
    facts = report["facts"]["loud-miss"]
    assert facts["serve_probed"] and facts["serve_replayed"], facts
    assert facts["serve_unseen_status"] == -1 and facts["loud"] is False, facts
    row = _row(report, "loud-miss")
    assert row["score"] < row["max"], row
    assert "gave no HTTP answer" in row["evidence"], row
    assert any("another message: no HTTP answer" in d for d in row["details"]), row["details"]


# --- where the machine has no network namespace ----------------------------------------------------------


def test_without_a_network_namespace_the_helpers_run_on_the_host_and_end_with_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same sandbox with its network-namespace layer reported missing: the run has the host's network, so
    # the stand-in helper must listen on the host (a port free there) and be gone when the run ends.
    without = dataclasses.replace(sandbox._caps(), netns=False)
    monkeypatch.setattr(sandbox, "_caps", lambda: without)
    assert sandbox.helpers_share_host_network()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    private = Path(tempfile.mkdtemp(dir=tmp_path))
    private.chmod(0o700)
    truth = private / "truth.jsonl"
    standin = [sys.executable, "-I", str(Path(sandbox.__file__).parent / "_standin_helper.py")]
    standin += ["--profile", "baseline", "--port", str(port), "--truth-log", str(truth)]
    standin += ["--error-log", str(private / "err"), "--lifetime", "60"]
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "I want a refund for my order"}]}
    client = (
        "import json, sys, urllib.request\n"
        f"req = urllib.request.Request('http://127.0.0.1:{port}/v1/chat/completions', "
        f"data={json.dumps(json.dumps(body))}.encode(), "
        "headers={'content-type': 'application/json', 'authorization': 'Bearer x'})\n"
        "with urllib.request.urlopen(req) as resp:\n"
        "    print(resp.status, resp.headers.get('x-standin-truth'))\n"
    )
    result = sandbox.run(
        ["python3", "-I", "-c", client],  # the system interpreter: the sandbox shows /usr
        cwd=tmp_path / "work",
        home=tmp_path / "home",
        timeout=60,
        loopback=True,
        netns_helpers=[standin],
    )
    assert result.returncode == 0 and result.stdout.split() == ["200", "None"], result
    lines = [json.loads(line) for line in truth.read_text(encoding="utf-8").splitlines()]
    assert [(e["intent"], e["status"]) for e in lines] == [("refund", 200)] and "t" in lines[0], lines
    assert os.stat(truth).st_mode & 0o077 == 0
    left = subprocess.run(["pgrep", "-f", str(truth)], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "", "the helper outlived the run"


_TRICKLE_SERVER = """
import http.server, sys, time

class Trickle(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for _ in range(200):  # a space (leading JSON whitespace) every 0.2 s: never idle for long
            self.wfile.write(b"1\\r\\n \\r\\n")
            self.wfile.flush()
            time.sleep(0.2)
        body = b'{"intent": "other", "needs_human": false}'
        self.wfile.write(b"%x\\r\\n%s\\r\\n0\\r\\n\\r\\n" % (len(body), body))

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Trickle)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
_ASK = """
import json, sys
from grader import _serve_client as client
client._REQUEST_TIMEOUT = 2.0
client.whole_answers_in_time()
print(json.dumps(client._send(sys.argv[1], {"method": "POST", "path": "/v1/x", "body": {"m": 1}})))
"""


def test_the_serve_client_gives_each_answer_a_whole_deadline_not_a_per_read_one(tmp_path: Path) -> None:
    """Red team 5, G7: a server trickling one byte of whitespace at a time before a made-up answer kept the
    client reading until the run was killed, and the probe went unscored: the whole answer has a deadline."""
    server = subprocess.Popen(
        [sys.executable, "-c", _TRICKLE_SERVER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        asked = subprocess.run(
            [sys.executable, "-c", _ASK, f"http://127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=Path(__file__).resolve().parents[1],
            check=False,
        )
    finally:
        os.killpg(server.pid, 9)
        server.wait()
    answer = json.loads(asked.stdout)
    assert answer["status"] == -1 and "no whole HTTP answer within 2 s" in answer["body"], asked
