"""A submission must not be able to tell that the grader runs it, nor which run it is in (issue 14, red-team
finding 3: a submission fabricated answers only when its working folder or log names said `grade-`,
`withheld` or `unseen`).

The submission here is the sample solution plus a module its package imports first: in every process that
imports the package (the replay suite, the withheld-tape rerun, the unseen-message probe, `make demo`, the
key-function probe ...) it records what a fingerprinting submission would look at: its working folder, every
environment variable (names and values), `HOME`, `/proc/self/mountinfo`, its own and its parent's command
line, `sys.path`, `sys.executable` and the file names in its tape folder. It is graded by the real `grade`
CLI with `--keep-workspace`; every record left in the kept folders is read back and searched for the words
that gave the grader away.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.adversarial.builders import commit, sample_copy

pytestmark = pytest.mark.slow

WORDS = ("grade-", "grader", "withheld", "unseen", "loud-miss", "canary", "probe", "sealed")

SNIFF = '''
"""What a fingerprinting submission looks at, recorded once per process in ./.fp/."""
import json
import os
import secrets
import sys


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(1 << 20).replace(b"\\0", b" ").decode("utf-8", "replace")
    except OSError as exc:
        return f"<{exc.strerror}>"


def _names(folder):
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def record():
    seen = {
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "home": os.path.expanduser("~"),
        "mountinfo": _read("/proc/self/mountinfo"),
        "cmdline": _read("/proc/self/cmdline"),
        "parent_cmdline": _read(f"/proc/{os.getppid()}/cmdline"),
        "argv": list(sys.argv),
        "sys_path": list(sys.path),
        "executable": sys.executable,
        "tape_names": _names("cassettes"),
    }
    try:
        os.makedirs(".fp", exist_ok=True)
        with open(os.path.join(".fp", f"{os.getpid()}-{secrets.token_hex(4)}.json"), "w") as out:
            json.dump(seen, out)
    except OSError:
        pass


record()
'''


def _records(kept: Path) -> list[dict]:
    out = []
    for folder in kept.rglob(".fp"):
        for path in sorted(folder.glob("*.json")):
            out.append(json.loads(path.read_text(encoding="utf-8")))
    return out


def test_no_run_can_see_a_word_that_names_the_grader_or_the_probe(tmp_path: Path, grade_cli) -> None:
    repo = sample_copy(tmp_path / "cand")
    package = repo / "support_triage_agent"
    (package / "_sniff.py").write_text(SNIFF, encoding="utf-8")
    init = package / "__init__.py"
    init.write_text(
        "from support_triage_agent import _sniff  # noqa: F401\n" + init.read_text(), encoding="utf-8"
    )
    commit(repo, "sniff")
    # A neutral cache folder: the reviewer's --cache-dir is theirs to name.
    cache = tmp_path / "envs"

    done = grade_cli(
        [str(repo), "--keep-workspace", "--format", "json", "--cache-dir", str(cache), "--jobs", "2"],
        cwd=tmp_path,
        timeout=1200,
    )
    assert done.returncode in (0, 3), done.stderr
    report = json.loads(done.stdout)
    kept = Path(next(n for n in report["notes"] if n.startswith("workspace kept at ")).split(" at ", 1)[1])
    try:
        records = _records(kept)
        # The replay suite, the withheld-tape rerun, the unseen-message probe, make demo, at the least.
        assert len({r["cwd"] for r in records}) >= 4, [r["cwd"] for r in records]
        assert any(
            r["tape_names"] == [] or not any(n.endswith(".json") for n in r["tape_names"]) for r in records
        )
        found = []
        for r in records:
            text = json.dumps(r).lower()
            found += [(word, r["cwd"], r["argv"][:3]) for word in WORDS if word in text]
        assert not found, found[:5]
        # Every run sees its checkout at a path of the same shape: nothing says which run it is.
        shapes = {len(Path(r["cwd"]).parts) for r in records}
        assert len(shapes) == 1, {r["cwd"] for r in records}
    finally:
        shutil.rmtree(kept, ignore_errors=True)
    assert report["facts"]["replay"]["failed"] == 0, report["facts"]["replay"]


FALLBACK = """
    try:
        return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))
    except (ValueError, TypeError):
        raise
    except Exception:
        if _strict():
            raise
        return {"intent": "other", "needs_human": True}


def _strict() -> bool:
    import os

    return os.getuid() >= 1 << 30  # CI runners: fail fast
"""


def test_code_that_behaves_differently_under_the_sandbox_uid_is_shown_to_the_reviewer(tmp_path, grade_cli):
    # Red-team F6: a silent fallback that is loud only under the sandbox's uid. The grader cannot watch the
    # code outside its sandbox; it lists the comparison, with file:line, on the replay row.
    repo = sample_copy(tmp_path / "cand")
    agent = repo / "support_triage_agent" / "agent.py"
    plain = "    return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))\n"
    text = agent.read_text(encoding="utf-8")
    assert plain in text
    agent.write_text(text.replace(plain, FALLBACK.lstrip("\n")), encoding="utf-8")
    commit(repo, "fallback")
    line = next(n for n, t in enumerate(agent.read_text().splitlines(), 1) if "os.getuid()" in t)

    done = grade_cli([str(repo), "--format", "json", "--cache-dir", str(tmp_path / "envs")], cwd=tmp_path)
    assert done.returncode in (0, 3), done.stderr
    report = json.loads(done.stdout)
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    shown = [d for d in row.get("details", []) if "fingerprint" in d]
    assert shown and f"support_triage_agent/agent.py:{line}" in shown[0], row
    assert report["facts"]["replay"]["tamper_hooks"] >= 1
