"""The canonical-keys check: kit tapes re-hash to their own names; the key function ignores only noise.

Static part: each kit-format tape's stored request is re-hashed (grader.tapes.canonical_key) and must start
with the tape's key, which must be the file name. Dynamic part: the manifest's ``key_function`` is called in
the sandbox on pairs of payloads; the probe script prints the keys it computed and the grader compares them.
That output is the one place the submission's own printout is read: it answers the probe's questions (two
keys per pair), it is never taken as a score or a claim about the submission.

When the cassette folder holds the kit's tape chain (``CHAIN.log``, see grader/chain.py), the chain is
walked and every tape held to its last entry: a broken link or a tape whose content no longer matches its
entry proves an edit made after recording (``chain_tampered``); a tape missing from the chain or an entry
without its tape is reported too. Without a chain nothing changes: it is evidence, never a requirement.

Payload pairs come from a seeded ``random.Random`` rather than hypothesis at grading time: hypothesis is a
test-only dependency, and a report must be the same each time the same commit is graded.
"""

from __future__ import annotations

import copy
import json
import random
import re
import secrets
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from grader import keyprobe, walk
from grader._json import marked_answer
from grader._toml import tomllib
from grader.chain import chain_rewrites, read_chain
from grader.checks import CheckResult, Finding, register
from grader.details import row_details
from grader.safeio import read_text
from grader.tapes import canonical_key, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["keys", "probe_cases", "prompt_blind"]

MIN_KEY_LEN = 16
_MARKER = f"@@{secrets.token_hex(6)}@@"  # random, no names: the run sees the script
_SEEDS = 4
_MAX_LISTED = 20
_KEY_FIELD = '"key"'

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

    Probes (the environment installed; the manifest's ``key_function``, else the submission's own key
    function found by grader/keyprobe.py and called the way its parameters suggest): key order, whitespace
    and the volatile fields the take-home names (an end-user ``user`` tag, a ``request_id``) must not change
    the key; the model, temperature, the user's message and the system prompt must (a ``role: system``
    message changed or removed; Anthropic's top-level ``system`` changed, as a string and as text blocks),
    and so must each request field grader/rules/key_probes.toml lists (``top_p``, ``seed``,
    ``max_tokens``, ``stop``, ``tools``, ``tool_choice``, ``response_format``, ``stream``: red team 6, H6,
    a key dropping the system prompt from the key and the stored request alike re-hashed every tape and
    replayed answers recorded for another prompt). Dropping ``metadata``, ``stream_options`` and
    ``cache_control`` too is reported but not required. vcrpy cassettes with no key function: the
    ``match_on`` the suite configures is read; vcrpy's default ignores the request body.

    Facts:
        tapes: tapes found in the cassette folder, any format (as cassette-hygiene counts them)
        tapes_checked: kit-format tapes whose stored request was re-hashed
        mismatched: tapes whose stored request does not hash to their key, or whose key is not their file name
        probes_run: key_function probe pairs answered
        probes_failed: wrong probe answers, plus a key_function that cannot be imported or crashes
        volatile_failed: probes where key order, whitespace, a user tag or a request_id changed the key
        differ_failed: probes where another model, temperature, user message, system prompt or field the
            take-home keeps (grader/rules/key_probes.toml) did not change the key, plus a key function that
            cannot be imported or crashes
        optional_failed: probes where metadata, stream_options or cache_control changed the key (reported,
            not required by the take-home)
        ignores_body: requests map to tapes by vcrpy's default matcher, which ignores the body
        key_function: the manifest's key_function, or the submission's own one the grader found and called
            ("" when none)
        chain: true when the cassette folder holds a tape chain (CHAIN.log)
        chain_entries: lines in the chain (0 without one)
        chain_tampered: proven edits after recording: broken chain links, lines that are not entries, tapes
            whose content no longer matches their chain entry (0 without a chain)
        chain_unlisted: tapes the chain does not hold (written outside recording, or their line removed)
        chain_missing: chain entries whose tape is not in the folder
        chain_rewrites: commits whose chain is not the previous commit's chain with lines appended (rewritten
            or started over: read next to chain_tampered, a re-chained edit shows here)
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
            line = tape.find_line(_KEY_FIELD) or 1
            findings.append(Finding("canonical-keys", problem, f"{tape.path}:{line}"))

    rewrites: list[tuple[str, int]] = []
    chain = read_chain(ctx.repo, ctx.manifest.cassette_dir, tapes)
    if chain is not None:
        if chain.error:
            findings.append(Finding("tape-chain", f"tape chain {chain.error}", f"{chain.path}:1"))
        findings += [Finding("tape-chain", p.message, p.location) for p in chain.problems]
        rewrites = chain_rewrites(ctx.repo, chain.path)
        for sha, line in rewrites[:_MAX_LISTED]:
            message = "tape chain rewritten in this commit: lines changed or removed, not only appended"
            findings.append(Finding("tape-chain", message, f"{sha}:{chain.path}:{line}"))

    declared = ctx.manifest.key_function or ""
    probed = _key_probe(ctx)
    key_function, probes_run, failed_whats, note = (
        probed.key_function,
        probed.runs,
        probed.failed,
        probed.note,
    )
    findings += probed.findings
    probe_lines = list(
        probed.lines
    )  # one line per kind of probe: what it varied, how many pairs kept it right
    volatile_set, optional_set = probed.volatile, probed.optional
    probes_failed = len(failed_whats)
    volatile = sum(w in volatile_set for w in failed_whats)
    optional = sum(w in optional_set for w in failed_whats)
    ignores_body = not key_function and any(t.format == "vcr" for t in tapes) and _vcr_ignores_body(ctx)
    if ignores_body:
        details.append(
            "no key function; the suite's vcrpy matcher is the default (method and URI), which ignores the "
            "request body: a changed prompt replays the old answer"
        )
    if note:
        details.append(note)
    details = [f"{f.location} {f.message}" for f in findings[:_MAX_LISTED]] + details
    if len(findings) > _MAX_LISTED:
        details.append(f"... and {len(findings) - _MAX_LISTED} more")
    # What the counts in the evidence rest on, each line checkable against a file (folded when alike).
    bad = {f.location.rpartition(":")[0] for f in findings if f.rule == "canonical-keys"}
    rehashed = [
        f"{t.path}:{t.find_line(_KEY_FIELD) or 1} re-hashes to its own name" for t in kit if t.path not in bad
    ]
    details += row_details(rehashed, [])  # folded here: 10,000 tapes are one line, in results.json too
    details += probe_lines
    if chain is not None and not chain.error and not chain.problems:
        details.append(
            f"{chain.path}:{max(chain.entries, 1)} tape chain intact: {chain.entries} entries, every tape "
            "matches its last entry"
        )

    facts: dict[str, Any] = {
        "tapes": len(tapes),
        "tapes_checked": len(kit),
        "mismatched": mismatched,
        "probes_run": probes_run,
        "probes_failed": probes_failed,
        "volatile_failed": volatile,
        "differ_failed": probes_failed - volatile - optional,
        "optional_failed": optional,
        "ignores_body": ignores_body,
        "key_function": key_function,
        "chain": chain is not None,
        "chain_entries": chain.entries if chain else 0,
        "chain_tampered": chain.tampered if chain else 0,
        "chain_unlisted": chain.count("unlisted-tape") if chain else 0,
        "chain_missing": chain.count("missing-tape") if chain else 0,
        "chain_rewrites": len(rewrites),
    }
    parts = [
        f"{len(kit) - mismatched}/{len(kit)} kit tapes re-hash to their own name"
        if kit
        else ("no kit tapes" if tapes else "no tapes: no key was ever filed")
    ]
    if probes_run or probes_failed:
        whose = "" if declared else f" of the submission's own {key_function}"
        ran = f"{probes_run} probes{whose}, {probes_failed - optional} failed"
        if optional:
            ran += f" (and {optional} kit-only normalizations not done, not required)"
        parts.append(ran)
    else:
        parts.append(note or "")
    if chain is not None:
        parts.append(_chain_summary(chain))
    facts["summary"] = "; ".join(p for p in parts if p)
    if declared and note.startswith(_NOT_RUN):
        # The grader's environment failed, not the submission: a declared key_function is never scored
        # as if it had no probes.
        return CheckResult(facts=facts, findings=findings, details=details, not_assessable=note)
    return CheckResult(facts=facts, findings=findings, details=details)


@dataclass(frozen=True)
class _KeyProbe:
    """What the key-function probe found: made once per grade (canonical-keys and loud-miss both read it)."""

    key_function: str  # the declared one, or the submission's own one the grader found ("" when none)
    runs: int
    failed: tuple[str, ...]  # what each failed pair varied ("another system message", ...)
    note: str
    findings: tuple[Finding, ...]
    lines: tuple[str, ...]
    volatile: frozenset[str]
    optional: frozenset[str]


def _key_probe(ctx: Context) -> _KeyProbe:
    def make() -> _KeyProbe:
        tapes = tapes_of(ctx)
        kit = [t for t in tapes if t.format == "kit"]
        declared = ctx.manifest.key_function or ""
        findings: list[Finding] = []
        lines: list[str] = []
        first = next((i for tape in tapes for i in tape.interactions if i.path or i.url), None)
        endpoint = next((tape.endpoint for tape in tapes if tape.endpoint), None)
        path = (first.path or urlsplit(first.url or "").path) if first else ""
        volatile, optional = _volatile_and_optional(_provider(path or "", endpoint, ctx.manifest.api_key_env))
        if declared:
            key_function = declared
            runs, failed, note = _probe(ctx, declared, findings, optional, lines)
        elif tapes and not kit:
            key_function, runs, failed, note = _probe_found(ctx, tapes, findings, optional, lines)
        else:
            key_function, runs, failed = "", 0, []
            note = "no key_function in [tool.takehome]: probes not available"
        return _KeyProbe(
            key_function,
            runs,
            tuple(failed),
            note,
            tuple(findings),
            tuple(lines),
            frozenset(volatile),
            frozenset(optional),
        )

    return ctx.memo("keys probe", make)


# The probes that change only the system prompt (`_system_prompt_pairs`).
_SYSTEM_PROMPT_PROBES = (
    "another system message",
    "the system message removed",
    "another top-level system string",
    "another top-level system text block",
)


def prompt_blind(ctx: Context) -> str | None:
    """Where the key function was shown to ignore the system prompt (``pkg/cassette.py:205 probe: another
    system message must change the key: 0/4 seeded pairs did``), or None: it keeps the prompt, or was not
    probed. loud-miss holds it against tapes that do not store the prompt either (red team 6, H6)."""
    probed = _key_probe(ctx)
    failed = [what for what in _SYSTEM_PROMPT_PROBES if what in probed.failed]
    if not failed:
        return None
    return next(
        (line for line in probed.lines if f" probe: {failed[0]} must change the key" in line),
        f"{probed.key_function} probe: {failed[0]} does not change the key",
    )


def _chain_summary(chain: Any) -> str:
    if chain.error:
        return f"tape chain {chain.error}"
    if not chain.problems:
        return f"tape chain intact ({chain.entries} entries, head {chain.head[:16]})"
    tampered = f", {chain.tampered} proving an edit after recording" if chain.tampered else ""
    return f"tape chain: {len(chain.problems)} problems{tampered} (first at {chain.problems[0].location})"


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


# What the take-home asks of a key (end-user tags out, order and whitespace canonical), and what it does not
# ask but the kit's own layer also drops. The end-user tag is the provider's own field: OpenAI's `user`,
# Anthropic's `metadata.user_id`; neither API has a `request_id` body field (request ids travel in headers).
_CANONICAL = {"reordered keys", "reformatted whitespace"}
_USER_TAG = {"openai": "an added user field", "anthropic": "an added metadata field"}
_KIT_EXTRAS = {
    "an added user field",
    "an added metadata field",
    "an added request_id",
    "added stream_options",
    "an added cache_control",
}


def _volatile_and_optional(provider: str) -> tuple[set[str], set[str]]:
    volatile = _CANONICAL | {_USER_TAG.get(provider, _USER_TAG["openai"])}
    return volatile, _KIT_EXTRAS - volatile


def _provider(path: str, endpoint: str | None, api_key_env: str | None) -> str:
    if (
        "anthropic" in (endpoint or "")
        or path.endswith("/messages")
        or (api_key_env or "").startswith("ANTH")
    ):
        return "anthropic"
    return "openai"


def _probe(
    ctx: Context, key_function: str, findings: list[Finding], optional: set[str], lines: list[str]
) -> tuple[int, list[str], str]:
    """(probes run, what each failed probe varied, a note for the reviewer) for a declared key_function."""
    if ctx.env is None:
        reason = ctx.install_error or "no installed environment"
        if ctx.install_failed:
            # The submission's own dependencies cannot be installed: its key function cannot be imported.
            why = str(reason).splitlines()[0]
            return 0, ["the key function itself"], f"key_function not importable: {why}"
        return 0, [], f"{_NOT_RUN}{reason}"
    cases = probe_cases()
    payloads = json.dumps([{"a": c[0], "b": c[1]} for c in cases], ensure_ascii=False)
    argv = ["python", "-c", _PROBE_SCRIPT, key_function, payloads]
    try:
        result, _audit = ctx.run(argv, label="keys-probe")
    except Exception as exc:  # the sandbox could not run it: not the submission's fault
        return 0, [], f"{_NOT_RUN}{str(exc).splitlines()[0] if str(exc) else exc!r}"
    return _judge(result, cases, key_function, findings, optional, lines, Path(ctx.repo))


def _probe_found(
    ctx: Context, tapes: list[Any], findings: list[Finding], optional: set[str], lines: list[str]
) -> tuple[str, int, list[str], str]:
    """(key function found, probes run, failed whats, note) for a submission with no declared key_function."""
    if ctx.env is None:
        return "", 0, [], "no installed environment: the submission's key function was not probed"
    specs = keyprobe.candidates(Path(ctx.repo))
    if not specs:
        why = "no key function found (a module-level function hashing or canonicalising a request)"
        return "", 0, [], f"{why}: not probed"
    method, url = "POST", "https://api.openai.com/v1/chat/completions"
    for tape in tapes:
        inter = next((i for i in tape.interactions if isinstance(i.request_body, dict)), None)
        if inter is not None:
            method = inter.method or method
            url = inter.url or (
                f"https://{tape.endpoint}{inter.path}" if tape.endpoint and inter.path else url
            )
            break
    sample = {"method": method, "url": url, "path": urlsplit(url).path or "/"}
    cases = probe_cases(whitespace=True)
    payloads = json.dumps(
        [{"a": c[0], "b": c[1], "whitespace": c[3] == "reformatted whitespace"} for c in cases],
        ensure_ascii=False,
    )
    script = keyprobe.PROBE_SCRIPT.replace("MARKER", repr(_MARKER))
    argv = ["python", "-c", script, json.dumps(specs), json.dumps(sample), payloads]
    try:
        result, _audit = ctx.run(argv, label="keys-probe")
    except Exception as exc:
        return "", 0, [], f"{_NOT_RUN}{str(exc).splitlines()[0] if str(exc) else exc!r}"
    answer = marked_answer(result.stdout, _MARKER) or {}
    spec = str(answer.get("spec") or "")
    if not spec:
        why = answer.get("error") or f"printed no answer (exit {result.returncode})"
        return "", 0, [], f"key function candidates {', '.join(specs)} not probed: {str(why)[:300]}"
    runs, failed, note = _judge(result, cases, spec, findings, optional, lines, Path(ctx.repo))
    shown = f"{spec} ({answer.get('shape')})"
    return shown, runs, failed, note or f"probed the submission's own key function {shown}"


def _judge(
    result: Any,
    cases: list[tuple[Any, Any, bool, str, int]],
    key_function: str,
    findings: list[Finding],
    optional: set[str],
    lines: list[str],
    repo: Path,
) -> tuple[int, list[str], str]:
    where = f"{key_function.partition(':')[0].replace('.', '/')}.py:1"
    answer = marked_answer(result.stdout, _MARKER)
    if result.timed_out or answer is None:
        why = "timed out" if result.timed_out else f"printed no answer (exit {result.returncode})"
        findings.append(Finding("canonical-keys", f"key_function probe {why}", where))
        return 0, ["the key function itself"], f"key_function probe {why}"
    if "error" in answer:
        findings.append(Finding("canonical-keys", str(answer["error"])[:300], where))
        return 0, ["the key function itself"], str(answer["error"])[:300]
    results = answer.get("results")
    if not isinstance(results, list) or len(results) != len(cases):
        findings.append(Finding("canonical-keys", "key_function probe answer is malformed", where))
        return 0, ["the key function itself"], "key_function probe answer is malformed"
    failed: list[str] = []
    tally: dict[tuple[str, bool], list[int]] = {}  # (what, keys must be equal) -> [right, pairs]
    for (_a, _b, expect_same, what, seed), got in zip(cases, results, strict=True):
        counts = tally.setdefault((what, expect_same), [0, 0])
        counts[1] += 1
        if not isinstance(got, dict) or "error" in got:
            failed.append("the key function itself")
            error = got.get("error") if isinstance(got, dict) else "no answer"
            message = f"key_function raised on a payload with {what}: {error} (seed {seed})"
            findings.append(Finding("canonical-keys", message, where))
            continue
        same = got.get("a") == got.get("b")
        counts[0] += same == expect_same
        if same != expect_same:
            failed.append(what)
            wrong = "changes the key" if expect_same else "does not change the key"
            extra = " (not required by the take-home)" if what in optional else ""
            findings.append(Finding("canonical-keys", f"{what} {wrong}{extra} (seed {seed})", where))
    lines += _probe_lines(tally, optional, _definition(repo, key_function) or where)
    return len(cases), failed, ""


def _probe_lines(tally: dict[tuple[str, bool], list[int]], optional: set[str], where: str) -> list[str]:
    """``where probe: reordered keys must keep the key: 4/4 seeded pairs did`` for each kind of probe (a
    pair on which the key function raised is not one that did)."""
    out = []
    for (what, expect_same), (right, total) in tally.items():
        must = "must keep the key" if expect_same else "must change the key"
        if what in optional:
            must = "may keep the key (the kit's layer does; not required by the take-home)"
        out.append(f"{where} probe: {what} {must}: {right}/{total} seeded pairs did")
    return out


def _definition(repo: Path, key_function: str) -> str | None:
    """``pkg/cassette.py:301``: where ``module:function`` is defined in the submission, when it is plain to
    see (a ``def`` at the start of a line of the module's file); None otherwise."""
    module, _, attr = key_function.partition(":")
    name = attr.rpartition(".")[2]
    base = module.replace(".", "/")
    for rel in (f"{base}.py", f"{base}/__init__.py", f"src/{base}.py", f"src/{base}/__init__.py"):
        try:  # never through a link, never a FIFO (grader/safeio.py)
            text = read_text(repo / rel, cap=2_000_000, root=repo, truncate=True)
        except OSError:
            continue
        match = re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\b", text, re.M) if name else None
        line = text.count("\n", 0, match.start()) + 1 if match else 1
        return f"{rel}:{line}"
    return None


_MAX_CONFIG_FILES = 5000  # sources and config files read for a vcrpy `match_on`
_MATCH_ON = re.compile(r"match_on[\"']?\s*[=:]\s*[\[(]([^\])]*)[\])]", re.S)


def _vcr_ignores_body(ctx: Context) -> bool:
    """No ``match_on`` anywhere names the body or a matcher of the suite's own: vcrpy's default applies."""
    repo = Path(ctx.repo)
    configs = walk.files(repo, hidden=False, include=_config_or_source, max_files=_MAX_CONFIG_FILES)
    for path in configs:
        try:  # never through a link, never a FIFO (grader/safeio.py)
            text = read_text(path, cap=512_000, root=repo, truncate=True)
        except OSError:
            continue
        if "match_on" in text and not _MATCH_ON.search(text):
            return False  # configured, not as a literal list (a constant, a call): not shown to ignore
        for match in _MATCH_ON.finditer(text):
            names = set(re.findall(r"[\"']([\w-]+)[\"']", match.group(1)))
            if "body" in names or names - _VCR_DEFAULT_MATCHERS:
                return False
    return True


def _config_or_source(name: str) -> bool:
    return name.endswith((".py", ".cfg", ".toml", ".ini"))


_VCR_DEFAULT_MATCHERS = {"method", "scheme", "host", "port", "path", "query", "uri", "headers", "raw_body"}


def probe_cases(
    seeds: int = _SEEDS, *, whitespace: bool = False
) -> list[tuple[dict[str, Any], dict[str, Any], bool, str, int]]:
    """(payload a, payload b, keys must be equal, what differs, seed) for seeded random chat payloads.

    ``whitespace``: also a pair the prober sends as the same JSON indented (a key function over bytes).
    """
    cases = []
    differ_fields = _differ_fields()
    for seed in range(seeds):
        rng = random.Random(seed)  # noqa: S311 (reproducible payloads, not secrets)
        base = _payload(rng)
        same = {
            **({"reformatted whitespace": copy.deepcopy(base)} if whitespace else {}),
            "reordered keys": _reordered(base),
            "an added user field": {**base, "user": f"user-{rng.randrange(10**6)}"},
            "an added metadata field": {**base, "metadata": {"user_id": str(rng.randrange(10**9))}},
            "an added request_id": {**base, "request_id": f"req_{rng.randrange(10**9)}"},
            "added stream_options": {**base, "stream_options": {"include_usage": True}},
            "an added cache_control": _with_cache_control(base),
        }
        differ = {
            "another model": (base, {**base, "model": base["model"] + "-other"}),
            "another temperature": (base, {**base, "temperature": base["temperature"] + 0.5}),
            "other messages": (base, _other_messages(base, rng)),
            **_system_prompt_pairs(base, rng),
            **{what: ({**base, **both}, {**base, **both, **fields}) for what, both, fields in differ_fields},
        }
        cases += [(base, b, True, what, seed) for what, b in same.items()]
        cases += [(a, b, False, what, seed) for what, (a, b) in differ.items()]
    return [(copy.deepcopy(a), copy.deepcopy(b), e, w, s) for a, b, e, w, s in cases]


def _system_prompt_pairs(
    base: dict[str, Any], rng: random.Random
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs differing only in the system prompt, in both wire formats: OpenAI's ``role: system`` message
    (its text changed, or the message removed: added, seen from the other side) and Anthropic's top-level
    ``system`` (as a string and as a list of text blocks). A key that drops the prompt replays answers
    recorded for another prompt (red team 6, H6)."""
    word = rng.choice(_WORDS)
    other = copy.deepcopy(base)
    other["messages"][0]["content"] += f" Answer {word}."
    removed = {**base, "messages": [m for m in base["messages"] if m.get("role") != "system"]}
    prompt = base["messages"][0]["content"]
    anthropic = {
        **{k: v for k, v in base.items() if k != "messages"},
        "max_tokens": base.get("max_tokens", 256),
        "messages": removed["messages"],
    }
    blocks = {**anthropic, "system": [{"type": "text", "text": prompt}]}
    return {
        "another system message": (base, other),
        "the system message removed": (base, removed),
        "another top-level system string": (
            {**anthropic, "system": prompt},
            {**anthropic, "system": f"{prompt} Answer {word}."},
        ),
        "another top-level system text block": (
            blocks,
            {**anthropic, "system": [{"type": "text", "text": f"{prompt} Answer {word}."}]},
        ),
    }


_PROBE_RULES = Path(__file__).resolve().parent.parent / "rules" / "key_probes.toml"


def _differ_fields(path: Path = _PROBE_RULES) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(what, fields set on both requests, fields set on the second) for each ``[[differ]]`` of the rule file:
    the request fields the take-home keeps in the key."""
    where = f"{path}: "
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{where}cannot read the key probe rules: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}invalid TOML ({exc}); fix the syntax") from None
    entries = data.get("differ")
    if data.get("version") != 1 or not isinstance(entries, list):
        raise ValueError(f"{where}expected 'version = 1' and [[differ]] entries")
    out = []
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise ValueError(f"{where}[[differ]] entry {n} is not a table")
        what, both, fields = entry.get("what"), entry.get("both", {}), entry.get("set")
        if not isinstance(what, str) or not what:
            raise ValueError(f"{where}[[differ]] entry {n}: needs 'what', a label for the probe")
        if not isinstance(both, dict) or not isinstance(fields, dict) or not fields:
            raise ValueError(
                f"{where}[[differ]] entry {n}: needs 'set', a table of fields, and 'both' must be a table"
            )
        dropped = (set(both) | set(fields)) & _MAY_DROP
        if dropped:
            raise ValueError(
                f"{where}[[differ]] entry {n}: {', '.join(sorted(dropped))} may be left out of the key "
                "(the take-home allows dropping it): not a field to probe"
            )
        out.append((what, both, fields))
    return out


# Top-level fields a key function may drop: an end-user tag, request ids, caching and usage switches.
_MAY_DROP = {"user", "metadata", "request_id", "stream_options", "cache_control"}


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
