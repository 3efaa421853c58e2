"""The loud-miss check: a missing tape must fail loudly, never reach the network or invent an answer."""

from __future__ import annotations

import ast
import functools
import re
import secrets as _random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, cast

from grader import pysource, walk
from grader.acquire import no_space, no_space_reason
from grader.checks import CheckResult, Finding, register, reworded_rerun
from grader.checks.ask_in_suite import exit_code, in_suite_argv, is_module_command
from grader.checks.canary import make_canary
from grader.checks.demo_run import demo_run
from grader.checks.drift import drift_run
from grader.checks.keys import prompt_blind
from grader.checks.serve_probe import ServeProbe, probe_serve
from grader.checks.served_answers import served_answers
from grader.checks.unrecorded_inputs import unrecorded_inputs
from grader.context import for_want_of_room, makefile_target_lines
from grader.details import counted
from grader.drift_run import ANSWER_KEYS, printed_objects
from grader.errors import NotAssessable
from grader.manifest import package_command
from grader.safeio import read_text
from grader.secrets.findings import fingerprint
from grader.standin import system_prompts
from grader.tapes import is_tape_file, tapes_of

if TYPE_CHECKING:
    from grader.audit import AuditLog
    from grader.context import Context, ReplayRun
    from grader.sandbox import RunResult

__all__ = ["loud_miss", "made_up_passes", "probe_key_fingerprint", "scan_fallbacks", "start_loud_miss"]

# Names of the two probes when `start_loud_miss` runs them in the background (Context.start_probe).
_RERUN = "loud-miss withheld-tapes"
_UNSEEN = "loud-miss unseen-message"
_UNSEEN_NOW = "loud-miss unseen-message (in the check)"
_IN_TESTS = "loud-miss unseen-message in a test"
_REWORDED = "loud-miss withheld-tapes, inputs re-worded"
_IN_PLACE = "loud-miss inputs re-worded, tapes in place"
_PROMPT_REWORDED = "loud-miss withheld-tapes, system prompts re-worded"
_PROMPT_IN_PLACE = "loud-miss system prompts re-worded, tapes in place"
_PROBE_KEY = "loud-miss key at hand"
_MAX_ANSWERED_SHOWN = 10  # tests that answered a never-recorded request: a finding for each of these

# The triage command run inside a pytest test of the submission's own suite (red-team R5: a client that
# invents answers only under pytest, for requests it never recorded, kept its command line honest):
# grader/checks/ask_in_suite.py.
# A failure or a stderr line "names the missing tape" when it says one of these: the kit's CassetteMiss,
# vcrpy's CannotOverwriteExistingCassetteException, or any wording about a cassette/tape that is missing.
_NAMES_TAPE = re.compile(r"cassette|tape|make record|\b[0-9a-f]{16,64}\b", re.IGNORECASE)
# Only what the failure *says* counts, not where it passed: pytest's traceback source lines (indented or
# ">"-marked) quote the recorder's code ("cassette.play_response(...)"), and paths name the recorder's
# modules (vcr/cassette.py), hashed cache folders and the grader's own "withheld-tapes" log files.
_PATH = re.compile(r"\S*[/\\]\S*")
_SOURCE_LINE = re.compile(r"^(?:\s|>)")
# A traceback frame inside vcrpy (its HTTP-library stubs), in pytest's report of the withheld-tape rerun.
_VCR_FRAME = re.compile(r"[/\\]vcr[/\\](?:stubs|patch|cassette)")
_BROAD = {"Exception", "BaseException"}
_NETWORK_CALLS = {
    "handle_request",
    "handle_async_request",
    "urlopen",
    "request",
    "post",
    "send",
    "create",
    "Client",
    "AsyncClient",
    "HTTPTransport",
    "AsyncHTTPTransport",
}
_SOURCE_CAP = 2_000_000  # a source file bigger than this is not the submission's own code
_MAX_SOURCES = 2000  # files, and bytes below: a checkout with more is not read further
_MAX_SOURCE_BYTES = 64_000_000


@dataclass(frozen=True)
class _Fallback:
    location: str
    what: str


def _handler_names(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return {"BaseException"}
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = set()
    for node in nodes:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _reraises(body: list[ast.stmt]) -> bool:
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call) and _call_name(node) in {"exit", "_exit", "abort"}:
            return True
    return False


def _invented_answer(body: list[ast.stmt]) -> bool:
    """A handler that returns a literal dict or string made up on the spot."""
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.Dict, ast.JoinedStr)):
            return True
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant):
            return isinstance(node.value.value, str)
    return False


def _network_call(body: list[ast.stmt]) -> str | None:
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call) and _call_name(node) in _NETWORK_CALLS:
            return _call_name(node)
    return None


def _fallbacks_in(source: str, rel: str) -> list[_Fallback]:
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        for handler in node.handlers:
            names = _handler_names(handler)
            catches_miss = any("Miss" in name or "Cassette" in name for name in names)
            broad = bool(names & _BROAD)
            if not (catches_miss or broad) or _reraises(handler.body):
                continue
            where = f"{rel}:{handler.lineno}"
            call = _network_call(handler.body)
            if call:
                found.append(_Fallback(where, f"`except {', '.join(sorted(names))}` falls back to {call}()"))
            elif _invented_answer(handler.body) and (catches_miss or "triage" in source):
                found.append(
                    _Fallback(where, f"`except {', '.join(sorted(names))}` returns a made-up answer")
                )
            elif catches_miss and not any(isinstance(n, ast.Return) for n in ast.walk(handler)):
                found.append(_Fallback(where, f"`except {', '.join(sorted(names))}` swallows the miss"))
    return found


def scan_fallbacks(repo: Path) -> list[_Fallback]:
    """Exception handlers in the submission's own code (not its tests) that hide a cassette miss."""
    found: list[_Fallback] = []
    for path in sorted(walk.own_sources(repo, max_files=_MAX_SOURCES, max_bytes=_MAX_SOURCE_BYTES)):
        rel_parts = path.relative_to(repo).parts
        try:  # no link (here or in a parent), no FIFO, capped (grader/safeio.py)
            source = read_text(path, cap=_SOURCE_CAP, root=repo)
        except OSError:
            continue
        if "except" in source:
            found.extend(_fallbacks_in(source, "/".join(rel_parts)))
    return found


def _said(texts: list[str]) -> str:
    """What failures and output say, without traceback source lines and without paths."""
    kept = []
    for text in texts:
        for line in text.splitlines():
            if line.strip() and not _SOURCE_LINE.match(line):
                kept.append(_PATH.sub(" ", line))
    return "\n".join(kept)


def _withheld_copy(ctx: Context, name: str, cassette_dir: Path) -> tuple[Path, int]:
    """A scratch copy with every tape under ``cassette_dir`` left out (never copied), and how many."""
    return ctx.scratch_copy_without(name, cassette_dir, is_tape_file)


def _prepare_unseen(ctx: Context, command: list[str]) -> Callable[[], tuple[RunResult, AuditLog]]:
    """The triage command on a message no tape holds, ready to run in its own copy, tapes in place.

    With the tapes in place a lenient matcher or a made-up default answers the unseen message as readily as
    a correct layer fails it; withholding them would only test that an absent tape folder is noticed.
    """
    copy = ctx.scratch_copy("unseen-message")
    message = _unseen_message()
    env = {"CASSETTE_MODE": "replay", "CASSETTE_MISS_LOG": str(ctx.log_path("unseen", ".misses.jsonl"))}
    env.update(_key_at_hand(ctx))
    return lambda: ctx.run([*command, message], cwd=copy, env=env, label="unseen-message")


def _key_at_hand(ctx: Context) -> dict[str, str]:
    """A made-up key, shaped like the provider's, in its key variable (the manifest's, else OpenAI's and
    Anthropic's): red team 8, R8-1, a miss that goes live, silently, only when a key is at hand (vcrpy's
    "new episodes") stayed loud in every probe, which ran without one. The network is off: a miss that goes
    live is a connection attempt. The same key for every run of a grade; `probe_key_fingerprint` tells the
    secret scan it is the grader's own."""
    named = ctx.manifest.api_key_env
    # The provider's own names as well as the declared one: a client may read another than it declares (red
    # team 9 found the canary probe handing its key to a name the recorder never read).
    names = [named] if named and named.replace("_", "").isalnum() else []
    names = list(dict.fromkeys([*names, "OPENAI_API_KEY", "ANTHROPIC_API_KEY"]))
    key = ctx.memo(_PROBE_KEY, lambda: make_canary(names[0]))
    return dict.fromkeys(names, key)


def probe_key_fingerprint(ctx: Context) -> str:
    """The fingerprint of the made-up key the unseen-message runs were given ("" when none was made): an
    output that shows it printed the grader's own key, which is no credential of the submission's."""
    key = ctx.memo_get(_PROBE_KEY)
    return fingerprint(key) if isinstance(key, str) else ""


def _unseen_message() -> str:
    # A customer's words with an order number no tape holds; nothing in it says "probe" (docs/security.md).
    return f"Hi, my parcel for order #{100000 + _random.randbelow(900000)} never arrived, where is it?"


def _prepare_in_tests(ctx: Context, command: list[str]) -> Callable[[], tuple[RunResult, AuditLog]] | None:
    """The triage command (``python -m <pkg>`` only) run from a test file added to a copy of the suite,
    tapes in place; None for any other command."""
    if not is_module_command(command):
        return None
    copy = ctx.scratch_copy("unseen-in-tests")
    argv = in_suite_argv(copy, command, _unseen_message())
    if argv is None:
        return None
    env = {"CASSETTE_MODE": "replay", "CASSETTE_MISS_LOG": str(ctx.log_path("in-tests", ".misses.jsonl"))}
    env.update(_key_at_hand(ctx))
    return lambda: ctx.run(argv, cwd=copy, env=env, label="unseen-in-tests")


def _prepare_rerun(ctx: Context, cassette_dir: Path) -> tuple[int, Callable[[], ReplayRun]]:
    """(tapes withheld, the suite rerun in a copy without them), ready to run."""
    copy, withheld = _withheld_copy(ctx, "withheld-tapes", cassette_dir)
    return withheld, lambda: ctx.run_suite(copy, label="withheld-tapes")


def start_loud_miss(ctx: Context) -> None:
    """Start both probes in the background before the first check (``--jobs`` above 1), like the canary.

    Each makes its tapes-withheld copy from the checkout's pristine copy (`Context.keep_pristine`), then
    runs alongside the replay suite and the other checks. The check takes their results; a probe that
    could not make its copy (e.g. no room) returns None and the check runs it itself and says why.
    """
    cassette_dir = ctx.manifest.cassette_dir
    if cassette_dir is None or ctx.env is None:
        return
    command = ctx.manifest.triage_command

    def rerun() -> tuple[int, ReplayRun] | None:
        try:
            withheld, run = _prepare_rerun(ctx, cassette_dir)
        except Exception:
            return None
        return withheld, run()

    def unseen(command: list[str]) -> tuple[RunResult, AuditLog] | None:
        try:
            run = _prepare_unseen(ctx, command)
        except Exception:
            return None
        return run()

    def in_tests(command: list[str]) -> tuple[RunResult, AuditLog] | None:
        try:
            run = _prepare_in_tests(ctx, command)
        except Exception:
            return None
        return run() if run is not None else None

    def reworded(in_place: bool, prompt: bool) -> tuple[reworded_rerun.Prepared, ReplayRun | None] | None:
        try:
            prepared = _prepare_reworded(ctx, cassette_dir, in_place, prompt)
        except Exception:
            return None
        return prepared, prepared.run() if prepared.run is not None else None

    ctx.start_probe(_RERUN, rerun)
    for in_place, prompt in ((False, False), (True, False), (False, True), (True, True)):
        ctx.start_probe(_probe_name(in_place, prompt), functools.partial(reworded, in_place, prompt))
    if command:
        ctx.start_probe(_UNSEEN, lambda: unseen(command))
        ctx.start_probe(_IN_TESTS, lambda: in_tests(command))


def _probes(
    ctx: Context, command: list[str] | None, cassette_dir: Path, facts: dict[str, object]
) -> tuple[ReplayRun, tuple[RunResult, AuditLog] | None]:
    """The withheld-tape rerun and the unseen-message run (None without a triage_command): the ones
    `start_loud_miss` started (waits for them), else (never started, or its copy could not be made in the
    background) each runs now; with ``--jobs`` above 1 the unseen message runs alongside the rerun."""
    unseen = cast("tuple[RunResult, AuditLog] | None", ctx.probe_result(_UNSEEN) if command else None)
    if command and unseen is None:
        # Its own probe name: the background one may have run and returned None (no copy).
        ctx.start_probe(_UNSEEN_NOW, _prepare_unseen(ctx, command), background=ctx.jobs > 1)
    try:
        facts["withheld"], rerun = _withheld_rerun(ctx, cassette_dir)
    finally:
        ctx.wait_probe(_UNSEEN_NOW)  # the unseen run never outlives the check, whatever the rerun did
    if command and unseen is None:
        unseen = cast("tuple[RunResult, AuditLog]", ctx.probe_result(_UNSEEN_NOW))
    return rerun, unseen


def _withheld_rerun(ctx: Context, cassette_dir: Path) -> tuple[int, ReplayRun]:
    """(tapes withheld, the suite's rerun without them): the one `start_loud_miss` started (waits for it),
    else run now; once per grade, whichever check asks first (loud-miss, or replay for `made_up_passes`)."""

    def get() -> tuple[int, ReplayRun]:
        started = cast("tuple[int, ReplayRun] | None", ctx.probe_result(_RERUN))
        if started is not None:
            return started
        withheld, run = _prepare_rerun(ctx, cassette_dir)
        return withheld, run()

    return ctx.memo(_RERUN, get)


def _probe_name(in_place: bool, prompt: bool) -> str:
    if prompt:
        return _PROMPT_IN_PLACE if in_place else _PROMPT_REWORDED
    return _IN_PLACE if in_place else _REWORDED


def _prepare_reworded(
    ctx: Context, cassette_dir: Path, in_place: bool, prompt: bool = False
) -> reworded_rerun.Prepared:
    if in_place:
        return reworded_rerun.prepare_in_place(ctx, cassette_dir, prompt=prompt)
    return reworded_rerun.prepare(ctx, cassette_dir, is_tape_file, prompt=prompt)


def _reworded_probe(
    ctx: Context, cassette_dir: Path, *, in_place: bool = False, prompt: bool = False
) -> tuple[reworded_rerun.Prepared, ReplayRun | None] | str:
    """A re-worded rerun (tapes withheld, or ``in_place``; the recorded user messages re-worded, or the
    system prompts when ``prompt``) `start_loud_miss` started (waits for it), else run now, once per grade;
    a string says why it was not run (the grade's budget spent, the replay suite hung)."""
    name = _probe_name(in_place, prompt)

    def get() -> tuple[reworded_rerun.Prepared, ReplayRun | None] | str:
        try:
            started = ctx.probe_result(name)
            if started is not None:
                return cast("tuple[reworded_rerun.Prepared, ReplayRun | None]", started)
            try:
                prepared = _prepare_reworded(ctx, cassette_dir, in_place, prompt)
            except NotAssessable:
                raise
            except Exception as exc:  # a probe the grader could not prepare costs the submission nothing
                if no_space(exc):
                    raise NotAssessable(no_space_reason("workspace", ctx.workspace.root)) from None
                return f"its copy could not be prepared ({type(exc).__name__}: {str(exc)[:200]})"
            return prepared, prepared.run() if prepared.run is not None else None
        except NotAssessable as exc:
            if for_want_of_room(exc.reason):
                # Not run for a full disk (a flood of the suite's own, under way while the copy was made:
                # red team 30): the rows it informs wait for the room, never scored without it.
                raise
            return str(exc)

    return ctx.memo(name, get)


def made_up_passes(ctx: Context) -> list[reworded_rerun.Answered]:
    """Tests of the suite that passed on a request no tape holds: their recorded messages (or, red team 6
    H1, the recorded system prompts) re-worded, with
    the tapes withheld or with every tape in place (loud-miss's re-worded runs, compared as it compares
    them). The replay check reads this (red team 4, F3): such a pass is one nobody recorded, like a pass
    on an edited tape. Empty when the runs were not made (no cassette folder, nothing re-worded, no
    environment, the grade's budget spent)."""
    cassette_dir = ctx.manifest.cassette_dir
    if cassette_dir is None or ctx.env is None:
        return []
    try:
        rerun = _withheld_rerun(ctx, cassette_dir)[1]
    except NotAssessable:
        return []
    answered = []
    for prompt in (False, True):
        for in_place in (False, True):
            compared = _comparison(ctx, cassette_dir, rerun, prompt=prompt, in_place=in_place)
            answered += compared[1] if compared is not None else []
    seen: set[str] = set()
    passes = []
    for item in answered:
        if item.how == "passed" and item.test not in seen:
            seen.add(item.test)
            passes.append(item)
    return passes


def _comparison(
    ctx: Context, cassette_dir: Path, rerun: ReplayRun, *, prompt: bool, in_place: bool
) -> tuple[int, list[reworded_rerun.Answered]] | None:
    """(tests compared, those that answered without a miss) for one re-worded run against the withheld-tape
    rerun (and, ``in_place``, its tapes-withheld twin): made once per grade, as loud-miss and the replay
    check both read it. None when a run it needs was not made or left no per-test outcomes."""

    def get() -> tuple[int, list[reworded_rerun.Answered]] | None:
        reworded = _reworded_probe(ctx, cassette_dir, prompt=prompt)
        if isinstance(reworded, str) or reworded[1] is None:
            return None
        if not in_place:
            compared = reworded_rerun.answered(rerun, reworded[1], _names_miss)
        else:
            probe = _reworded_probe(ctx, cassette_dir, in_place=True, prompt=prompt)
            if isinstance(probe, str) or probe[1] is None:
                return None
            compared = reworded_rerun.answered_in_place(
                rerun, reworded[1], probe[1], _names_miss, _tape_holds(ctx)
            )
        if compared is None:
            return None
        inputs = "its recorded system prompt" if prompt else "its recorded messages"
        return compared[0], [replace(item, inputs=inputs) for item in compared[1]]

    return ctx.memo(f"loud-miss compared: prompt={prompt} in_place={in_place}", get)


def _tape_holds(ctx: Context) -> Callable[[str], bool]:
    """Whether a committed tape holds a key (in its path or text): every tape's path and text joined once,
    when first asked (a key has no newline)."""

    @functools.cache
    def held() -> str:
        return "\n".join(part for tape in tapes_of(ctx) for part in (tape.path, tape.text))

    return lambda key: key in held()


def _in_tests_probe(ctx: Context, command: list[str] | None) -> tuple[RunResult, AuditLog] | None:
    """The in-tests run `start_loud_miss` started (waits for it), else run now; None when not applicable."""
    if not command:
        return None
    started = cast("tuple[RunResult, AuditLog] | None", ctx.probe_result(_IN_TESTS))
    if started is not None:
        return started
    run = _prepare_in_tests(ctx, command)
    return run() if run is not None else None


@register("loud-miss", probes=start_loud_miss)
def loud_miss(ctx: Context) -> CheckResult:
    """A missing tape fails loudly instead of reaching the network or inventing an answer.

    Three probes: a static scan for exception handlers that hide a miss; the replay suite rerun in a scratch
    copy with every tape withheld (it must fail, name the missing tape, and connect nowhere); and, when the
    manifest has a triage_command, that command on a message no tape holds (it must exit 2, connect nowhere),
    once as a command and once from a test file added to the suite (``python -m <pkg>`` commands).
    A fourth reruns the suite with the tapes withheld and every recorded user message re-worded (one word
    inserted) wherever the repository's text files hold it, so the suite's own calls send requests no tape
    ever held: a test that failed naming a miss in the withheld-tape rerun must fail naming one again; one
    that passes or fails on something else answered a never-recorded request (red-team R5, R5b, R5c: a
    client that stays loud for recorded keys or for the grader's entry points). When no recorded message
    occurs in any text file the suite's inputs were not reached and nothing is held against it. The same
    re-worded inputs run once more with every tape in place (red team 4, F3: a client that invents answers
    only when its tape folder is whole, as it is in the real run): a test whose miss named a new key once
    re-worded must fail naming a miss there too. Both runs are made once more with only the recorded system
    prompts re-worded (each prompt, line and sentence a text file holds; red team 6, H1: a cassette that
    serves the tape of the same ticket for a key it lacks passes its suite on answers recorded for another
    prompt).
    When the Makefile has a ``serve`` target, a fifth (grader/checks/serve_probe.py): the replay server,
    loopback only, must answer a recorded request with its recorded answer and an unseen one with 422 naming
    a key; a 2xx for the unseen request is one more silent fallback, and no HTTP answer at all (the server
    crashed, reset or hung) is not loud. No server is needed for full marks.

    Facts:
        loud: the withheld-tape rerun failed naming a missing tape, an unseen message (if probed)
            exited 2, as a command and inside a test, `make serve` (if probed) gave an unseen request an
            HTTP answer, and no test answered a re-worded request
        network_attempts: connection attempts in both probes (audit hook, or refused by pytest-socket)
        silent_fallbacks: exception handlers in the submission's code that hide a miss (static scan)
        withheld: tapes withheld for the rerun
        withheld_failed: tests that failed or errored with the tapes withheld
        withheld_passed: tests that still passed with the tapes withheld
        named_miss: a failure message, output line or the miss ledger named the missing tape (paths excluded)
        unseen_exit: exit code of triage_command on an unseen message (-1 when not available)
        unseen_printed_answer: that run printed an answer (a JSON object with ``intent`` or ``needs_human``)
            on its stdout, whatever its exit: a made-up default for whatever reads the output (not loud)
        unseen_exit_package: ``python -m <pkg>`` (the package's own entry point, what the brief names) on
            an unseen message, when the manifest's triage_command is another command (-1 otherwise): a strict
            twin declared beside a lenient entry point (red team 9) shows here
        unseen_package_answered: that run exited 0 printing an answer (a JSON object with ``intent`` or
            ``needs_human``): made up, so not loud; any other exit of an entry point that is not the
            declared command is not held against it
        unseen_exit_in_tests: the same command (``python -m <pkg>`` only) run from a test file added to the
            suite, under pytest (-1 when not available or when that test did not run): a client that invents
            answers only under pytest shows here
        reworded_occurrences: places where a recorded user message was re-worded for the re-worded
            rerun (the tapes withheld, every recorded message in the repository's text files given one more
            word, in its JSON, Python, CSV or YAML spelling too); 0: no text file holds one, not probed
        reworded_files: files those places are in
        reworded_compared: tests that failed naming a miss in the withheld-tape rerun, compared with the
            re-worded rerun
        reworded_answered: of those, tests that passed or failed without naming a miss with their inputs
            re-worded: they answered a request no tape ever held (a finding each, with the test id)
        reworded_in_place_compared: tests whose miss named a key no tape holds once their inputs were
            re-worded (so their request changed), compared with the same re-worded inputs run with every
            tape in place (red team 4, F3: a client that invents answers only when its tape folder is whole)
        reworded_in_place_answered: of those, tests that passed or failed without naming a miss there (a
            finding each)
        prompt_reworded_occurrences: places where a recorded system prompt (or one of its lines) was
            re-worded for the system-prompt runs (red team 6, H1: a cassette that serves the tape of the
            same ticket for a key it lacks); 0: no text file holds one, not probed
        prompt_reworded_compared: tests that failed naming a miss in the withheld-tape rerun, compared with
            the system prompts re-worded and the tapes withheld
        prompt_reworded_answered: of those, tests that passed or failed without naming a miss there
        prompt_in_place_compared: tests whose miss named a key no tape holds once the system prompts were
            re-worded, compared with the same run with every tape in place
        prompt_in_place_answered: of those, tests that passed or failed without naming a miss there: they
            were answered from a tape recorded for another system prompt (a finding each)
        prompt_unheld: the agent sends a system prompt (the drift probe's stand-in received one) that no
            tape's stored request holds, and the key-function probe showed its key unchanged by another
            prompt (red team 6, H6): a prompt changed after recording replays the old answers and no miss
            can show it (a `prompt-not-recorded` finding at the key function; not loud)
        unrecorded_suspects: tests that passed in the suite's run having tried to open a tape path that does
            not exist (the audit hook files each open under its test): they may have passed on a miss
        unrecorded_asked: strings of those tests' inputs (the data files they opened, their test file's
            string literals) that no tape holds, given to the triage command offline, tapes in place (at
            most 10, data files first)
        unrecorded_answered: of those, strings it answered (an answer printed, whatever the exit): a layer
            inventing answers on a miss only for inputs it knows (red team 15, F2); a `made-up-answer`
            finding each, at the string's file:line, and not loud
        miss_answers_served: requests in the suite's run for which the cassette layer opened no tape, only
            tried paths that do not exist, and the HTTP client was still handed an answer no tape of that
            ticket holds (red team 17: seen in the suite's process, whatever request the triage command
            sends; httpx/httpx2 clients); a `made-up-answer` finding each, at the layer's line that tried
            the path, and not loud
        demo_passed_a_miss: `make demo`'s own run (make-targets', every tape in place) exited 0 after trying a
            tape path whose key no tape file has (red team 22: a batch mode that invents only while its tape
            folder holds tapes): not loud
        demo_withheld_exit: `make demo` run with every tape withheld (a scratch copy, as make-targets runs it
            otherwise; -1 when there is no demo target): a demo that exits 0 there showed a table no tape
            backs (red team 21: a batch mode that labels every failed ticket `other`), so not loud
        serve_probed: a `make serve` replay server was started and answered the probe
        serve_replayed: it answered the recorded request with HTTP 200 and the recorded answer
        serve_unseen_status: its HTTP status for a request no tape holds (-1 when not probed, or when it
            gave no HTTP answer)
        serve_names_key: that answer was HTTP 422 with a key (16+ hex characters) in its body
        summary: one line
    """
    fallbacks = scan_fallbacks(ctx.repo)
    found = _Found(
        facts={
            "silent_fallbacks": len(fallbacks),
            "network_attempts": 0,
            "withheld": 0,
            "withheld_failed": 0,
            "withheld_passed": 0,
            "named_miss": False,
            "unseen_exit": -1,
            "unseen_printed_answer": False,
            "unseen_exit_in_tests": -1,
            "unseen_exit_package": -1,
            "unseen_package_answered": False,
            "loud": False,
            "demo_withheld_exit": -1,
            "demo_passed_a_miss": False,
            "serve_probed": False,
            "serve_replayed": False,
            "serve_unseen_status": -1,
            "serve_names_key": False,
            "reworded_occurrences": 0,
            "reworded_files": 0,
            "reworded_compared": 0,
            "reworded_answered": 0,
            "reworded_in_place_compared": 0,
            "reworded_in_place_answered": 0,
            "prompt_reworded_occurrences": 0,
            "prompt_reworded_compared": 0,
            "prompt_reworded_answered": 0,
            "prompt_in_place_compared": 0,
            "prompt_in_place_answered": 0,
            "prompt_unheld": False,
            "unrecorded_suspects": 0,
            "unrecorded_asked": 0,
            "unrecorded_answered": 0,
            "miss_answers_served": 0,
        },
        findings=[Finding("silent-fallback", f.what, f.location) for f in fallbacks],
        details=[f"{f.location}: {f.what}" for f in fallbacks],
    )
    if ctx.env is None and ctx.install_failed:
        # The submission's own dependencies cannot be installed: no miss could be provoked, scored so.
        found.facts["summary"] = f"not run: {str(ctx.install_error).splitlines()[0]}"
        return found.result()
    ctx.require_env()
    cassette_dir = ctx.manifest.cassette_dir
    if cassette_dir is None:
        found.facts["summary"] = "no cassette folder found: nothing to withhold, a miss cannot be provoked"
        return found.result()
    command = ctx.manifest.triage_command
    rerun, unseen_run = _probes(ctx, command, cassette_dir, found.facts)
    failed, named = _rerun_facts(found, rerun)
    unseen_ok = _unseen_facts(found, unseen_run, command)
    unseen_ok = _in_tests_facts(found, _in_tests_probe(ctx, command), command) and unseen_ok
    entry = package_command(ctx.repo)
    if command and entry and entry != command:
        # The manifest may name a strict command beside a lenient `python -m <pkg>` that the README, `make
        # demo` and the brief use (red team 9): the package's own entry point is asked too.
        twin = _prepare_unseen(ctx, entry)()
        code = twin[0].returncode if twin[0].returncode is not None else -1
        found.facts["unseen_exit_package"] = code
        # Only an answer it made up counts against it: a `__main__` that is not a triage command (a server,
        # a usage line, an error) is why a manifest names another one.
        made_up = code == 0 and _prints_an_answer(twin[0].stdout)
        found.facts["unseen_package_answered"] = made_up
        if made_up or twin[1].network_attempts:
            _unseen_facts(found, twin, entry, record=False)  # its detail line and connection attempts
            unseen_ok = False
    answered = []
    for prompt in (False, True):
        reworded = _reworded_probe(ctx, cassette_dir, prompt=prompt)
        compared = _comparison(ctx, cassette_dir, rerun, prompt=prompt, in_place=False)
        answered += _reworded_facts(found, reworded, compared, prompt)
        if not isinstance(reworded, str) and reworded[1] is not None:
            in_place = _reworded_probe(ctx, cassette_dir, in_place=True, prompt=prompt)
            compared = _comparison(ctx, cassette_dir, rerun, prompt=prompt, in_place=True)
            answered += _in_place_facts(found, in_place, compared, prompt)
    unheld = _prompt_unheld(ctx)
    if unheld is not None:
        found.facts["prompt_unheld"] = True
        found.findings.append(Finding("prompt-not-recorded", unheld[1], unheld[0]))
        found.details.append(f"{unheld[0]} {unheld[1]}")
    unrecorded_ok = _unrecorded_facts(ctx, found, command)
    served_ok = _served_facts(ctx, found)
    demo_ok = _demo_facts(ctx, found, cassette_dir)
    serve = _serve_facts(found, probe_serve(ctx), len(fallbacks))
    _attempt_findings(found, rerun)
    # A server that gives an unseen request no HTTP answer (crashed, reset, hung) did not refuse it loudly.
    serve_ok = not serve.ran or serve.unseen_status > 0
    found.facts["loud"] = (
        failed > 0
        and named
        and not found.attempts
        and unseen_ok
        and serve_ok
        and not answered
        and unheld is None
        and unrecorded_ok
        and served_ok
        and demo_ok
    )
    found.facts["summary"] = _summary(found, failed, bool(command), fallbacks, serve)
    return found.result()


def _unrecorded_facts(ctx: Context, found: _Found, command: list[str] | None) -> bool:
    """Red team 15, F2: the suite's own inputs that no tape holds, from tests that passed on a miss, given
    to the triage command (grader/checks/unrecorded_inputs.py); whether none was answered."""
    if not command:
        return True
    try:
        rr = ctx.replay_run()
    except NotAssessable:
        return True
    env = {"CASSETTE_MODE": "replay", "CASSETTE_MISS_LOG": str(ctx.log_path("unrecorded", ".misses.jsonl"))}
    env.update(_key_at_hand(ctx))
    probe = unrecorded_inputs(ctx, rr, command, env)
    if probe is None:
        return True
    found.facts["unrecorded_suspects"] = probe.suspects
    found.facts["unrecorded_asked"] = probe.asked
    found.facts["unrecorded_answered"] = len(probe.made)
    for made in probe.made:
        what = (
            f"{made.test} passed on a miss; the triage command answered its input {made.message[:80]!r}, "
            f"which no tape holds, with {made.said}"
        )
        found.findings.append(Finding("made-up-answer", what, made.where))
        found.details.append(f"{made.where}: {what}")
    if probe.made:
        found.unrecorded_first = f"{probe.made[0].where}: {probe.made[0].message[:60]!r}"
    return not probe.made


def _demo_facts(ctx: Context, found: _Found, cassette_dir: Path) -> bool:
    """Red team 21, F1: `make demo` with every tape withheld must not exit 0. The triage command is asked
    about one message at a time; a demo may go through another path of the same program (a batch mode over
    a data file) that turns each failed ticket into a label of its own. Red team 22, F2: such a path may
    invent only while its tape folder holds tapes, so the demo's own run (every tape in place) must not exit
    0 after trying a tape that does not exist either. Whether it was loud (True when there is no demo
    target)."""
    targets = makefile_target_lines(ctx.repo)
    if "demo" not in targets:
        return True  # make-targets scores a missing demo
    real, real_audit = demo_run(ctx)
    missed = _missed_tapes(ctx, real_audit, cassette_dir)
    found.facts["demo_passed_a_miss"] = bool(missed) and real.returncode == 0 and not real.timed_out
    if found.facts["demo_passed_a_miss"]:
        what = (
            f"`make demo` exited 0 after trying {counted(len(missed), 'tape')} that no tape file holds "
            f"(first: {missed[0]}): a miss that did not fail the demo, so what it showed for it was made up"
        )
        found.findings.append(Finding("made-up-answer", what, targets["demo"]))
        found.details.append(f"{targets['demo']}: {what}")
        return False
    copy, withheld = _withheld_copy(ctx, "demo-withheld", cassette_dir)
    if not withheld:
        return True
    run, audit = ctx.run(
        ["make", "demo"],
        cwd=copy,
        env={"CASSETTE_MISS_LOG": str(ctx.log_path("demo", ".misses.jsonl"))},
        label="make demo",
    )
    code = run.returncode if run.returncode is not None and not run.timed_out else -1
    found.facts["demo_withheld_exit"] = code
    found.attempts.extend((e.where, e.target) for e in audit.network_attempts)
    _unrouted(found, run, "`make demo` with the tapes withheld", bool(audit.network_attempts))
    if code != 0:
        return not audit.network_attempts
    lines = [line.strip() for line in run.stdout.splitlines() if line.strip()]
    shown = f", printing {lines[-1][:120]!r}" if lines else ""
    what = (
        f"`make demo` with all {counted(withheld, 'tape')} withheld exited 0{shown}: whatever it showed, no "
        "tape backs it; a miss must fail the demo too"
    )
    found.findings.append(Finding("made-up-answer", what, targets["demo"]))
    found.details.append(f"{targets['demo']}: {what}")
    return False


def _missed_tapes(ctx: Context, audit: AuditLog, cassette_dir: Path) -> list[str]:
    """Paths under the tape folder the run tried that do not exist, whose key (the name up to its first
    dot) no tape file has either: a layer trying ``<key>.json.gz`` before ``<key>.json`` missed nothing."""
    folder = PurePosixPath(cassette_dir.as_posix())
    try:
        held = {p.name.split(".", 1)[0] for p in (ctx.repo / cassette_dir).iterdir()}
    except OSError:
        held = set()
    missed = []
    for rel in sorted(audit.opened):
        path = PurePosixPath(rel)
        if path.is_absolute() or ".." in path.parts or not path.is_relative_to(folder):
            continue
        if path.name.split(".", 1)[0] in held or (ctx.repo / rel).exists():
            continue
        missed.append(rel)
    return missed


def _served_facts(ctx: Context, found: _Found) -> bool:
    """Red team 17: in the suite's own run, requests for which the cassette layer found no tape (it tried
    only paths that do not exist) and the HTTP client was handed an answer anyway; whether there were none."""
    served = served_answers(ctx)
    invented = served.invented if served is not None else []
    found.facts["miss_answers_served"] = len(invented)
    for item in invented:
        what = (
            f"{item.test or 'a request made outside any test'}: the cassette layer tried {item.tried}, which "
            f"does not exist, and the HTTP client was handed {item.sent} for {item.message[:80]!r}, which "
            + (f"no tape of that ticket holds (they hold {item.held})" if item.held else "no tape holds")
        )
        found.findings.append(Finding("made-up-answer", what, item.where))
        found.details.append(f"{item.where}: {what}")
    if invented and not found.unrecorded_first:
        found.unrecorded_first = f"{invented[0].where}: {invented[0].message[:60]!r}"
    return not invented


def _prompt_unheld(ctx: Context) -> tuple[str, str] | None:
    """(where, what) when the agent sends a system prompt that neither its key nor any tape holds (red team 6,
    H6): no stored request holds a prompt, the key-function probe showed the key unchanged by another one,
    and the drift probe's stand-in received one. Then a prompt changed after recording is answered from the
    old tapes and nothing offline can tell; the re-worded runs cannot show it either (the same keys miss with
    any prompt). None when any of the three is not shown (a probe that did not run charges nothing)."""
    bodies = [i.request_body for tape in tapes_of(ctx) for i in tape.interactions]
    if not any(isinstance(body, dict) for body in bodies) or any(system_prompts(b) for b in bodies):
        return None
    blind = prompt_blind(ctx)
    if blind is None:
        return None
    run = drift_run(ctx)
    if isinstance(run, NotAssessable) or not run.ran:
        return None
    calls = [call for outcome in run.outcomes for call in outcome.calls]
    sent = sum(bool(call.system) for call in calls)
    if not sent:
        return None
    where, _, probe = blind.partition(" probe: ")
    what = (
        f"the agent sends a system prompt ({sent} of {counted(len(calls), 'request')} in the drift probe) "
        f"that no tape's stored request holds, and its key ignores it ({probe or blind}): a prompt changed "
        "after recording is answered from the old tapes without a miss"
    )
    return where, what


@dataclass
class _Found:
    """What the loud-miss probes found so far: the check's facts, findings, details and the connection
    attempts (where, what) of every probe."""

    facts: dict[str, object]
    findings: list[Finding]
    details: list[str]
    attempts: list[tuple[str, str]] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)  # test ids that answered a re-worded request
    answered_how: str = ""  # how they were found, for the summary
    unrecorded_first: str = ""  # file:line and start of the first unrecorded input answered

    def result(self) -> CheckResult:
        return CheckResult(self.facts, self.findings, self.details)


def _rerun_facts(found: _Found, rerun: ReplayRun) -> tuple[int, bool]:
    """The withheld-tape rerun: how many failed and passed, whether a failure named the missing tape, and
    its connection attempts. Returns (tests failed, the miss was named)."""
    res = rerun.results
    failed = (res.failed + res.errors) if res else 0
    found.facts["withheld_failed"] = failed
    found.facts["withheld_passed"] = res.passed if res else 0
    found.attempts += [(e.where, e.target) for e in rerun.audit.network_attempts]
    _unrouted(found, rerun.run, "the withheld-tape rerun", bool(rerun.audit.network_attempts))
    # pytest-socket refuses getaddrinfo/connect before any socket exists, so the audit hook never sees
    # those: a recorder that falls through to the network (pytest-vcr's default `once`) shows up here.
    found.attempts += [(where, what) for where, what in rerun.blocked]
    if not rerun.blocked and res:
        found.attempts += [
            (line.split(" (", 1)[0], "socket refused by pytest-socket")
            for line in res.first_failures
            if "SocketBlockedError" in line
        ]
    failure_text = _said(
        [*(res.first_failures if res else []), rerun.run.stdout[-20000:], rerun.run.stderr[-20000:]]
    )
    named = bool(rerun.misses) or bool(_NAMES_TAPE.search(failure_text))
    found.facts["named_miss"] = named
    return failed, named


def _unrouted(found: _Found, run: RunResult, which: str, seen: bool) -> None:
    """Red team 5, G6: what left for the network past the audit hook (a `curl` child, any non-Python
    process), counted by the run's own network namespace: one attempt, unless the hook already saw some."""
    if run.no_route and not seen:
        found.attempts.append(
            (
                f"({which})",
                f"{counted(run.no_route, 'packet')} toward the network from a process the audit hook does "
                "not see (not Python: curl, wget, a shell)",
            )
        )


def _unseen_facts(
    found: _Found,
    unseen_run: tuple[RunResult, AuditLog] | None,
    command: list[str] | None,
    *,
    record: bool = True,
) -> bool:
    """The unseen-message run's exit (``record``: as ``unseen_exit``) and attempts; whether it was loud (True
    when it was not probed)."""
    if unseen_run is None:
        return True
    run, audit = unseen_run
    if record:
        found.facts["unseen_exit"] = run.returncode if run.returncode is not None else -1
    found.attempts.extend((e.where, e.target) for e in audit.network_attempts)
    _unrouted(found, run, "the unseen-message run", bool(audit.network_attempts))
    # Red team 16, F3: an answer printed on a miss is a made-up default to whatever reads stdout, whatever
    # the exit status says.
    printed = _prints_an_answer(run.stdout)
    if record:
        found.facts["unseen_printed_answer"] = printed
    if run.returncode != 2 or printed:
        shown = " ".join(command or [])
        what = f"exited {run.returncode}"
        if printed or (run.returncode == 0 and run.stdout.strip()):
            what = f"answered {run.stdout.strip()[:120]!r} and exited {run.returncode}"
        found.details.append(f"`{shown} <unseen message>` {what}; a miss must exit 2 and print no answer")
    return run.returncode == 2 and not printed and not audit.network_attempts


def _in_tests_facts(
    found: _Found, run_audit: tuple[RunResult, AuditLog] | None, command: list[str] | None
) -> bool:
    """The command's exit inside a test (grader/checks/ask_in_suite.py); whether it was loud. A
    test that never reached its end (collection failed) says nothing either way: noted, not held against."""
    if run_audit is None:
        return True
    run, audit = run_audit
    found.attempts.extend((e.where, e.target) for e in audit.network_attempts)
    _unrouted(found, run, "the unseen message inside a test", bool(audit.network_attempts))
    shown = " ".join(command or [])
    code = exit_code(run)
    if code is None:
        found.details.append(
            f"`{shown} <unseen message>` inside a test of the suite did not run (pytest {run.returncode})"
        )
        return not audit.network_attempts
    found.facts["unseen_exit_in_tests"] = code
    if code != 2:
        answer = [line for line in run.stdout.splitlines() if line.strip() and not line.startswith(".")]
        what = f"exited {code}" + (f" after printing {answer[0][:120]!r}" if answer else "")
        found.details.append(
            f"`{shown} <unseen message>` inside a test of the suite {what}; a miss must exit 2"
        )
    return code == 2 and not audit.network_attempts


def _prints_an_answer(stdout: str) -> bool:
    """``stdout`` holds a JSON object with ``intent`` or ``needs_human``: an answer."""
    return any(ANSWER_KEYS & set(value) for value in printed_objects(stdout))


def _names_miss(text: str) -> bool:
    return bool(_NAMES_TAPE.search(_said([text])))


def _reworded_facts(
    found: _Found,
    probe: tuple[reworded_rerun.Prepared, ReplayRun | None] | str,
    compared_answered: tuple[int, list[reworded_rerun.Answered]] | None,
    prompt: bool = False,
) -> list[reworded_rerun.Answered]:
    """The re-worded rerun (user messages, or system prompts when ``prompt``) compared per test with the
    withheld-tape rerun: its facts, a detail line saying what was re-worded where, and a finding per test
    that answered a never-recorded request (returned)."""
    run_name, what, fact = (
        ("system-prompt re-worded rerun", "recorded system-prompt piece", "prompt_reworded")
        if prompt
        else ("re-worded rerun", "recorded user message", "reworded")
    )
    if isinstance(probe, str):
        found.details.append(f"{run_name} not run: {probe}")
        return []
    prepared, run = probe
    done = prepared.rewording
    found.facts[f"{fact}_occurrences"] = done.occurrences
    if not prompt:
        found.facts["reworded_files"] = len(done.files)
    if run is None and prepared.failed:
        found.details.append(f"{run_name} not run: {prepared.failed}")
        return []
    if run is None:
        why = (
            f"none of the {counted(prepared.messages, what)} occurs in the repository's text files"
            if prepared.messages
            else f"no {what} to re-word"
        )
        found.details.append(
            f"{run_name} not run: {why}, so the suite's own calls were not probed with requests no tape "
            "ever held (not held against the submission)"
        )
        return []
    shown = ", ".join(done.places[:5]) + (", …" if len(done.places) > 5 else "")
    head = (
        f"{run_name}: {counted(done.found, what)} re-worded at "
        f"{counted(done.occurrences, 'place')} in {counted(len(done.files), 'file')} ({shown}), "
        "tapes withheld"
    )
    if compared_answered is None:
        found.details.append(f"{head}: not compared, the run left no per-test outcomes")
        return []
    compared, answered = compared_answered
    found.facts[f"{fact}_compared"], found.facts[f"{fact}_answered"] = compared, len(answered)
    found.details.append(
        f"{head}: of {counted(compared, 'test')} that failed naming a miss with the tapes withheld, "
        f"{len(answered)} answered without one"
    )
    inputs = "its system prompt re-worded" if prompt else "its inputs re-worded"
    _answered_findings(
        found, answered, compared, ("every tape withheld", "the tapes withheld", "ever held"), inputs
    )
    return answered


def _answered_findings(
    found: _Found,
    answered: list[reworded_rerun.Answered],
    compared: int,
    said: tuple[str, str, str],
    inputs: str = "its inputs re-worded",
) -> None:
    """A `made-up-answer` finding for each of the first tests that answered a re-worded request, and the
    first run that found any, for the summary. ``said``: how the tapes were, in a finding and in the
    summary, and what "no tape" did ("ever held", "holds"); ``inputs``: what was re-worded."""
    tapes, tapes_summary, held = said
    for item in answered[:_MAX_ANSWERED_SHOWN]:  # the report lists each finding under the row's details
        what = f"{item.test} {item.how} with {inputs} and {tapes}: it answered a request no tape {held}"
        found.findings.append(Finding("made-up-answer", what, item.where))
    if answered and not found.answered:
        found.answered = [item.test for item in answered]
        whose = "recorded system prompts" if "system prompt" in inputs else "recorded messages"
        found.answered_how = (
            f"with its {whose} re-worded and {tapes_summary}, {len(answered)} of "
            f"{counted(compared, 'test')} answered a request no tape {held} instead of failing on the miss"
        )


def _in_place_facts(
    found: _Found,
    probe: tuple[reworded_rerun.Prepared, ReplayRun | None] | str,
    compared_answered: tuple[int, list[reworded_rerun.Answered]] | None,
    prompt: bool = False,
) -> list[reworded_rerun.Answered]:
    """The re-worded run with every tape in place (red team 4, F3; system prompts re-worded when ``prompt``,
    red team 6, H1), compared per test with both withheld runs: its facts, a detail line, and a finding per
    test that answered a request no tape holds."""
    run_name, fact = (
        ("system-prompt re-worded run", "prompt_in_place")
        if prompt
        else ("re-worded run", "reworded_in_place")
    )
    if isinstance(probe, str):
        found.details.append(f"{run_name} with the tapes in place not run: {probe}")
        return []
    prepared, run = probe
    if run is None:
        found.details.append(
            f"{run_name} with the tapes in place not run: {prepared.failed or 'nothing was re-worded'}"
        )
        return []
    if compared_answered is None:
        found.details.append(f"{run_name} with the tapes in place: not compared, no per-test outcomes")
        return []
    compared, answered = compared_answered
    found.facts[f"{fact}_compared"] = compared
    found.facts[f"{fact}_answered"] = len(answered)
    found.details.append(
        f"{run_name} with every tape in place: of {counted(compared, 'test')} whose miss named a new key "
        f"once re-worded, {len(answered)} answered without one"
    )
    inputs = "its system prompt re-worded" if prompt else "its inputs re-worded"
    _answered_findings(
        found, answered, compared, ("every tape in place", "every tape in place", "holds"), inputs
    )
    return answered


def _serve_facts(found: _Found, serve: ServeProbe, fallbacks: int) -> ServeProbe:
    """The `make serve` probe's facts, details, outbound attempts and fallback finding."""
    found.facts["serve_probed"], found.facts["serve_replayed"] = serve.ran, serve.replayed
    found.facts["serve_unseen_status"], found.facts["serve_names_key"] = serve.unseen_status, serve.names_key
    found.details += serve.details if serve.ran else [f"serve probe {serve.status}"]
    found.attempts += [
        (where.split(" ", 1)[0], "from `make serve`: " + where.split(" ", 1)[-1]) for where in serve.outbound
    ]
    if serve.fallback is not None:
        found.findings.append(serve.fallback)
        found.facts["silent_fallbacks"] = fallbacks + 1
    return serve


def _attempt_findings(found: _Found, rerun: ReplayRun) -> None:
    """Every connection attempt counted, the first five shown as details and findings."""
    attempts = found.attempts
    found.facts["network_attempts"] = len(attempts)
    for where, what in list(dict.fromkeys(attempts))[:5]:
        found.details.append(f"{where}: connection attempt with the tapes withheld ({what})")
        found.findings.append(Finding("network-fallback", "connection attempt on a cassette miss", where))
    if attempts and _VCR_FRAME.search(rerun.run.stdout[-200000:]):
        found.details.append(
            "vcrpy passed the miss through to the network: its `once`, `new_episodes` and `all` record modes "
            "record on a miss (pytest-vcr's default is `once`); replay with record_mode='none' "
            "(pytest-recording's default) so a missing cassette fails"
        )


def _summary(
    found: _Found, failed: int, probed_unseen: bool, fallbacks: list[_Fallback], serve: ServeProbe
) -> str:
    """The check's one line, from the facts gathered."""
    facts, attempts = found.facts, found.attempts
    if facts["loud"]:
        summary = (
            f"with {counted(facts['withheld'], 'tape')} withheld, {counted(failed, 'test')} failed "
            "naming the missing tape and nothing connected"
            + ("; an unseen message exits 2" if probed_unseen else "")
        )
    elif attempts:
        summary = (
            f"silent fallback: {len(attempts)} connection attempts on a cassette miss "
            f"(first: {attempts[0][0]})"
        )
    elif failed == 0 and facts["withheld_passed"] == 0:
        # Red team 13: a suite that cannot start in the sandbox (`-p xdist` absent) was said to have passed.
        summary = (
            f"with {counted(facts['withheld'], 'tape')} withheld, the suite ran no test: a miss was not "
            "shown to fail loudly"
        )
    elif failed == 0:
        summary = (
            f"with {counted(facts['withheld'], 'tape')} withheld, the suite still passed: misses go unnoticed"
        )
    elif not facts["named_miss"]:
        summary = (
            f"with the tapes withheld {counted(failed, 'test')} failed, but no failure names a missing tape"
        )
    elif facts["unseen_exit"] not in (-1, 2):
        summary = f"an unseen message exited {facts['unseen_exit']} instead of 2"
    elif facts["unseen_printed_answer"]:
        summary = "an unseen message exited 2 but printed an answer on stdout: a made-up default"
    elif facts["unseen_package_answered"]:
        summary = (
            "`python -m <pkg>` exited 0 on an unseen message, printing an answer, instead of 2 (the "
            "manifest's triage_command is another command)"
        )
    elif serve.ran and serve.unseen_status <= 0:
        summary = "`make serve` gave no HTTP answer to a request no tape holds (it must answer 422)"
    elif facts["unrecorded_answered"]:
        summary = (
            f"the triage command answered {facts['unrecorded_answered']} of the suite's inputs that no tape "
            f"holds, which a test passed on (first: {found.unrecorded_first})"
        )
    elif facts["miss_answers_served"]:
        summary = (
            f"on {counted(facts['miss_answers_served'], 'request')} of the suite's run the cassette layer "
            "found no tape and the HTTP client was handed an answer no tape holds (first: "
            f"{found.unrecorded_first})"
        )
    elif facts["unseen_exit_in_tests"] in (-1, 2) and found.answered:
        summary = f"{found.answered_how} (first: {found.answered[0]})"
    elif facts["prompt_unheld"] and facts["unseen_exit_in_tests"] in (-1, 2):
        summary = (
            "the system prompt the agent sends is in neither its key nor its tapes: a changed prompt is "
            "answered from the old tapes without a miss"
        )
    # After the findings that name the input (file:line): the demo's name only its recipe line.
    elif facts["demo_passed_a_miss"]:
        summary = "`make demo` exited 0 after trying a tape that does not exist: a miss that did not fail it"
    elif facts["demo_withheld_exit"] == 0:
        summary = "`make demo` exited 0 with every tape withheld: its output is backed by no tape"
    else:
        summary = f"an unseen message exited {facts['unseen_exit_in_tests']} inside a test instead of 2"
    if fallbacks:
        summary += f"; {len(fallbacks)} handlers hide a miss (first: {fallbacks[0].location})"
    if serve.fallback is not None:
        summary += f"; `make serve` answers an unseen request with HTTP {serve.unseen_status}"
    elif serve.ran and serve.names_key:
        summary += "; `make serve` replays and answers an unseen request with 422 naming its key"
    return summary
