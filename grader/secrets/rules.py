"""Secret rules are data (grader/rules/secrets.toml); this module loads, validates and compiles them."""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader._toml import tomllib
from grader.secrets.literals import match_prefixes

__all__ = ["DEFAULT_RULES", "Rule", "RuleError", "base62", "load_rules", "validators"]

DEFAULT_RULES = Path(__file__).resolve().parent.parent / "rules" / "secrets.toml"

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_REGEX_META = set(".^$*+?{}[]\\|()")
_SYNTAX_CAPITALS = re.compile(r"\(\?P[<=]|\\[A-Z]")


class RuleError(ValueError):
    """A rule file that cannot be used; the message names file, rule and what to fix."""


def base62(number: int, width: int) -> str:
    """``number`` in base 62 (0-9A-Za-z), left-padded with zeros to ``width``."""
    digits = ""
    while number:
        number, rest = divmod(number, 62)
        digits = _B62[rest] + digits
    return digits.rjust(width, "0")


def _github_crc32(secret: str) -> bool:
    # GitHub's token format: prefix_ + 30 random chars + 6-char base62 CRC32 of those 30 chars.
    _, _, body = secret.partition("_")
    if len(body) != 36:
        return False
    random_part, checksum = body[:30], body[30:]
    return base62(zlib.crc32(random_part.encode("ascii", "replace")), 6) == checksum


_VALIDATORS: dict[str, Callable[[str], bool]] = {"github_crc32": _github_crc32}


def validators() -> dict[str, Callable[[str], bool]]:
    """Validator name -> function(secret) -> bool that rules may name in ``validator``."""
    return dict(_VALIDATORS)


@dataclass(frozen=True)
class Rule:
    """One detector: a regex that starts with a literal, plus the filters that drop non-secrets."""

    id: str
    description: str
    regex: str
    keywords: tuple[str, ...] = ()
    entropy: float = 3.0
    validator: str | None = None
    generic: bool = False  # a context rule (header values); loses to a specific rule on the same text
    ignore_case: bool = False  # regex and keywords run over the lowercased text (write them in lowercase)
    require_digit: bool = False
    # The format itself repeats characters (OpenSSH's length fields are runs of "A"): a run is no sign of a
    # placeholder, only text that compresses to almost nothing is.
    runs_allowed: bool = False
    true_samples: tuple[str, ...] = ()
    false_samples: tuple[str, ...] = ()
    compiled: re.Pattern[bytes] = field(init=False, repr=False, compare=False)
    keywords_b: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    # Literals one of which occurs wherever the regex matches (in the lowercased text for ignore_case);
    # empty: the regex must run everywhere. See ``_anchors``.
    anchors: frozenset[bytes] = field(init=False, repr=False, compare=False)
    prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Rules match bytes: files are never decoded as a whole, which keeps the scan fast.
        object.__setattr__(self, "compiled", re.compile(self.regex.encode("ascii")))
        words = (k.lower() if self.ignore_case else k for k in self.keywords)
        object.__setattr__(self, "keywords_b", tuple(k.encode("ascii") for k in words))
        object.__setattr__(self, "prefix", _literal_prefix(self.regex))
        object.__setattr__(self, "anchors", _anchors(self.compiled.pattern, self.keywords_b))

    def check_validator(self, secret: str) -> bool:
        """True when the rule has no validator or the secret passes it."""
        return self.validator is None or _VALIDATORS[self.validator](secret)


@functools.lru_cache(maxsize=256)  # every Scanner loads the rules again
def _anchors(regex: bytes, keywords: tuple[bytes, ...]) -> frozenset[bytes]:
    # The regex's own literal prefixes when each of them holds a keyword: ``hf_A`` .. ``hf_z`` are sharper
    # than the keyword ``hf_`` alone (not followed by a space, a quote, a digit...). Otherwise the keywords:
    # ``T3BlbkFJ`` inside an OpenAI key is rarer than any ``sk-`` prefix (``task-runner`` holds ``sk-r``).
    prefixes = match_prefixes(regex)
    if prefixes and all(any(k in p for k in keywords) for p in prefixes):
        return prefixes
    return frozenset(keywords) if keywords else prefixes


def _literal_prefix(regex: str) -> str:
    out = []
    for ch in regex:
        if ch in _REGEX_META:
            break
        out.append(ch)
    return "".join(out)


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "description": str,
    "regex": str,
    "keywords": list,
    "entropy": (int, float),
    "validator": str,
    "generic": bool,
    "ignore_case": bool,
    "require_digit": bool,
    "runs_allowed": bool,
    "true_samples": list,
    "false_samples": list,
}
_REQUIRED = ("id", "description", "regex")


def _line_of(text: str, needle: str) -> int:
    pos = text.find(needle)
    return text.count("\n", 0, pos) + 1 if pos >= 0 else 1


def load_rules(path: Path | str | None = None) -> list[Rule]:
    """Read and compile the rule file (default: the kit's grader/rules/secrets.toml).

    Raises RuleError with ``file:line: rule: what is wrong`` for a file that cannot be used.
    """
    path = Path(path) if path is not None else DEFAULT_RULES
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError(f"{path}: cannot read the secret rules ({exc.strerror}); check the path") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML: {exc}") from None
    entries = data.get("rules")
    if not isinstance(entries, list) or not entries:
        raise RuleError(f"{path}:1: no [[rules]] tables; add at least one rule")
    rules: list[Rule] = []
    seen: set[str] = set()
    for entry in entries:
        rule_id = str(entry.get("id", "?"))
        needle = f'id = "{rule_id}"'
        where = f"{path}:{_line_of(text, needle)}: rule {rule_id}"
        rules.append(_build(entry, where))
        if rule_id in seen:
            raise RuleError(f"{where}: duplicate id; ids must be unique")
        seen.add(rule_id)
    return rules


def _build(entry: dict[str, object], where: str) -> Rule:
    for name in _REQUIRED:
        if name not in entry:
            raise RuleError(f"{where}: missing {name!r}")
    for name, value in entry.items():
        expected = _FIELDS.get(name)
        if expected is None:
            raise RuleError(f"{where}: unknown field {name!r}; allowed: {', '.join(_FIELDS)}")
        if not isinstance(value, expected) or (
            isinstance(value, list) and not all(isinstance(v, str) for v in value)
        ):
            raise RuleError(f"{where}: {name!r} has the wrong type")
    regex = str(entry["regex"])
    if not regex or regex[0] in _REGEX_META:
        # Speed: the regex engine skips ahead to a literal prefix; an alternation up front scans every byte.
        raise RuleError(f"{where}: the regex must start with a literal; split alternatives into rules")
    letters = _SYNTAX_CAPITALS.sub("", regex)  # "(?P<name>" and escapes like \S are syntax
    if entry.get("ignore_case") and letters != letters.lower():
        raise RuleError(f"{where}: with ignore_case the regex runs on lowercased text; write it in lowercase")
    validator = entry.get("validator")
    if validator is not None and validator not in _VALIDATORS:
        raise RuleError(f"{where}: unknown validator {validator!r}; known: {', '.join(_VALIDATORS)}")
    try:
        rule = Rule(
            id=str(entry["id"]),
            description=str(entry["description"]),
            regex=regex,
            keywords=tuple(entry.get("keywords", ())),  # type: ignore[arg-type]
            entropy=float(entry.get("entropy", 3.0)),  # type: ignore[arg-type]
            validator=validator,
            generic=bool(entry.get("generic", False)),
            ignore_case=bool(entry.get("ignore_case", False)),
            require_digit=bool(entry.get("require_digit", False)),
            runs_allowed=bool(entry.get("runs_allowed", False)),
            true_samples=tuple(entry.get("true_samples", ())),  # type: ignore[arg-type]
            false_samples=tuple(entry.get("false_samples", ())),  # type: ignore[arg-type]
        )
    except (re.error, UnicodeEncodeError) as exc:
        raise RuleError(f"{where}: bad regex: {exc}") from None
    if rule.generic and "secret" not in rule.compiled.groupindex:
        raise RuleError(f"{where}: a generic rule needs a named group (?P<secret>...)")
    return rule
