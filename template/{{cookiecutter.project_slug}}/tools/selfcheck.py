"""`make check`: find the mistakes a reviewer would find, before you submit.

Five checks, one line each (`ok: ...`, or one `FAIL: <what> (<file:line>)` line per problem):

- offline replay: the suite passes in replay with sockets blocked and no credential variables set;
- no credentials: no API key in the files you would submit, nor anywhere in git history;
- tape metadata: every tape records `meta.model`, `meta.endpoint` and `meta.recorded_at`;
- tape chain: `python -m <package>.cassette verify` (`make verify`) passes: no tape edited after it was
  recorded, none missing from the chain (run only when the Makefile names the package);
- REPLAY.md: its four sections exist and no `TODO` is left in them.

Uses only the standard library, pytest and pytest-socket. Exits 1 when any check fails, 2 on a bad argument.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 10  # per check; the rest is summarised as "... and N more"
MAX_MESSAGE = 200  # characters of a failure's first line (a cassette miss is shown whole)

# The common key formats, each starting with a literal prefix. A match must start a token.
KEY_PATTERNS = {
    "Anthropic API key": r"sk-ant-[A-Za-z0-9_-]{32,}",
    "OpenRouter API key": r"sk-or-v1-[0-9a-f]{64}",
    "OpenAI API key": r"sk-(?!ant-|or-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}",
    "Google API key": r"AIza[0-9A-Za-z_-]{35}",
    "AWS access key id": r"A(?:KIA|SIA)[0-9A-Z]{16}",
    "GitHub token": r"gh[pousr]_[A-Za-z0-9]{36}",
    "Hugging Face token": r"hf_[A-Za-z0-9]{30,}",
    "Groq API key": r"gsk_[A-Za-z0-9]{48,}",
    # A credential header's value, whatever the token looks like (tapes from other recorders store them).
    "credential header": r"(?i:authorization|x-api-key|api-key)[\"']?\s*[:=]\s*\[?\s*[\"']?"
    r"(?i:bearer\s+)?[A-Za-z0-9._~+/=-]{16,}",
}
KEYS = re.compile("|".join(f"(?<![A-Za-z0-9_-])(?P<g{i}>{p})" for i, p in enumerate(KEY_PATTERNS.values())))
KEY_NAMES = list(KEY_PATTERNS)
# Values that stand in for a key in docs, tests and scrubbed tapes (a real key is random: no words, no runs).
PLACEHOLDER = re.compile(
    r"redacted|dummy|example|fake|test|placeholder|your|xxxx|\.\.\.|abcdef|123456|(.)\1{5}", re.IGNORECASE
)
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist"}

REPLAY_SECTIONS = (
    "Endpoint family and model",
    "Recording date",
    "Fields normalized out of the key",
    "What replay proves and what it does not",
)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
# The variables tests/conftest.py unsets in replay.
CREDENTIAL_ENV = re.compile(
    r".*(_API_KEY|_TOKEN)$|^(OPENAI|ANTHROPIC)_(BASE_URL|ORG_ID|ORGANIZATION|PROJECT_ID)$"
)


def check_offline_replay() -> tuple[str, list[str]]:
    """Run the suite like a stranger would: replay, no sockets, no credentials."""
    env = {k: v for k, v in os.environ.items() if not CREDENTIAL_ENV.match(k.upper())}
    # The committed tapes, all of them: not a refresh folder, not a partial replay.
    for name in ("PYTEST_ADDOPTS", "CASSETTE_DIR", "CASSETTE_REPLAY_UNTIL"):
        env.pop(name, None)
    env["CASSETTE_MODE"] = "replay"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--disable-socket"]
        argv += ["--allow-unix-socket", f"--junitxml={report}", "-o", "junit_family=xunit1"]
        try:
            result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)  # noqa: S603
        except subprocess.TimeoutExpired:
            return "", ["the suite did not finish within 15 minutes"]
        problems = _failures(report)
    output = (result.stdout + result.stderr).strip().splitlines()
    summary = output[-1].strip("= ") if output else f"pytest exited {result.returncode}"
    if result.returncode != 0 and not problems:
        problems = [f"pytest: {summary}"]
    return summary, problems


def _failures(report: Path) -> list[str]:
    """One line per failed or erroring test in pytest's JUnit report (empty when there is no report)."""
    try:
        cases = ET.parse(report).getroot().iter("testcase")  # noqa: S314 - the file pytest just wrote
    except (OSError, ET.ParseError):
        return []
    lines = []
    for case in cases:
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            lines.append(_failure_line(case, problem))
    return lines


def _failure_line(case: ET.Element, problem: ET.Element) -> str:
    message = problem.get("message", "").splitlines() or ["failed"]
    # "pkg.cassette.CassetteMiss: ... /abs/repo/cassettes/..." -> "CassetteMiss: ... cassettes/..."
    text = re.sub(r"^[\w.]+\.(\w+:)", r"\1", message[0]).replace(f"{ROOT}{os.sep}", "")
    if text.startswith("CassetteMiss: cassette miss: "):
        # Kept whole: the nearest tape's name and the fields that differ are the point of the line (the
        # cassette layer lists at most three differences, so it stays short).
        text = text.removeprefix("CassetteMiss: ")
    elif len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 3] + "..."
    where = f"{case.get('file', '?')}:{int(case.get('line', '0')) + 1}"
    return f"{case.get('name')}: {text} ({where})"


def check_credentials() -> tuple[str, list[str]]:
    """Scan the files you would submit, then every commit's added lines."""
    problems = [f"{name} ({path}:{line})" for path, line, name in _scan_tree()]
    history = _git("log", "-p", "--all", "--relative", "--no-color", "--no-ext-diff", "--format=commit %H")
    if history is None:
        return "tree only: no git history to scan", problems
    for sha, path, line, name in _scan_history(history):
        problems.append(f"{name} added in commit {sha[:7]}: revoke it, then rewrite history ({path}:{line})")
    return "tree and history", problems


def _git(*args: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    result = subprocess.run([git, *args], cwd=ROOT, capture_output=True, text=True, errors="replace")  # noqa: S603
    return result.stdout if result.returncode == 0 else None


def _find_keys(text: str) -> Iterator[str]:
    for match in KEYS.finditer(text):
        value = match.group(0)
        if PLACEHOLDER.search(value) or not re.search(r"[0-9A-Z]", value.split()[-1]):
            continue  # a placeholder, or lowercase only: prose or an identifier, not a key
        yield KEY_NAMES[int(match.lastgroup[1:])]


def _scan_tree() -> Iterator[tuple[str, int, str]]:
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if listed is not None:  # what `git add -A` would submit; ignored files (.env, .venv) stay private
        paths = [ROOT / name for name in listed.split("\0") if name]
    else:
        paths = [p for p in ROOT.rglob("*") if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]
    for path in sorted(paths):
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for name in _find_keys(line):
                yield path.relative_to(ROOT).as_posix(), number, name


def _scan_history(log: str) -> Iterator[tuple[str, str, int, str]]:
    sha, path, number = "", "", 0
    for line in log.splitlines():
        if line.startswith("commit "):
            sha = line.split()[1]
        elif line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else line[4:]
        elif line.startswith("@@"):
            match = re.search(r"\+(\d+)", line)
            number = int(match.group(1)) if match else 0
        elif line.startswith("+"):
            for name in _find_keys(line[1:]):
                yield sha, path, number, name
            number += 1
        elif line.startswith(" "):
            number += 1


def check_tape_metadata(cassette_dir: Path) -> tuple[str, list[str]]:
    """Every tape says which model answered, where, and when."""
    tapes = sorted(p for p in cassette_dir.glob("*.json") if not p.is_symlink())
    rel = cassette_dir.relative_to(ROOT).as_posix()
    if not tapes:
        return "", [f"no tapes in {rel}/: run `make record` and commit them ({rel}/)"]
    problems = []
    local = 0
    for tape in tapes:
        where = tape.relative_to(ROOT).as_posix()
        text = tape.read_text(encoding="utf-8", errors="replace")
        try:
            meta = json.loads(text).get("meta")
        except (json.JSONDecodeError, AttributeError) as exc:
            problems.append(f"not a JSON object: {exc} ({where}:{getattr(exc, 'lineno', 1)})")
            continue
        line = next((n for n, s in enumerate(text.splitlines(), 1) if '"meta"' in s), 1)
        meta = meta if isinstance(meta, dict) else {}
        missing = [f"meta.{k}" for k in ("model", "endpoint", "recorded_at") if not _filled(meta.get(k))]
        if missing:
            problems.append(f"no {', '.join(missing)} ({where}:{line})")
        elif not _iso_time(meta["recorded_at"]):
            problems.append(f"meta.recorded_at is not an ISO 8601 time ({where}:{line})")
        local += _loopback(str(meta.get("endpoint", "")))
    if local:
        # Not a problem (a rehearsal is what the stand-in is for), but not what a reviewer's rubric rewards.
        note = "recorded against a loopback endpoint: reviewers' default rubric gives at most 2/3"
        return f"{len(tapes)} tapes; {local} {note}", problems
    return f"{len(tapes)} tapes", problems


def _loopback(host: str) -> bool:
    """Whether a tape's endpoint stays on this machine: the grader's rule (its grader/loopback.py), copied."""
    text = host.strip().lower()
    try:
        address = ipaddress.ip_address(text[1:-1] if text[:1] == "[" and text[-1:] == "]" else text)
    except ValueError:
        try:
            name = urlsplit(text if "://" in text else f"//{text}").hostname or ""
        except ValueError:
            return False
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return name == "localhost" or name.endswith(".localhost")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback or address.ipv4_mapped.is_unspecified
    return address.is_loopback or address.is_unspecified


def _filled(value: object) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _iso_time(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def check_chain(cassette_dir: Path, package: str) -> tuple[str, list[str]]:
    """The package's own verifier: the chain is whole and every tape matches its last chain entry."""
    folder = str(cassette_dir.relative_to(ROOT))
    argv = [sys.executable, "-m", f"{package}.cassette", "verify", "--dir", folder]
    try:
        result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)  # noqa: S603
    except subprocess.TimeoutExpired:
        return "", ["`verify` did not finish within 5 minutes"]
    if result.returncode == 0:
        return result.stdout.strip().removeprefix("ok (").removesuffix(")"), []
    lines = [line.removeprefix("verify: ") for line in result.stderr.strip().splitlines()]
    return "", [_where_last(line) for line in lines] or [f"verify exited {result.returncode}"]


def _where_last(line: str) -> str:
    """``path:line: message`` -> ``message (path:line)``, the way every other check names a place."""
    match = re.match(r"(\S+?:\d+): (.*)", line)
    return f"{match.group(2)} ({match.group(1)})" if match else line


def check_replay_doc() -> tuple[str, list[str]]:
    """REPLAY.md has its four sections, with every TODO filled in."""
    path = ROOT / "REPLAY.md"
    if path.is_symlink() or not path.is_file():
        return "", ["REPLAY.md is missing or a symlink (REPLAY.md:1)"]
    found: dict[str, int] = {}
    todos: list[str] = []
    section = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        heading = HEADING.match(line)
        if heading:
            titles = {t.lower(): t for t in REPLAY_SECTIONS}
            section = titles.get(" ".join(heading.group(1).split()).lower(), "")
            if section:
                found.setdefault(section, number)
        elif section and "TODO" in line:
            todos.append(f'TODO left in "{section}" (REPLAY.md:{number})')
    missing = [f'no "## {t}" section (REPLAY.md:1)' for t in REPLAY_SECTIONS if t not in found]
    return f"{len(found)}/{len(REPLAY_SECTIONS)} sections", missing + todos


def main(argv: list[str]) -> int:
    cassette_dir = (ROOT / (argv[0] if argv else "cassettes")).resolve()
    if not cassette_dir.is_relative_to(ROOT):
        print(f"selfcheck: the cassette folder must be inside {ROOT}", file=sys.stderr)
        return 2
    checks = {
        "offline replay": check_offline_replay,
        "no credentials": check_credentials,
        "tape metadata": lambda: check_tape_metadata(cassette_dir),
    }
    if len(argv) > 1:
        checks["tape chain"] = lambda: check_chain(cassette_dir, argv[1])
    checks["REPLAY.md sections"] = check_replay_doc
    failed = False
    for label, check in checks.items():
        summary, problems = check()
        if not problems:
            print(f"ok: {label}" + (f" ({summary})" if summary else ""))
        for problem in problems[:MAX_LINES]:
            print(f"FAIL: {label}: {problem}")
        if len(problems) > MAX_LINES:
            print(f"FAIL: {label}: ... and {len(problems) - MAX_LINES} more")
        failed = failed or bool(problems)
        sys.stdout.flush()
    if shutil.which("grade"):
        print("`grade .` is installed: it runs the reviewers' full rubric on this repository")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
