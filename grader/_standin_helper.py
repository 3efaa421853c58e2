"""The drift probe's stand-in, beside the run it grades: in the run's network namespace, out of its sight.

Started by grader/sandbox.py (``run(netns_helpers=...)``) as ``python -I _standin_helper.py ...`` in one drift
lane's own fresh network namespace, after ``lo`` is up and before the sandboxed driver starts: the grader's
interpreter, user and filesystem, outside the run's mount and pid namespaces (grader/drift_run.py builds the
command). It

1. loads the profile (and its rules) from the grader's own files;
2. opens the truth log and its error log in a folder only the grader's user can open, which the run is
   never shown (each line the label the model meant, the drift applied, the status, and ``t``: the
   ``time.monotonic()`` of the answer, by which the grader assigns it to the ticket that ran then);
3. listens on 127.0.0.1:PORT (in the lane's own namespace; where the machine has none, a port the grader
   found free on the host);
4. forks: the parent exits 0 (the run may start: the listener is up), the child keeps only the listener
   and the two logs, gives up root (uid 65534, which owns nothing of the run's) and serves until the run's
   process group is killed or its lifetime ends.

The answers carry no ``x-standin-truth`` header: what the model meant is for the grader only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

_NOBODY = 65534


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="_standin_helper")
    parser.add_argument("--profile", required=True, help="the profile file (YAML), resolved by the grader")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--truth-log", required=True, help="created here (must not exist)")
    parser.add_argument("--error-log", required=True, help="created here (must not exist)")
    parser.add_argument("--lifetime", type=float, required=True, help="seconds to serve at most")
    parser.add_argument("--path-prefix", action="append", default=[])
    args = parser.parse_args(argv)
    os.chdir("/")  # nothing of the run's working folder is held open
    # -I: neither the working folder nor this script's folder is on sys.path; the grader's package is.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from grader._intercept_helper import _detach, _drop
    from grader.standin import RulesError, make_server
    from grader.standin_drift import Drifter
    from grader.standin_profile import ProfileError, load_profile, resolve_profile

    # What the standard library imports lazily must be loaded before root is given up: the grader's
    # interpreter may live where uid 65534 cannot read (a Python under a 0700 /root).
    "localhost".encode("idna")
    try:
        profile = load_profile(resolve_profile(args.profile))
    except (ProfileError, RulesError) as exc:
        print(f"standin: error: {exc}", file=sys.stderr)
        return 2
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND
    truth_fd = os.open(args.truth_log, flags, 0o600)
    error_fd = os.open(args.error_log, flags, 0o600)
    truth = os.fdopen(truth_fd, "w", encoding="utf-8")

    def sink(line: dict[str, object]) -> None:
        truth.write(json.dumps({**line, "t": time.monotonic()}) + "\n")
        truth.flush()

    try:
        server, _url = make_server("127.0.0.1", args.port, rules=profile.rules, log=None)
    except OSError as exc:
        print(f"standin: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}", file=sys.stderr)
        return 3
    server.drift = Drifter(profile, sink=sink, header=False)
    server.path_prefixes = tuple(args.path_prefix)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        return 0  # the listener is up: the run may start
    try:
        _detach(server.fileno(), truth_fd, error_fd, stderr=error_fd)
        _drop(_NOBODY)
        # Never outlive the run, even if the process-group kill that ends it were missed.
        threading.Timer(args.lifetime, os._exit, args=(0,)).start()
        server.serve_forever(poll_interval=0.5)
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
