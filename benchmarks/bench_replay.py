"""Replay: the template's ``CassetteTransport`` against ``httpx.MockTransport`` (the floor) and vcrpy.

    python -m benchmarks --only replay [--quick]

The template is baked with its defaults and its ``cassette.py`` imported from the baked project. For each N,
N distinct chat-completion POSTs (one system prompt, N different customer messages) are recorded twice from
the same requests: through the transport itself in ``record`` mode over an inner ``httpx.MockTransport``,
and by vcrpy over the same ``MockTransport``. Replay is then timed through an ``httpx.Client`` exactly as the
template's client calls it: ``client.post(url, json=payload)``, reading the reply body.

- per call: the mean over a batch of calls in a shuffled order (the cassette and the floor: 1,000 calls,
  every key once, or 1,000/N times below N=1,000, the two taking turns every 25 calls; vcrpy: a uniform
  random sample, since it scans its interactions per request);
- first call: building the transport (for vcrpy: entering ``use_cassette``, which loads its YAML) and the
  first request, with a fresh client, on a key not requested before in that process. A child process with a
  PEP 578 audit hook counts the files it opens in the tape folder for its first call: exactly one.

Runs are interleaved (each round measures every configuration once) so machine noise falls on all of them.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from ._common import Section, Series, Verdict, ratio

__all__ = ["run"]

_BASE = "https://api.openai.com/v1"
# CPU time of this process: the calls are CPU-bound and single-threaded, and other work on a shared machine
# then inflates every configuration far less than it inflates wall time.
_clock = time.process_time
_SYSTEM = (
    "You triage customer support messages for an online shop. Read the customer's message and answer with "
    'exactly one JSON object and nothing else: {"intent": <intent>, "needs_human": <true|false>}. intent is '
    "one of refund, billing, shipping, technical, account, other. needs_human is true only when a person "
    "must step in: legal threats, fraud, chargebacks, hacked accounts, a demand for a manager, fury."
)
_WORDS = (
    "my order parcel refund invoice card expired password reset app crashes login two-factor courier late "
    "damaged missing charged twice subscription cancel manager lawyer unacceptable tracking where is please"
).split()
_HEADERS = {"content-type": "application/json", "openai-model": "gpt-4o-mini-2024-07-18"}


def _payloads(n: int, seed: int = 8) -> list[dict[str, Any]]:
    rng = random.Random(seed)  # noqa: S311 - benchmark data
    out = []
    for i in range(n):
        message = f"Ticket {i}: " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(12, 40))) + "."
        out.append(
            {
                "model": "gpt-4o-mini",
                "temperature": 0,
                "max_tokens": 200,
                "messages": [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": message}],
            }
        )
    return out


def _reply(request: httpx.Request) -> httpx.Response:
    """What the recorded endpoint answered: a chat completion shaped like the real one."""
    n = len(request.content)
    body = {
        "id": f"chatcmpl-{n:08d}",
        "object": "chat.completion",
        "created": 1729208875,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": json.dumps({"intent": "billing", "needs_human": n % 2 == 0}),
                    "refusal": None,
                    "annotations": [],
                },
            }
        ],
        "usage": {"prompt_tokens": 248, "completion_tokens": 15, "total_tokens": 263},
        "system_fingerprint": "fp_27bebe765c",
        "service_tier": "default",
    }
    return httpx.Response(200, headers=_HEADERS, content=json.dumps(body).encode())


def _baked_cassette(tmp: Path) -> ModuleType:
    from tests.helpers.bake import bake

    project = bake(tmp / "bake")
    (package,) = [p.parent.name for p in project.glob("*/cassette.py")]
    sys.path.insert(0, str(project))
    return importlib.import_module(f"{package}.cassette")


def _record_cassette(cassette: ModuleType, folder: Path, payloads: list[dict[str, Any]]) -> None:
    transport = cassette.CassetteTransport(folder, mode="record", inner=httpx.MockTransport(_reply))
    with httpx.Client(transport=transport, base_url=_BASE) as client:
        for payload in payloads:
            client.post("/chat/completions", json=payload).raise_for_status()
    assert len(list(folder.glob("*.json"))) == len(payloads), "every request must be a distinct tape"


def _vcr(path: Path, match_on: tuple[str, ...], record_mode: str) -> Any:
    import vcr

    return vcr.VCR(match_on=match_on, record_mode=record_mode).use_cassette(
        str(path), allow_playback_repeats=True
    )


def _record_vcr(path: Path, payloads: list[dict[str, Any]]) -> None:
    # Recorded with method matching only (each lookup stops at the first interaction), record_mode "all":
    # the cassette holds every request; body matching is switched on for replay.
    with (
        _vcr(path, ("method",), "all"),
        httpx.Client(transport=httpx.MockTransport(_reply), base_url=_BASE) as client,
    ):
        for payload in payloads:
            client.post("/chat/completions", json=payload).raise_for_status()


_OPENS_CHILD = """
import json, sys
import httpx
sys.path.insert(0, sys.argv[1])
from {package}.cassette import CassetteTransport
folder, payload = sys.argv[2], json.loads(sys.argv[3])
opened = []
sys.addaudithook(lambda e, a: opened.append(a[0]) if e == "open" and str(a[0]).startswith(folder) else None)
client = httpx.Client(transport=CassetteTransport(folder, mode="replay"), base_url="{base}")
client.post("/chat/completions", json=payload).raise_for_status()
print(len(opened))
"""


def _tapes_opened(cassette: ModuleType, folder: Path, payload: dict[str, Any]) -> int:
    """Files under ``folder`` a fresh process opens to build the transport and serve one request.

    Counted by a PEP 578 audit hook in a child process, so the timed process carries no hook.
    """
    package = cassette.__name__.rpartition(".")[0]
    project = str(Path(cassette.__file__).parents[1])
    code = _OPENS_CHILD.format(package=package, base=_BASE)
    argv = [sys.executable, "-c", code, project, str(folder), json.dumps(payload)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    return int(out.stdout.strip())


def _per_call(clients: dict[str, httpx.Client], payloads: list[dict[str, Any]], chunk: int = 25) -> Any:
    """Mean CPU seconds per call of each client over ``payloads``, and each client's reply bodies.

    The clients take turns in chunks of ``chunk`` calls, so a burst of load elsewhere on the machine falls
    on all of them alike; two warm-up calls each first, and a garbage collection before timing.
    """
    for client in clients.values():
        for payload in payloads[:2]:
            client.post("/chat/completions", json=payload)
    spent = dict.fromkeys(clients, 0.0)
    replies: dict[str, list[bytes]] = {label: [] for label in clients}
    gc.collect()
    for i in range(0, len(payloads), chunk):
        part = payloads[i : i + chunk]
        for label, client in clients.items():
            start = _clock()
            for payload in part:
                replies[label].append(client.post("/chat/completions", json=payload).content)
            spent[label] += _clock() - start
    return {label: spent[label] / len(payloads) for label in clients}, replies


def _wrong(payloads: list[dict[str, Any]], replies: list[bytes]) -> int:
    """How many replies are not the one recorded for their request (compared as JSON)."""
    wanted = (_reply(httpx.Request("POST", _BASE, json=p)).content for p in payloads)
    return sum(json.loads(got) != json.loads(want) for got, want in zip(replies, wanted, strict=True))


_STAGES = (
    "floor: MockTransport.handle_request",
    "cassette: handle_request, whole",
    "  Cassette.exchange: parse body, normalize, hash",
    "  Cassette.replay: read tape, parse its response, dump body",
    "  httpx.Response built from the Reply",
)


def _breakdown(cassette: ModuleType, folder: Path, floor: Any, payloads: list[dict[str, Any]]) -> list[float]:
    """CPU µs per request of each of ``_STAGES``, over prebuilt requests (the transport alone, no client)."""
    transport = cassette.CassetteTransport(folder, mode="replay")
    tape = transport.cassette
    with httpx.Client(base_url=_BASE) as client:
        requests = [client.build_request("POST", "/chat/completions", json=p) for p in payloads]
    mock = httpx.MockTransport(floor)

    def per(func: Any, items: list[Any]) -> tuple[float, list[Any]]:
        start = _clock()
        out = [func(item) for item in items]
        return (_clock() - start) / len(items) * 1e6, out

    t_floor, _ = per(lambda r: mock.handle_request(r).read(), requests)
    t_whole, _ = per(lambda r: transport.handle_request(r).read(), requests)
    t_exchange, exchanges = per(
        lambda r: tape.exchange(r.method, r.url.raw_path.decode("ascii"), r.url.host, r.content, {}), requests
    )
    t_replay, replies = per(tape.replay, exchanges)
    t_response, _ = per(
        lambda pair: httpx.Response(
            pair[1].status, headers=pair[1].headers, content=pair[1].content, request=pair[0]
        ).read(),
        list(zip(requests, replies, strict=True)),
    )
    return [t_floor, t_whole, t_exchange, t_replay, t_response]


def run(quick: bool = False, runs: int = 5) -> Section:
    sizes = (100, 300) if quick else (100, 1000, 3000)
    vcr_calls = {100: 60, 300: 20, 1000: 20, 3000: 10}
    section = Section("Replay: CassetteTransport vs httpx.MockTransport (floor) vs vcrpy (body matching)")
    for name in ("CASSETTE_MODE", "CASSETTE_MISS_LOG", "CASSETTE_USED_LOG"):
        os.environ.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp_name:
        tmp = Path(tmp_name)
        cassette = _baked_cassette(tmp)
        payloads = _payloads(max(sizes) + 2 * runs + 2)  # extra ones: fresh keys for the first-call runs
        build: dict[int, tuple[Path, Path]] = {}
        for n in sizes:
            folder, yaml_path = tmp / f"tapes-{n}", tmp / f"vcr-{n}.yaml"
            first = payloads[:n] + payloads[max(sizes) : max(sizes) + 2 * runs + 2]
            _record_cassette(cassette, folder, first)
            _record_vcr(yaml_path, first)
            build[n] = folder, yaml_path
        section.method = [
            f"template `CassetteTransport` baked from `template/` ({cassette.__file__.rsplit('/', 2)[-2]}), "
            "tapes recorded by the transport itself (`record` over an inner `httpx.MockTransport`)",
            "vcrpy cassettes recorded from the same requests over the same `MockTransport`; replayed with "
            '`match_on=["method", "uri", "body"]`, `allow_playback_repeats=True`',
            "a call is `httpx.Client.post(url, json=payload)` reading the reply; the floor is a "
            "`MockTransport` whose handler returns a new `httpx.Response` built from prebuilt bytes",
            "times are CPU time of the benchmark process (`time.process_time`): single-threaded CPU-bound "
            "calls, so other load on the machine distorts them far less than wall time",
            "per call: mean over 1,000 calls in shuffled order (every key once; below N=1,000 each key "
            f"1,000/N times), the two taking turns every 25 calls (vcrpy: {vcr_calls[sizes[-1]]}–"
            f"{vcr_calls[sizes[0]]} uniformly sampled calls); first call: transport set-up + one request",
            f"{runs} interleaved rounds; table cells are median (min–max)",
        ]
        canned = _reply(httpx.Request("POST", _BASE, content=b"x")).content

        def floor(_request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers=_HEADERS, content=canned)

        per_call: dict[tuple[str, int], Series] = {}
        first_call: dict[tuple[str, int], Series] = {}
        opens = {n: _tapes_opened(cassette, build[n][0], payloads[-1]) for n in sizes}
        wrong = {"cassette": 0, "vcrpy": 0}
        for label in ("cassette", "floor", "vcrpy"):
            for n in sizes:
                per_call[label, n] = Series(f"{label} per call, N={n:,}", "µs")
                first_call[label, n] = Series(f"{label} first call, N={n:,}", "ms")
        stages = [Series(label, "µs") for label in _STAGES]
        rng = random.Random(3)  # noqa: S311 - benchmark order
        for round_ in range(runs):
            for n in sizes:
                folder, yaml_path = build[n]
                # 1,000 calls at every N (each key 1,000/N times below N=1,000): a mean over 100 calls is
                # too short a measurement to compare with the floor on a shared machine.
                sample = payloads[:n] * max(1, 1000 // n)
                sample = rng.sample(sample, min(len(sample), 1000))
                fresh = payloads[max(sizes) + 2 * round_ : max(sizes) + 2 * round_ + 2]

                # The cassette and the floor: first call on a fresh key, then calls in turns.
                start = _clock()
                transport = cassette.CassetteTransport(folder, mode="replay")
                client = httpx.Client(transport=transport, base_url=_BASE)
                client.post("/chat/completions", json=fresh[0]).raise_for_status()
                first_call["cassette", n].values.append((_clock() - start) * 1e3)
                start = _clock()
                floor_client = httpx.Client(transport=httpx.MockTransport(floor), base_url=_BASE)
                floor_client.post("/chat/completions", json=fresh[1]).raise_for_status()
                first_call["floor", n].values.append((_clock() - start) * 1e3)
                seconds, replies = _per_call({"cassette": client, "floor": floor_client}, sample)
                client.close()
                floor_client.close()
                for label in ("cassette", "floor"):
                    per_call[label, n].values.append(seconds[label] * 1e6)
                wrong["cassette"] += _wrong(sample, replies["cassette"])

                # vcrpy with body matching: every reply must be the one recorded for that request.
                start = _clock()
                with _vcr(yaml_path, ("method", "uri", "body"), "none"):
                    client = httpx.Client(transport=httpx.MockTransport(_reply), base_url=_BASE)
                    client.post("/chat/completions", json=fresh[1]).raise_for_status()
                    first_call["vcrpy", n].values.append((_clock() - start) * 1e3)
                    calls = rng.sample(payloads[:n], vcr_calls[n])
                    seconds, replies = _per_call({"vcrpy": client}, calls)
                    client.close()
                per_call["vcrpy", n].values.append(seconds["vcrpy"] * 1e6)
                wrong["vcrpy"] += _wrong(calls, replies["vcrpy"])
            big = max(sizes)
            for series, value in zip(
                stages, _breakdown(cassette, build[big][0], floor, payloads[: min(big, 1000)]), strict=True
            ):
                series.values.append(value)
            print(f"  replay round {round_ + 1}/{runs} done", file=sys.stderr)

    for n in sizes:
        section.series += [per_call["floor", n], per_call["cassette", n], per_call["vcrpy", n]]
    for n in sizes:
        section.series += [first_call["floor", n], first_call["cassette", n], first_call["vcrpy", n]]
    for series in stages:
        series.note = "breakdown"
    section.series += stages
    small, large = sizes[0], sizes[-1]
    mid = 1000 if 1000 in sizes else sizes[-1]
    for n in sizes:
        r = ratio(per_call["cassette", n], per_call["floor", n])
        section.verdicts.append(
            Verdict(f"replay per call ≤ 1.5× the MockTransport floor, N={n:,}", f"{r:.2f}×", r <= 1.5)
        )
    drift = ratio(per_call["cassette", large], per_call["cassette", small])
    floor_drift = ratio(per_call["floor", large], per_call["floor", small])
    section.verdicts.append(
        Verdict(
            f"replay per call flat from N={small:,} to N={large:,} (±20%)",
            f"{drift:.2f}× (cassette N={large:,} / N={small:,}; the floor's own: {floor_drift:.2f}×)",
            abs(drift - 1) <= 0.2,
        )
    )
    speedup = ratio(per_call["vcrpy", mid], per_call["cassette", mid])
    section.verdicts.append(
        Verdict(f"≥ 100× faster than vcrpy body matching at N={mid:,}", f"{speedup:,.0f}×", speedup >= 100)
    )
    first = first_call["cassette", large]
    section.verdicts.append(
        Verdict(
            f"first call ≤ 5 ms at N={large:,} (tapes read lazily)",
            f"{first.median:.2f} ms; files opened in the cassette folder by a fresh process's first call: "
            f"{opens[large]}",
            first.median <= 5 and opens[large] == 1,
        )
    )
    for label, count in wrong.items():
        section.notes.append(f"{label}: {count} replies differed from the recorded ones (checked untimed)")
    return section
