"""Small real triage agents for the drift probe's tests: git repositories a grader can grade.

Each agent is a package ``agent`` (standard library only) whose ``python -m agent MESSAGE`` asks the model
endpoint the grader gives it (``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``) and prints
``{"intent", "needs_human"}``. A message containing ``(live)`` is sent streamed. Three parsers:

- ``correct``: repairs what carries the answer (fences, prose, extra or renamed fields, label case and
  synonyms, tool calls, split streams), retries 429/500 after ``Retry-After``, raises on a refusal, an
  empty or a cut answer;
- ``default``: takes ``json.loads(text)["intent"]`` when it is a known label and falls back to
  ``{"intent": "other", "needs_human": false}`` on anything else, HTTP errors included;
- ``raising``: strict ``json.loads`` of the text, exactly the two keys, a known label; raises otherwise.

Tickets are chosen per drift kind with the real ``drifted`` profile's own decision (``Drifter.choose`` on
the digest the stand-in computes for this agent's request), so a grade meets every kind on purpose.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from grader.standin import classify, load_rules
from grader.standin_drift import Drifter
from grader.standin_profile import load_profile, resolve_profile
from tests.helpers.git import GIT_ENV

__all__ = ["BASE_TEXT", "KINDS", "PATHS", "choose_tickets", "make_agent", "request_body"]

SYSTEM = 'Classify the support ticket. Answer with JSON only: {"intent": ..., "needs_human": ...}.'
BASE_TEXT = "I returned the jacket two weeks ago and still have not received my refund"
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
# What a grader sees the agent send: the request body, built exactly as the agent's code builds it.
KINDS = tuple(d.kind for d in load_profile(resolve_profile("drifted")).drifts)


def request_body(provider: str, message: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "test-model", "max_tokens": 200, "temperature": 0}
    if provider == "anthropic":
        body["system"] = SYSTEM
        body["messages"] = [{"role": "user", "content": message}]
    else:
        body["messages"] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": message}]
    if "(live)" in message:
        body["stream"] = True
    return body


_AGENT = r'''
import json, os, sys, time, urllib.error, urllib.request

PROVIDER, PARSER = @@SETTINGS@@
SYSTEM = @@SYSTEM@@
INTENTS = ("refund", "billing", "shipping", "technical", "account", "other")
SYNONYMS = {"refunds": "refund", "payment": "billing", "delivery": "shipping", "tech_support": "technical",
            "login": "account", "general": "other"}
DEFAULT = {"intent": "other", "needs_human": False}


def body(message):
    b = {"model": "test-model", "max_tokens": 200, "temperature": 0}
    if PROVIDER == "anthropic":
        b["system"] = SYSTEM
        b["messages"] = [{"role": "user", "content": message}]
    else:
        b["messages"] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": message}]
    if "(live)" in message:
        b["stream"] = True
    return b


def post(b):
    if PROVIDER == "anthropic":
        url = os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages"
        headers = {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01"}
    else:
        url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
        headers = {"authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}
    headers["content-type"] = "application/json"
    for attempt in range(6):
        request = urllib.request.Request(url, data=json.dumps(b).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            if PARSER == "correct" and exc.code in (429, 500) and attempt < 5:
                time.sleep(float(exc.headers.get("retry-after") or 0.2))
                continue
            raise
    raise RuntimeError("unreachable")


def events(raw):
    for block in raw.replace("\r\n", "\n").split("\n\n"):
        data = "".join(line[5:].strip() for line in block.split("\n") if line.startswith("data:"))
        if data and data != "[DONE]":
            yield json.loads(data)


def reply(raw, stream):
    """(text, refusal, tool arguments, stop reason) of a reply, streamed or not."""
    text, refusal, args, stop = None, None, None, None
    if PROVIDER == "anthropic":
        if not stream:
            data = json.loads(raw)
            stop = data.get("stop_reason")
            texts = [b.get("text", "") for b in data["content"] if b.get("type") == "text"]
            text = "".join(texts) if texts else None
            for b in data["content"]:
                if b.get("type") == "tool_use":
                    args = json.dumps(b.get("input"))
        else:
            parts, tool = [], []
            for event in events(raw):
                kind = event.get("type")
                if kind == "content_block_start" and event["content_block"].get("type") == "tool_use":
                    tool.append("")
                elif kind == "content_block_delta":
                    delta = event["delta"]
                    if delta.get("type") == "text_delta":
                        parts.append(delta["text"])
                    elif delta.get("type") == "input_json_delta":
                        tool.append(delta["partial_json"])
                elif kind == "message_delta":
                    stop = event["delta"].get("stop_reason")
            text = "".join(parts) if parts else None
            args = "".join(tool) if tool else None
        if stop == "refusal":
            refusal, text = text, None
        return text, refusal, args, stop
    if not stream:
        choice = json.loads(raw)["choices"][0]
        message = choice["message"]
        calls = message.get("tool_calls") or []
        args = calls[0]["function"]["arguments"] if calls else None
        return message.get("content"), message.get("refusal"), args, choice.get("finish_reason")
    parts, refusals, tool = [], [], []
    for event in events(raw):
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                parts.append(delta["content"])
            if delta.get("refusal"):
                refusals.append(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                tool.append((call.get("function") or {}).get("arguments") or "")
            stop = choice.get("finish_reason") or stop
    text = "".join(parts) if parts else None
    return text, "".join(refusals) or None, "".join(tool) if tool else None, stop


def correct(text, refusal, args, stop):
    if refusal:
        raise RuntimeError("the model refused: " + refusal)
    if stop in ("length", "max_tokens"):
        raise RuntimeError("the answer was cut at the token limit")
    source = args if args is not None else text
    if not source or not source.strip():
        raise RuntimeError("the model sent no answer")
    start, end = source.find("{"), source.rfind("}")
    if start < 0 or end < start:
        raise RuntimeError("no JSON object in the answer: " + source[:80])
    data = json.loads(source[start : end + 1])
    intent = str(data.get("intent", data.get("category", ""))).strip().lower()
    intent = SYNONYMS.get(intent, intent)
    if intent not in INTENTS or not isinstance(data.get("needs_human"), bool):
        raise RuntimeError("not a classification: " + source[:80])
    return {"intent": intent, "needs_human": data["needs_human"]}


def default(text, refusal, args, stop):
    try:
        data = json.loads(text)
        if data["intent"] in INTENTS:
            return {"intent": data["intent"], "needs_human": bool(data.get("needs_human"))}
    except Exception:
        pass
    return DEFAULT


def raising(text, refusal, args, stop):
    data = json.loads(text)
    if set(data) != {"intent", "needs_human"} or data["intent"] not in INTENTS:
        raise ValueError("model answer is not {intent, needs_human} with a known intent: " + text[:80])
    return data


def main():
    message = sys.argv[-1]
    b = body(message)
    try:
        raw = post(b)
    except Exception:
        if PARSER.startswith("default"):
            answer = DEFAULT
        else:
            raise
    else:
        parse = {"correct": correct, "default": default, "default-loud": default, "raising": raising}[PARSER]
        answer = parse(*reply(raw, "stream" in b))
    print(json.dumps(answer))
    if PARSER == "default-loud" and answer == DEFAULT:
        # A guess printed for whatever reads stdout, then an exit that looks like a loud failure.
        print("triage: warning: best-effort answer", file=sys.stderr)
        return 1
    return 0


sys.exit(main())
'''


def _tape(provider: str, message: str) -> dict[str, Any]:
    body = request_body(provider, message)
    key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "version": 1,
        "key": key,
        "request": {"method": "POST", "path": PATHS[provider], "body": body},
        "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": {}},
        "meta": {"model": "test-model", "provider": provider, "recorded_at": "2026-11-29T10:04:11Z"},
    }


def choose_tickets(provider: str, kinds: tuple[str, ...] = KINDS) -> dict[str, list[str]]:
    """kind -> messages whose first answer from a fresh ``drifted`` stand-in carries that kind: one sent
    plain and one streamed (``split_stream``: streamed only). An error drift's ticket also gets no drift
    on its retry, so a retrying agent then sees a clean answer."""
    profile = load_profile(resolve_profile("drifted"))
    rules = load_rules()
    assert classify(BASE_TEXT, rules) == {"intent": "refund", "needs_human": False}
    chosen: dict[str, list[str]] = {}
    for kind in kinds:
        for stream in (False, True):
            if kind == "split_stream" and not stream:
                continue
            for n in range(1, 5000):
                message = f"{BASE_TEXT} (order {kind} {n}){' (live)' if stream else ''}"
                canonical = json.dumps(request_body(provider, message), sort_keys=True, separators=(",", ":"))
                digest = hashlib.sha256(f"{PATHS[provider]}\n{canonical}".encode()).digest()
                drifter = Drifter(profile)

                def applies(d: Any, stream: bool = stream) -> bool:
                    return d.kind != "split_stream" or stream

                first = drifter.choose(digest, applies)
                if first is None or first.kind != kind:
                    continue
                if kind.startswith("http_") and drifter.choose(digest, applies) is not None:
                    continue
                chosen.setdefault(kind, []).append(message)
                break
            else:
                raise AssertionError(f"no ticket found for {kind} (stream={stream})")
    return chosen


def make_agent(root: Path, provider: str, parser: str, messages: list[str]) -> Path:
    """A committed git repository: the agent, a manifest naming its triage command, a tape per message."""
    repo = root / f"agent-{provider}-{parser}"
    (repo / "agent").mkdir(parents=True)
    (repo / "cassettes").mkdir()
    key_env = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    (repo / "pyproject.toml").write_text(
        "[project]\nname = 'drift-agent'\nversion = '0.1.0'\ndependencies = []\n\n"
        "[tool.takehome]\ncassette_dir = 'cassettes'\ntriage_command = ['python', '-m', 'agent']\n"
        f"api_key_env = '{key_env}'\n",
        encoding="utf-8",
    )
    (repo / "agent" / "__init__.py").write_text("", encoding="utf-8")
    source = _AGENT.replace("@@SETTINGS@@", f"{provider!r}, {parser!r}").replace("@@SYSTEM@@", repr(SYSTEM))
    (repo / "agent" / "__main__.py").write_text(source.lstrip(), encoding="utf-8")
    for number, message in enumerate(messages, 1):
        tape = _tape(provider, message)
        path = repo / "cassettes" / f"{number:03d}-{tape['key']}.json"
        path.write_text(json.dumps(tape, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "agent"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"})
    return repo
