"""Run a submission's triage command once per ticket against an endpoint; print one marked JSON answer.

Staged by grader/drift_run.py into a read-only folder and run in the sandbox as
``python -E -s _drift_driver.py PLAN.json`` under the submission's interpreter: standard library only, and
nothing of the submission's is imported. The endpoint is the plan's URL: the kit's stand-in, which the
grader runs beside this run, outside its sight (grader/_standin_helper.py), or a live endpoint. The command
runs once per ticket, one after the other, each in its own session so a timeout kills what it started; each
ticket's outcome carries when it began and ended (``time.monotonic()``), by which the grader assigns the
stand-in's answers, which it alone reads, to tickets. Keys (the grader's canary) come from the environment
and are replaced by ``[canary]`` in everything this prints.

The driver makes itself non-dumpable first: the commands it starts run as the same user, and could
otherwise ptrace it or write its memory (``/proc/<pid>/mem``) to forge the answer it prints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

MARKER = "@@GRADER-DRIFT-RUN@@"
_OUTPUT_CAP = 16_000
_PR_SET_DUMPABLE = 4


def _undumpable() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        pass  # not Linux, or no libc to ask: the grader's other checks stand


def _read(path: str, cap: int) -> str:
    with open(path, "rb") as handle:
        return handle.read(cap).decode("utf-8", "replace")


def _environment(plan: dict[str, Any], base: str, tapes: str) -> dict[str, str]:
    env = dict(os.environ)
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    env["OPENAI_BASE_URL"] = base
    env["ANTHROPIC_BASE_URL"] = root
    for name, anthropic in plan.get("base_envs", []):
        env[name] = root if anthropic else base
    env["CASSETTE_DIR"] = tapes
    env.update(plan.get("env", {}))
    return env


def _one(
    plan: dict[str, Any],
    ticket: dict[str, Any],
    env: dict[str, str],
    work: str,
    secrets: list[str],
    timeout: float,
) -> dict[str, Any]:
    out_path, err_path = os.path.join(work, "out"), os.path.join(work, "err")
    began = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [*plan["command"], ticket["message"]],
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        try:  # whatever it left running must not answer for the next ticket
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    ended = time.monotonic()
    stdout, stderr = _read(out_path, _OUTPUT_CAP), _read(err_path, 4 * _OUTPUT_CAP)[-_OUTPUT_CAP:]
    for secret in secrets:
        stdout, stderr = stdout.replace(secret, "[canary]"), stderr.replace(secret, "[canary]")
    return {
        "id": ticket["id"],
        "exit": code,
        "stdout": stdout,
        "stderr": stderr,
        "seconds": round(ended - began, 3),
        "began": began,
        "ended": ended,
        # Stopped by the run's own deadline, not by the per-ticket timeout: not the agent's doing.
        "stopped": code is None and timeout < plan["ticket_timeout"],
    }


def main() -> int:
    _undumpable()
    with open(sys.argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    work = tempfile.mkdtemp(prefix="drift-run-", dir=os.environ.get("HOME") or None)
    plan.setdefault("tapes", os.path.join(work, "tapes"))
    secrets = [os.environ[name] for name in plan.get("secret_envs", []) if os.environ.get(name)]
    deadline = time.monotonic() + plan["total_timeout"]
    tapes = os.path.join(plan["tapes"], "lane-1")
    os.makedirs(tapes, exist_ok=True)
    env = _environment(plan, plan["url"], tapes)
    results: list[dict[str, Any]] = []
    skipped: list[str] = []
    for ticket in plan["tickets"]:
        left = deadline - time.monotonic()
        if left < 1.0:
            skipped.append(ticket["id"])
            continue
        timeout = min(plan["ticket_timeout"], left)
        results.append(_one(plan, ticket, env, work, secrets, timeout))
    print(MARKER + json.dumps({"tapes": plan["tapes"], "tickets": results, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
