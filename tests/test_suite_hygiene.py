"""The suite's own hygiene: the session-end check finds a process a test left running, however detached."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys

import pytest

from tests.helpers.processes import SESSION_VARIABLE, leftovers, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_detached_process_is_found_until_it_ends() -> None:
    value = f"probe-{secrets.token_hex(8)}"
    env = {**os.environ, SESSION_VARIABLE: value}
    # Its own session and group, its parent gone at once: reparented away from this process.
    subprocess.run(["sh", "-c", "sleep 9771 >/dev/null 2>&1 &"], env=env, start_new_session=True, check=True)
    # The shell returns before its background child has exec'd `sleep` (on a busy machine, seconds before):
    # wait for the state, never for a time.
    wait_for(lambda: [c for _p, c in leftovers(value, within=0)] == ["sleep 9771"], within=60, every=0.1)
    found = leftovers(value, within=0)
    assert [command for _pid, command in found] == ["sleep 9771"]
    os.kill(found[0][0], signal.SIGKILL)
    assert leftovers(value, within=60) == []


def test_the_session_marks_every_process_it_starts() -> None:
    value = os.environ[SESSION_VARIABLE]
    done = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ[{SESSION_VARIABLE!r}])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == value
