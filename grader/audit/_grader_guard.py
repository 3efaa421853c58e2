"""The grader guard (-p _grader_guard): raw vs reported outcomes, via an inherited fd.

It also makes failure reports cheaper without changing a byte of them (``_share_source_trees``,
``_share_full_sources``), logs which interactions of each vcrpy cassette were played (``_watch_vcr``), and
what the HTTP client was handed by each request that opened (or tried to open) a file of the repository
(``_watch_sends``).
"""

import contextlib
import contextvars
import json
import os
import sys

import pytest

# A sibling copied next to this file (tamper.write_guard): the folder first on the run's path.
from _pytest_longrepr import first_line, message

_FD = os.environ.pop("PYTEST_REPORT_FD", None)
_UNSKIP = os.environ.pop("PYTEST_RUN_SKIPPED", None) == "1"
# The whole-suite rerun: every test collected runs, whatever a plugin or hook deselected (red team 5, G5).
_RUN_ALL = os.environ.pop("PYTEST_RUN_ALL", None) == "1"
_NONCE = os.environ.pop("PYTEST_REPORT_NONCE", "")
# The rerun that keeps the submission's conftest files and plugins for their fixtures but takes every hook
# implementation of theirs away once a test's fixtures are set up (red team 23, F3).
_UNHOOK = os.environ.pop("PYTEST_RUN_UNHOOKED", None) == "1"
_ACTIVE = _FD is not None and _FD.isdigit() and not os.environ.get("PYTEST_XDIST_WORKER")
_STATE = {"deselected": 0, "depth": 0, "narrowed": ""}
_SEEN = set()
# What the command line asked pytest to collect, before any conftest's or plugin's configure hook ran.
_ASKED = {}


def _write(record):
    # depth > 1: an in-process pytest inside a test (pytester): its reports are not the suite's.
    if _ACTIVE and _STATE["depth"] <= 1:
        try:
            record["n"] = _NONCE
            os.write(int(_FD), (json.dumps(record, default=str) + "\n").encode("utf-8", "replace"))
        except OSError:
            pass


def _raw_exc(exc):
    if isinstance(exc, pytest.skip.Exception):
        return "skipped"
    if isinstance(exc, pytest.xfail.Exception):
        return "xfail"
    return "failed"


def _raw(call):
    excinfo = call.excinfo
    if excinfo is None:
        return "passed"
    if excinfo.errisinstance(pytest.skip.Exception):
        return "skipped"
    if excinfo.errisinstance(pytest.xfail.Exception):
        return "xfail"
    return "failed"


def _no_xfail(item):
    # Red team 5, G2: a fixture's request.applymarker(xfail) or a pytest.xfail() call comes after the marks
    # were stripped; pytest's own --runxfail makes both report what the test did. Set before each phase
    # (the outermost wrapper), so a conftest that turns it off at configure time is overruled.
    if _UNSKIP:
        try:
            item.config.option.runxfail = True
        except AttributeError:
            pass


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    _no_xfail(item)
    raw = _raw(call)  # read before any other wrapper can change call.excinfo
    raw_message = first_line(call.excinfo.exconly()) if call.excinfo is not None else ""
    if call.when == "call":
        # The test raised inside the runner but the call ended cleanly: an outer pytest_runtest_call
        # wrapper swallowed it. The runner's view wins.
        swallowed = _RAISED.pop(item.nodeid, None)
        if swallowed is not None and raw == "passed" and swallowed[0] != "skipped":
            raw, raw_message = swallowed[0], swallowed[1] + " (swallowed by a pytest_runtest_call wrapper)"
    outcome = yield
    report = outcome.get_result()
    _SEEN.add((report.nodeid, report.when))
    _record(report, raw, raw_message)


def pytest_runtest_logreport(report):
    # Under pytest-xdist the controller only sees reports (no makereport): log those, raw unknown.
    if (report.nodeid, report.when) not in _SEEN:
        _record(report, "unknown", "")


def _record(report, raw, raw_message):
    fspath, lineno, _ = report.location
    wasxfail = getattr(report, "wasxfail", None)
    _write(
        {
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "raw": raw,
            "raw_message": raw_message,
            "wasxfail": wasxfail is not None,
            "notrun": isinstance(raw_message, str) and "[NOTRUN]" in raw_message,
            "longrepr": message(report) or raw_message,
            "location": f"{fspath}:{(lineno or 0) + 1}",
        }
    )


def pytest_collectreport(report):
    if report.failed:
        _write(
            {
                "nodeid": report.nodeid,
                "when": "collect",
                "outcome": "error",
                "raw": "failed",
                "wasxfail": False,
                "longrepr": message(report),
                "location": report.nodeid.split("::")[0],
            }
        )


def pytest_deselected(items):
    _STATE["deselected"] += len(items)


def _strip(node):
    node.own_markers[:] = [m for m in node.own_markers if m.name not in ("skip", "skipif", "xfail")]
    keywords = getattr(node, "keywords", None)
    for name in ("skip", "skipif", "xfail"):
        try:
            if keywords is not None and name in keywords._markers:
                del keywords._markers[name]
        except (AttributeError, KeyError, TypeError):
            pass


# unittest's decorators skip without a pytest mark (red team 4, F7): skip/skipIf/skipUnless replace a method
# with a wrapper raising SkipTest (the original kept as __wrapped__) or flag a class (pytest then registers
# a skipping fixture while it collects it); expectedFailure flags the method.
def _strip_unittest(item):
    cls = getattr(item, "cls", None)
    if cls is None:
        return
    name = getattr(item, "originalname", None) or item.name
    method = getattr(cls, name, None)
    try:
        if getattr(method, "__unittest_skip__", False) and callable(getattr(method, "__wrapped__", None)):
            setattr(cls, name, method.__wrapped__)
            item._obj = None  # collection cached the wrapper, bound: fetched again from the class
        elif getattr(method, "__unittest_expecting_failure__", False):
            method.__unittest_expecting_failure__ = False
    except (AttributeError, TypeError):
        pass


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    collected = list(items) if _RUN_ALL else None
    yield
    if collected is not None and len(items) < len(collected):
        items[:] = collected
    if _UNSKIP:
        for item in items:
            for node in item.listchain():
                _strip(node)
            _strip_unittest(item)


class _SourceTrees(dict):
    """pytest's per-report cache of parsed source files, shared by every report of the session.

    An entry is trusted only while its file is unchanged on disk (same mtime and size); sources without a
    file (exec'd strings) are never shared.
    """

    def __init__(self):
        super().__init__()
        self._stamps = {}

    def _fresh(self, key):
        if dict.__contains__(self, key) and self._stamps.get(key) != _stamp(key):
            dict.pop(self, key, None)

    def get(self, key, default=None):
        self._fresh(key)
        return dict.get(self, key, default)

    def __getitem__(self, key):
        self._fresh(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key):
        self._fresh(key)
        return dict.__contains__(self, key)

    def __setitem__(self, key, tree):
        stamp = _stamp(key)
        if stamp is not None:
            self._stamps[key] = stamp
            dict.__setitem__(self, key, tree)


def _stamp(path):
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return (st.st_mtime_ns, st.st_size)


def _share_source_trees():
    """Parse each source file once per session for failure reports, instead of once per failing test.

    pytest's traceback formatter caches the AST of every file a traceback shows, but only for one report:
    when many tests fail through the same large modules (every test that needs a tape, with the tapes
    withheld), each failure parses and walks them all again (~25 ms a failure through httpx's client).
    The reports come out identical. Any pytest without that formatter field is left as it is.
    """
    try:  # pytest's internals, present or not in the submission's pytest: only tried when this runs
        import dataclasses

        from _pytest._code import code
    except Exception:
        return
    shared = _SourceTrees()
    for cls in list(vars(code).values()):
        try:
            if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
                continue
            field = next((f for f in dataclasses.fields(cls) if f.name == "astcache"), None)
            if field is None or field.init:
                continue
        except Exception:  # noqa: S112 - an unexpected pytest: its own per-report cache stays
            continue
        original = cls.__init__

        def __init__(self, *args, _original=original, **kwargs):
            _original(self, *args, **kwargs)
            if type(getattr(self, "astcache", None)) is dict and not self.astcache:
                object.__setattr__(self, "astcache", shared)

        cls.__init__ = __init__


_share_source_trees()


def _share_full_sources():
    """Build pytest's whole-file ``Source`` of a module once per version of its lines, not once per frame.

    Every traceback entry of a failure report asks for the full source of its file (``Code.fullsource``),
    and pytest builds it anew each time: a right-stripped copy of every line of the module (~2,000 lines of
    httpx's client, for each failing test that passes through it). ``inspect.findsource`` hands back
    linecache's list of the file's lines, the same list object until the file changes on disk; the Source
    pytest made from that very list is reused, with the line number of the object asked about. A pytest
    whose ``findsource`` is not built that way (no ``raw_lines`` holding linecache's list) is left as it is.
    """
    try:  # pytest's internals, present or not in the submission's pytest: only tried when this runs
        import inspect

        from _pytest._code import code, source
    except Exception:
        return
    original = getattr(code, "findsource", None)
    if original is None or original is not getattr(source, "findsource", None):
        return
    built = {}  # id(linecache's list) -> (that list, the Source pytest built from it)

    def findsource(obj):
        try:
            lines, lineno = inspect.findsource(obj)
        except Exception:
            return original(obj)  # pytest's own fallbacks
        hit = built.get(id(lines))
        if hit is not None and hit[0] is lines:
            return hit[1], lineno
        full, own_lineno = original(obj)
        if full is not None and own_lineno == lineno and getattr(full, "raw_lines", None) is lines:
            built[id(lines)] = (lines, full)  # holding the list keeps its id from being reused
        return full, own_lineno

    code.findsource = findsource


_share_full_sources()


def _from_root(path):
    """``path`` relative to the run's folder when inside it (the grader maps it back), else as it is."""
    root = os.environ.get("PY_AUDIT_ROOT", "")
    if root and path.startswith(os.path.join(root, "")):
        return os.path.relpath(path, root)
    return path


def _watch_vcr():
    """Log which of a vcrpy cassette's interactions were played, each time vcrpy closes a cassette.

    Only once the suite itself imported vcrpy (pytest-recording, pytest-vcr or a conftest): the guard never
    imports it. The grader's hygiene check counts recorded interactions no test played (unpruned tapes).
    """
    cassette = getattr(sys.modules.get("vcr.cassette"), "Cassette", None)
    save = getattr(cassette, "_save", None)
    if save is None or getattr(save, "_grader_watched", False):
        return

    def watched_save(self, *args, **kwargs):
        try:
            counts = getattr(self, "play_counts", None) or {}
            _write(
                {
                    "vcr": _from_root(os.path.abspath(str(self._path))),
                    "interactions": len(self.data),
                    "played": sorted(i for i, n in counts.items() if isinstance(i, int) and n),
                }
            )
        except Exception:  # noqa: S110 - a vcrpy without these attributes: nothing to log
            pass
        return save(self, *args, **kwargs)

    watched_save._grader_watched = True
    cassette._save = watched_save


# --- what the HTTP client was handed ---------------------------------------------------------------------
# Red team 17: a cassette layer answering some keys from a table of its own (on a hit, or on a miss) is found
# by asking the triage command about the ticket, which says nothing when the suite's requests differ from the
# command's. What the SDK receives is seen here instead, in the suite's own process: each ``send`` of an httpx
# (or httpx2) client is wrapped, the files opened while it ran are collected (an audit hook that does nothing
# outside a send), and when it opened or tried any file of the run's folder, the request and the response
# it returned are logged for the grader to hold against the tapes. Streamed responses are not read here.
_IN_SEND = contextvars.ContextVar("_grader_in_send", default=None)
_SENDS = {"logged": 0, "hook": False, "test": ""}
_MAX_SENDS = 500
_BODY_CAP = 16 * 1024
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _send_hook(event, args):
    if event != "open":
        return
    opened = _IN_SEND.get()
    if opened is None or len(opened) >= 40:
        return
    try:
        path, mode, flags = args
        if isinstance(mode, str) and any(c in mode for c in "wax+"):
            return
        if not isinstance(mode, str) and isinstance(flags, int) and flags & _WRITE_FLAGS:
            return
        root = os.environ.get("PY_AUDIT_ROOT", "")
        if not root or not isinstance(path, (str, bytes)):
            return
        full = os.path.abspath(os.fsdecode(path))
        inside = os.path.join(root, "")
        if not full.startswith(inside):
            return  # the interpreter's own files (imports during a send): not the repository's
        site = ""
        if not opened:  # the first file the layer opened or tried: where, in the submission's code
            frame = sys._getframe(1)
            while frame is not None and not frame.f_code.co_filename.startswith(inside):
                frame = frame.f_back
            site = f"{_from_root(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else "?"
        opened.append((full, site))
    except Exception:  # noqa: S110 - watching must never break the watched program
        pass


def _text(body):
    return body[:_BODY_CAP].decode("utf-8", "replace") if isinstance(body, bytes) else ""


def _note_send(request, response, opened):
    if not opened or _SENDS["logged"] >= _MAX_SENDS:
        return
    try:
        body = response.content  # a response not read yet (streamed) raises: not logged
    except Exception:
        return
    try:
        sent = request.content
    except Exception:
        sent = b""
    found, missing = [], []
    for path, _ in opened:
        rel = _from_root(path)
        target = found if os.path.lexists(path) else missing
        if rel not in target:
            target.append(rel)
    _SENDS["logged"] += 1
    _write(
        {
            "send": _SENDS["test"],
            "request": _text(sent),
            "response": _text(body),
            "opened": found[:20],
            "missing": missing[:20],
            "site": opened[0][1],
        }
    )


@contextlib.contextmanager
def _collecting():
    """The files of the run's folder opened (or tried) while the block runs, in this context only."""
    opened = []
    token = _IN_SEND.set(opened)
    try:
        yield opened
    finally:
        _IN_SEND.reset(token)


def _sync_watch(send):
    def watched_send(self, request, *args, **kwargs):
        with _collecting() as opened:
            response = send(self, request, *args, **kwargs)
        _note_send(request, response, opened)
        return response

    return watched_send


def _async_watch(send):
    async def watched_send(self, request, *args, **kwargs):
        with _collecting() as opened:
            response = await send(self, request, *args, **kwargs)
        _note_send(request, response, opened)
        return response

    return watched_send


def _watch_sends(nodeid):
    """Wrap the clients' ``send`` once the suite imported httpx or httpx2 (the guard never imports them);
    again after the submission put its own ``send`` back."""
    _SENDS["test"] = nodeid
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        for cls_name, wrap in (("Client", _sync_watch), ("AsyncClient", _async_watch)):
            cls = getattr(module, cls_name, None)
            send = getattr(cls, "send", None)
            if send is None or getattr(send, "_grader_watched", False):
                continue
            watched = wrap(send)
            watched._grader_watched = True
            try:
                cls.send = watched
            except (AttributeError, TypeError):
                continue
            if not _SENDS["hook"]:
                sys.addaudithook(_send_hook)
                _SENDS["hook"] = True


# Before each phase: pytest-recording imports vcrpy inside its fixture, so the first test's cassette exists
# before vcrpy does; `_save` is looked up at closing time, so watching by teardown still sees it.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    sys.audit("grader.test", item.nodeid)  # the audit hook files each open under the test that made it
    _no_xfail(item)
    if _ACTIVE:
        _watch_vcr()
        _watch_sends(item.nodeid)


# Red team 23, F3: a test that takes a conftest fixture errors in the rerun without conftest files, which is
# no evidence; its `pytest_pyfunc_call` swallowing the assertion went unseen. In the unhooked rerun the
# fixtures are set up with every hook in force (an autouse fixture may register more), then every plugin
# holding a hook implementation of the submission's code is unregistered before pytest calls the test. The
# fixture definitions stay: pytest parsed them when the plugin was registered.
@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_runtest_setup")
def pytest_runtest_setup_unhook(item):
    try:
        return (yield)
    finally:
        if _UNHOOK:
            _unhook(item.config)


_HERE = os.path.dirname(os.path.realpath(__file__)) + os.sep


def _unhook(config):
    manager = config.pluginmanager
    for plugin in list(manager.get_plugins()):
        try:
            callers = manager.get_hookcallers(plugin) or []
            impls = [i for c in callers for i in c.get_hookimpls() if i.plugin is plugin]
        except Exception:  # noqa: S112 - a plugin pluggy cannot describe: left as it is
            continue
        codes = [_code_of(getattr(i, "function", None)) for i in impls]
        if any(_own(c) and not os.path.realpath(c[0]).startswith(_HERE) for c in codes if c):
            _unregister(config, plugin)


# The innermost wrapper around pytest's own call of the test (trylast: every other wrapper of this hook,
# however and whenever it was registered, runs outside this one). What the test raised is recorded here,
# before any outer wrapper can swallow it: `call.excinfo`, which makereport reads, is built only after all
# of them ran.
_RAISED = {}  # nodeid -> (raw outcome, first line of the exception)


# --- test methods whose body never runs ----------------------------------------------------------------
# Red team 27, F4/F5: a `unittest.TestCase` method written `async def`, or holding a `yield`, returns a
# coroutine or a generator when called, and unittest reports it passed (Python 3.11 only warns): its body, the
# assertion included, never ran. The grader's runs call such a method and fail it, saying why. A class that
# runs coroutines itself (`IsolatedAsyncioTestCase`) overrides this method and is untouched.
def _never_ran(result):
    import inspect

    for kind, test in (("coroutine", inspect.iscoroutine), ("generator", inspect.isgenerator)):
        if test(result):
            return kind
    return "asynchronous generator" if inspect.isasyncgen(result) else None


def _call_test_method(self, method):
    result = method()
    kind = _never_ran(result)
    if kind is not None:
        with contextlib.suppress(Exception):
            result.close()
        raise AssertionError(
            f"the test method returned a {kind}, so its body never ran (unittest does not run async or "
            "generator test methods outside IsolatedAsyncioTestCase): counted as failed by the grader"
        )
    if result is not None:
        import warnings

        warnings.warn(
            f"It is deprecated to return a value that is not None from a test case ({method})",
            DeprecationWarning,
            stacklevel=3,
        )


if _ACTIVE:
    import unittest.case

    if hasattr(unittest.case.TestCase, "_callTestMethod"):
        unittest.case.TestCase._callTestMethod = _call_test_method


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item):
    _no_xfail(item)
    body = None
    elsewhere = None
    if _ACTIVE:
        _watch_vcr()
        _watch_sends(item.nodeid)
        _check_wrapped(item)
        body = _watch_body(item)
        if "asyncio" in sys.modules:  # a suite that never imported it has no task to watch
            _watch_asyncio()
        elsewhere = _Elsewhere(item.nodeid)
    _RAISED.pop(item.nodeid, None)
    try:
        result = yield
    except BaseException as exc:
        _RAISED[item.nodeid] = (_raw_exc(exc), first_line(f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        if body is not None:
            with contextlib.suppress(AttributeError, TypeError):
                item.instance.__dict__.pop(item.name, None)
        missed = elsewhere.close() if elsewhere is not None else None
    why = body.get("why") if body is not None else None
    if not why and missed:
        why = f"the test's code failed {missed}, where pytest does not see it"
    if why and not getattr(item, "_excinfo", None):
        exc = AssertionError(f"{why}: counted as failed by the grader")
        _RAISED[item.nodeid] = ("failed", first_line(f"AssertionError: {exc}"))
        raise exc
    return result


# --- errors raised where the test's own frame never sees them ----------------------------------------------
# Red team 29, F1: a check run in a thread the test starts (or in a `__del__` the test's gc.collect() calls,
# or in a pool task whose result nobody asks for) fails there; pytest only warns and reports the test passed.
# While a test's call runs, such errors are noted (the hooks pytest installed still get them) and fail the
# test: an assertion (or pytest.fail), or any error whose first frame outside the libraries is a test module's
# (the test's own code failed). Errors of library code in background threads are noise more often than
# verdicts. A test that silences them on purpose (its own excepthook) is like one that catches its own
# assertion: a reviewer's matter.
def _verdict(exc):
    if isinstance(exc, (AssertionError, pytest.fail.Exception)):
        return True
    tb = getattr(exc, "__traceback__", None)
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if not os.path.realpath(file).startswith(_LIBRARY):
            name = os.path.basename(file)
            return name == "conftest.py" or (
                name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
            )
        tb = tb.tb_next
    return False


_FUTURES = {"open": None}  # the _Elsewhere of the call running now
# Threads a test's call started and left running (thread -> the test's nodeid), and the last test whose call
# ran: a check that fails after the call ended is still that test's verdict (red team 29's gap: a thread
# that sleeps past the call, an asyncio task collected later).
_LATE = {"threads": {}, "last": "", "hooked": False}
_JOIN_AT_CLOSE = 0.5  # seconds a call's end waits, in all, for the threads it started
_JOIN_AT_FINISH = 2.0  # seconds the session's end waits, in all, for daemon threads tests left running


class _Elsewhere:
    def __init__(self, nodeid=""):
        import threading

        self.nodeid = nodeid
        self.found = []
        self.pending = {}  # id(future) -> future holding an assertion nobody has asked for yet
        self.before = set(threading.enumerate())
        self._thread_hook = threading.excepthook
        self._unraisable_hook = sys.unraisablehook
        threading.excepthook = self._thread
        sys.unraisablehook = self._unraisable
        _FUTURES["open"] = self
        _LATE["last"] = nodeid

    def _thread(self, args):
        # A thread an earlier test left running is that test's, reported by the late hook below.
        if args.thread not in _LATE["threads"] and _verdict(args.exc_value):
            self.found.append("in a thread the test started")
        self._thread_hook(args)

    def _unraisable(self, unraisable):
        if _verdict(unraisable.exc_value):
            self.found.append("in code Python ran outside the test's frame (a __del__, a finalizer)")
        self._unraisable_hook(unraisable)

    def close(self):
        import threading
        import time

        # A thread the call started and did not join gets a moment to end inside the call's window.
        me = threading.current_thread()
        started = [t for t in threading.enumerate() if t not in self.before and t is not me]
        deadline = time.monotonic() + _JOIN_AT_CLOSE
        for thread in started:
            thread.join(max(0.0, deadline - time.monotonic()))
        if threading.excepthook == self._thread:
            threading.excepthook = self._thread_hook
        if sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._unraisable_hook
        _FUTURES["open"] = None
        left = [t for t in started if t.is_alive()]
        if left:
            for thread in left:
                _LATE["threads"][thread] = self.nodeid
            _late_hook()
        if self.pending:
            self.found.append("in a task whose result the test never asked for")
        return self.found[0] if self.found else None


def _late(nodeid, where, exc):
    """A test's check that failed after its call ended: a teardown error of that test, like pytest's own."""
    if not nodeid:
        return
    said = first_line(f"{type(exc).__name__}: {exc}")
    _write(
        {
            "nodeid": nodeid,
            "when": "teardown",
            "outcome": "failed",
            "raw": "failed",
            "raw_message": said,
            "wasxfail": False,
            "notrun": False,
            "longrepr": f"the test's code failed {where} after the test's call ended, where pytest does not "
            f"see it: {said} (counted as failed by the grader)",
            "location": nodeid.split("::")[0],
            "late": True,
        }
    )


def _late_hook():
    import threading

    if _LATE["hooked"]:
        return
    _LATE["hooked"] = True
    below = threading.excepthook

    def late(args):
        nodeid = _LATE["threads"].get(args.thread)
        if nodeid is not None and _verdict(args.exc_value):
            _late(nodeid, "in a thread the test started and left running", args.exc_value)
        below(args)

    threading.excepthook = late


def _join_left_threads():
    """At the session's end: the threads tests left running end here, not after the last record is written.

    A non-daemon thread would hold the interpreter's exit anyway; a daemon one gets a bounded wait, and one
    still asleep past it is killed at exit with its check never run."""
    import time

    deadline = time.monotonic() + _JOIN_AT_FINISH
    for thread in list(_LATE["threads"]):
        thread.join(None if not thread.daemon else max(0.0, deadline - time.monotonic()))


# asyncio reports a task's exception nobody retrieved (a task never awaited, collected later) and one left
# at a loop's shutdown through the loop's exception handler; pytest never sees either.
def _watch_asyncio():
    asyncio = sys.modules.get("asyncio")
    loop_class = getattr(getattr(asyncio, "base_events", None), "BaseEventLoop", None)
    if loop_class is None or getattr(loop_class.call_exception_handler, "_grader_watched", False):
        return
    handler = loop_class.call_exception_handler

    def watched(self, context):
        exc = context.get("exception") if isinstance(context, dict) else None
        if exc is not None and _verdict(exc):
            watching = _FUTURES["open"]
            if watching is not None:
                watching.found.append("in an asyncio task nothing awaited")
            else:
                _late(_LATE["last"], "in an asyncio task nothing awaited", exc)
        return handler(self, context)

    watched._grader_watched = True
    loop_class.call_exception_handler = watched


def _watch_futures():
    import concurrent.futures

    future = concurrent.futures.Future
    set_exception, result, exception = future.set_exception, future.result, future.exception

    def watched_set_exception(self, exc):
        watching = _FUTURES["open"]
        if watching is not None and _verdict(exc):
            watching.pending[id(self)] = self
        return set_exception(self, exc)

    def asked(self):
        watching = _FUTURES["open"]
        if watching is not None:
            watching.pending.pop(id(self), None)

    def watched_result(self, timeout=None):
        try:
            return result(self, timeout)
        finally:
            asked(self)

    def watched_exception(self, timeout=None):
        try:
            return exception(self, timeout)
        finally:
            asked(self)

    future.set_exception = watched_set_exception
    future.result = watched_result
    future.exception = watched_exception


if _ACTIVE:
    _watch_futures()


# A TestCase of the submission's can override `_callTestMethod` (or `run`) itself, past the replacement
# above: the method is then never called, or its coroutine never awaited, and unittest reports a pass. So
# the test method pytest hands unittest is wrapped to note that it was called and that its body ran (an
# `async def` one through an `async def` wrapper, so IsolatedAsyncioTestCase still awaits it); a call that
# ends cleanly without that fails the test.
def _watch_body(item):
    import functools
    import inspect

    if type(item).__name__ != "TestCaseFunction" or getattr(item, "instance", None) is None:
        return None
    try:
        method = item.obj
    except Exception:
        return None
    if not callable(method):
        return None
    body = {"why": "the test method was never called (its TestCase's own run or _callTestMethod skipped it)"}

    if inspect.iscoroutinefunction(_plain(method)):
        body["why"] = "the test method returned a coroutine nothing awaited, so its body never ran"

        @functools.wraps(method)
        async def watched(*args, **kwargs):
            body["why"] = ""
            return await method(*args, **kwargs)

    else:

        @functools.wraps(method)
        def watched(*args, **kwargs):
            body["why"] = ""
            result = method(*args, **kwargs)
            kind = _never_ran(result)
            if kind is not None:
                body["why"] = f"the test method returned a {kind}, so its body never ran"
            return result

    try:
        item.obj = watched
        setattr(item.instance, item.name, watched)  # the asynchronous path reads the method from the instance
    except (AttributeError, TypeError):
        return None
    return body


# --- test functions replaced after collection ---------------------------------------------------------------
# A hook (pytest_itemcollected, pytest_collection_modifyitems, pytest_runtest_setup, an autouse fixture ...)
# can swap the function pytest will call, or the item's runner, for one that swallows the test's assertion:
# the runner then sees a pass. Whatever hook did it, the swap is visible just before the call: the function
# is no longer the one the test module defined when pytest collected it. Replacements whose code lives in the
# submission (not the venv's libraries: pytest-asyncio wraps coroutines the same way) are logged; the grader
# then reruns the suite without the submission's hooks and compares outcomes.
_ORIGIN = {}  # nodeid -> the function the test module defined, as pytest collected it
_ORIGIN_CODE = {}  # nodeid -> that function's code when pytest collected it
_LIBRARY = tuple(
    os.path.realpath(p) + os.sep
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(pytest.__file__))}
)


def _plain(obj):
    """The function object behind a bound method, staticmethod or classmethod."""
    return getattr(obj, "__func__", obj)


def _code_of(obj):
    """(file, line, name) of the code that runs when ``obj`` is called; None when it has none (a builtin)."""
    for _ in range(5):
        obj = _plain(obj)
        code = getattr(obj, "__code__", None)
        if code is not None:
            return code.co_filename, code.co_firstlineno, getattr(obj, "__qualname__", code.co_name)
        inner = getattr(obj, "func", None)  # functools.partial
        obj = inner if inner is not None else (type(obj).__call__ if callable(obj) else None)
        if obj is None:
            return None
    return None


def _own(code):
    """Whether the code comes from outside the interpreter's libraries (the submission, or exec'd text)."""
    if code is None:
        return False
    return not os.path.realpath(code[0]).startswith(_LIBRARY)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    # Before pytest collects a unittest class: a skipped one would get its skipping fixture there.
    if _UNSKIP and isinstance(obj, type) and getattr(obj, "__unittest_skip__", False):
        try:
            obj.__unittest_skip__ = False
        except (AttributeError, TypeError):
            pass
    outcome = yield
    try:
        made = outcome.get_result()
    except BaseException:
        return
    for item in made if isinstance(made, list) else [made]:
        if isinstance(item, pytest.Function):
            _ORIGIN.setdefault(item.nodeid, _plain(obj))
            _ORIGIN_CODE.setdefault(item.nodeid, getattr(_plain(obj), "__code__", None))


def _check_wrapped(item):
    if not isinstance(item, pytest.Function):
        return
    found = []
    origin = _ORIGIN.get(item.nodeid)
    try:
        current = _plain(item.obj)
    except Exception:
        current = origin
    if origin is not None and current is not origin and _own(_code_of(current)):
        found.append(("test function", _code_of(current)))
    collected = _ORIGIN_CODE.get(item.nodeid)
    now = getattr(current, "__code__", None)
    if current is origin and collected is not None and now is not None and now is not collected:
        # The same function object running other code (`test_x.__code__ = ...` in a fixture or a hook, after
        # pytest collected it; a library's code as well as the submission's): the code the module defined is
        # put back, so the test runs its own body.
        found.append(("test code", _code_of(current)))
        with contextlib.suppress(AttributeError, TypeError, ValueError):
            current.__code__ = collected
    runner = item.__dict__.get("runtest") or getattr(type(item), "runtest", None)
    if _own(_code_of(runner)):  # pytest's own runner (or a library's subclass) lives in the venv
        found.append(("runtest", _code_of(runner)))
    # Inside the runner, pytest asks its pytest_pyfunc_call implementations to call the function: the first to
    # answer wins, so one of the submission's own can call it and swallow what it raised, below every
    # wrapper, with the function and runner untouched (red team 9: a plugin named by PYTEST_PLUGINS on the
    # Makefile's recipe line, which no configuration file names). However it was loaded, it is seen here.
    caller = getattr(getattr(item, "ihook", None), "pytest_pyfunc_call", None)
    try:
        impls = list(caller.get_hookimpls()) if caller is not None else []
    except Exception:
        impls = []
    for impl in impls:
        code = _code_of(getattr(impl, "function", None))
        if _own(code):
            found.append(("pytest_pyfunc_call hook", code))
            if _without_hooks(item.config) or _UNHOOK:
                # The rerun without the submission's hooks: one a test registered itself (red team 9) is
                # registered again by the same test, so it is taken away here, before pytest asks it.
                _unregister(item.config, getattr(impl, "plugin", None))
    root = str(getattr(item.config, "rootpath", "") or "")
    for what, (file, line, qualname) in found:
        if root and file.startswith(root + os.sep):
            file = file[len(root) + 1 :]
        _write({"wrapped": item.nodeid, "what": what, "by": f"{file}:{line}", "name": str(qualname)[:120]})


def _without_hooks(config):
    try:
        return bool(config.getoption("noconftest"))
    except (ValueError, AttributeError):
        return False


def _unregister(config, plugin):
    if plugin is None:
        return
    try:
        config.pluginmanager.unregister(plugin)
    except Exception:  # noqa: S110 - already gone, or pluggy refused: the rerun's outcome still tells
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    if _ACTIVE:
        _watch_vcr()


def _selection(config):
    option = config.option
    return {
        "args": list(getattr(config, "args", None) or []),
        "--ignore": list(getattr(option, "ignore", None) or []),
        "--ignore-glob": list(getattr(option, "ignore_glob", None) or []),
    }


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not _ASKED:
        _ASKED.update(_selection(config))


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    # Red team 15: a conftest's pytest_configure put a failing test file in `config.option.ignore` (or
    # rewrote `config.args`): never collected, neither skipped nor deselected. Recorded; in the whole-suite
    # rerun what the command line asked for is put back.
    if _STATE["depth"] > 1 or not _ASKED:
        return
    config = session.config
    now = _selection(config)
    changed = [name for name, value in _ASKED.items() if now.get(name) != value]
    if changed:
        _STATE["narrowed"] = ", ".join(changed)
        if _RUN_ALL:
            try:
                config.args[:] = _ASKED["args"]
                config.option.ignore = list(_ASKED["--ignore"])
                config.option.ignore_glob = list(_ASKED["--ignore-glob"])
            except (AttributeError, TypeError):
                pass


def pytest_sessionstart(session):
    _STATE["depth"] += 1


def pytest_sessionfinish(session, exitstatus):
    if _STATE["depth"] > 1:
        _STATE["depth"] -= 1
        return
    if _ACTIVE:
        _join_left_threads()
    collected = getattr(session, "testscollected", None)
    _write(
        {
            "session": True,
            "exitstatus": int(exitstatus),
            "collected": collected,
            "deselected": _STATE["deselected"],
            "narrowed": _STATE["narrowed"],
            # `python -O` or PYTHONOPTIMIZE compiles assert statements out (red team 31: with
            # `--assert=plain` too, a failing test passed); the grader runs the suite again without.
            "optimized": sys.flags.optimize,
        }
    )
