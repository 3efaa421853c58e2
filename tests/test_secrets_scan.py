"""The scanner on text and working trees: escapes, encodings, placeholders, suppressions, redaction."""

from __future__ import annotations

import base64
import gzip
import json
import os
from pathlib import Path

import pytest

from grader.secrets import Scanner, redact, scan_text, scan_tree
from grader.secrets.samples import expand

FIXTURES = Path(__file__).parent / "fixtures"

# Keys are generated at run time from templates, so this file carries no literal key.
PROJECT_KEY = expand("sk-proj-{{b64url:74}}T3BlbkFJ{{b64url:74}}", "scan:project")
ANTHROPIC_KEY = expand("sk-ant-api03-{{b64url:93}}AA", "scan:anthropic")
GROQ_KEY = expand("gsk_{{alnum:52}}", "scan:groq")
ALL_KEYS = {"openai-project-key": PROJECT_KEY, "anthropic-api-key": ANTHROPIC_KEY, "groq-api-key": GROQ_KEY}


def _rules(text: str) -> list[str]:
    return [f.rule for f in scan_text(text, source="out")]


@pytest.mark.parametrize("rule_id", sorted(ALL_KEYS))
@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param("{k}", id="bare"),
        pytest.param('{{\\"api_key\\": \\"{k}\\"}}', id="json-escaped-quotes"),
        pytest.param('"first line\\n{k}\\nnext"', id="json-newline-escape"),
        pytest.param('"\\u0022{k}\\u0022"', id="json-unicode-escape"),
        pytest.param("https://x.invalid/?key%3D{k}&y=1", id="url-encoded-equals"),
        pytest.param("data=%7B%22key%22%3A%22{k}%22%7D", id="url-encoded-json"),
        pytest.param("'{k}'", id="single-quotes"),
        pytest.param("KEY={k}\r\n", id="crlf"),
    ],
)
def test_keys_are_found_through_escapes_and_url_encoding(rule_id: str, wrap: str) -> None:
    assert _rules(wrap.format(k=ALL_KEYS[rule_id])) == [rule_id]


def test_a_key_inside_a_json_string_inside_json_is_found() -> None:
    inner = json.dumps({"messages": [{"content": f"my key is {GROQ_KEY}"}]})
    assert _rules(json.dumps({"body": inner})) == ["groq-api-key"]


@pytest.mark.parametrize("before", ["task", "x", "9", "Q"])
def test_a_key_shape_glued_to_a_longer_word_is_not_a_key(before: str) -> None:
    assert _rules(before + GROQ_KEY) == []


def test_a_key_shape_that_runs_on_is_not_cut_short() -> None:
    assert _rules(GROQ_KEY + "Z") == []


@pytest.mark.parametrize(
    "text",
    [
        "OPENAI_API_KEY=sk-...",
        "OPENAI_API_KEY=sk-xxxx",
        "api_key = YOUR_API_KEY",
        "x-api-key: test-key",
        "Authorization: REDACTED",
        '"Authorization": "[REDACTED]"',
        "xxxx",
        "aws_access_key_id=AKIAIOSFODNN7EXAMPLE",
        "Authorization: Bearer test_openai_api_key",
        "x-api-key: dummy",
        "Authorization: Bearer fake",
        "gsk_" + "ab" * 26,
        "sk-or-v1-" + "0123456789abcdef" * 4,
        "sk-ant-api03-" + "A" * 93 + "AA",
    ],
)
def test_placeholders_and_low_entropy_strings_are_not_findings(text: str) -> None:
    assert _rules(text) == []


@pytest.mark.parametrize(
    "comment",
    [
        "  # gitleaks:allow",
        "  # pragma: allowlist secret",
        "  # nosec",
        "  # noqa: S105",
        "  // gitleaks:allow",
    ],
)
def test_suppression_comments_do_not_silence_the_scanner(comment: str) -> None:
    assert _rules(f'KEY = "{GROQ_KEY}"{comment}') == ["groq-api-key"]


def test_suppression_files_in_the_repo_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "config.py").write_text(f'KEY = "{GROQ_KEY}"\n')
    finding = scan_tree(tmp_path)[0]
    (tmp_path / ".gitleaksignore").write_text(f"{finding.fingerprint}\nconfig.py:groq-api-key:1\n")
    (tmp_path / ".secrets.baseline").write_text(json.dumps({"results": {"config.py": []}}))
    (tmp_path / ".gitleaks.toml").write_text("[allowlist]\npaths = ['''.*''']\n")
    assert [f.location for f in scan_tree(tmp_path)] == ["config.py:1"]


def test_redaction_shows_at_most_eight_characters() -> None:
    shown = redact(PROJECT_KEY)
    assert shown == "sk-proj-…[redacted]"
    assert redact("abcdefghijklmnop") == "abcd…[redacted]"
    assert redact("short") == "s…[redacted]"


def test_no_finding_field_holds_the_full_secret() -> None:
    text = f"line one\nANTHROPIC_API_KEY={ANTHROPIC_KEY}\n"
    (finding,) = scan_text(text, source="make test")
    assert finding.location == "make test:2"
    dumped = repr(finding) + finding.render() + json.dumps(finding.__dict__)
    assert ANTHROPIC_KEY not in dumped
    assert ANTHROPIC_KEY[:20] not in dumped
    assert finding.redacted.startswith("sk-ant-")


def test_a_key_repeated_in_every_interaction_is_one_finding_per_file() -> None:
    text = "\n".join(f'{{"authorization": "Bearer {PROJECT_KEY}"}}' for _ in range(5))
    assert [f.location for f in scan_text(text, source="tape.json")] == ["tape.json:1"]


def test_the_header_rule_yields_to_the_provider_rule_on_the_same_key() -> None:
    assert _rules(f'"x-api-key": "{ANTHROPIC_KEY}"') == ["anthropic-api-key"]


def test_an_unknown_token_in_a_vcr_authorization_header_is_found() -> None:
    token = expand("{{alnum:40}}", "scan:header")
    tape = f"interactions:\n- request:\n    headers:\n      authorization:\n      - Bearer {token}\n"
    (finding,) = scan_text(tape, source="cassettes/t.yaml")
    assert (finding.rule, finding.line) == ("authorization-header", 5)


# --- working tree -------------------------------------------------------------------------------


def test_the_vendored_real_cassettes_have_no_findings() -> None:
    scanner = Scanner()
    from grader.secrets.tree import scan_tree_with

    assert scan_tree_with(scanner, FIXTURES / "corpus") == []
    assert scanner.stats.tapes >= 13


def test_realistic_non_secrets_have_no_findings() -> None:
    # hashes, UUIDs, base64 images, embeddings, model/org/project/request ids, cookies, .env.example
    assert scan_tree(FIXTURES / "nonsecrets") == []


def _vcr_tape(body: bytes) -> str:
    b64 = base64.encodebytes(gzip.compress(body, mtime=0)).decode()
    block = "".join(f"        {line}\n" for line in b64.splitlines())
    return (
        "interactions:\n- request:\n    method: POST\n    uri: https://api.openai.com/v1/chat/completions\n"
        f"  response:\n    body:\n      string: !!binary |\n{block}    headers:\n      Content-Encoding:\n"
        "      - gzip\n    status:\n      code: 200\nversion: 1\n"
    )


def test_a_key_in_a_gzip_base64_vcr_body_is_found(tmp_path: Path) -> None:
    body = json.dumps({"choices": [{"message": {"content": f"use {PROJECT_KEY} please"}}]}).encode()
    tape = tmp_path / "tests" / "cassettes" / "t.yaml"
    tape.parent.mkdir(parents=True)
    tape.write_text(_vcr_tape(body))
    (finding,) = scan_tree(tmp_path)
    assert (finding.kind, finding.rule, finding.location) == (
        "tape",
        "openai-project-key",
        "tests/cassettes/t.yaml:8",
    )
    assert finding.encoding == "gzip+base64"


def test_a_key_in_a_gzip_base64_json_string_is_found() -> None:
    blob = base64.b64encode(gzip.compress(f"token {GROQ_KEY}".encode())).decode()
    wrapped = json.dumps({"response": {"body": {"base64_string": blob}}}, indent=1).replace("/", "\\/")
    (finding,) = scan_text(wrapped, source="tape.json")
    assert (finding.rule, finding.encoding, finding.line) == ("groq-api-key", "gzip+base64", 4)


def test_a_gzipped_file_is_inflated_and_scanned(tmp_path: Path) -> None:
    (tmp_path / "dump.json.gz").write_bytes(gzip.compress(f'{{"k": "{GROQ_KEY}"}}'.encode()))
    (finding,) = scan_tree(tmp_path)
    assert (finding.path, finding.encoding) == ("dump.json.gz", "gzip")


def test_the_kit_cassette_dir_marks_tapes(tmp_path: Path) -> None:
    (tmp_path / "recs").mkdir()
    (tmp_path / "recs" / "a.txt").write_text(GROQ_KEY)
    (tmp_path / "notes.txt").write_text(GROQ_KEY)
    kinds = {f.path: f.kind for f in scan_tree(tmp_path, tape_dirs=("recs",))}
    assert kinds == {"recs/a.txt": "tape", "notes.txt": "tree"}


def test_symlinks_are_not_followed_and_git_is_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.txt").write_text(GROQ_KEY)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(GROQ_KEY)
    os.symlink(outside / "k.txt", repo / "link.txt")
    os.symlink(outside, repo / "linkdir")
    (repo / "ok.txt").write_text("nothing here")
    assert scan_tree(repo) == []


def test_binary_files_are_read_for_the_text_they_hold(tmp_path: Path) -> None:
    """Red team 5, G9: a key in a SQLite file, a PNG's text chunk or committed bytecode is found."""
    (tmp_path / "cache.db").write_bytes(
        b"SQLite format 3\0" + b"\0\7" * 50 + f"OPENAI_API_KEY={PROJECT_KEY}".encode()
    )
    png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + b"\0" * 13 + b"tEXtComment\0" + GROQ_KEY.encode() + b"\xae\x42"
    (tmp_path / "shot.png").write_bytes(png)
    (tmp_path / "noise.bin").write_bytes(bytes(range(256)) * 400)  # binary with no key: nothing
    (tmp_path / "cassettes").mkdir()
    (tmp_path / "cassettes" / "raw.json").write_bytes(b"\0\1\2" + GROQ_KEY.encode() + b"\0")

    found = {f.path: f for f in scan_tree(tmp_path)}

    assert set(found) == {
        "cache.db",
        "shot.png",
        "cassettes/raw.json",
    }
    assert found["cache.db"].rule == "openai-project-key" and found["shot.png"].rule == "groq-api-key"
    assert found["cache.db"].encoding == "binary file's text" and found["cassettes/raw.json"].encoding is None


def test_huge_files_are_scanned_block_by_block_to_the_cap_and_the_rest_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team 5, G1: a key on the last line of a file over the whole-read size, or straddling two blocks,
    is found at its line; a file past the read cap, or a gzip body inflating past it, is listed as not
    fully scanned. (Sizes made small here; the real ones are tested in test_a_key_after_20_mb_...)."""
    from grader.secrets import tree

    monkeypatch.setattr(tree, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(tree, "READ_CAP", 6000)
    monkeypatch.setattr(tree, "_OVERLAP", 300)
    filler = b"".join(b"row %03d of plain log text\n" % i for i in range(100))  # 2,600 bytes, 100 lines
    (tmp_path / "end.log").write_bytes(filler + GROQ_KEY.encode() + b"\n")
    cut = filler[:990] + b"\n" + GROQ_KEY.encode() + b"\n" + filler  # the key across the first block's end
    (tmp_path / "cut.log").write_bytes(cut)
    (tmp_path / "past.log").write_bytes(filler * 3 + GROQ_KEY.encode() + b"\n")  # 7,800 bytes: past the cap
    (tmp_path / "deep.log.gz").write_bytes(gzip.compress(filler * 3 + GROQ_KEY.encode()))
    (tmp_path / "shallow.log.gz").write_bytes(gzip.compress(filler + GROQ_KEY.encode() + b"\n"))
    scanner = Scanner()

    found = tree.scan_tree_with(scanner, tmp_path)

    assert sorted((f.path, f.line) for f in found) == [
        ("cut.log", cut[: cut.index(GROQ_KEY.encode())].count(b"\n") + 1),
        ("end.log", 101),
        ("shallow.log.gz", 101),
    ]
    assert sorted(line.split(":", 1)[0] for line in scanner.stats.unscanned) == ["deep.log.gz", "past.log"]
    assert "scanned only to 6000 bytes" in next(u for u in scanner.stats.unscanned if u.startswith("deep"))


def test_a_key_after_20_mb_of_log_or_70_mb_of_gzip_is_found(tmp_path: Path) -> None:
    """G1 at its real size: over the 16 MiB whole-read size, in the tree and inflated from a gzip."""
    line = b"2026-12-01 10:00:00 INFO request served in 12 ms for a customer\n"
    (tmp_path / "server.log").write_bytes(line * (20 * 1024**2 // len(line)) + GROQ_KEY.encode() + b"\n")
    (tmp_path / "server.log.1.gz").write_bytes(
        gzip.compress(line * (70 * 1024**2 // len(line)) + PROJECT_KEY.encode() + b"\n", compresslevel=1)
    )
    scanner = Scanner()
    from grader.secrets.tree import scan_tree_with

    found = scan_tree_with(scanner, tmp_path)

    assert sorted((f.path, f.rule) for f in found) == [
        ("server.log", "groq-api-key"),
        ("server.log.1.gz", "openai-project-key"),
    ]
    assert scanner.stats.unscanned == []


def test_a_private_key_block_is_found_at_its_own_begin_line_after_unended_ones() -> None:
    """Red team 31: 2 MB of `-----BEGIN RSA PRIVATE KEY-----` lines without an END held the scan for minutes
    (each BEGIN's match ran on through the next ones to the end of the file). A block ends at the next
    `-----` line: the BEGIN lines before a real block are not part of it, and the block is where it starts."""
    block = expand(
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE{{b64:60}}\n{{b64:64}}\n-----END RSA PRIVATE KEY-----\n",
        "scan:pem",
    )
    findings = scan_text("-----BEGIN RSA PRIVATE KEY-----\n" * 3 + block, source="deploy/id_rsa")
    assert [(f.rule, f.line) for f in findings] == [("private-key", 4)], findings
