"""The canary recording probe: does recording write or print the API key it is given?

Not a check of its own: the `secrets` check calls `probe_canary` and reports its facts (`canary_leaks`,
`canary_probe`), so the no-credentials row keeps scoring from one check.

In a throwaway copy of the repository, the manifest's `record_command` (without one, `make record` when the
Makefile has that target) runs in the sandbox with loopback only (a fresh network namespace with `lo` up). The
kit's stand-in model server is started inside that same sandboxed command, and the command gets a freshly
generated canary key in `api_key_env` and in both providers' key variables, and the stand-in's URL in
`base_url_env` and both providers' base-URL variables. Any occurrence of the canary afterwards in the
copy's files (tapes included; JSON-, hex- or base64-encoded, reversed, or a piece of it too) or in what the
command printed is a latent leak: with a real key, it would have been committed or logged.

The command's TLS libraries get a trust store of one CA certificate (``SSL_CERT_FILE``): the stand-in speaks
plain HTTP on loopback and nothing else is reachable, so no certificate is ever checked, while loading the
full CA bundle costs ~20 ms for every HTTP client a recorder builds (httpx builds one per client; a
recorder that makes a client per call spends more on that than on the calls).

The stand-in runs under the submission's interpreter (the only one the sandbox user is sure to reach), which
need not have PyYAML: the probe copies `standin.py` and its rules, converted to JSON by the grader, into a
read-only folder beside the checkout and starts the stand-in from there with `python -E -s` (standard
library only), so neither the submission's `PYTHONPATH` nor its files can shadow what it imports.
"""

from __future__ import annotations

import base64
import io
import json
import secrets as _random
import shlex
import shutil
import string
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from grader import walk
from grader.acquire import no_space, no_space_reason, no_space_text
from grader.checks import Finding
from grader.context import makefile_targets
from grader.errors import NotAssessable
from grader.gitpack import PACK_MAGIC, Allowance, pack_bodies
from grader.safeio import read_bytes
from grader.secrets import redact, scan_text
from grader.secrets.decode import TEXT_ESCAPES, wide_text
from grader.secrets.findings import fingerprint
from grader.secrets.inflate import (
    LAYERS,
    ZIP_CENTRAL,
    ZIP_LOCAL,
    ZIP_MEMBER_ERRORS,
    Inflated,
    compression,
    embedded,
)
from grader.secrets.tree import MAX_MEMBERS

if TYPE_CHECKING:
    from grader.context import Context

__all__ = [
    "CanaryProbe",
    "canary_result",
    "find_canary",
    "make_canary",
    "probe_canary",
    "start_canary",
    "summarize",
]

_LABEL = "canary record"
_ALNUM = string.ascii_letters + string.digits
_MAX_FILE_BYTES = 64 * 1024 * 1024
# Inflated bytes for the whole probe: red team 8, R8-3, thousands of small bzip2 bombs each cost seconds of
# the grader's own time, outside the budget. Past it a compressed file is read as it is, and listed.
_INFLATE_TOTAL = 1024 * 1024 * 1024
# Git pack entries for the whole probe (red team 14: 3 million empty blobs in one pack cost 140 s of the
# grader's own CPU); an honest `git gc` of a take-home writes a few thousand.
_PACK_ENTRIES = 50_000
_MAX_LISTED = 10
# Exit code the wrapper script uses when the stand-in never printed its URL.
_NO_STANDIN = 97
_WRAPPER = """\
url_file="$HOME/.standin-url"
python -E -s "$STANDIN_TOOLS/standin.py" --port 0 --quiet --rules "$STANDIN_TOOLS/rules/standin.json" \
  >"$url_file" 2>/dev/null &
i=0
while [ ! -s "$url_file" ] && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
if [ ! -s "$url_file" ]; then echo "the stand-in server did not start" >&2; exit {code}; fi
url=$(head -n 1 "$url_file")
rm -f "$url_file"
OPENAI_BASE_URL="$url"
ANTHROPIC_BASE_URL="${{url%/v1}}"
export OPENAI_BASE_URL ANTHROPIC_BASE_URL
{strip}
{base_env}="$url"
export {base_env}
exec "$@"
"""


@dataclass
class CanaryProbe:
    """What the probe found: `status` is "ran" or "not available: <why>"."""

    status: str
    leaks: list[Finding] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    fingerprint: str = ""  # of the canary key (never the key): its own output holds it and is no other leak
    output_label: str = ""  # the label of the probe's run in ctx.outputs
    # Compressed files the run wrote that were not inflated (the probe's inflation budget was spent).
    unscanned: list[str] = field(default_factory=list)
    # It applied but was not run: the grade's budget was spent, or the replay suite hung (red team 7, R7-2:
    # a submission that spent the budget before it kept a leak at record time unseen, row still at 3).
    skipped: bool = False
    # Skipped because the workspace disk had no room for its copy: the grader's disk, not the submission's
    # choice, so with nothing else found the row is not assessable rather than capped.
    no_room: bool = False


@dataclass(frozen=True)
class _Plan:
    """A probe ready to run: its scratch copy is made and the stand-in staged."""

    argv: list[str]
    scratch: Path
    env: dict[str, str]
    canary: str
    key_env: str
    shown: str


def make_canary(api_key_env: str) -> str:
    """A fresh key shaped like the provider's real keys (so format checks and redactors treat it as one).

    Built from parts at run time: the kit's source never holds a key-shaped literal.
    """

    def rand(n: int) -> str:
        return "".join(_random.choice(_ALNUM) for _ in range(n))

    if "ANTHROPIC" in api_key_env.upper():
        return "-".join(("sk", "ant", "api03", rand(93))) + "AA"
    return "-".join(("sk", "proj", rand(74) + "T3Blbk" + "FJ" + rand(74)))


_ROT13 = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm",
)
_PIECE, _STRIDE = 32, 8  # a piece of the key this long, anywhere: every piece of 40+ characters holds one


def _base64_cores(raw: bytes) -> list[bytes]:
    """The cores of ``raw``'s base64 encodings (standard and URL-safe) at the three alignments."""
    out = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw)
        # Drop the characters that mix in the padding bytes or the unknown neighbours.
        start = ((shift * 8) + 5) // 6 + 1
        core = encoded[start : len(encoded) - 4]
        if len(core) >= 24:
            out += [core, core.translate(bytes.maketrans(b"+/", b"-_"))]
    return list(dict.fromkeys(out))


def _needles(canary: str) -> list[tuple[bytes, str]]:
    """The canary as written, reversed, ROT13'd, each also hex- and base64-encoded (red team 4, F5: a
    recorder that kept the key reversed and base64-encoded); then pieces of it (split across places)."""
    out: list[tuple[bytes, str]] = []
    for text, how in ((canary, ""), (canary[::-1], "reversed")):
        for form, named in ((text, how), (text.translate(_ROT13), f"{how} ROT13".strip())):
            raw = form.encode("ascii")
            out.append((raw, named))
            out += [(raw.hex().encode(), f"{named} hex-encoded".strip())]
            out += [(raw.hex().upper().encode(), f"{named} hex-encoded".strip())]
            out += [(core, f"{named} base64-encoded".strip()) for core in _base64_cores(raw)]
    return out


def _pieces(canary: str) -> list[tuple[bytes, str]]:
    """Every piece of the key (and of it reversed) of `_PIECE` characters at a stride of `_STRIDE`."""
    out = []
    for text, how in ((canary, "a piece of it"), (canary[::-1], "a piece of it, reversed")):
        raw = text.encode("ascii")
        out += [(raw[i : i + _PIECE], how) for i in range(0, len(raw) - _PIECE + 1, _STRIDE)]
    return out


def _lines_holding(data: bytes, needles: list[tuple[bytes, str]]) -> list[tuple[int, str]]:
    hits: list[tuple[int, str]] = []
    for needle, how in needles:
        start = data.find(needle)
        while start != -1:
            hits.append((data.count(b"\n", 0, start) + 1, how))
            start = data.find(needle, start + len(needle))
    return hits


def find_canary(data: bytes, canary: str) -> list[tuple[int, str]]:
    """(line, how) of each place `data` holds the canary (plain, reversed, ROT13, each hex- or
    base64-encoded too), or else a piece of it; lines count from 1."""
    return _per_line(_lines_holding(data, _needles(canary)), _lines_holding(data, _pieces(canary)))


def _per_line(whole: list[tuple[int, str]], pieces: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """One (line, how) per line: the plainest way it was found, a piece only on a line with no whole key."""
    lines = {line for line, _ in whole}
    first: dict[int, str] = {}
    for line, how in sorted(set(whole) | {hit for hit in pieces if hit[0] not in lines}):
        first.setdefault(line, how)
    return sorted(first.items())


class _StreamScan:
    """`find_canary` over what a command prints, chunk by chunk and all of it (red team 12, F3: the key
    printed after 2 MB of output, past what the run's result keeps, was not looked for). Each chunk is
    searched with the end of the one before it, so a key split across chunks is found."""

    _MAX_HITS = 1000  # per stream: the first lines are the evidence; a flood of them adds nothing

    def __init__(self, canary: str) -> None:
        self._needles, self._pieces = _needles(canary), _pieces(canary)
        self._keep = max(len(n) for n, _ in self._needles + self._pieces) - 1
        self._tail = [b"", b""]
        self._lines = [0, 0]  # newlines before each stream's tail
        self._whole: list[set[tuple[int, str]]] = [set(), set()]
        self._part: list[set[tuple[int, str]]] = [set(), set()]

    def __call__(self, stream: int, chunk: bytes) -> None:
        data = self._tail[stream] + chunk
        base = self._lines[stream]
        for found, needles in ((self._whole, self._needles), (self._part, self._pieces)):
            if len(found[stream]) < self._MAX_HITS:
                found[stream].update((base + line, how) for line, how in _lines_holding(data, needles))
        cut = max(len(data) - self._keep, 0)
        self._lines[stream] = base + data.count(b"\n", 0, cut)
        self._tail[stream] = data[cut:]

    def hits(self, stream: int) -> list[tuple[int, str]]:
        return _per_line(sorted(self._whole[stream]), sorted(self._part[stream]))


def _stage_standin(dest: Path) -> Path:
    """Copy the stand-in and its rules (as JSON: no PyYAML needed) where the sandbox user can read them."""

    here = Path(__file__).resolve().parent.parent
    rules = yaml.safe_load((here / "rules" / "standin.yaml").read_text(encoding="utf-8"))
    (dest / "rules").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(here / "standin.py", dest / "standin.py")
    (dest / "rules" / "standin.json").write_text(json.dumps(rules), encoding="utf-8")
    for folder in (dest, dest / "rules"):
        folder.chmod(0o755)
        for item in folder.iterdir():
            if item.is_file():
                item.chmod(0o644)
    return dest


def _one_certificate(dest: Path) -> Path | None:
    """A trust store of one CA certificate (the first in certifi's bundle) for the probe's TLS libraries."""
    try:  # optional: certifi comes with httpx/requests, not with the grader
        import certifi

        bundle = Path(certifi.where()).read_text(encoding="ascii", errors="replace")
    except (ImportError, OSError):
        return None
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    start = bundle.find(begin)
    stop = bundle.find(end, start)
    if start < 0 or stop < 0:
        return None
    dest.write_text(bundle[start : stop + len(end)] + "\n", encoding="ascii")
    dest.chmod(0o644)
    return dest


def _wrapper(base_env: str, anthropic: bool) -> str:
    # Anthropic's SDKs and the template append /v1/messages to the base URL; OpenAI's expect it to end in /v1.
    strip = 'url="${url%/v1}"' if anthropic else ":"
    return _WRAPPER.format(code=_NO_STANDIN, strip=strip, base_env=base_env)


def _scan_tree(root: Path, canary: str, unscanned: list[str], before: Path) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    total = Allowance(_INFLATE_TOTAL, _PACK_ENTRIES)
    # Everything the run could have written to, whatever the folder (a key in .venv/ or node_modules/ is
    # a leak too); git's own data is read below, only where the run changed it.
    for path in walk.files(root, skip={".git"}):
        found += _scan_file(root, path, canary, unscanned, total)
    # A recorder that commits its tapes commits what it wrote with them (red team 12, F2: the key in a
    # commit message, in a loose object or, after `git gc`, in a pack). The files of `.git` that differ
    # from the copy the run started from are read, packs entry by entry: git itself is never run on it.
    for path in walk.files(root / ".git", skip=()):
        rel = path.relative_to(root)
        if not _same_file(path, before / rel):
            found += _scan_file(root, path, canary, unscanned, total)
    return found


def _same_file(path: Path, other: Path) -> bool:
    try:
        if path.stat().st_size != other.lstat().st_size or not other.is_file() or other.is_symlink():
            return False
        return read_bytes(path, cap=_MAX_FILE_BYTES) == read_bytes(other, cap=_MAX_FILE_BYTES)
    except OSError:
        return False


def _scan_file(
    root: Path, path: Path, canary: str, unscanned: list[str], total: Allowance
) -> list[tuple[str, str]]:
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            return []
        data = read_bytes(path, cap=_MAX_FILE_BYTES)  # the probe's run owned this copy
    except OSError:
        return []
    rel = path.relative_to(root).as_posix()
    if data[:4] == PACK_MAGIC:
        return _scan_pack(rel, data, canary, unscanned, total)
    if total.bytes <= 0 and (data[:4] == ZIP_LOCAL or compression(data[:_HEAD]) is not None):
        unscanned.append(f"{rel}: written by the canary run, not inflated ({_INFLATE_TOTAL} bytes were)")
    found: list[tuple[str, str]] = []
    for where, body, inside in _bodies(rel, data, canary, total):
        found.extend(_first(where, find_canary(body, canary), inside))
    return found


def _scan_pack(
    rel: str, data: bytes, canary: str, unscanned: list[str], total: Allowance
) -> list[tuple[str, str]]:
    """A git pack the run wrote, entry by entry, within what is left of the probe's inflated bytes and
    pack entries (`_PACK_ENTRIES`); a pack not read to its end is listed."""
    allowance = Allowance(min(_MAX_FILE_BYTES, total.bytes), total.entries)  # a file's share of the rest
    hits: list[tuple[int, str]] = []
    read = 0
    for body in pack_bodies(data, allowance):
        read += 1
        for _where, text, inside in _as_read(rel, body, ""):
            hits += [
                (line, ", ".join(x for x in (inside, how) if x)) for line, how in find_canary(text, canary)
            ]
    total.bytes -= min(_MAX_FILE_BYTES, total.bytes) - allowance.bytes
    total.entries = allowance.entries
    if read < int.from_bytes(data[8:12], "big") and allowance.spent():
        unscanned.append(f"{rel}: a git pack written by the canary run, read to entry {read} (the rest not)")
    return _first(rel, sorted(hits), "inside a git pack entry")


_HEAD = 8192  # what a compressed body is known by


def _bodies(rel: str, data: bytes, canary: str, total: Allowance) -> Iterator[tuple[str, bytes, str]]:
    """(where, bytes, how they were reached) of what one file holds: its bytes; inflated, when it is a
    gzip, zlib, xz or bzip2 file (red team 7, R7-5: a gzip'd dump of the environment); each member of a zip
    archive, itself inflated when compressed. The inflated bytes of a file share `_MAX_FILE_BYTES`, and
    those of every file ``total`` (what is left of `_INFLATE_TOTAL`, taken from as it is used)."""
    yield from _as_read(rel, data, "")
    budget = [min(_MAX_FILE_BYTES, total.bytes)]
    start = budget[0]
    try:
        for where, body, inside in _inflated_bodies(rel, data, canary, budget):
            yield from _as_read(where, body, inside)
    finally:
        total.bytes -= start - budget[0]


def _as_read(where: str, body: bytes, inside: str) -> Iterator[tuple[str, bytes, str]]:
    """``body``, and the text anyone opening it reads when that differs from its bytes, as the secret
    scan reads it (red team 12, F5: a recorder writing the key as UTF-16, as PowerShell's ``>`` does, was
    not found): UTF-16/32 transcoded, JSON ``\\uXXXX``, URL ``%XX`` and HTML ``&#NN;`` escapes of ASCII
    undone. Lines stay where they were."""
    yield where, body, inside
    wide = wide_text(body)
    if wide is not None:
        yield where, wide[0], ", ".join(x for x in (inside, f"as {wide[1]} text") if x)
    for decode, named in TEXT_ESCAPES:
        unescaped = decode(body)
        if unescaped is not None:
            yield where, unescaped, ", ".join(x for x in (inside, named) if x)


def _inflated_bodies(
    rel: str, data: bytes, canary: str, budget: list[int]
) -> Iterator[tuple[str, bytes, str]]:
    if data[:4] == ZIP_LOCAL:
        for name, member in _members(data, budget):
            # A name holding the key is found in the archive's own bytes (names are stored as they are);
            # a report never prints it.
            hit = find_canary(name.encode("utf-8", "surrogateescape"), canary)
            shown = redact(name) if hit else name
            yield f"{rel}:{shown}", member, ""
            yield from _inflated(f"{rel}:{shown}", member, budget)
    else:
        yield from _inflated(rel, data, budget)


def _inflated(where: str, data: bytes, budget: list[int], layer: int = 1) -> Iterator[tuple[str, bytes, str]]:
    """The body a compressed file inflates to (again when that is compressed, a ``.gz.gz``), or the
    compressed streams inside any other file (a PDF's FlateDecode stream, a PNG's zTXt chunk: red team 26)."""
    if budget[0] <= 0:
        return
    name = compression(data[:_HEAD])
    if name is None:
        if layer == 1:
            for off, kind, body in embedded(data, cap=budget[0]):
                budget[0] -= len(body)
                yield where, body, f"inside a {kind} stream at byte {off}"
        return
    # Past the cap the rest is left unread, as a file over `_MAX_FILE_BYTES` is.
    body = b"".join(Inflated(name, [data], cap=budget[0], block=budget[0]))
    budget[0] -= len(body)
    yield where, body, f"inside its {name} body"
    if layer < LAYERS and compression(body[:_HEAD]):
        yield from _inflated(where, body, budget, layer + 1)


def _members(data: bytes, budget: list[int]) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each readable member of the zip archive in ``data``, up to the secret scan's
    member cap and ``budget`` inflated bytes in all; an archive with more entries is not opened (zipfile
    builds an object per entry)."""
    if data.count(ZIP_CENTRAL) > MAX_MEMBERS:
        return
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.LargeZipFile, *ZIP_MEMBER_ERRORS):
        return
    for info in infos[:MAX_MEMBERS]:
        if info.is_dir() or budget[0] <= 0:
            continue
        try:
            with archive.open(info) as stream:
                body = stream.read(budget[0])
        except ZIP_MEMBER_ERRORS:
            continue
        budget[0] -= len(body)
        yield info.filename, body


def _first(where: str, hits: list[tuple[int, str]], inside: str = "") -> list[tuple[str, str]]:
    """One place per file or stream: its first hit, and how many more lines hold the canary."""
    if not hits:
        return []
    line, how = hits[0]
    lines = {n for n, _ in hits}
    more = f"{len(lines) - 1} more line{'s' if len(lines) != 2 else ''} too" if len(lines) > 1 else ""
    return [(f"{where}:{line}", ", ".join(x for x in (inside, how, more) if x))]


def start_canary(ctx: Context) -> None:
    """Start the probe in the background, alongside the other checks (the `secrets` check takes its result).

    Its scratch copy comes from the checkout's pristine copy (`Context.keep_pristine`), so it is made in
    the background too, while the replay suite runs in the checkout.
    """

    def probe() -> CanaryProbe | None:
        try:
            plan = _plan(ctx)
        except Exception:  # e.g. no room for the scratch copy: `canary_result` runs it inside the check
            return None
        return plan if isinstance(plan, CanaryProbe) else _execute(ctx, plan)

    ctx.start_probe(_LABEL, probe)


def canary_result(ctx: Context) -> CanaryProbe:
    """The probe's outcome: the one `start_canary` started (waits for it), else the probe run now."""
    result = ctx.probe_result(_LABEL)
    return result if isinstance(result, CanaryProbe) else probe_canary(ctx)


def probe_canary(ctx: Context) -> CanaryProbe:
    """Run the record command with a canary key against the stand-in, in a scratch copy; report leaks."""
    try:
        plan = _plan(ctx)
    except OSError as exc:
        # No room for its copy (another candidate's flood: red team 30): the static scan still counts.
        if not no_space(exc):
            raise
        reason = no_space_reason("workspace", ctx.workspace.root)
        return CanaryProbe(f"not available: {reason}", skipped=True, no_room=True)
    except NotAssessable as exc:
        return CanaryProbe(f"not available: {exc.reason}", skipped=True, no_room=no_space_text(exc.reason))
    return plan if isinstance(plan, CanaryProbe) else _execute(ctx, plan)


# Every name a recorder may read its key from gets the canary: the manifest's api_key_env is the submission's
# word, and a recorder that reads another (red team 9: `api_key_env` named a variable the recorder never read,
# so it refused for want of its key and the probe saw no leak) must still be handed one.
_PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def _record_command(ctx: Context) -> list[str]:
    """The manifest's record_command; else the Makefile's `record` target, which make-targets also runs (red
    team 9: deleting record_command from the manifest switched the probe off while `make record` stayed)."""
    declared = list(ctx.manifest.record_command or [])
    if declared:
        return declared
    return ["make", "record"] if "record" in makefile_targets(ctx.repo) else []


def _plan(ctx: Context) -> CanaryProbe | _Plan:
    manifest = ctx.manifest
    record = _record_command(ctx)
    if not record:
        return CanaryProbe("not available: no record_command in [tool.takehome] and no `record` target")
    key_env = manifest.api_key_env or _PROVIDER_KEYS[0]
    if ctx.env is None:
        reason = ctx.install_error or "the submission's environment was not installed"
        return CanaryProbe(f"not available: {' '.join(str(reason).split())}")
    anthropic = "ANTHROPIC" in key_env.upper()
    base_env = manifest.base_url_env or ("ANTHROPIC_BASE_URL" if anthropic else "OPENAI_BASE_URL")
    if not base_env.replace("_", "").isalnum():
        return CanaryProbe(f"not available: base_url_env {base_env!r} is not a variable name")

    tools = _stage_standin(ctx.workspace.root / "standin")
    scratch = ctx.scratch_copy("canary-record")
    canary = make_canary(key_env)
    env = dict.fromkeys(dict.fromkeys([key_env, *_PROVIDER_KEYS]), canary)
    env.update(STANDIN_TOOLS=str(tools), CASSETTE_MODE="record")
    trust = _one_certificate(tools / "ca.pem")
    if trust is not None:
        env["SSL_CERT_FILE"] = str(trust)
    argv = ["/bin/sh", "-c", _wrapper(base_env, anthropic), "sh", *record]
    return _Plan(argv, scratch, env, canary, key_env, _shown(record))


def _shown(record: list[str]) -> str:
    """The record command as reports show it: the submission wrote it, so it may hold a credential."""
    text = shlex.join(record)
    if scan_text(text, source="record_command"):
        return "the manifest's record_command (it holds a credential: see the no-credentials findings)"
    return text


def _execute(ctx: Context, plan: _Plan) -> CanaryProbe:
    argv, scratch, canary, key_env, shown = plan.argv, plan.scratch, plan.canary, plan.key_env, plan.shown
    printed = _StreamScan(canary)
    try:
        # The template's record command runs the suite: once the replay suite hung, this is not run.
        run, _audit = ctx.run(
            argv, cwd=scratch, env=plan.env, loopback=True, label=_LABEL, suite_probe=True, watch=printed
        )
    except NotAssessable as exc:  # skipped, or the grade's budget is spent: the static scan still counts
        return CanaryProbe(f"not available: {exc.reason}", skipped=True)
    print_ = fingerprint(canary)
    if run.returncode == _NO_STANDIN and "stand-in server did not start" in run.stderr:
        return CanaryProbe(
            "not available: the stand-in server did not start in the sandbox",
            fingerprint=print_,
            output_label=_LABEL,
        )

    unscanned: list[str] = []
    places = _scan_tree(scratch, canary, unscanned, ctx.repo)
    for index, stream in enumerate(("stdout", "stderr")):
        places.extend(_first(f"{stream} of {shown}", printed.hits(index)))
    masked = redact(canary)
    leaks = [
        Finding(
            rule="canary-leak",
            message=(
                f"the canary key given to `{shown}` in {key_env} ({masked}) was "
                f"{'printed' if where.startswith(('stdout', 'stderr')) else 'written here'}"
                f"{' (' + how + ')' if how else ''}: recording would leak a real key; never write or log it"
            ),
            location=where,
        )
        for where, how in places
    ]
    outcome = "timed out" if run.timed_out else f"exit {run.returncode}"
    details = [f"canary probe: `{shown}` ran with a canary key against the stand-in ({outcome})"]
    details += [f"canary leak: {f.location} {f.message}" for f in leaks[:_MAX_LISTED]]
    if len(leaks) > _MAX_LISTED:
        details.append(f"... and {len(leaks) - _MAX_LISTED} more canary leaks")
    return CanaryProbe("ran", leaks, details, fingerprint=print_, output_label=_LABEL, unscanned=unscanned)


def summarize(summary: str, probe: CanaryProbe, other_findings: int) -> str:
    """The secrets check's summary with the probe's outcome added in front (leaks) or at the end."""
    if not probe.leaks and probe.skipped:
        why = probe.status.removeprefix("not available: ")
        return (
            f"{summary}; the canary record probe was not run ({why}): a key the recording writes or prints "
            "was not looked for"
        )
    if not probe.leaks:
        return f"{summary}; the canary record probe found no leak" if probe.status == "ran" else summary
    places = ", ".join(f.location for f in probe.leaks[:3])
    more = f" and {len(probe.leaks) - 3} more" if len(probe.leaks) > 3 else ""
    n = len(probe.leaks)
    leak = "canary leak" if n == 1 else "canary leaks"
    head = f"{n} {leak}: recording wrote or printed the key it was given ({places}{more})"
    rest = summary if other_findings else summary.replace("no credentials", "no other credentials", 1)
    return f"{head}; {rest}"
