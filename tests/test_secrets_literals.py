"""Literal prefixes derived from a regex: every match must hold one of them, or a key would be skipped."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.secrets import load_rules
from grader.secrets.literals import match_prefixes
from grader.secrets.rules import Rule
from grader.secrets.samples import true_sample_matches

RULES = load_rules()

# Shapes the rule file uses and some it could: optional parts, unbounded and bounded repeats, alternations
# up front and nested, classes, lookarounds, \d, inline flags, an empty alternative, lazy repeats.
TRICKY = [
    rb"ab",
    rb"a(?:bc|d)e",
    rb"x*y",
    rb"a[ \t]*[:=]b",
    rb"a(?:\\*[\"'])?[ \t]*[:=][ \t]*(?:\\n|\r?\n)?[ \t]*(?:\[[ \t]*|-[ \t]+)?c",
    rb"ab{2,3}c",
    rb"ab{0,2}c",
    rb"a(?:b|)c",
    rb"(?:ab|b)c",
    rb"a|b|cd",
    rb"a\db",
    rb"a[^b]c",
    rb"a[^bc]d",
    rb"a[\d:]b",
    rb"(?=ab)a",
    rb"a(?=b)",
    rb"(?<=a)b",
    rb"a(?i:b)c",
    rb"(?i)ab",
    rb"a.b",
    rb"a+?b",
    rb"(a)\1",
    rb"(?:a?)*b",
    rb"[ab]{4}",
    rb"A(?:KIA|SIA)[A-Z2-7]{2}(?![a-z])",
    rb"gh[ousr]_[a-z0-9]{3}",
    rb"\Aab",
    rb"ab\b",
]
ALPHABET = "ab cd:=\t\n\\\"'-_[AKISghousr0123z5"


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=40))
def test_every_match_holds_a_derived_literal(text: str) -> None:
    data = text.encode()
    for regex in TRICKY:
        literals = match_prefixes(regex, limit=16)
        if not literals:
            continue  # "may match anywhere": no filter
        for match in re.finditer(regex, data):
            assert any(literal in match.group(0) for literal in literals), (regex, match.group(0), literals)


@pytest.mark.parametrize("regex", TRICKY)
def test_planted_matches_hold_a_derived_literal(regex: bytes) -> None:
    # Strings each pattern does match, built by hand, so the property above is never vacuous.
    planted = [
        b"ab",
        b"abce",
        b"ade",
        b"xxxy",
        b"y",
        b"a \t:b",
        b'a\\\\"  = \\n  - c',
        b"abbc",
        b"abbbc",
        b"ac",
        b"abc",
        b"bc",
        b"cd",
        b"a1b",
        b"azc",
        b"azd",
        b"a5b",
        b"aBc",
        b"AB",
        b"a-b",
        b"aab",
        b"aa",
        b"abab",
        b"AKIAZZ",
        b"ASIA23",
        b"ghs_a1b",
    ]
    literals = match_prefixes(regex, limit=16)
    for data in planted:
        for match in re.finditer(regex, data):
            assert not literals or any(lit in match.group(0) for lit in literals), (regex, data)


def test_what_cannot_be_expanded_ends_the_literal_early() -> None:
    assert match_prefixes(rb"ab\dc") == {b"ab"}
    assert match_prefixes(rb"a(?=b)c") == {b"a"}
    assert match_prefixes(rb"(?i)abc") == frozenset()  # any case may match: no literal holds
    assert match_prefixes(rb"a(?i:b)c") == {b"a"}
    assert match_prefixes(rb".ab") == frozenset()
    assert match_prefixes(rb"(?:a?)*b") == frozenset()


def test_literals_grow_until_the_limit() -> None:
    assert match_prefixes(rb"hf_[A-Za-z]{34}") == {
        b"hf_" + bytes([c]) for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    }
    assert match_prefixes(rb"hf_[A-Za-z]{34}", limit=10) == {b"hf_"}
    assert match_prefixes(rb"A(?:KIA|SIA)[A-Z2-7]{16}", limit=2) == {b"AKIA", b"ASIA"}
    assert match_prefixes(rb"x*y") == {b"y", b"x" * 32}  # xy, xxy, ... hold "y"


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_each_rule_has_anchors_and_every_true_sample_match_holds_one(rule: Rule) -> None:
    assert rule.anchors, f"{rule.id}: without keywords or a literal prefix its regex runs over every byte"
    matches = true_sample_matches(rule)
    assert len(matches) >= len(rule.true_samples)
    for text in matches:
        assert any(a in text for a in rule.anchors), (rule.id, text)


def test_a_rules_anchors_are_its_prefixes_only_when_each_holds_a_keyword() -> None:
    by_id = {r.id: r for r in RULES}
    # hf_ + a letter or digit: sharper than the keyword, which every one of them holds.
    assert len(by_id["huggingface-access-token"].anchors) == 62  # hf_ and a letter or digit
    # sk-... prefixes do not hold T3BlbkFJ, the rarer keyword: the keyword gates.
    assert by_id["openai-legacy-key"].anchors == {b"T3BlbkFJ"}
    # Lowercase literals for a rule that runs on lowercased text.
    assert all(a.startswith(b"authorization") for a in by_id["authorization-header"].anchors)
