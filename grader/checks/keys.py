"""The canonical-keys check: kit tapes re-hash to their own names; the key function ignores only noise.

Static part: each kit-format tape's stored request is re-hashed (grader.tapes.canonical_key) and must start
with the tape's key, which must be the file name. Dynamic part: the manifest's ``key_function`` is called in
the sandbox on pairs of payloads; the probe script prints the keys it computed and the grader compares them.
That output is the one place the submission's own printout is read: it answers the probe's questions (two
keys per pair), it is never taken as a score or a claim about the submission.

Payload pairs come from a seeded ``random.Random`` rather than hypothesis at grading time: hypothesis is a
test-only dependency, and a report must be the same each time the same commit is graded.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from grader.checks import CheckResult, Finding, register
from grader.tapes import canonical_key, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["keys", "probe_cases"]

MIN_KEY_LEN = 16
_MARKER = "@@GRADER-KEY-PROBE@@"
_SEEDS = 4
_MAX_LISTED = 20

# Runs inside the sandbox with the submission importable (PYTHONPATH = repo). Prints one marked JSON line.
_PROBE_SCRIPT = """
import importlib, json, sys
spec, cases = sys.argv[1], json.loads(sys.argv[2])
mod_name, _, attr = spec.partition(":")
try:
    func = importlib.import_module(mod_name)
    for part in (attr or "").split("."):
        func = getattr(func, part)
except BaseException as exc:
    print(MARKER + json.dumps({"error": "cannot import %s: %s: %s" % (spec, type(exc).__name__, exc)}))
    sys.exit(0)
out = []
for case in cases:
    try:
        out.append({"a": str(func(case["a"])), "b": str(func(case["b"]))})
    except BaseException as exc:
        out.append({"error": ("%s: %s" % (type(exc).__name__, exc))[:300]})
print(MARKER + json.dumps({"results": out}))
""".replace("MARKER", repr(_MARKER))


@register("keys")
def keys(ctx: Context) -> CheckResult:
    """Tape keys are canonical and every tape re-hashes to its own name.

    Probes (when [tool.takehome] key_function is set and the environment is installed): key order and the
    volatile fields user, metadata, request_id, stream_options and cache_control must not change the key;
    model, temperature and the messages must. With neither kit tapes nor a key_function there is nothing to
    check and the row goes to a reviewer (``manual``).

    Facts:
        tapes: tapes found in the cassette folder, any format (as cassette-hygiene counts them)
        tapes_checked: kit-format tapes whose stored request was re-hashed
        mismatched: tapes whose stored request does not hash to their key, or whose key is not their file name
        probes_run: key_function probe pairs answered
        probes_failed: wrong probe answers, plus a key_function that cannot be imported or crashes
        key_function: the manifest's key_function ("" when not declared)
        summary: one line with the counts
    """
    findings: list[Finding] = []
    details: list[str] = []
    tapes = tapes_of(ctx)
    kit = [t for t in tapes if t.format == "kit"]
    mismatched = 0
    for tape in kit:
        problem = _key_problem(tape.path, tape.key, tape.interactions[0])
        if problem:
            mismatched += 1
            line = tape.find_line('"key"') or 1
            findings.append(Finding("canonical-keys", problem, f"{tape.path}:{line}"))

    key_function = getattr(ctx.manifest, "key_function", None) or ""
    probes_run, probes_failed, note = _probe(ctx, key_function, findings)
    if note:
        details.append(note)
    details = [f"{f.location} {f.message}" for f in findings[:_MAX_LISTED]] + details
    if len(findings) > _MAX_LISTED:
        details.append(f"... and {len(findings) - _MAX_LISTED} more")

    facts: dict[str, Any] = {
        "tapes": len(tapes),
        "tapes_checked": len(kit),
        "mismatched": mismatched,
        "probes_run": probes_run,
        "probes_failed": probes_failed,
        "key_function": key_function,
    }
    parts = [
        f"{len(kit) - mismatched}/{len(kit)} kit tapes re-hash to their own name"
        if kit
        else ("no kit tapes" if tapes else "no tapes: no key was ever filed")
    ]
    parts.append(
        f"{probes_run} probes, {probes_failed} failed" if probes_run or probes_failed else note or ""
    )
    facts["summary"] = "; ".join(p for p in parts if p)
    if key_function and note.startswith(_NOT_RUN):
        # The grader's environment failed, not the submission: a declared key_function is never scored
        # as if it had no probes.
        return CheckResult(facts=facts, findings=findings, details=details, not_assessable=note)
    manual = None
    if not kit and probes_run == 0 and probes_failed == 0:
        manual = (
            "no kit-format tapes and no key probe: how requests map to tapes (e.g. vcrpy's match_on, which "
            "ignores the body by default) must be read in the code"
        )
    return CheckResult(facts=facts, findings=findings, details=details, manual=manual)


def _key_problem(path: str, key: str | None, inter: Any) -> str | None:
    stem = PurePosixPath(path).name
    stem = stem[: -len(".json")] if stem.lower().endswith(".json") else stem
    key = key or stem
    if key != stem:
        return f"key {key[:24]} is not the file name {stem[:24]}"
    if len(key) < MIN_KEY_LEN:
        return f"key {key!r} is shorter than {MIN_KEY_LEN} hex characters"
    digest = canonical_key(inter.method, inter.path, inter.request_body)
    if not digest.startswith(key.lower()):
        return (
            f"stored request re-hashes to {digest[: len(key)]}, not its key {key} (edited after recording?)"
        )
    return None


_NOT_RUN = "key_function probes not run: "


def _probe(ctx: Context, key_function: str, findings: list[Finding]) -> tuple[int, int, str]:
    """(probes run, probes failed, a note for the reviewer)."""
    if not key_function:
        return 0, 0, "no key_function in [tool.takehome]: probes not available"
    if getattr(ctx, "env", None) is None:
        reason = getattr(ctx, "install_error", None) or "no installed environment"
        return 0, 0, f"{_NOT_RUN}{reason}"
    cases = probe_cases()
    payloads = json.dumps([{"a": c[0], "b": c[1]} for c in cases], ensure_ascii=False)
    argv = ["python", "-c", _PROBE_SCRIPT, key_function, payloads]
    try:
        result, _audit = ctx.run(argv, label="keys-probe")
    except Exception as exc:  # the sandbox could not run it: not the submission's fault
        return 0, 0, f"{_NOT_RUN}{str(exc).splitlines()[0] if str(exc) else exc!r}"
    where = f"{key_function.partition(':')[0].replace('.', '/')}.py:1"
    answer = _read_answer(result.stdout)
    if result.timed_out or answer is None:
        why = "timed out" if result.timed_out else f"printed no answer (exit {result.returncode})"
        findings.append(Finding("canonical-keys", f"key_function probe {why}", where))
        return 0, 1, f"key_function probe {why}"
    if "error" in answer:
        findings.append(Finding("canonical-keys", str(answer["error"])[:300], where))
        return 0, 1, str(answer["error"])[:300]
    results = answer.get("results")
    if not isinstance(results, list) or len(results) != len(cases):
        findings.append(Finding("canonical-keys", "key_function probe answer is malformed", where))
        return 0, 1, "key_function probe answer is malformed"
    failed = 0
    for (_a, _b, expect_same, what, seed), got in zip(cases, results, strict=True):
        if not isinstance(got, dict) or "error" in got:
            failed += 1
            error = got.get("error") if isinstance(got, dict) else "no answer"
            message = f"key_function raised on a payload with {what}: {error} (seed {seed})"
            findings.append(Finding("canonical-keys", message, where))
            continue
        same = got.get("a") == got.get("b")
        if same != expect_same:
            failed += 1
            wrong = "changes the key" if expect_same else "does not change the key"
            findings.append(Finding("canonical-keys", f"{what} {wrong} (seed {seed})", where))
    return len(cases), failed, ""


def _read_answer(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(_MARKER):
            try:
                answer = json.loads(line[len(_MARKER) :])
            except ValueError:
                return None
            return answer if isinstance(answer, dict) else None
    return None


def probe_cases(seeds: int = _SEEDS) -> list[tuple[dict[str, Any], dict[str, Any], bool, str, int]]:
    """(payload a, payload b, keys must be equal, what differs, seed) for seeded random chat payloads."""
    cases = []
    for seed in range(seeds):
        rng = random.Random(seed)  # noqa: S311 (reproducible payloads, not secrets)
        base = _payload(rng)
        same = {
            "reordered keys": _reordered(base),
            "an added user field": {**base, "user": f"user-{rng.randrange(10**6)}"},
            "an added metadata field": {**base, "metadata": {"trace": str(rng.randrange(10**9))}},
            "an added request_id": {**base, "request_id": f"req_{rng.randrange(10**9)}"},
            "added stream_options": {**base, "stream_options": {"include_usage": True}},
            "an added cache_control": _with_cache_control(base),
        }
        differ = {
            "another model": {**base, "model": base["model"] + "-other"},
            "another temperature": {**base, "temperature": base["temperature"] + 0.5},
            "other messages": _other_messages(base, rng),
        }
        cases += [(base, b, True, what, seed) for what, b in same.items()]
        cases += [(base, b, False, what, seed) for what, b in differ.items()]
    return [(copy.deepcopy(a), copy.deepcopy(b), e, w, s) for a, b, e, w, s in cases]


_WORDS = ("refund", "order", "late", "invoice", "password", "reset", "café", "naïve", "😀", "urgent", "help")


def _payload(rng: random.Random) -> dict[str, Any]:
    text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 8)))
    payload: dict[str, Any] = {
        "model": rng.choice(["gpt-4o-mini", "claude-3-5-haiku-latest", "gpt-4.1-nano"]),
        "messages": [
            {"role": "system", "content": "Classify the message."},
            {"role": "user", "content": text},
        ],
        "temperature": rng.choice([0, 0.2, 1]),
    }
    if rng.random() < 0.5:
        payload["max_tokens"] = rng.randint(16, 512)
    return payload


def _reordered(payload: Any) -> Any:
    if isinstance(payload, dict):
        return {k: _reordered(payload[k]) for k in reversed(list(payload))}
    if isinstance(payload, list):
        return [_reordered(x) for x in payload]
    return payload


def _with_cache_control(payload: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(payload)
    out["messages"][0]["cache_control"] = {"type": "ephemeral"}
    return out


def _other_messages(payload: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    out = copy.deepcopy(payload)
    out["messages"][-1]["content"] += f" {rng.choice(_WORDS)}!"
    return out
