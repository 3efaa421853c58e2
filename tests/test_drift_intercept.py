"""The drift probe reaches an agent whatever endpoint it hard-codes (grader/intercept.py).

Real parts throughout: small agent repositories graded by the real grader, in the real sandbox (its own
network namespace, bwrap), against the real stand-in, over real TLS with the CA made for that run. Each agent
ignores the base-URL variables the probe sets: it names its provider's real host (httpx, urllib, the
openai and anthropic SDKs with no base URL), so the only way its request can reach the stand-in is the
interception. What is asserted is what a reviewer reads: the row's score and facts, the per-ticket lines.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grader.grading import grade
from grader.intercept import InterceptRulesError, load_hosts, prepare
from grader.rubric import load_rubric
from grader.sandbox import can_intercept
from tests.drift_agents import choose_tickets, make_agent
from tests.helpers.git import GIT_ENV

pytestmark = pytest.mark.skipif(not can_intercept(), reason="needs a network namespace and bwrap")

_GIT = {**GIT_ENV, "PATH": "/usr/bin:/bin"}
_KINDS = ("code_fence", "refusal", "http_429", "prose_before")

# `post(b)` of tests/drift_agents.py's agent, replaced: each returns the raw answer body (JSON, or SSE text
# for a streamed ticket) and raises on an HTTP error the agent does not retry.
_POSTS = {
    "httpx": """
def post(b):
    import httpx
    for attempt in range(6):
        r = httpx.post("https://api.openai.com/v1/chat/completions", json=b, timeout=30,
                       headers={"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
        if r.status_code in (429, 500) and attempt < 5:
            time.sleep(float(r.headers.get("retry-after") or 0.2))
            continue
        r.raise_for_status()
        return r.text
""",
    # trust_env=False: httpx then ignores SSL_CERT_FILE and trusts certifi's bundle only.
    "httpx-certifi": """
def post(b):
    import httpx
    with httpx.Client(trust_env=False, timeout=30) as client:
        for attempt in range(6):
            r = client.post("https://api.openai.com/v1/chat/completions", json=b,
                            headers={"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
            if r.status_code in (429, 500) and attempt < 5:
                time.sleep(float(r.headers.get("retry-after") or 0.2))
                continue
            r.raise_for_status()
            return r.text
""",
    "urllib-openrouter": """
def post(b):
    url = "https://openrouter.ai/api/v1/chat/completions"
    headers = {"authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "content-type": "application/json"}
    for attempt in range(6):
        request = urllib.request.Request(url, data=json.dumps(b).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            if exc.code in (429, 500) and attempt < 5:
                time.sleep(float(exc.headers.get("retry-after") or 0.2))
                continue
            raise
""",
    # The SDKs with no base URL: the variable the probe sets is removed first, so the SDK's default host
    # (the real provider's) is what it connects to.
    "openai-sdk": """
def post(b):
    os.environ.pop("OPENAI_BASE_URL", None)
    from openai import OpenAI
    client = OpenAI(max_retries=5)
    return client.chat.completions.with_raw_response.create(**b).text
""",
    "anthropic-sdk": """
def post(b):
    os.environ.pop("ANTHROPIC_BASE_URL", None)
    from anthropic import Anthropic
    client = Anthropic(max_retries=5)
    fields = {k: v for k, v in b.items() if k != "temperature"}
    return client.messages.with_raw_response.create(**fields, extra_body={"temperature": 0}).text
""",
}
_AGENTS = {  # name -> (wire format, dependencies)
    "httpx": ("openai", ["httpx"]),
    "httpx-certifi": ("openai", ["httpx", "certifi"]),
    "urllib-openrouter": ("openai", []),
    "openai-sdk": ("openai", ["openai"]),
    "anthropic-sdk": ("anthropic", ["anthropic"]),
}


def _drift_rubric(tickets: int) -> Any:
    rubric = load_rubric()
    row = next(r for r in rubric.rows if r.id == "model-drift")
    return replace(rubric, rows=(row,), thresholds={**rubric.thresholds, "drift_tickets": tickets})


def _row(report: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in report["rows"] if r["id"] == "model-drift")


def _agent(tmp_path: Path, name: str, post: str, messages: list[str], deps: list[str], provider: str) -> Path:
    repo = make_agent(tmp_path, provider, "correct", messages)
    main = repo / "agent" / "__main__.py"
    source = main.read_text(encoding="utf-8")
    start, end = source.index("def post(b):"), source.index("def events(raw):")
    main.write_text(source[:start] + post.strip() + "\n\n\n" + source[end:], encoding="utf-8")
    pyproject = repo / "pyproject.toml"
    listed = ", ".join(f"'{d}'" for d in deps)
    pyproject.write_text(
        pyproject.read_text(encoding="utf-8").replace("dependencies = []", f"dependencies = [{listed}]"),
        encoding="utf-8",
    )
    subprocess.run(["git", "commit", "-qam", name], cwd=repo, check=True, env=_GIT)
    return repo


@pytest.fixture(scope="module")
def tickets() -> dict[str, list[str]]:
    """Plain (not streamed) tickets of a few drift kinds, per wire format: the SDK agents ask unstreamed."""
    out: dict[str, list[str]] = {}
    for provider in ("openai", "anthropic"):
        chosen = choose_tickets(provider, _KINDS)
        out[provider] = [m for kind in _KINDS for m in chosen[kind] if "(live)" not in m]
    return out


@pytest.mark.index
@pytest.mark.parametrize("name", sorted(_AGENTS))
def test_an_agent_that_hard_codes_its_provider_meets_the_drifted_stand_in(
    tmp_path: Path, grade_cache: Path, tickets: dict[str, list[str]], name: str
) -> None:
    provider, deps = _AGENTS[name]
    messages = tickets[provider]
    repo = _agent(tmp_path, name, _POSTS[name], messages, deps, provider)
    report = grade(
        str(repo), rubric=_drift_rubric(len(messages)), timeout=120, cache_root=grade_cache, jobs=2
    )
    facts, row = report["facts"]["drift"], _row(report)

    assert facts["probe"] == "ran", facts
    assert facts["unreached"] == 0, row["details"]  # every ticket reached the stand-in, through 443
    # The messages' own draws, then one run per kind they did not reach (the probe's cover run).
    assert facts["tickets"] > len(messages)
    assert facts["drifted"] > 0 and facts["violations"] == 0, row["details"]
    assert set(_KINDS) < set(facts["kinds"]), facts["kinds"]
    assert row["score"] == row["max"], row
    assert "api.openai.com" in row["details"][0], row["details"][
        0
    ]  # the reviewer is told of the interception


_REACH = r"""
def post(b):
    import socket
    results = []
    # 1. An intercepted host: reaches the stand-in (the ticket then counts as reached).
    url = "https://api.openai.com/v1/chat/completions"
    headers = {"authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "content-type": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(b).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        results.append("openai=ok")
    except Exception as exc:
        results.append("openai=fail")
    # 2. Anything else: a name not intercepted, an address off the machine, the host's own loopback listener.
    for label, host, port in (("name", "example.org", 443), ("address", "1.1.1.1", 443),
                              ("host-loopback", "127.0.0.1", @@PORT@@)):
        try:
            socket.create_connection((host, port), timeout=3).close()
            results.append(label + "=connected")
        except OSError:
            results.append(label + "=fail")
    # 3. No private key in what the run was shown for the interception: the CA file's folder and the one
    # above it (the probe's staged tools), its home, /etc.
    seen = 0
    ca = os.path.dirname(os.environ["SSL_CERT_FILE"])
    for top in (ca, os.path.dirname(ca), os.environ["HOME"], "/etc"):
        for folder, _dirs, files in os.walk(top):
            for f in files:
                try:
                    with open(os.path.join(folder, f), "rb") as handle:
                        seen += b"PRIVATE KEY" in handle.read(1_000_000)
                except OSError:
                    pass
    results.append("keys=%d" % seen)
    sys.stderr.write("reach: " + " ".join(results) + "\n")
    sys.exit(3)
"""


@pytest.fixture
def host_listener() -> Iterator[tuple[int, list[object]]]:
    """A listener on the host's own loopback (outside any namespace): it records every connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted: list[object] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            accepted.append(peer)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        done.set()
        thread.join()
        server.close()


def test_the_probe_reaches_only_the_stand_in_and_its_run_sees_no_key(
    tmp_path: Path, grade_cache: Path, tickets: dict[str, list[str]], host_listener: tuple[int, list[object]]
) -> None:
    port, accepted = host_listener
    post = _REACH.replace("@@PORT@@", str(port))
    repo = _agent(tmp_path, "reach", post, tickets["openai"][:1], [], "openai")
    report = grade(str(repo), rubric=_drift_rubric(1), timeout=120, cache_root=grade_cache, jobs=1)
    lines = [line for line in _row(report)["details"] if "ticket T01 (" in line]

    assert len(lines) == 1, _row(report)["details"]
    assert "reach: openai=ok name=fail address=fail host-loopback=fail keys=0" in lines[0], lines[0]
    assert accepted == []


def test_the_rule_file_is_data_and_a_bad_entry_is_one_line(tmp_path: Path) -> None:
    hosts = load_hosts()
    assert {"api.openai.com", "api.anthropic.com", "openrouter.ai"} <= {h.name for h in hosts}
    bad = tmp_path / "intercept.toml"
    bad.write_text('version = 1\n[[hosts]]\nname = "*.openai.com"\n', encoding="utf-8")
    with pytest.raises(InterceptRulesError, match=r"intercept\.toml: \[\[hosts\]\] entry 1: 'name'"):
        load_hosts(bad)


def test_the_ca_key_is_never_written_and_the_leaf_key_only_where_the_run_cannot_look(tmp_path: Path) -> None:
    public, private = tmp_path / "public", tmp_path / "private"
    made = prepare(public, private, forward_port=8000, lifetime=5.0)
    written = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with_key = [p for p, data in written.items() if b"PRIVATE KEY" in data]
    assert with_key == [private / "chain.pem"]  # the leaf's, for the TLS end; the CA's is nowhere
    assert private.stat().st_mode & 0o077 == 0 and (private / "chain.pem").stat().st_mode & 0o077 == 0
    assert b"PRIVATE KEY" not in made.ca_file.read_bytes()
    assert made.overlays["/etc/hosts"].read_text(encoding="utf-8").count("127.0.0.1\tapi.openai.com") == 1
    assert set(made.env) >= {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"}
    assert all(Path(v) == made.ca_file for v in made.env.values())
