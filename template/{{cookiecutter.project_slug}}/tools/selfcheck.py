"""`make check`: find the mistakes a reviewer would find, before you submit.

Five checks, one line each (`ok: ...`, or one `FAIL: <what> (<file:line>)` line per problem):

- offline replay: the suite passes in replay with sockets blocked and no credential variables set;
- no credentials: no API key in the files you would submit, nor anywhere in git history;
- tape metadata: every tape records `meta.model`, `meta.endpoint` and `meta.recorded_at`;
- tape chain: `python -m <package>.cassette verify` (`make verify`) passes: no tape edited after it was
  recorded, none missing from the chain (run only when the Makefile names the package);
- replay-doc: REPLAY.md covers the six topics the reviewers' replay-doc row counts (endpoint, model,
  recording date, normalized fields each with a reason, what replay proves, what it does not), each with
  something a reviewer can check (a host or URL, a model name, a date, a named field and why, a sentence
  that says something; a section with a `TODO` left covers nothing), and claims nothing the tapes
  contradict; the same rule as the row (tools/replay_doc.json), so the same count and the same lines.

Uses only the standard library, pytest and pytest-socket. Exits 1 when any check fails, 2 on a bad argument.
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from bisect import bisect_left
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
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

# The reviewers' replay-doc rule, as data: a byte copy of the grader's grader/rules/replay_doc.json, read by
# check_replay_doc below, which follows grader/checks/replay_doc.py step by step, so `make check` counts the
# same topics and cites the same lines as the grader's replay-doc row.
REPLAY_RULE = json.loads((Path(__file__).resolve().parent / "replay_doc.json").read_text(encoding="utf-8"))
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
    # The suite's own grouped line ("cassette: 24 miss(es); nearest tapes differ in: ..."), first: with many
    # misses it says the one cause the lines below repeat.
    grouped = next((line for line in output if line.startswith("cassette: ")), None)
    if problems and grouped:
        problems.insert(0, grouped.replace(f"{ROOT}{os.sep}", ""))
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


def check_replay_doc(cassette_dir: Path) -> tuple[str, list[str]]:
    """The replay-doc row's rule (tools/replay_doc.json): six topics covered, nothing the tapes contradict."""
    rule = ReplayRule(REPLAY_RULE)
    found = rule.find_doc(ROOT)
    if isinstance(found, str) or found is None:
        reason = found if isinstance(found, str) else "no REPLAY.md in the repo root or docs/"
        return "", [f"{reason} (REPLAY.md:1)"]
    rel, text = found
    return rule.judge(rel, text, _kit_tapes(cassette_dir))


def _kit_tapes(cassette_dir: Path) -> list[tuple[str, dict]]:
    """(repo-relative path, tape) of each readable tape in the kit's format."""
    out = []
    for path in sorted(cassette_dir.glob("*.json")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            tape = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(tape, dict) and "version" in tape and isinstance(tape.get("request"), dict):
            out.append((path.relative_to(ROOT).as_posix(), tape))
    return out


def _title(text: str) -> str:
    """A heading's title without its closing #s (after a space, or the whole title) and the blanks around
    them; in code, not in the rule's pattern, which must stay linear (the grader does the same)."""
    title = text.rstrip()
    bare = title.rstrip("#")
    if bare != title and (not bare or bare[-1] in " \t"):
        title = bare.rstrip()
    return title


class ReplayRule:
    """grader/checks/replay_doc.py's rule, mirrored: same sections, topics, TODO handling, normalized fields
    with a reason, and contradictions with the tapes (this project's kit-format tapes; the grader also reads
    other recorders' tapes for the models they carry)."""

    def __init__(self, rule: dict) -> None:
        self.unfilled = re.compile(rule["unfilled"])
        self.heading = re.compile(rule["heading"])
        self.setext = re.compile(rule["setext"])
        self.backticked = re.compile(rule["backticked"])
        self.listish = re.compile(rule["listish"])
        self.drop_words = re.compile(rule["drop_words"])
        self.emphasis = re.compile(rule["emphasis"])
        self.model_name = re.compile(rule["model_name"])
        self.sse_model = re.compile(rule["served_model_in_stream"])
        self.normalized_lines = re.compile(rule["normalized_lines"])
        self.fences = tuple(rule["fence"])
        self.topics = {t["name"]: (t["heading"], t["keyword"]) for t in rule["topics"]}
        self.substance = {t["name"]: t["substance"] for t in rule["topics"]}
        self.needs = {
            name: [(re.compile(need["pattern"]), need) for need in topic["needs"]]
            for name, topic in self.substance.items()
        }
        self.content_word = re.compile(rule["content_word"])
        self.filler = frozenset(rule["filler_words"].split())
        self.sentence_end = re.compile(rule["sentence_end"])
        self.rule = rule

    def find_doc(self, root: Path) -> tuple[str, str] | str | None:
        for folder in (root / name for name in self.rule["folders"]):
            if folder.is_symlink() or not folder.is_dir():
                continue
            for entry in sorted(folder.iterdir()):
                if entry.name.lower() != self.rule["file_name"]:
                    continue
                rel = entry.relative_to(root).as_posix()
                if entry.is_symlink():
                    return f"{rel} is a symlink; not read"
                if not entry.is_file():
                    continue
                with entry.open("rb") as handle:
                    raw = handle.read(int(self.rule["max_bytes"]))
                return rel, raw.decode("utf-8", "replace")
        return None

    def judge(self, rel: str, text: str, tapes: list[tuple[str, dict]]) -> tuple[str, list[str]]:
        sections = self._sections(text)
        filled = [s for s in sections if not self._unfilled(s)]
        # One pattern for the models the tapes carry: a document naming one of them names the model (the
        # grader's cap: the first 200 names of at most 200 characters, in sorted order).
        carried = {m.lower() for _, tape in tapes for m in self._models(tape) if m}
        names = sorted(m for m in carried if len(m) <= 200)[:200]
        models = (
            re.compile("|".join(rf"(?<![\w.-]){re.escape(m)}(?![\w-])" for m in names)) if names else None
        )
        covered: dict[str, int] = {}
        hollow: dict[str, tuple[int, str]] = {}  # topic -> (line, what its places lack)
        for topic in self.topics:
            said = self._says(filled, topic, models)
            if isinstance(said, int):
                covered[topic] = said
            elif said is not None:
                hollow[topic] = said
        fields, _, _ = self._normalized_fields(sections)
        _, unexplained, norm_found = self._normalized_fields(filled)
        if norm_found and "normalized fields" not in covered:
            covered["normalized fields"] = norm_found
            hollow.pop("normalized fields", None)
        if unexplained:
            covered.pop("normalized fields", None)
            hollow.pop("normalized fields", None)
        problems = []
        for topic, (heading_rx, _) in self.topics.items():
            if topic in covered:
                continue
            if topic == "normalized fields" and unexplained:
                line, _ = self._unfilled_line(sections, heading_rx)
                why = f"{', '.join(name for name, _ in unexplained)} listed without a reason"
            elif topic in hollow:
                line, why = hollow[topic]
            else:
                line, why = self._unfilled_line(sections, heading_rx)
            problems.append(f"does not cover {topic}: {why} ({rel}:{line})")
        contradictions = self._stored_dropped(fields, tapes, rel) + self._unknown_models(sections, tapes, rel)
        claims = ClaimRule(self.rule).judge(self._claim_lines(sections), tapes, rel)
        contradictions += claims
        problems += [f"{message} ({where})" for message, where in contradictions]
        parts = []
        missing = [t for t in self.topics if t not in covered and t not in hollow]
        if missing:
            parts.append(f"missing: {', '.join(missing)}")
        if hollow:
            said = "; ".join(
                f"{t} at {rel}:{hollow[t][0]} — {hollow[t][1]}" for t in self.topics if t in hollow
            )
            parts.append(f"without substance: {said}")
        summary = f"{rel} covers {len(covered)}/{len(self.topics)} topics, "
        summary += f"{len(contradictions)} contradictions"
        if parts:
            summary += f" ({'; '.join(parts)})"
        return summary, problems

    def _sections(self, text: str) -> list[tuple[int, str, list[tuple[int, str]], int]]:
        """(heading line, title, [(line, text)], number of #s), the text before any heading first."""
        sections: list[tuple[int, str, list[tuple[int, str]], int]] = [(0, "", [], 0)]
        in_code = False
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith(self.fences):
                in_code = not in_code
            match = None if in_code else self.heading.match(line)
            last = sections[-1][2]
            if match:
                sections.append((number, _title(match.group(2)), [], len(match.group(1))))
            elif not in_code and self.setext.match(line) and self._setext_title(last):
                start, title = last.pop()  # "Title" underlined with === or ---
                sections.append((start, title.strip(), [], 1 if "=" in line else 2))
            else:
                last.append((number, line))
        return sections

    def _setext_title(self, lines: list[tuple[int, str]]) -> bool:
        """Whether the last line read can be underlined into a heading: text, not a list or table."""
        if not lines or not lines[-1][1].strip():
            return False
        return not self.listish.match(lines[-1][1]) and not self.heading.match(lines[-1][1])

    def _plain(self, text: str) -> str:
        return self.emphasis.sub("", text)

    def _unfilled(self, section: tuple[int, str, list[tuple[int, str]], int]) -> bool:
        return any(self.unfilled.search(line) for _, line in section[2])

    def _unfilled_line(self, sections: list, heading_rx: str) -> tuple[int, str]:
        # A `#` title is the place only when no section heading names the topic (as the grader cites it).
        for start, title, lines, _ in sorted(sections, key=lambda s: s[3] == 1):
            if start and re.search(heading_rx, self._plain(title), re.IGNORECASE):
                todo = next((n for n, line in lines if self.unfilled.search(line)), None)
                if todo:
                    return todo, "its section still holds unfilled text (TODO, TBD, FIXME or <fill ...>)"
                return start, "its section says nothing about it"
        return 1, "no heading or filled-in line names it"

    def _says(self, filled: list, topic: str, models: re.Pattern | None) -> int | tuple[int, str] | None:
        """The line saying something checkable about `topic`; else (first place naming it, what it lacks)."""
        places = self._places(filled, topic)
        verdicts = [self._substance(place, topic, models) for place in places]
        for verdict in verdicts:
            if isinstance(verdict, int):
                return verdict
        return (places[0][0], str(verdicts[0])) if places else None

    def _places(self, filled: list, topic: str) -> list[tuple[int, list[tuple[int, str]], bool, bool]]:
        """(line, lines, under a heading shared with another topic, lines[0] is the heading) per place."""
        heading_rx, keyword_rx = self.topics[topic]
        rule = self.substance[topic]
        shares = self.topics[rule["shares_heading_with"]][0] if "shares_heading_with" in rule else None
        locate = rule.get("locate") or (rule["needs"][0]["pattern"] if rule.get("locates") else None)
        # "A newer model (gpt-4.1) needs a new recording", under "does not prove", is not the model recorded.
        outside = self.topics[rule["not_under"]][0] if "not_under" in rule else None
        filled = [s for s in filled if not (outside and re.search(outside, s[1], re.IGNORECASE))]
        places = []
        for start, title, lines, _ in sorted(filled, key=lambda s: s[3] == 1):
            if start and re.search(heading_rx, self._plain(title), re.IGNORECASE):
                shared = shares is not None and bool(re.search(shares, self._plain(title), re.IGNORECASE))
                places.append((start, [(start, title), *lines], shared, True))
        for _, _, lines, _ in filled:
            paragraphs = self._paragraphs(lines)
            for index, paragraph in enumerate(paragraphs):
                for number, line in paragraph:
                    text = self._plain(line)
                    if re.search(keyword_rx, text, re.IGNORECASE) or (locate and re.search(locate, text)):
                        # "Left out of the key:" introduces the table or list after it.
                        follows = paragraphs[index + 1] if paragraph[-1][1].rstrip().endswith(":") else []
                        lines_from = [(n, t) for n, t in paragraph if n >= number] + follows
                        places.append((number, lines_from, False, False))
                        break
        return places

    @staticmethod
    def _paragraphs(lines: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
        out: list[list[tuple[int, str]]] = [[]]
        for number, line in lines:
            if line.strip():
                out[-1].append((number, line))
            elif out[-1]:
                out.append([])
        return [p for p in out if p]

    def _substance(self, place: tuple, topic: str, models: re.Pattern | None) -> int | str:
        """The line of the place that says what `topic` needs, or what the place lacks."""
        line0, lines, shared, under_heading = place
        rule = self.substance[topic]
        needs = self.needs[topic]
        if rule["unit"] == "sentence":
            # The heading or the line naming the topic says what a sentence is about, unless the heading
            # names two ("What replay proves and what it does not"): then the sentence itself must.
            body = lines[1:] if under_heading else lines
            unless = self.topics[rule["unless_naming"]][1] if "unless_naming" in rule else None
            wordy = [
                (n, s)
                for n, s in self._sentences(body)
                if self._content_words(s) >= rule["min_words"]
                and not (unless and re.search(unless, s, re.IGNORECASE))
            ]
            for number, sentence in wordy:
                if not shared or all(rx.search(sentence) for rx, _ in needs):
                    return number
            return str(rule["lacks"] if not wordy else needs[0][1]["lacks"])
        first = None
        for index, (rx, need) in enumerate(needs):
            found = next((n for n, line in lines if rx.search(self._plain(line))), None)
            if found is None and index == 0 and models is not None and rule.get("tape_models"):
                found = next((n for n, line in lines if models.search(line.lower())), None)
            if found is None and need.get("or_explained_list_line"):
                found = next((n for n, line in lines if self._explained_list_line(line)), None)
            if found is None:
                return str(need["lacks"])
            first = found if first is None else first
        return first if first is not None else line0

    def _sentences(self, lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """(line, sentence): a blank line or a list item starts a block; blocks split at full stops."""
        blocks: list[list[tuple[int, str]]] = []
        fresh = True
        for number, line in lines:
            if not line.strip():
                fresh = True
                continue
            if fresh or self.listish.match(line):
                blocks.append([])
            blocks[-1].append((number, self._plain(line).strip()))
            fresh = False
        out = []
        for block in blocks:
            text, starts = "", []
            for number, line in block:
                starts.append((len(text), number))
                text += line + " "
            begin = 0
            for end in [m.start() for m in self.sentence_end.finditer(text)] + [len(text)]:
                if text[begin:end].strip():
                    out.append((max(n for offset, n in starts if offset <= begin), text[begin:end].strip()))
                begin = end
        return out

    def _content_words(self, sentence: str) -> int:
        return sum(1 for word in self.content_word.findall(sentence) if word.lower() not in self.filler)

    def _explained_list_line(self, line: str) -> bool:
        """A list or table line naming a field with words beside it ("- `user`: identifies the caller")."""
        if not self.listish.match(line) or not self.backticked.search(line):
            return False
        rest = re.sub(r"[|:*\-+—–,()]", " ", self.backticked.sub(" ", line))
        return len(re.findall(r"[A-Za-z]{2,}", rest)) >= int(self.rule["reason_words"])

    def _normalized_fields(self, sections: list) -> tuple[list, list, int | None]:
        heading_rx = self.topics["normalized fields"][0]
        chosen = [s for s in sections if s[0] and re.search(heading_rx, s[1], re.IGNORECASE)]
        candidates = []
        if chosen:
            for _, title, lines, _ in chosen:
                drops = bool(self.drop_words.search(title))
                candidates += [(n, line, drops) for n, line in lines]
        else:
            for _, _, lines, _ in sections:
                candidates += [(n, line, False) for n, line in lines if self.normalized_lines.search(line)]
        fields, unexplained = [], []
        for number, line, section_drops in candidates:
            if not self.listish.match(line):
                continue
            names = self.backticked.findall(line)
            if not names:
                continue
            explained = self._explained_list_line(line)
            drops = section_drops or bool(self.drop_words.search(line))
            for name in names:
                fields.append((name, number, drops))
                if not explained:
                    unexplained.append((name, number))
        return fields, unexplained, (fields[0][1] if fields else None)

    def _stored_dropped(self, fields: list, tapes: list[tuple[str, dict]], rel: str) -> list[tuple[str, str]]:
        out = []
        for name, line, drops in fields:
            if not drops:
                continue
            holders = [path for path, tape in tapes if _has_key(tape["request"].get("body"), name)]
            if holders:
                message = f"says `{name}` is dropped, but {holders[0]} stores it"
                if len(holders) > 1:
                    message += f" (and {len(holders) - 1} more tapes)"
                out.append((message, f"{rel}:{line}"))
        return out

    def _unknown_models(
        self, sections: list, tapes: list[tuple[str, dict]], rel: str
    ) -> list[tuple[str, str]]:
        carried = {m for _, tape in tapes for m in self._models(tape) if m}
        if not carried:
            return []
        lowered = {m.lower() for m in carried} | {m.lower().rsplit("/", 1)[-1] for m in carried}
        limits_rx = self.topics["what replay does not prove"][0]
        out, seen = [], set()
        for start, title, lines, _ in sections:
            if start and re.search(limits_rx, title, re.IGNORECASE):
                continue
            for number, line in lines:
                for match in self.model_name.finditer(line):
                    shown = match.group(1).rstrip(".-")
                    name = shown.lower()
                    if name in seen or name in lowered or name.rsplit("/", 1)[-1] in lowered:
                        continue
                    seen.add(name)
                    out.append((f"names model {shown}, which no tape carries", f"{rel}:{number}"))
        return out

    def _claim_lines(self, sections: list) -> list[tuple[int, str, str]]:
        """(line, text, section title) where a host or date claim is read: filled-in sections outside the
        "does not prove" ones, fenced code left out."""
        limits_rx = self.topics["what replay does not prove"][0]
        out = []
        for section in sections:
            start, title, lines, _ = section
            if self._unfilled(section) or (start and re.search(limits_rx, self._plain(title), re.IGNORECASE)):
                continue
            in_code = False
            for number, line in lines:
                if line.lstrip().startswith(self.fences):
                    in_code = not in_code
                elif not in_code:
                    out.append((number, self._plain(line), self._plain(title)))
        return out

    def _models(self, tape: dict) -> list[str | None]:
        meta = tape.get("meta") if isinstance(tape.get("meta"), dict) else {}
        body = tape["request"].get("body")
        response = tape.get("response") if isinstance(tape.get("response"), dict) else {}
        reply = response.get("body")
        found = [meta.get("model"), meta.get("served_model")]
        found.append(body.get("model") if isinstance(body, dict) else None)
        if isinstance(reply, dict):
            found += [reply.get("model"), reply.get("modelVersion")]
        elif isinstance(response.get("text"), str):
            match = self.sse_model.search(response["text"][:200_000])
            found.append(match.group(1) if match else None)
        return [m if isinstance(m, str) else None for m in found]


class ClaimRule:
    """grader/checks/replay_claims.py mirrored: REPLAY.md's endpoint host and recording date held to the
    tapes' `meta.endpoint` and `meta.recorded_at` (rule: `cross_check` in tools/replay_doc.json)."""

    MONTHS = {name: n for n, name in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}

    def __init__(self, rule: dict) -> None:
        cross = rule["cross_check"]
        self.host = re.compile(cross["host"])
        self.providers = tuple(h.lower() for h in cross["provider_hosts"])
        self.host_line, self.host_heading = re.compile(cross["host_line"]), re.compile(cross["host_heading"])
        self.host_not_line = re.compile(cross["host_not_line"])
        self.not_a_claim = re.compile(cross["not_a_claim"])
        self.date_line, self.date_heading = re.compile(cross["date_line"]), re.compile(cross["date_heading"])
        self.date_word = re.compile(cross["date_word"])
        self.slack = timedelta(days=int(cross["date_slack_days"]))
        self.max_claims, self.window = int(cross["max_claims"]), int(cross["negation_window"])
        topic = next(t for t in rule["topics"] if t["name"] == "recording date")
        self.date = re.compile(topic["substance"]["needs"][0]["pattern"])

    def judge(self, lines: list, tapes: list[tuple[str, dict]], rel: str) -> list[tuple[str, str]]:
        hosts: dict[str, tuple[str, str]] = {}
        days: dict[date, str] = {}
        for path, tape in tapes:
            meta = tape.get("meta") if isinstance(tape.get("meta"), dict) else {}
            response = tape.get("response") if isinstance(tape.get("response"), dict) else {}
            headers = response.get("headers") if isinstance(response.get("headers"), dict) else {}
            host = _tape_host(meta.get("endpoint")) if isinstance(meta.get("endpoint"), str) else None
            if host:
                hosts.setdefault(self._key(host), (host, f"{path}, meta.endpoint"))
            found = [(meta.get("recorded_at"), "meta.recorded_at")]
            stamp = next((v for k, v in headers.items() if str(k).lower() == "date"), None)
            found.append(
                (_http_day(stamp[0] if isinstance(stamp, list) and stamp else stamp), "response date header")
            )
            for value, where in found:
                day = _iso_day(value)
                if day is not None:
                    days.setdefault(day, f"{path}, {where}")
        out = []
        host_claims = self._hosts(lines)
        if (
            host_claims
            and hosts
            and not any(_same_host(self._key(h), key) for _, h in host_claims for key in hosts)
        ):
            shown = _listed(sorted({h for _, h in host_claims}, key=str.lower))
            plural = "s" if len({h.lower() for _, h in host_claims}) > 1 else ""
            recorded = _listed(sorted({h for h, _ in hosts.values()}))
            example = next(iter(hosts.values()))[1]
            message = f"names endpoint host{plural} {shown}, but the tapes were recorded against {recorded} "
            out.append((message + f"(e.g. {example})", f"{rel}:{host_claims[0][0]}"))
        date_claims = self._dates(lines)
        ordered = sorted(days)
        if (
            date_claims
            and days
            and not any(
                self._near(ordered, first, last) for _, _, spans in date_claims for first, last in spans
            )
        ):
            recorded = (
                "on " + ", ".join(d.isoformat() for d in ordered)
                if len(ordered) <= 3
                else f"between {ordered[0].isoformat()} and {ordered[-1].isoformat()} ({len(ordered)} days)"
            )
            said = _listed(list(dict.fromkeys(shown for _, shown, _ in date_claims)))
            message = f"says the tapes were recorded on {said}, but they were recorded {recorded} "
            out.append((message + f"(e.g. {days[ordered[0]]})", f"{rel}:{date_claims[0][0]}"))
        return out

    def _hosts(self, lines: list) -> list[tuple[int, str]]:
        out = []
        for number, text, heading in lines:
            if not (self.host_line.search(text) or self.host_heading.search(heading)):
                continue
            if self.host_not_line.search(text):
                continue
            for match in self.host.finditer(text):
                host = match.group(1).lower().strip("[]")
                if self.not_a_claim.search(text[max(0, match.start() - self.window) : match.start()]):
                    continue
                provider = any(
                    host == k or (k.startswith("*.") and host.endswith(k[1:])) for k in self.providers
                )
                if _loopback(host) or provider:
                    out.append((number, match.group(1)))
                    if len(out) >= self.max_claims:
                        return out
        return out

    def _dates(self, lines: list) -> list[tuple[int, str, list[tuple[date, date]]]]:
        out = []
        for number, text, heading in lines:
            about = self.date_line.search(text) or (
                self.date_heading.search(heading)
                and (self.date_word.search(heading) or self.date_word.search(text))
            )
            if about:
                for match in self.date.finditer(text):
                    spans = self._spans(match.group(0))
                    if spans:
                        out.append((number, match.group(0), spans))
                        if len(out) >= self.max_claims:
                            return out
        return out

    def _spans(self, text: str) -> list[tuple[date, date]]:
        """The days a written date may mean: one day, both readings of `1/12/2026`, or a whole month."""
        numbers = [int(n) for n in re.findall(r"\d+", text)]
        month_name = re.search(r"[A-Za-z]{3,}", text)
        if month_name:
            month = self.MONTHS.get(month_name.group(0)[:3].lower())
            year = next((n for n in numbers if n >= 1900), None)
            days = [n for n in numbers if n < 100]
            if month is None or year is None:
                return []
            if days:
                return _valid_days([(year, month, days[0])])
            start = date(year, month, 1)
            return [(start, (start + timedelta(days=31)).replace(day=1) - timedelta(days=1))]
        if len(numbers) != 3:
            return []
        if numbers[0] >= 1900:
            return _valid_days([(numbers[0], numbers[1], numbers[2])])
        return _valid_days([(numbers[2], numbers[1], numbers[0]), (numbers[2], numbers[0], numbers[1])])

    def _near(self, ordered: list[date], first: date, last: date) -> bool:
        near = bisect_left(ordered, first - self.slack)
        return near < len(ordered) and ordered[near] <= last + self.slack

    @staticmethod
    def _key(host: str) -> str:
        return "loopback" if _loopback(host) else host.lower().strip("[]").rstrip(".")


_HOSTLIKE = re.compile(
    r"^(https?://)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9-]+)*(:\d+)?(/\S*)?$", re.IGNORECASE
)


def _tape_host(value: str) -> str | None:
    """The host a tape's endpoint names (the grader's grader/recordings.py endpoint_host, copied)."""
    if _loopback(value):
        try:
            return urlsplit(value if "://" in value else f"//{value}").hostname or value
        except ValueError:
            return value
    text = re.sub(r"^(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS)\s+", "", value.strip(), flags=re.IGNORECASE)
    if not _HOSTLIKE.match(text):
        return None
    host = urlsplit(text if "://" in text else f"//{text}").hostname
    return host if host and ("." in host or host == "localhost") else None


def _same_host(claimed: str, recorded: str) -> bool:
    return claimed == recorded or recorded.endswith("." + claimed) or claimed.endswith("." + recorded)


def _http_day(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso_day(value: object) -> date | None:
    try:
        return date.fromisoformat(value[:10]) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _valid_days(candidates: list[tuple[int, int, int]]) -> list[tuple[date, date]]:
    out = []
    for year, month, day in candidates:
        try:
            out.append((date(year, month, day),) * 2)
        except ValueError:
            continue
    return out


def _listed(items: list[str]) -> str:
    return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")


def _has_key(value: object, name: str, depth: int = 0) -> bool:
    if depth > 50:
        return False
    if isinstance(value, dict):
        return name in value or any(_has_key(v, name, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_key(v, name, depth + 1) for v in value)
    return False


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
    checks["replay-doc"] = lambda: check_replay_doc(cassette_dir)
    failed = False
    for label, check in checks.items():
        summary, problems = check()
        if not problems:
            print(f"ok: {label}" + (f" ({summary})" if summary else ""))
        elif label == "replay-doc" and summary:
            print(f"FAIL: {label}: {summary}")  # the count the reviewers' replay-doc row reports
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
