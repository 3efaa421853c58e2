"""The canary recording probe: a generated key, the stand-in in a loopback sandbox, leaks found and redacted.

The probe runs real record commands in the real sandbox against the real stand-in, on a copy of
sample_solution with its real installed environment.
"""

from __future__ import annotations

import base64
import random
import re
import shlex
import shutil
import string
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from grader.acquire import acquire
from grader.checks.canary import CanaryProbe, find_canary, make_canary, probe_canary
from grader.context import Context
from grader.install import default_cache_root, ensure_env
from grader.manifest import read_manifest
from grader.secrets import Scanner
from tests.helpers.git import GIT_ENV

ROOT = Path(__file__).resolve().parents[1]
_FULL_KEY = re.compile(r"sk-(?:proj|ant-api03)-[A-Za-z0-9_-]{30,}")


# --- fast: generation and matching


@pytest.mark.parametrize(
    ("env_name", "rule"),
    [("OPENAI_API_KEY", "openai-project-key"), ("ANTHROPIC_API_KEY", "anthropic-api-key")],
)
def test_canary_is_fresh_and_shaped_like_the_providers_keys(env_name: str, rule: str) -> None:
    first, second = make_canary(env_name), make_canary(env_name)
    assert first != second
    found = Scanner().scan_text(f"key={first}\n", source="probe")
    assert [f.rule for f in found] == [rule]


def test_canary_is_found_plain_and_base64_encoded_at_every_alignment() -> None:
    canary = make_canary("OPENAI_API_KEY")
    assert find_canary(f"a\nb\nAuthorization: Bearer {canary}\n".encode(), canary) == [(3, "")]
    for prefix in (b"", b"x", b"xy", b"Bearer "):
        blob = b"line one\n" + base64.b64encode(prefix + canary.encode()) + b"\n"
        assert find_canary(blob, canary) == [(2, "base64-encoded")], prefix
    assert find_canary(b"nothing here\n" * 100, canary) == []
    # Red team 4, F5 and its neighbours: the key reversed, ROT13'd, hex-encoded, then encoded again.
    reversed_b64 = base64.urlsafe_b64encode(canary[::-1].encode())
    assert find_canary(b"x\n" + reversed_b64, canary) == [(2, "reversed base64-encoded")]
    assert find_canary(canary.encode().hex().encode(), canary) == [(1, "hex-encoded")]
    rot13 = canary.translate(
        str.maketrans(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
            "nopqrstuvwxyzabcdefghijklmNOPQRSTUVWXYZABCDEFGHIJKLM",
        )
    )
    assert find_canary(base64.b64encode(rot13.encode()), canary) == [(1, "ROT13 base64-encoded")]
    half = len(canary) // 2
    assert find_canary(f"{canary[:half]}\n{canary[half:]}".encode(), canary) == [
        (1, "a piece of it"),
        (2, "a piece of it"),
    ]
    # A different key of the same shape is not the canary.
    assert find_canary(make_canary("OPENAI_API_KEY").encode(), canary) == []


# --- the probe in the sandbox


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A git copy of sample_solution and its installed environment (cached across the kit's tests)."""
    src = tmp_path_factory.mktemp("canary-src") / "sub"
    shutil.copytree(
        ROOT / "sample_solution",
        src,
        ignore=shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache", "*.pyc"),
    )
    env = ensure_env(src, cache_root=default_cache_root(), timeout=300)
    return src, env


def _ctx(tmp_path: Path, installed: tuple[Path, object], **manifest: object) -> Context:
    src, env = installed
    root = tmp_path / "ws"
    root.mkdir(parents=True)
    root.chmod(0o711)  # as grade() does: traversable, so the sandbox may drop to nobody
    workspace = acquire(str(src), root)
    return Context(workspace, replace(read_manifest(workspace.repo), **manifest), env=env, timeout=120)  # type: ignore[arg-type]


def _all_text(probe: CanaryProbe) -> str:
    return "\n".join([probe.status, *probe.details, *(f"{f.location} {f.message}" for f in probe.leaks)])


@pytest.mark.index
def test_a_record_run_that_keeps_the_key_to_itself_has_no_leak_and_reached_the_standin(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    # Talks to the stand-in through the URL the probe exported, and stores only the answer.
    script = (
        "import json, os, urllib.request\n"
        "url = os.environ['OPENAI_BASE_URL'] + '/chat/completions'\n"
        "msg = {'model': 'gpt-4o-mini', 'messages': [{'role': 'user', 'content': 'refund'}]}\n"
        "auth = {'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']}\n"
        "req = urllib.request.Request(url, method='POST', data=json.dumps(msg).encode(),\n"
        "    headers={**auth, 'content-type': 'application/json'})\n"
        "body = json.load(urllib.request.urlopen(req, timeout=10))\n"
        "open('answer.txt', 'w').write(body['choices'][0]['message']['content'])\n"
    )
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", script])
    before = sorted(p.relative_to(ctx.repo) for p in ctx.repo.rglob("*"))
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    assert probe.leaks == []
    answers = list((ctx.workspace.root / "scratch").glob("*/repo/answer.txt"))
    assert [a.read_text() for a in answers] == ['{"intent": "refund", "needs_human": false}']
    # The probe ran in a throwaway copy: the checkout the other checks read is untouched.
    assert sorted(p.relative_to(ctx.repo) for p in ctx.repo.rglob("*")) == before


@pytest.mark.index
def test_a_key_written_to_a_file_or_printed_is_a_leak_named_by_place_and_redacted(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    script = (
        "import base64, os\n"
        "key = os.environ['OPENAI_API_KEY']\n"
        "open('debug.log', 'w').write('start\\nkey=' + key + '\\nagain ' + key + '\\n')\n"
        "open('blob.b64', 'w').write(base64.b64encode(b'Bearer ' + key.encode()).decode())\n"
        "print('recording with', key)\n"
        # red team 4, F5: reversed and then base64-encoded; and split in two halves on two lines
        "open('session.json', 'w').write(base64.b64encode(key[::-1].encode()).decode())\n"
        "open('parts.txt', 'w').write('a=' + key[:90] + '\\nb=' + key[90:] + '\\n')\n"
    )
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", script])
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    places = {f.location: f.message for f in probe.leaks}
    assert set(places) == {
        "debug.log:2",
        "blob.b64:1",
        "session.json:1",
        "parts.txt:1",
        "stdout of python -c " + _quoted(script) + ":1",
    }
    assert "reversed base64-encoded" in places["session.json:1"]
    assert "a piece of it" in places["parts.txt:1"] and "1 more line too" in places["parts.txt:1"]
    assert "1 more line too" in places["debug.log:2"]
    assert "base64-encoded" in places["blob.b64:1"]
    assert "[redacted]" in places["debug.log:2"]
    assert not _FULL_KEY.search(_all_text(probe))


@pytest.mark.index
def test_a_credential_written_into_the_record_command_is_never_shown(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    rng = random.Random(7)  # built at run time from seeded noise: no literal key in this file
    noise = "".join(rng.choices(string.ascii_letters + string.digits, k=148))
    written = "sk-proj-" + noise[:74] + "T3BlbkFJ" + noise[74:]
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", f"print('{written}'[:3])"])
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    assert written not in _all_text(probe)
    assert "record_command (it holds a credential" in _all_text(probe)


def _quoted(script: str) -> str:
    return shlex.quote(script)


@pytest.mark.index
def test_without_record_command_the_makefiles_record_target_is_probed(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    """Red team 9, F3: deleting record_command from the manifest switched the probe off (no-credentials 3
    for a recorder that writes its key to a file) while `make record` still worked."""
    ran = probe_canary(_ctx(tmp_path / "a", installed, record_command=None, api_key_env=None))
    assert ran.status == "ran", _all_text(ran)
    assert "canary probe: `make record` ran with a canary key against the stand-in (exit 0)" in ran.details
    assert ran.leaks == []
    ctx = _ctx(tmp_path / "b", installed, record_command=None)
    (ctx.repo / "Makefile").unlink()
    none = probe_canary(ctx)
    assert none.status == "not available: no record_command in [tool.takehome] and no `record` target"


@pytest.mark.index
def test_a_recorder_reading_another_key_variable_than_declared_still_gets_the_canary(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    """Red team 9, F3 (variant): api_key_env named a variable the recorder never read, so it refused to
    record for want of its key and the probe saw no leak. Every provider's key variable holds the canary."""
    script = "import os\nopen('record-debug.log', 'w').write('key=' + os.environ['OPENAI_API_KEY'] + '\\n')\n"
    probe = probe_canary(
        _ctx(tmp_path, installed, record_command=["python", "-c", script], api_key_env="TRIAGE_API_KEY")
    )
    assert probe.status == "ran", _all_text(probe)
    assert [f.location for f in probe.leaks] == ["record-debug.log:1"]
    assert "in TRIAGE_API_KEY" in probe.leaks[0].message and not _FULL_KEY.search(_all_text(probe))


@pytest.mark.index
def test_the_submissions_own_modules_cannot_shadow_the_standins(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    ctx = _ctx(tmp_path, installed, record_command=["sh", "-c", 'test -n "$OPENAI_BASE_URL"'])
    # Packages named like what the stand-in imports, in the checkout (on the command's PYTHONPATH), would
    # break a stand-in that imported from there.
    for name in ("yaml", "json", "http"):
        (ctx.repo / name).mkdir()
        (ctx.repo / name / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    assert "(exit 0)" in probe.details[0]


@pytest.mark.index
def test_the_record_commands_tls_libraries_load_a_one_certificate_trust_store(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    # httpx (and OpenSSL's defaults) read SSL_CERT_FILE: a client still builds, from one certificate
    # instead of the whole CA bundle, and the recorder reaches the stand-in as before.
    script = (
        "import os, ssl\n"
        "import httpx\n"
        "pem = open(os.environ['SSL_CERT_FILE']).read()\n"
        "print('certificates:', pem.count('BEGIN CERTIFICATE'))\n"
        "print('contexts:', ssl.create_default_context().cert_store_stats()['x509_ca'])\n"
        "with httpx.Client() as client:\n"
        "    reply = client.get(os.environ['OPENAI_BASE_URL'] + '/models')\n"
        "print('stand-in:', reply.status_code)\n"
    )
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", script])
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    output = dict(ctx.outputs)["canary record"]
    assert "certificates: 1" in output, output
    assert "contexts: 1" in output, output
    assert re.search(r"^stand-in: \d{3}$", output, re.MULTILINE), output


@pytest.mark.index
def test_the_record_command_sees_a_loopback_standin_url_and_no_route_out(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    script = (
        "import os, socket\n"
        "print(os.environ['OPENAI_BASE_URL'])\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 443), timeout=2)\n"
        "    print('outside: connected')\n"
        "except OSError:\n"
        "    print('outside: unreachable')\n"
    )
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", script])
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    output = dict(ctx.outputs)["canary record"]
    assert re.search(r"^http://127\.0\.0\.1:\d+/v1$", output, re.MULTILINE), output
    assert "outside: unreachable" in output


@pytest.mark.index
def test_a_compressed_dump_of_the_environment_is_a_leak_inside_its_body(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    # Red team 7, R7-5: the recorder snapshots its environment compressed; the plain dump was already found.
    script = (
        "import gzip, io, json, lzma, os, zipfile, zlib\n"
        "dump = json.dumps(dict(os.environ), indent=1).encode()\n"
        "open('.record-env.snapshot', 'wb').write(gzip.compress(dump))\n"
        "open('.http-cache.bin', 'wb').write(zlib.compress(dump))\n"
        "open('env.xz', 'wb').write(lzma.compress(dump))\n"
        "with zipfile.ZipFile('debug.zip', 'w', zipfile.ZIP_DEFLATED) as z:\n"
        "    z.writestr('run/env.json', dump)\n"
        "    z.writestr('run/env.json.z', zlib.compress(dump))\n"
        "    z.writestr('keys/' + os.environ['OPENAI_API_KEY'] + '.txt', dump)\n"
        # Red team 26: compressed twice, and deflated inside another format (a PDF page's stream).
        "open('env.json.gz.gz', 'wb').write(gzip.compress(gzip.compress(dump)))\n"
        "page = zlib.compress(b'BT (' + dump + b') Tj ET')\n"
        "head = b'%PDF-1.7\\n%\\xe2\\xe3\\n4 0 obj <</Filter /FlateDecode>>\\nstream\\r\\n'\n"
        "open('report.pdf', 'wb').write(head + page + b'\\r\\nendstream\\n')\n"
    )
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", script])
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    places = {f.location.rsplit(":", 1)[0]: f.message for f in probe.leaks}
    assert set(places) == {
        "debug.zip",  # the member named after the key: names are stored as they are
        "debug.zip:keys/sk-…[redacted]",  # and that member's own leak, its name redacted
        ".record-env.snapshot",
        ".http-cache.bin",
        "env.xz",
        "debug.zip:run/env.json",
        "debug.zip:run/env.json.z",
        "env.json.gz.gz",
        "report.pdf",
    }
    assert "(inside its gzip body" in places[".record-env.snapshot"]
    assert "(inside its gzip body" in places["env.json.gz.gz"]
    assert "(inside a zlib stream at byte " in places["report.pdf"]
    assert "(inside its zlib body" in places[".http-cache.bin"]
    assert "(inside its xz body" in places["env.xz"]
    assert "(inside its zlib body" in places["debug.zip:run/env.json.z"]
    assert "canary leak: .record-env.snapshot:" in _all_text(probe)
    assert not _FULL_KEY.search(_all_text(probe))


@pytest.mark.index
def test_a_key_printed_after_megabytes_of_output_is_found_at_its_line(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    # Red team 12, F3: reports keep the first 2 MB a command prints; the key came after 3 MB of debug lines.
    script = (
        "import os\n"
        "for i in range(150_000): print('debug: request %06d ok' % i)\n"
        "print('debug: auth header Bearer ' + os.environ['OPENAI_API_KEY'])\n"
    )
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", script])
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    assert [f.location for f in probe.leaks] == ["stdout of python -c " + _quoted(script) + ":150001"]
    assert not _FULL_KEY.search(_all_text(probe))


@pytest.mark.index
def test_a_key_written_as_utf16_or_json_escaped_is_found_as_it_reads(
    tmp_path: Path, installed: tuple[Path, object]
) -> None:
    # Red team 12, F5: what PowerShell's `>` writes (UTF-16 with a BOM); the tree scan already read it so.
    script = (
        "import os\n"
        "key = os.environ['OPENAI_API_KEY']\n"
        "open('rec.log', 'w', encoding='utf-16').write('recording\\nkey=' + key + '\\n')\n"
        "open('rec.json', 'w').write('{\"k\": \"' + ''.join('\\\\u%04x' % ord(c) for c in key) + '\"}')\n"
    )
    ctx = _ctx(tmp_path, installed, record_command=["python", "-c", script])
    probe = probe_canary(ctx)
    assert probe.status == "ran", _all_text(probe)
    places = {f.location: f.message for f in probe.leaks}
    assert set(places) == {"rec.log:2", "rec.json:1"}, places
    assert "as utf-16 text" in places["rec.log:2"]
    assert "JSON-escaped" in places["rec.json:1"]


@pytest.mark.index
@pytest.mark.parametrize("packed", [False, True], ids=["loose-object", "after-gc"])
def test_a_recorder_that_commits_the_key_leaks_it_into_the_repositorys_history(
    tmp_path: Path, installed: tuple[Path, object], packed: bool
) -> None:
    """Red team 12, F2: an "auto-commit my tapes" recorder put the key in a commit message, and the probe
    never looked in `.git`. The recorder here also drops the reflog and COMMIT_EDITMSG, so the key is only
    in the commit object: loose (zlib), or after `git gc` inside a pack."""
    src, env = installed
    repo = tmp_path / "sub"
    shutil.copytree(src, repo)
    git_env = {**GIT_ENV, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", "-C", str(repo), *args], env=git_env, check=True, capture_output=True)
    record = (
        'git add -A && git -c user.name=rec -c user.email=rec@localhost commit -q --allow-empty -m "tapes'
        ' re-recorded ($OPENAI_API_KEY)" && '
        + ("git gc -q && " if packed else "")
        + "rm -rf .git/logs .git/COMMIT_EDITMSG"
    )
    root = tmp_path / "ws"
    root.mkdir()
    root.chmod(0o711)
    workspace = acquire(str(repo), root)
    manifest = replace(read_manifest(workspace.repo), record_command=["/bin/sh", "-c", record])
    ctx = Context(workspace, manifest, env=env, timeout=120)  # type: ignore[arg-type]
    probe = probe_canary(ctx)
    assert probe.status == "ran" and "exit 0" in _all_text(probe), _all_text(probe)
    places = {f.location: f.message for f in probe.leaks}
    assert places and all(where.startswith(".git/objects/") for where in places), places
    how = "inside a git pack entry" if packed else "inside its zlib body"
    assert all(how in message for message in places.values()), places
    assert not _FULL_KEY.search(_all_text(probe))


def test_what_the_run_wrote_is_inflated_up_to_a_total_and_the_rest_is_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team 8, R8-3: a record run that writes many small bzip2 bombs would cost the grader seconds each.
    The probe inflates at most `_INFLATE_TOTAL` bytes in all (lowered here); a compressed file past it is
    listed as not inflated, so a gzip'd leak written after the bombs keeps the row below 3, not clean."""
    import bz2
    import gzip

    from grader.checks import canary as canary_module

    monkeypatch.setattr(canary_module, "_INFLATE_TOTAL", 12 * 1024 * 1024)
    key = make_canary("OPENAI_API_KEY")
    for n in range(5):
        (tmp_path / f"cache-{n}.bz2").write_bytes(bz2.compress(b"\0" * (4 * 1024 * 1024)))
    (tmp_path / "aa-early.gz").write_bytes(gzip.compress(f"KEY={key}\n".encode()))
    (tmp_path / "zz-late.gz").write_bytes(gzip.compress(f"KEY={key}\n".encode()))
    unscanned: list[str] = []
    found = canary_module._scan_tree(tmp_path, key, unscanned, tmp_path / "as-submitted")
    assert [where for where, _ in found] == ["aa-early.gz:1"]
    assert any(line.startswith("zz-late.gz: written by the canary run, not inflated") for line in unscanned)


def test_a_git_folder_the_run_turned_into_a_link_is_not_followed(tmp_path: Path) -> None:
    # The run owned its copy: `.git` -> a folder outside it must not be read (nor `/` walked) as root.
    from grader.checks import canary as canary_module

    key = make_canary("OPENAI_API_KEY")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "HEAD").write_text(f"ref: {key}\n")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / ".git").symlink_to(outside)
    assert canary_module._scan_tree(copy, key, [], tmp_path / "as-submitted") == []
