"""The sandbox, exercised with real subprocesses, real sockets and real namespaces."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader import sandbox
from tests.helpers.processes import wait_for

ROOT = os.geteuid() == 0
NETNS = sandbox.isolation().network == "namespace+pytest-socket"
needs_netns = pytest.mark.skipif(not NETNS, reason="no network namespace on this machine")
needs_root = pytest.mark.skipif(not ROOT, reason="privilege drop only happens as root")
# A Python any user can execute (the grader's may live under a 0700 /root).
PY = next(
    (p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), sys.executable
)


@pytest.fixture
def box():
    """A world-traversable folder (pytest's tmp_path is 0700 as root: `nobody` could not enter it)."""
    path = Path(tempfile.mkdtemp(prefix="sbx-test-"))
    path.chmod(0o755)
    (path / "work").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(box: Path, argv, **kw):
    kw.setdefault("timeout", 20)
    return sandbox.run(argv, cwd=box / "work", home=box / "home", **kw)


def _alive(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False).returncode == 0


def _gone(marker: str) -> bool:
    """Every process whose command line holds ``marker`` has ended (killed processes take a moment)."""
    return wait_for(lambda: not _alive(marker))


def test_command_output_and_exit_code(box):
    res = _run(box, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.returncode, res.stdout, res.stderr, res.timed_out) == (3, "out\n", "err\n", False)


@needs_root
def test_runs_as_an_unprivileged_uid_and_cannot_write_root_owned_files(box):
    precious = box / "precious.txt"
    precious.write_text("grader data\n")
    res = _run(box, ["sh", "-c", f"id -u; echo evil >> {precious}; touch mine"])
    assert res.user == "unprivileged"
    assert int(res.stdout.splitlines()[0]) not in (0, os.getuid())
    assert precious.read_text() == "grader data\n"
    assert (box / "work" / "mine").exists()  # cwd is handed to the command ...
    assert (box / "work" / "mine").stat().st_uid == os.getuid()  # ... and taken back afterwards


_KEYRING = """
import ctypes, platform, sys
add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
USER_KEYRING = ctypes.c_int(-4)
if sys.argv[1] == "add":
    got = libc.syscall(add_key, b"user", b"left-behind", b"payload", ctypes.c_size_t(7), USER_KEYRING)
else:  # KEYCTL_SEARCH (10) of the user keyring
    got = libc.syscall(keyctl, ctypes.c_int(10), USER_KEYRING, b"user", b"left-behind", ctypes.c_int(0))
print(got, ctypes.get_errno())
"""


@pytest.mark.skipif(sandbox.isolation().filesystem != "bwrap", reason="the filter is applied by bwrap")
def test_kernel_keyrings_are_out_of_reach(box):
    """Red team 9: a key added to the run's user keyring outlived the grade and the next run as that uid read
    it. Both calls are refused now; an ordinary program is not disturbed."""
    script = box / "keys.py"
    script.write_text(_KEYRING)
    script.chmod(0o644)
    added = _run(box, [PY, str(script), "add"], readable=[script])
    searched = _run(box, [PY, str(script), "search"], readable=[script])
    assert added.stdout.split() == ["-1", "1"], added  # EPERM
    assert searched.stdout.split() == ["-1", "1"], searched
    assert _run(box, [PY, "-c", "import ssl, sqlite3; print('fine')"]).stdout == "fine\n"


def test_hanging_command_is_killed_at_the_deadline(box):
    res = _run(box, ["sh", "-c", "trap '' TERM; sleep 9731"], timeout=1.5)
    assert res.timed_out and res.returncode is None
    assert _gone("sleep 9731")


def test_grandchild_holding_stdout_does_not_block(box):
    # The command exits at once but leaves a daemon with our stdout open.
    # The daemon sleeps for hours: had the run waited for its stdout, it would have timed out.
    res = _run(box, ["sh", "-c", "(setsid sleep 9732 &); echo started"], timeout=30)
    assert res.stdout == "started\n" and not res.timed_out
    assert _gone("sleep 9732")


def test_grandchild_is_killed_on_timeout(box):
    res = _run(box, ["sh", "-c", "sleep 9733 & echo go; sleep 9734"], timeout=1)
    assert res.timed_out and res.stdout == "go\n"
    assert _gone("sleep 9733") and _gone("sleep 9734")


@needs_root
def test_fork_bomb_is_contained(box):
    # Ask for far more processes than the limit; forks start failing instead of exhausting the machine.
    script = "i=0; while [ $i -lt 600 ]; do sleep 9735 & i=$((i+1)); done; echo spawned"
    # The script ends by itself once forks fail: the deadline only has to be generous (a busy machine).
    res = _run(box, ["sh", "-c", script], timeout=60)
    assert "fork" in res.stderr.lower()
    assert _gone("sleep 9735")


def test_memory_hog_is_stopped(box):
    res = _run(box, [PY, "-c", "b = bytearray(16 * 1024**3); print('allocated')"])
    assert res.returncode != 0
    assert "MemoryError" in res.stderr
    assert "allocated" not in res.stdout


def test_huge_output_is_capped_and_drained(box):
    script = "head -c 30000000 /dev/zero | tr '\\0' x; echo; echo finished >&2"
    res = _run(box, ["sh", "-c", script], output_cap=100_000)
    assert res.truncated
    assert res.returncode == 0  # the writer was never blocked on a full pipe
    assert res.stderr == "finished\n"
    assert len(res.stdout) < 100_000 + 100
    assert "truncated" in res.stdout[-60:]


def test_credentials_are_scrubbed_and_home_is_fresh(box, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-should-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_nope")
    monkeypatch.setenv("MY_DB_PASSWORD", "hunter2")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    res = _run(box, ["sh", "-c", 'env; echo "home=$(ls -A "$HOME" | tr "\\n" " ")"'], env={"EXTRA_FLAG": "1"})
    env = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    for leaked in ("OPENAI_API_KEY", "GITHUB_TOKEN", "MY_DB_PASSWORD"):
        assert leaked not in env
    assert "sk-live" not in res.stdout and "hunter2" not in res.stdout
    assert env["HOME"] == str(box / "home")
    assert env["TMPDIR"] == str(box / "home" / "tmp")
    assert env["home"].split() == ["tmp"]
    assert env["CASSETTE_MODE"] == "replay"
    assert env["PYTHONPATH"] == str(box / "work")
    assert env["PIP_NO_INDEX"] == "1"
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["EXTRA_FLAG"] == "1"


def test_scrubbed_env_passes_index_config_only_for_install(tmp_path):
    base = {
        "PATH": "/usr/bin",
        "PIP_INDEX_URL": "https://pypi.example/simple",
        "UV_CACHE_DIR": "/c",
        "UV_INDEX_PRIVATE_PASSWORD": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
    }
    offline = sandbox.scrubbed_env(home=tmp_path, base=base)
    online = sandbox.scrubbed_env(home=tmp_path, base=base, network=True, venv=tmp_path / "v")
    assert "PIP_INDEX_URL" not in offline and offline["PIP_NO_INDEX"] == "1"
    assert online["PIP_INDEX_URL"] == "https://pypi.example/simple" and online["UV_CACHE_DIR"] == "/c"
    assert "PIP_NO_INDEX" not in online
    for env in (offline, online):
        assert "UV_INDEX_PRIVATE_PASSWORD" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert online["PATH"].split(os.pathsep)[0] == str(tmp_path / "v" / "bin")
    assert online["VIRTUAL_ENV"] == str(tmp_path / "v")
    assert sandbox.scrubbed_env(home=tmp_path, base=base, extra={"CASSETTE_MODE": "record"})[
        "CASSETTE_MODE"
    ] == ("record")


_CONNECT = textwrap.dedent(
    """
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    except OSError as exc:
        print("blocked", exc.errno)
    else:
        print("connected")
    """
)


@needs_netns
def test_no_network_inside(box):
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        local = _run(box, [PY, "-c", _CONNECT, "127.0.0.1", str(port)])
        public = _run(box, [PY, "-c", _CONNECT, "1.1.1.1", "53"])
    finally:
        server.close()
    assert local.stdout.startswith("blocked"), local.stdout + local.stderr
    assert public.stdout.startswith("blocked"), public.stdout + public.stderr


_ECHO = textwrap.dedent(
    """
    import socket, threading
    srv = socket.create_server(("127.0.0.1", 0))
    def serve():
        conn, _ = srv.accept()
        conn.sendall(conn.recv(100).upper())
        conn.close()
    threading.Thread(target=serve).start()
    c = socket.create_connection(srv.getsockname(), timeout=3)
    c.sendall(b"ping")
    print(c.recv(100).decode())
    """
)


@needs_netns
def test_loopback_allows_server_and_client_inside(box):
    res = _run(box, [PY, "-c", _ECHO], loopback=True)
    assert res.stdout.strip() == "PING", res.stderr
    closed = _run(box, [PY, "-c", _ECHO], timeout=4)
    assert closed.stdout.strip() != "PING"  # without loopback even lo is down


def test_missing_command_is_reported_not_raised(box):
    res = _run(box, ["definitely-not-a-command-xyz"])
    assert res.returncode != 0


# --- the filesystem boundary (bwrap): a real mount namespace, real host processes, concurrent real runs ---

BWRAP = sandbox.isolation().filesystem == "bwrap"
needs_bwrap = pytest.mark.skipif(not BWRAP, reason="bwrap cannot run on this machine")


@pytest.fixture
def neighbour():
    """Another candidate's workspace on the same host, with a secret and a tape."""
    path = Path(tempfile.mkdtemp(prefix="sbx-neighbour-"))
    path.chmod(0o755)
    (path / "work" / "cassettes").mkdir(parents=True)
    (path / "work" / "secret.txt").write_text("neighbour-secret-7351\n")
    (path / "work" / "cassettes" / "tape.json").write_text("{}\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs_bwrap
def test_another_workspace_and_root_are_invisible(box, neighbour):
    target = neighbour / "work"
    script = (
        f"ls {neighbour} {target}; cat {target}/secret.txt; rm -f {target}/cassettes/tape.json;"
        f" echo planted > {target}/key.txt; ls -A /root; echo '--- tmp'; ls -A /tmp; echo done"
    )
    res = _run(box, ["sh", "-c", script])
    assert res.stdout.splitlines()[-1] == "done", res.stderr
    assert "neighbour-secret" not in res.stdout
    assert f"cannot access '{neighbour}'" in res.stderr and "cannot access '/root'" in res.stderr
    assert (target / "cassettes" / "tape.json").is_file()
    assert not (target / "key.txt").exists()
    assert sorted(p.name for p in target.iterdir()) == ["cassettes", "secret.txt"]
    # /tmp holds only the folder bwrap made to reach the run's own folders, not the host's /tmp.
    listed = res.stdout.split("--- tmp\n", 1)[1].splitlines()[:-1]
    assert listed == [box.name], listed
    # A command line is the submission's (a manifest's record_command): naming a path does not show it.
    named = _run(box, ["cat", str(target / "secret.txt")])
    assert named.returncode != 0 and "neighbour-secret" not in named.stdout


@needs_bwrap
def test_host_processes_and_their_environment_are_invisible(box):
    nonce = "host-nonce-4711"
    host = subprocess.Popen(["sleep", "9741"], env={**os.environ, "PYTEST_REPORT_NONCE": nonce})
    try:
        script = (
            f"cat /proc/{host.pid}/environ; grep -l {nonce} /proc/[0-9]*/environ;"
            " ls /proc | grep -c '^[0-9]'; ps -e 2>/dev/null | grep -c sleep; echo done"
        )
        res = _run(box, ["sh", "-c", script])
    finally:
        host.kill()
        host.wait()
    assert res.stdout.splitlines()[-1] == "done", res.stderr
    assert nonce not in res.stdout
    # Only the run's own processes: its pid namespace's init, the shell and the commands it is running.
    own = int(res.stdout.splitlines()[-3])
    assert own < 10, res.stdout


@needs_bwrap
def test_tmp_is_private_to_the_run_and_gone_afterwards(box, tmp_path):
    other = Path(tempfile.mkdtemp(prefix="sbx-test-other-"))
    other.chmod(0o755)
    (other / "work").mkdir()
    marker = f"kit-private-tmp-{os.getpid()}-{time.monotonic_ns()}"
    results: dict[str, sandbox.RunResult] = {}

    # The writer says when its files exist (a file in its cwd) and keeps them until the reader is done.
    ready, release = box / "work" / "ready", box / "work" / "release"
    wait = "i=0; while [ ! -e release ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"
    write = f"echo x > /tmp/{marker}; echo y > /dev/shm/{marker}; touch ready; {wait}; ls /tmp"

    def writer() -> None:
        results["writer"] = _run(box, ["sh", "-c", write], timeout=120)

    def reader() -> None:
        wait_for(ready.exists)
        try:
            results["reader"] = _run(
                other, ["sh", "-c", f"ls -A /tmp /dev/shm; cat /tmp/{marker}; echo done"]
            )
        finally:
            release.touch()

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        shutil.rmtree(other, ignore_errors=True)
    assert marker in results["writer"].stdout  # the writer did write it, in its own /tmp
    assert results["reader"].stdout.splitlines()[-1] == "done"
    assert marker not in results["reader"].stdout
    assert not Path("/tmp", marker).exists() and not Path("/dev/shm", marker).exists()


@needs_bwrap
def test_private_tmp_is_capped_so_a_flood_cannot_eat_the_hosts_memory(box):
    show = "import os\nfor p in ('/tmp', '/dev/shm'):\n    v = os.statvfs(p); print(v.f_blocks * v.f_frsize)"
    res = _run(box, [PY, "-c", show])
    tmp, shm = map(int, res.stdout.split())
    assert 0 < tmp <= 256 * 1024**2 and 0 < shm <= 64 * 1024**2, res.stdout + res.stderr


@needs_bwrap
def test_the_venv_is_read_only(box):
    venv = box / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    script = (
        f"import pathlib, sys\n"
        f"for p in (pathlib.Path({str(site)!r}) / 'evil.pth', pathlib.Path(sys.prefix) / 'bin' / 'pytest'):\n"
        f"    try:\n        p.write_text('import os\\n')\n    except OSError as exc:\n"
        f"        print('refused', exc.errno)\n    else:\n        print('wrote', p)\n"
    )
    res = _run(box, ["python", "-c", script], venv=venv)
    assert res.stdout.splitlines() == ["refused 30", "refused 30"], res.stdout + res.stderr  # EROFS
    assert not (site / "evil.pth").exists() and not (venv / "bin" / "pytest").exists()


@needs_bwrap
@needs_root
def test_concurrent_runs_get_distinct_uids(box):
    other = Path(tempfile.mkdtemp(prefix="sbx-test-other-"))
    other.chmod(0o755)
    (other / "work").mkdir()
    try:
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda b: _run(b, ["sh", "-c", "id -u; sleep 1"]), (box, other)))
    finally:
        shutil.rmtree(other, ignore_errors=True)
    uids = {int(r.stdout.split()[0]) for r in runs}
    assert len(uids) == 2 and not uids & {0, 65534}, uids


def test_isolation_says_which_filesystem_layer_ran(box):
    iso = sandbox.isolation()
    assert iso.filesystem in ("bwrap", "host")
    host = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "/"], capture_output=True, text=True, check=False)
    inside = _run(box, ["findmnt", "-n", "-o", "FSTYPE", "/"])
    # What the report claims is what a command sees: with bwrap / is its own tmpfs, else the host's root.
    if iso.filesystem == "bwrap":
        assert inside.stdout.strip() == "tmpfs" != host.stdout.strip()
    else:
        assert inside.stdout == host.stdout


_LIMITS_PROBE = textwrap.dedent(
    """
    import json, shutil, sys, tempfile
    from pathlib import Path
    from grader import sandbox
    work = Path(tempfile.mkdtemp(prefix="sbx-limits-")); work.chmod(0o755)
    show = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[1])"
    res = sandbox.run([sys.argv[1], "-c", show], cwd=work, home=work / "h", timeout=20)
    shutil.rmtree(work)
    print(json.dumps({"rc": res.returncode, "out": res.stdout, "err": res.stderr,
                      "limits": sandbox.isolation().limits, "shortfall": sandbox.host_shortfall()}))
    """
)


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="no prlimit")
def test_a_lower_host_address_space_limit_is_used_not_failed():
    # A reviewer shell with `ulimit -v` / `prlimit --as` below our 4 GiB: setting 4 GiB would fail.
    host = 3 * 1024**3
    done = subprocess.run(
        ["prlimit", f"--as={host}", "--", sys.executable, "-c", _LIMITS_PROBE, PY],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    seen = json.loads(done.stdout)
    assert seen["rc"] == 0, seen["err"]
    assert int(seen["out"]) == host
    assert seen["limits"]["address_space"] == host and seen["limits"]["lowered_by_host"] == ["address_space"]
    assert seen["shortfall"] is None


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="no prlimit")
def test_a_host_limit_below_the_floor_is_a_shortfall_not_a_score():
    done = subprocess.run(
        ["prlimit", f"--as={768 * 1024**2}", "--", sys.executable, "-c",
         "from grader import sandbox; print(sandbox.host_shortfall())"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert "address space limit (805306368 bytes)" in done.stdout


@needs_bwrap
@needs_root
def test_a_run_that_cannot_drop_privileges_is_root_without_capabilities(box):
    # A venv the unprivileged uid cannot enter keeps the command as root: it still gets no capability, so
    # the read-only mounts hold, and root-only host files stay hidden.
    venv = box / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    venv.chmod(0o700)
    script = (
        "id -u; grep CapEff /proc/self/status; cat /etc/shadow 2>/dev/null | wc -c;"
        ' touch "$VIRTUAL_ENV/evil"; mount -t tmpfs none /usr 2>/dev/null || echo nomount'
    )
    res = _run(box, ["sh", "-c", script], venv=venv)
    lines = res.stdout.split()
    assert res.user == "grader" and lines[0] == "0", res.stdout + res.stderr
    assert lines[1:4] == ["CapEff:", "0000000000000000", "0"], res.stdout
    assert "Read-only file system" in res.stderr and not (venv / "evil").exists()
    assert res.stdout.strip().endswith("nomount")


@needs_root
def test_two_runs_in_the_same_folder_take_turns_instead_of_locking_each_other_out(box):
    # Under --jobs, a check's `make demo` and another check's probe may both run in the checkout: each run's
    # uid owns the folder while it runs, so the second waits rather than take it from under the first.
    script = "for i in 1 2 3 4 5 6; do echo x > $0-$i || exit 1; sleep 0.2; done"
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda name: _run(box, ["sh", "-c", script, name]), ("first", "second")))
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert len(list((box / "work").iterdir())) == 12


CPU_GROUPS = sandbox.isolation().cpu != "shared"


def _groups_of(marker: str) -> dict[str, str]:
    """pid -> the CPU-hierarchy cgroup of every process whose command line holds ``marker``."""
    found = {}
    for pid in subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split():
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            _id, controllers, path = line.split(":", 2)
            names = controllers.split(",") if controllers else []
            if ("cpu" in names) if sandbox.isolation().cpu == "cgroup-v1" else not names:
                found[pid] = path
    return found


@pytest.mark.skipif(not CPU_GROUPS, reason="no cgroup the grader can use on this machine (isolation.cpu)")
def test_each_command_gets_one_cpu_group_for_everything_it_forks(box):
    """Red-team R4: a suite of a hundred busy processes, each in a session of its own, starved the neighbour
    in a batch. Every process of one command (setsid escapees included) is in one group; two commands
    running at once are in two; the groups are gone once the commands end."""
    other = Path(tempfile.mkdtemp(prefix="sbx-test-"))
    other.chmod(0o755)
    forks = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(30)\n"
        "time.sleep(30)\n"
    )
    markers = ("cpugroup-a", "cpugroup-b")
    with ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(
                sandbox.run, [PY, "-c", forks, marker], cwd=folder / "work", home=folder / "home", timeout=8
            )
            for folder, marker in zip((box, other), markers, strict=True)
        ]
        assert wait_for(lambda: all(len(_groups_of(m)) >= 4 for m in markers), within=30)
        groups = [set(_groups_of(m).values()) for m in markers]
        for run in runs:
            run.result()
    shutil.rmtree(other, ignore_errors=True)
    assert all(len(g) == 1 for g in groups), groups  # each command's processes share one group
    assert groups[0] != groups[1] and "/" not in groups[0] | groups[1], groups
    layer = sandbox.isolation().cpu
    base = Path("/sys/fs/cgroup/cpu" if layer == "cgroup-v1" else "/sys/fs/cgroup")
    assert wait_for(lambda: not any((base / g.lstrip("/")).exists() for s in groups for g in s))


MEMORY_GROUPS = sandbox.isolation().memory != "shared"


@pytest.mark.skipif(
    not MEMORY_GROUPS, reason="no cgroup the grader can use on this machine (isolation.memory)"
)
def test_the_memory_ceiling_covers_a_command_and_everything_it_forks(box, monkeypatch):
    """Red-team R6: the address-space rlimit caps one process, so 256 of them could hold ~1 TiB. The ceiling
    covers the command as a whole: three children that each stay under any per-process limit, together
    over the ceiling, are not all left alive. (A small ceiling, so the test takes little of a shared host.)"""
    from grader import cpugroup

    monkeypatch.setattr(cpugroup, "MEMORY_LIMIT", 256 * 1024**2)
    script = (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(3):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = bytearray(128 * 1024 * 1024)\n"
        "        for i in range(0, len(block), 4096):\n"
        "            block[i] = 1\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(sorted(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids))\n"
    )
    done = _run(box, [PY, "-c", script], timeout=60)
    codes = json.loads(done.stdout.strip() or "[]")
    assert len(codes) == 3, (done.stdout, done.stderr)
    assert -9 in codes, codes  # the kernel killed at least one: 384 MiB together is over the ceiling

    monkeypatch.setattr(cpugroup, "MEMORY_LIMIT", 1024 * 1024**2)
    done = _run(box, [PY, "-c", script], timeout=60)
    assert json.loads(done.stdout.strip()) == [0, 0, 0], done.stderr  # under it: all three finish


_CONNECT_ONCE = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((sys.argv[1], 80))
    except OSError as exc:
        print(exc)
    """
)


@needs_netns
def test_the_run_counts_what_it_sent_toward_the_network_from_any_process(box):
    """Red team 5, G6: the run's own network namespace counts every packet it had no route for, whatever
    process sent it (a `curl` child is not seen by the audit hook); loopback is not counted."""
    (box / "work" / "connect.py").write_text(_CONNECT_ONCE)
    assert _run(box, [PY, "connect.py", "192.0.2.1"]).no_route == 1
    assert _run(box, ["/bin/sh", "-c", f"{PY} connect.py 192.0.2.1; {PY} connect.py 192.0.2.2"]).no_route == 2
    assert _run(box, [PY, "connect.py", "127.0.0.1"], loopback=True).no_route == 0
    assert _run(box, ["true"]).no_route == 0
    assert _run(box, ["sleep", "30"], timeout=1).no_route is None  # killed: nothing counted, not zero
    assert _run(box, ["true"], network=True).no_route is None
