"""The grader's PEP 578 audit hook, imported at start-up by ``_grader_audit.pth`` in a submission's venv.

Inert unless ``PY_AUDIT_LOG`` is set. Then it appends one JSON line per network attempt (inet socket
created, connect, sendto, getaddrinfo, and pytest-socket refusals, which ``_grader_pytest`` announces as the
``grader.socket_refused`` event) and per file under ``PY_AUDIT_ROOT`` opened for reading (or asked for with
a stat when it does not exist), with the test running then (the guard announces each as the ``grader.test``
event).
It must stay cheap: every ``open`` in a test suite passes through it, so events are filtered by name first
and each path is logged once per process.
"""

import os
import sys

_WANTED = frozenset(
    {
        "socket.connect",
        "socket.getaddrinfo",
        "socket.__new__",
        "socket.sendto",
        "open",
        "grader.socket_refused",
        "grader.test",
    }
)
_INET = (2, 10)  # AF_INET, AF_INET6 (the numbers are the same on every platform the grader runs on)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _install(log_path, root):
    # Local: this module is imported by a .pth file at every start-up of the submission's interpreter;
    # json and threading are only paid for when auditing is on.
    import json
    import threading

    # Opened before the hook exists, so writing the log never re-enters the hook.
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    roots = tuple({os.path.join(os.path.abspath(root), ""), os.path.join(os.path.realpath(root), "")})
    seen_paths = set()
    state = threading.local()
    # The test pytest is running (the guard announces each one): a file open is logged once per file, call
    # site and test, so the grader can tell which tapes each test read.
    current = [None]

    def where(frame):
        innermost = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if innermost is None and filename != __file__:
                innermost = frame
            for prefix in roots:
                if filename.startswith(prefix):
                    return f"{filename[len(prefix) :]}:{frame.f_lineno}"
            frame = frame.f_back
        if innermost is None:
            return "?"
        return f"{innermost.f_code.co_filename}:{innermost.f_lineno}"

    def emit(record, site=None):
        record["where"] = site or where(sys._getframe(2))
        record["pid"] = os.getpid()
        os.write(fd, (json.dumps(record, default=str) + "\n").encode("utf-8", "replace"))

    def hook(event, args):
        if event not in _WANTED or getattr(state, "busy", False):
            return
        state.busy = True
        try:
            if event == "grader.test":
                current[0] = str(args[0]) if args else None
            elif event == "open":
                path, mode, flags = args
                if not isinstance(path, str):
                    if not isinstance(path, bytes):
                        return  # an fd
                    path = os.fsdecode(path)
                if isinstance(mode, str):
                    if "w" in mode or "a" in mode or "x" in mode or "+" in mode:
                        return
                elif isinstance(flags, int) and flags & _WRITE_FLAGS:
                    return
                full = os.path.abspath(path)
                for prefix in roots:
                    if full.startswith(prefix):
                        rel = full[len(prefix) :]
                        # Once per file and call site, not per file: a test that reads every tape
                        # (a lint of the recordings) must not hide which tapes the replay layer opened.
                        site = where(sys._getframe(1))
                        if (rel, site, current[0]) not in seen_paths:
                            seen_paths.add((rel, site, current[0]))
                            record = {"event": "open", "path": rel}
                            if current[0] is not None:
                                record["test"] = current[0]
                            emit(record, site)
                        return
            elif event == "socket.__new__":
                if args[1] in _INET:
                    emit({"event": event, "family": int(args[1])})
            elif event == "grader.socket_refused":  # raised by _grader_pytest: pytest-socket said no
                emit({"event": "socket.refused", "host": args[0], "port": args[1]})
            elif event == "socket.getaddrinfo":
                emit({"event": event, "host": args[0], "port": args[1]})
            else:  # socket.connect / socket.sendto: (socket, address)
                sock, address = args[0], args[-1]
                if getattr(sock, "family", None) in _INET and isinstance(address, tuple):
                    emit({"event": event, "host": address[0], "port": address[1]})
        except Exception:  # noqa: S110 - auditing must never break the audited program
            pass
        finally:
            state.busy = False

    sys.addaudithook(hook)
    _announce_missing_stats()


_SUPPORTS = ("supports_dir_fd", "supports_fd", "supports_follow_symlinks", "supports_effective_ids")


def _announce_missing_stats():
    """A stat of a path that does not exist is announced as a read that failed (the ``open`` event a read
    raises before it fails): a replay layer that asks ``Path.exists()`` before it opens a tape tried that
    tape all the same (the grader's unrecorded-input probe, and the guard's send watch, look for such tries).
    CPython raises no audit event for a stat; ``os.stat`` and ``os.lstat`` are what ``os.path.exists``,
    ``Path.exists``/``is_file`` and their kin call."""
    for name in ("stat", "lstat"):
        original = getattr(os, name)

        def announced(path, *args, _original=original, **kwargs):
            try:
                return _original(path, *args, **kwargs)
            except FileNotFoundError:
                if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"):
                    try:
                        sys.audit("open", os.fspath(path), "r", 0)
                    except Exception:  # noqa: S110 - auditing must never break the audited program
                        pass
                raise

        announced.__name__ = announced.__qualname__ = name
        announced.__doc__ = original.__doc__
        # shutil.rmtree and others test `os.stat in os.supports_dir_fd`: the wrapper supports what it wraps.
        for supports in _SUPPORTS:
            table = getattr(os, supports, None)
            if isinstance(table, set) and original in table:
                table.add(announced)
        setattr(os, name, announced)


if os.environ.get("PY_AUDIT_LOG"):
    try:
        _install(os.environ["PY_AUDIT_LOG"], os.environ.get("PY_AUDIT_ROOT") or os.getcwd())
    except OSError:
        pass
