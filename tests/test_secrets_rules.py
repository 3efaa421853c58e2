"""The rule file: each rule's synthetic samples behave as documented; a broken rule file fails clearly."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from grader.secrets import RuleError, Scanner, load_rules
from grader.secrets.filters import shannon_entropy
from grader.secrets.rules import DEFAULT_RULES, base62
from grader.secrets.samples import expand

RULES = load_rules()
SCANNER = Scanner(RULES)

TRUE = [(r.id, i, expand(t, f"{r.id}:true:{i}")) for r in RULES for i, t in enumerate(r.true_samples)]
FALSE = [(r.id, i, expand(t, f"{r.id}:false:{i}")) for r in RULES for i, t in enumerate(r.false_samples)]


def test_the_rule_file_covers_the_providers_the_issue_names() -> None:
    ids = {r.id for r in RULES}
    expected = {
        "openai-legacy-key", "openai-project-key", "openai-service-account-key", "openai-admin-key",
        "anthropic-api-key", "anthropic-admin-key", "groq-api-key", "openrouter-api-key",
        "replicate-api-token", "xai-api-key", "perplexity-api-key", "google-api-key",
        "huggingface-access-token", "aws-access-key-id", "github-pat", "github-fine-grained-pat",
        "slack-bot-token", "slack-user-token", "slack-webhook-url", "stripe-live-secret-key",
        "stripe-restricted-key", "authorization-header", "api-key-header",
    }  # fmt: skip
    assert expected <= ids
    for rule in RULES:
        assert rule.true_samples and rule.false_samples, f"{rule.id} needs true and false samples"


def test_the_rule_file_credits_gitleaks() -> None:
    assert "gitleaks" in DEFAULT_RULES.read_text()
    notice = (DEFAULT_RULES.parent / "NOTICE").read_text()
    assert "MIT License" in notice and "Zachary Rice" in notice


@pytest.mark.parametrize(("rule_id", "index", "sample"), TRUE, ids=[f"{r}-{i}" for r, i, _ in TRUE])
def test_true_sample_is_found_by_its_rule(rule_id: str, index: int, sample: str) -> None:
    found = SCANNER.scan_text(sample, source="sample")
    assert rule_id in [f.rule for f in found]


@pytest.mark.parametrize(("rule_id", "index", "sample"), FALSE, ids=[f"{r}-{i}" for r, i, _ in FALSE])
def test_false_sample_is_not_a_finding(rule_id: str, index: int, sample: str) -> None:
    assert SCANNER.scan_text(sample, source="sample") == []


def test_the_rule_file_holds_no_literal_key() -> None:
    # Samples are templates expanded at test time; the file itself must scan clean.
    assert SCANNER.scan_text(DEFAULT_RULES.read_text(), source="secrets.toml") == []


def test_samples_are_deterministic_and_high_entropy() -> None:
    template = "sk-or-v1-{{hex:64}}"
    assert expand(template, "a") == expand(template, "a") != expand(template, "b")
    assert len(set(expand(template, "a")[9:])) >= 12


def test_github_checksum_is_validated() -> None:
    body = expand("{{alnum:30}}", "gh")
    good = "ghp_" + body + base62(zlib.crc32(body.encode()), 6)
    bad = "ghp_" + body + ("000000" if not good.endswith("000000") else "000001")
    assert [f.rule for f in SCANNER.scan_text(f"token={good}", source="t")] == ["github-pat"]
    assert SCANNER.scan_text(f"token={bad}", source="t") == []


def test_a_random_hex_key_that_drew_few_symbols_is_still_a_key() -> None:
    # 1.7% of random 32-character hex keys have entropy under 3.3, the assignment rules' floor.
    key = "7f85f36f2d8233bf7f2fb84f4156f47f"  # drawn at random
    assert 3.0 < shannon_entropy(key) < 3.3
    assert [f.rule for f in SCANNER.scan_text(f"TOGETHER_API_KEY={key}", source="t")] == [
        "credential-assignment-api-key"
    ]
    # A placeholder made of hex stays one: repeated, not random.
    assert SCANNER.scan_text("TOGETHER_API_KEY=" + "deadbeef" * 4, source="t") == []


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[rules]\n", "not valid TOML"),
        ("title = 'x'\n", "no [[rules]]"),
        ("[[rules]]\nid = 'a'\ndescription = 'd'\n", "missing 'regex'"),
        ("[[rules]]\nid = 'a'\ndescription = 'd'\nregex = 'x'\ncolour = 'red'\n", "unknown field 'colour'"),
        ("[[rules]]\nid = 'a'\ndescription = 'd'\nregex = '[a-z]+'\n", "must start with a literal"),
        ("[[rules]]\nid = 'a'\ndescription = 'd'\nregex = 'ab('\n", "bad regex"),
        ("[[rules]]\nid = 'a'\ndescription = 'd'\nregex = 'ab'\nvalidator = 'luhn'\n", "unknown validator"),
    ],
)
def test_a_broken_rule_file_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(RuleError) as info:
        load_rules(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_rule_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="cannot read"):
        load_rules(tmp_path / "nope.toml")


def test_the_rule_error_points_at_the_rule_line(tmp_path: Path) -> None:
    text = "[[rules]]\nid = 'ok'\ndescription = 'd'\nregex = 'ab'\n\n"
    text += "[[rules]]\nid = \"bad\"\ndescription = 'd'\n"
    with pytest.raises(RuleError, match=r"rules\.toml:7: rule bad: missing 'regex'"):
        load_rules(_write(tmp_path, text))
