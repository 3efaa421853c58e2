"""The keyword prefilter: one multi-literal pass decides which rules run, and must never hide a key.

The fast path (one Aho-Corasick pass over all keywords, in chunks) and the slow path (one ``in`` per
keyword, used when the extension is missing) must give the same findings for any input.
"""

from __future__ import annotations

import base64
import gzip
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.secrets import Scanner, load_rules
from grader.secrets import scanner as scanner_module
from grader.secrets.decode import MARKERS
from grader.secrets.rules import Rule, base62
from grader.secrets.samples import expand, true_sample_matches

RULES = load_rules()
TRUE = [(r.id, i, expand(t, f"{r.id}:true:{i}")) for r in RULES for i, t in enumerate(r.true_samples)]
GROQ_KEY = expand("gsk_{{alnum:52}}", "prefilter:groq")
CHUNK = scanner_module._CHUNK


@pytest.fixture(params=["fast", "slow"])
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Scanner:
    if request.param == "slow":
        monkeypatch.setattr(scanner_module, "ahocorasick_rs", None)
    return Scanner(RULES)


def _found(scanner: Scanner, text: str) -> list[tuple[str, int, str]]:
    return [(f.rule, f.line, f.fingerprint) for f in scanner.scan_text(text, source="t")]


def test_the_fast_path_is_the_one_in_use() -> None:
    assert scanner_module.ahocorasick_rs is not None, "ahocorasick-rs is a core dependency"
    finder = scanner_module.literal_finder((b"a",))
    assert finder.func is scanner_module._find_together  # type: ignore[attr-defined]


@pytest.mark.parametrize(("rule_id", "index", "sample"), TRUE, ids=[f"{r}-{i}" for r, i, _ in TRUE])
def test_every_true_sample_is_found_on_both_paths(
    scanner: Scanner, rule_id: str, index: int, sample: str
) -> None:
    assert rule_id in [f.rule for f in scanner.scan_text(sample, source="sample")]


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_every_match_of_a_true_sample_holds_one_of_its_rules_keywords(rule: Rule) -> None:
    # Without the one-pass search a rule runs only where one of its keywords occurs: a keyword that its
    # regex can match without would hide keys. Checked on every true sample (lowercased for ignore_case).
    assert rule.keywords_b, f"{rule.id}: without keywords the slow path runs its regex over every byte"
    matches = true_sample_matches(rule)
    assert len(matches) >= len(rule.true_samples)
    for text in matches:
        assert any(k in text for k in rule.keywords_b), (rule.id, text)


@pytest.mark.parametrize("prefix", ["AKIA", "ASIA"])
def test_both_aws_key_prefixes_are_found(scanner: Scanner, prefix: str) -> None:
    key = prefix + expand("{{upper32:16}}", f"prefilter:aws:{prefix}")
    assert [f.rule for f in scanner.scan_text(f"id = {key}", source="t")] == ["aws-access-key-id"]


@pytest.mark.parametrize("kind", ["o", "u", "s", "r"])
def test_every_github_token_prefix_is_found(scanner: Scanner, kind: str) -> None:
    body = expand("{{alnum:30}}", f"prefilter:gh:{kind}")
    token = f"gh{kind}_{body}{base62(zlib.crc32(body.encode()), 6)}"
    assert [f.rule for f in scanner.scan_text(f"token: {token}", source="t")] == ["github-token"]


@pytest.mark.parametrize(
    "name", ["authorization", "Authorization", "AUTHORIZATION", "aUtHoRiZaTiOn", "AuthorizatioN"]
)
def test_the_authorization_header_is_found_in_any_casing(scanner: Scanner, name: str) -> None:
    token = expand("{{alnum:40}}", "prefilter:header")
    for text in (f"{name}: Bearer {token}", f'{{"{name}": "Bearer {token}"}}', f"  {name}:\n  - {token}\n"):
        assert [f.rule for f in scanner.scan_text(text, source="t")] == ["authorization-header"], text


@pytest.mark.parametrize("name", ["x-api-key", "X-Api-Key", "X-API-KEY", "x-aPi-KeY", "Api-Key"])
def test_the_api_key_header_is_found_in_any_casing(scanner: Scanner, name: str) -> None:
    token = expand("{{alnum:40}}", "prefilter:api-key")
    assert [f.rule for f in scanner.scan_text(f"{name}: {token}", source="t")] == ["api-key-header"]


@pytest.mark.parametrize("shift", [-60, -5, -4, -3, -2, -1, 0, 1])
def test_a_key_across_a_chunk_boundary_is_found(scanner: Scanner, shift: int) -> None:
    # The keyword "gsk_" starts `shift` bytes from the boundary: cut in two for -3..-1.
    filler = ("lorem ipsum dolor sit amet " * (CHUNK // 20))[: CHUNK + shift - 1] + "\n"
    text = filler + GROQ_KEY + "\n" + "tail " * 100
    assert _found(scanner, text) == [("groq-api-key", 2, _found(scanner, GROQ_KEY)[0][2])]


@pytest.mark.parametrize("shift", [-3, -2, -1, 0])
def test_a_gzip_body_across_a_chunk_boundary_is_found(scanner: Scanner, shift: int) -> None:
    blob = base64.b64encode(gzip.compress(f"token {GROQ_KEY}".encode(), mtime=0)).decode()
    assert blob.startswith("H4sI")
    filler = ("x" * 70 + "\n") * (CHUNK // 71 + 1)
    text = filler[: CHUNK + shift - 1] + "\n" + blob + "\n"
    assert [(f.rule, f.encoding) for f in scanner.scan_text(text, source="t")] == [
        ("groq-api-key", "gzip+base64")
    ]


def test_the_literal_search_agrees_with_one_search_per_literal() -> None:
    # Overlapping literals (one starting inside another's occurrence, one inside another) and occurrences
    # cut by chunk boundaries: the one-pass search reports exactly what separate searches report.
    literals = tuple(sorted({b"ghp_", b"_live_", b"xox", b"xai-", b"sk-ant-", b"ant-", b"hf_", *MARKERS}))
    fast = scanner_module.literal_finder(literals)
    rng = random.Random(5)
    alphabet = b"abghiklnopstvx_-!H4sIyA"
    for trial in range(300):
        size = rng.choice([0, 1, 7, 100, CHUNK - 1, CHUNK + 5, 2 * CHUNK + 3])
        data = bytearray(rng.choice(alphabet) for _ in range(min(size, 400)))
        data.extend(b"." * (size - len(data)))
        for _ in range(rng.randint(0, 3)):
            word = rng.choice([*literals, b"ghp_live_", b"xoxai-", b"sk-ant-"])
            at = rng.choice([0, size, CHUNK - rng.randint(0, 8), 2 * CHUNK - rng.randint(0, 8)])
            data[min(at, len(data)) : min(at, len(data))] = word
        blob = bytes(data)
        assert fast(blob) == scanner_module._find_each(literals, blob), trial


def test_a_key_in_a_file_made_of_keywords_is_found(scanner: Scanner) -> None:
    # Every third byte starts a keyword (the chunked search reports each occurrence): the key is found.
    text = "hf_r8_xox" * (3 * CHUNK // 9) + "\n" + GROQ_KEY + "\n"
    assert [f.rule for f in scanner.scan_text(text, source="t")] == ["groq-api-key"]


def _ungated() -> Scanner:
    # Every rule's regex over every byte: what the gates must never change.
    scanner = Scanner(RULES)
    scanner._gates = [frozenset()] * len(scanner.rules)
    return scanner


def _flip_case(rng: random.Random, word: str) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c for c in word)


_PIECES = [sample for _, _, sample in TRUE] + [
    "hf_", "hf_hub_download", "r8_", "sk-", "task-runner", "gsk", "AIza", "xox", "ghp_", "sk_live_",
    "authorization", "api-key", "Bearer ", ": ", "=", "\\n", "%3D", '\\"', "\n", " ", "\t", "-", "_",
    expand("{{alnum:40}}", "prefilter:piece"), expand("{{b64url:34}}", "prefilter:piece"), "T3BlbkFJ",
]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(picks=st.lists(st.integers(0, len(_PIECES) - 1), max_size=14), seed=st.integers(0, 2**16))
def test_the_gates_never_change_a_finding(picks: list[int], seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(_PIECES[i] if rng.random() < 0.7 else _flip_case(rng, _PIECES[i]) for i in picks)
    fast = [(f.rule, f.line, f.fingerprint, f.encoding) for f in Scanner(RULES).scan_text(text, source="t")]
    assert fast == [
        (f.rule, f.line, f.fingerprint, f.encoding) for f in _ungated().scan_text(text, source="t")
    ]


def test_the_gates_never_change_a_finding_in_a_mixed_document() -> None:
    rng = random.Random(11)
    parts = []
    for n in range(12 * len(RULES)):  # enough pieces that nearly every rule's samples are drawn
        piece = _PIECES[rng.randrange(len(_PIECES))]
        parts.append(_flip_case(rng, piece) if n % 3 == 0 else piece)
        parts.append(rng.choice([" ", "\n", ": ", "=", '"', "'"]))
    text = "".join(parts)
    fast = Scanner(RULES).scan_text(text, source="t")
    assert len({f.rule for f in fast}) >= len(RULES) - 2  # nearly every rule fires somewhere
    assert [(f.rule, f.line, f.fingerprint) for f in fast] == [
        (f.rule, f.line, f.fingerprint) for f in _ungated().scan_text(text, source="t")
    ]
