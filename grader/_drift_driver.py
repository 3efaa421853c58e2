"""Run a submission's triage command once per ticket against a stand-in; print one marked JSON answer.

Staged by grader/drift_run.py into a read-only folder and run in the sandbox as
``python -E -s _drift_driver.py PLAN.json`` under the submission's interpreter: standard library only, and
nothing of the submission's is imported. It starts the stand-in (the staged copy of the grader's, from the
same folder) unless the plan names an endpoint URL, then runs the command once per ticket, one after the
other in each of a few lanes (each lane has its own stand-in and truth log, sliced by its size before and
after each ticket), each ticket in its own session so a timeout kills what it started. Keys (the grader's
canary) come from the environment and are replaced by ``[canary]`` in everything this prints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

MARKER = "@@GRADER-DRIFT-RUN@@"
_OUTPUT_CAP = 16_000
_TRUTH_CAP = 1_000_000
_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from grader.standin import main; sys.exit(main())"


def _read(path: str, cap: int) -> str:
    with open(path, "rb") as handle:
        return handle.read(cap).decode("utf-8", "replace")


def _start_standin(plan: dict[str, Any], work: str, truth: str) -> tuple[subprocess.Popen[bytes] | None, str]:
    url_file, err_file = os.path.join(work, "url"), os.path.join(work, "standin.err")
    options = ["--profile", plan["profile"], "--rules", plan["rules"], "--truth-log", truth]
    # A fixed port when the grader's TLS end forwards the intercepted hosts here (its own namespace).
    options += ["--port", str(int(plan.get("standin_port") or 0))]
    for prefix in plan.get("path_prefixes", []):
        options += ["--path-prefix", prefix]
    with open(url_file, "w") as out, open(err_file, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-E", "-s", "-c", _BOOT, plan["tools"], "--quiet", *options],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    for _ in range(400):
        text = _read(url_file, 4096)
        if text.endswith("\n"):
            return proc, text.strip()
        if proc.poll() is not None:
            break
        time.sleep(0.025)
    proc.kill()
    lines = [line for line in _read(err_file, 64_000).splitlines() if line.strip()]
    return None, lines[-1][:300] if lines else ""


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


def _calls(truth: str, start: int, end: int) -> list[dict[str, Any]]:
    if end <= start:
        return []
    with open(truth, "rb") as handle:
        handle.seek(start)
        data = handle.read(min(end - start, _TRUTH_CAP)).decode("utf-8", "replace")
    calls = []
    for line in data.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            calls.append(entry)
    return calls


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _one(
    plan: dict[str, Any],
    ticket: dict[str, Any],
    env: dict[str, str],
    work: str,
    truth: str,
    secrets: list[str],
    timeout: float,
) -> dict[str, Any]:
    out_path, err_path = os.path.join(work, "out"), os.path.join(work, "err")
    start = _size(truth)
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
    seconds = time.monotonic() - began
    stdout, stderr = _read(out_path, _OUTPUT_CAP), _read(err_path, 4 * _OUTPUT_CAP)[-_OUTPUT_CAP:]
    for secret in secrets:
        stdout, stderr = stdout.replace(secret, "[canary]"), stderr.replace(secret, "[canary]")
    return {
        "id": ticket["id"],
        "exit": code,
        "stdout": stdout,
        "stderr": stderr,
        "seconds": round(seconds, 3),
        "calls": _calls(truth, start, _size(truth)),
        # Stopped by the run's own deadline, not by the per-ticket timeout: not the agent's doing.
        "stopped": code is None and timeout < plan["ticket_timeout"],
    }


def _lane(
    plan: dict[str, Any],
    tickets: list[dict[str, Any]],
    work: str,
    secrets: list[str],
    deadline: float,
    out: dict[str, Any],
) -> None:
    """One lane: its own stand-in, truth log and tape folder, its tickets one after another."""
    os.makedirs(work, exist_ok=True)
    truth = os.path.join(work, "truth.jsonl")
    open(truth, "a").close()
    standin, base = None, plan.get("url") or ""
    if not base:
        standin, base = _start_standin(plan, work, truth)
        if standin is None:
            out["error"] = "the stand-in server did not start in the sandbox" + (f": {base}" if base else "")
            return
    tapes = os.path.join(plan["tapes"], os.path.basename(work))
    os.makedirs(tapes, exist_ok=True)
    env = _environment(plan, base, tapes)
    try:
        for ticket in tickets:
            left = deadline - time.monotonic()
            if left < 1.0:
                out["skipped"].append(ticket["id"])
                continue
            timeout = min(plan["ticket_timeout"], left)
            out["results"].append(_one(plan, ticket, env, work, truth, secrets, timeout))
    finally:
        if standin is not None:
            standin.terminate()
            try:
                standin.wait(timeout=5)
            except subprocess.TimeoutExpired:
                standin.kill()


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    work = tempfile.mkdtemp(prefix="drift-run-", dir=os.environ.get("HOME") or None)
    plan.setdefault("tapes", os.path.join(work, "tapes"))
    secrets = [os.environ[name] for name in plan.get("secret_envs", []) if os.environ.get(name)]
    deadline = time.monotonic() + plan["total_timeout"]
    # Tickets run in a few lanes at once, each lane with a stand-in of its own: a stand-in's drift decisions
    # depend only on the seed and each request, so lanes decide exactly as one stand-in would, and each
    # lane's truth log is sliced ticket by ticket as before.
    count = max(1, min(int(plan.get("lanes", 1)), len(plan["tickets"])))
    outs: list[dict[str, Any]] = [{"results": [], "skipped": []} for _ in range(count)]
    threads: list[threading.Thread] = []
    for n in range(count):
        folder = os.path.join(work, f"lane-{n + 1}")
        lane = (plan, plan["tickets"][n::count], folder, secrets, deadline, outs[n])
        threads.append(threading.Thread(target=_lane, args=lane))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [o["error"] for o in outs if "error" in o]
    if errors:
        print(MARKER + json.dumps({"error": errors[0]}))
        return 0
    order = {t["id"]: n for n, t in enumerate(plan["tickets"])}
    results = sorted((r for o in outs for r in o["results"]), key=lambda r: order[r["id"]])
    skipped = sorted((s for o in outs for s in o["skipped"]), key=order.__getitem__)
    print(MARKER + json.dumps({"tapes": plan["tapes"], "tickets": results, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
