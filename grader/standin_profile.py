"""Stand-in model profiles: which model the stand-in plays and the drift it injects (`--profile FILE`).

A profile is YAML (read with `yaml.safe_load`); every mistake is one `file:line: ...` line (ProfileError).
The format is documented in docs/standin.md; the kit ships `baseline` (today's answers) and `drifted`
in grader/standin_profiles/, named on the command line without a path or suffix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.standin import Rules, RulesError, load_rules

__all__ = [
    "DRIFT_KINDS",
    "PROFILES_DIR",
    "Drift",
    "Profile",
    "ProfileError",
    "load_profile",
    "resolve_profile",
]

PROFILES_DIR = Path(__file__).parent / "standin_profiles"
_MAX_BYTES = 256 * 1024


class ProfileError(ValueError):
    """The profile is malformed; the message is one line naming file:line and what to fix."""


@dataclass(frozen=True)
class Drift:
    kind: str
    rate: float
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    seed: int
    rules: Rules
    # provider ("openai" | "anthropic") -> the model name every answer reports; absent = as the rules say
    served_model: Mapping[str, str]
    drifts: tuple[Drift, ...]
    # "random": each answer rolls against the rates; "rotate": every answer drifts, the kinds (rate above 0)
    # in turn from a start the seed picks, skipping kinds that do not apply (the drift probe's cover run)
    order: str = "random"


# --- option checks: each returns an error phrase, or None when the value is fine -------------------------

_Check = Callable[[object], "str | None"]


def _text(value: object) -> str | None:
    return None if isinstance(value, str) and value else "must be a non-empty string"


def _names(value: object) -> str | None:
    ok = (
        isinstance(value, dict)
        and value
        and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    )
    return None if ok else "must be a non-empty mapping of names to names"


def _scalars(value: object) -> str | None:
    ok = (
        isinstance(value, dict)
        and value
        and all(isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in value.items())
    )
    return None if ok else "must be a non-empty mapping of field names to strings, numbers or booleans"


def _fraction(value: object) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1
    return None if ok else "must be a number strictly between 0 and 1"


def _seconds(value: object) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 60
    return None if ok else "must be a number of seconds from 0 to 60"


def _retry_after(value: object) -> str | None:
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3600)
    return None if ok else "must be whole seconds from 0 to 3600, or null for no Retry-After header"


def _case(value: object) -> str | None:
    return None if value in ("title", "upper") else "must be 'title' (Refund) or 'upper' (REFUND)"


# kind -> option -> (check, default); a default of ... marks a required option.
DRIFT_KINDS: dict[str, dict[str, tuple[_Check, Any]]] = {
    "code_fence": {"language": (_text, "json")},
    "prose_before": {"text": (_text, "Sure! Here is the classification:")},
    "prose_after": {"text": (_text, "Let me know if there is anything else I can help with.")},
    "extra_field": {"fields": (_scalars, {"confidence": 0.92})},
    "renamed_field": {"renames": (_names, {"intent": "category"})},
    "label_case": {"style": (_case, "title")},
    "label_synonym": {"synonyms": (_names, ...)},
    "truncated": {"keep": (_fraction, 0.5)},
    "refusal": {"text": (_text, "I'm sorry, but I can't help with that request.")},
    "empty": {},
    "http_429": {"retry_after": (_retry_after, 1)},
    "http_500": {"retry_after": (_retry_after, None)},
    "slow": {"delay_seconds": (_seconds, 2.0)},
    "tool_call": {"tool_name": (_text, "classify_ticket")},
    "split_stream": {},
}

_TOP_KEYS = ("version", "name", "seed", "order", "rules", "served_model", "drift")
_ORDERS = ("random", "rotate")


# --- reading --------------------------------------------------------------------------------------------


def resolve_profile(spec: str) -> Path:
    """`baseline` / `drifted` (a bare name) mean the shipped profile of that name; anything else is a path."""
    shipped = PROFILES_DIR / f"{spec}.yaml"
    if "/" not in spec and "." not in spec and shipped.is_file():
        return shipped
    return Path(spec)


def _line_map(root: Any) -> dict[tuple[str, ...], tuple[int, int]]:
    """(key path) -> (line of the key, line of its value), 1-based, from a composed YAML node tree."""
    import yaml  # local: the drift probe runs this module under a submission's interpreter, maybe no PyYAML

    lines: dict[tuple[str, ...], tuple[int, int]] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines[sub] = (key.start_mark.line + 1, value.start_mark.line + 1)
                walk(value, sub)

    if root is not None:
        walk(root, ())
    return lines


def load_profile(path: Path) -> Profile:
    """Read and validate one profile; raises ProfileError with a single `file:line: ...` line.

    A ``.json`` profile needs no PyYAML (the drift probe runs the stand-in under a submission's interpreter);
    its errors name the file without a line.
    """
    try:
        if path.is_symlink() or not path.is_file():
            raise ProfileError(f"{path}: no such profile file; give a YAML file, or 'baseline' or 'drifted'")
        raw = path.read_bytes()[: _MAX_BYTES + 1]
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the profile: {exc.strerror}") from None
    if len(raw) > _MAX_BYTES:
        raise ProfileError(f"{path}: the profile is larger than {_MAX_BYTES // 1024} KiB; keep it small")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: the profile is not UTF-8 text") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ProfileError(f"{path}: invalid JSON in the stand-in profile ({exc}); fix it") from None
        return _Validator(path, {}).profile(data)
    import yaml  # local: a .json profile needs no PyYAML (the drift probe's stand-in runs without it)

    try:
        data = yaml.safe_load(text)
        lines = _line_map(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ProfileError(f"{where}: invalid YAML in the stand-in profile; fix the syntax") from None
    return _Validator(path, lines).profile(data)


class _Validator:
    def __init__(self, path: Path, lines: dict[tuple[str, ...], tuple[int, int]]) -> None:
        self.path = path
        self.lines = lines

    def fail(self, where: tuple[str, ...], message: str, *, at_key: bool = False) -> ProfileError:
        key_line, value_line = self.lines.get(where, (1, 1))
        dotted = ".".join(where)
        subject = f"'{dotted}' " if dotted else ""
        return ProfileError(f"{self.path}:{key_line if at_key else value_line}: {subject}{message}")

    def profile(self, data: object) -> Profile:
        if not isinstance(data, dict):
            raise self.fail((), "a profile must be a mapping with 'version: 1', 'name', 'seed' and 'drift'")
        for key in data:
            if key not in _TOP_KEYS:
                raise self.fail(
                    (str(key),), f"is not a profile key; use one of {', '.join(_TOP_KEYS)}", at_key=True
                )
        if data.get("version") != 1:
            raise self.fail(("version",), "must be 1 (write 'version: 1' at the top)")
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(("name",), "must be a non-empty string naming the model this profile plays")
        seed = data.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise self.fail(("seed",), "must be a whole number >= 0")
        order = data.get("order", "random")
        if order not in _ORDERS:
            raise self.fail(("order",), f"must be one of {', '.join(_ORDERS)}")
        return Profile(
            name=name,
            path=self.path,
            seed=seed,
            rules=self.rules(data.get("rules")),
            served_model=self.served(data.get("served_model")),
            drifts=self.drifts(data.get("drift")),
            order=order,
        )

    def rules(self, value: object) -> Rules:
        if value is None:
            return load_rules()
        if not isinstance(value, str) or not value:
            raise self.fail(("rules",), "must be a path to a rules file (relative to the profile) or null")
        try:
            return load_rules(self.path.parent / value)
        except RulesError as exc:
            raise self.fail(("rules",), f"names bad rules: {exc}") from None

    def served(self, value: object) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(("served_model",), "must map 'openai' and/or 'anthropic' to a model name")
        served: dict[str, str] = {}
        for provider, model in value.items():
            where = ("served_model", str(provider))
            if provider not in ("openai", "anthropic"):
                raise self.fail(where, "is not a provider; use 'openai' or 'anthropic'", at_key=True)
            if not isinstance(model, str) or not model.isascii() or not model.isprintable() or " " in model:
                raise self.fail(where, "must be a model name of visible ASCII characters")
            served[provider] = model
        return served

    def drifts(self, value: object) -> tuple[Drift, ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise self.fail(("drift",), "must map drift kinds to {rate: 0..1, ...options}")
        drifts = []
        for kind, entry in value.items():
            drifts.append(self.drift(str(kind), entry))
        total = sum(d.rate for d in drifts)
        if total > 1 + 1e-9:
            raise self.fail(
                ("drift",),
                f"rates add up to {total:g}; at most one drift applies per answer, so keep them <= 1",
                at_key=True,
            )
        return tuple(drifts)

    def drift(self, kind: str, entry: object) -> Drift:
        where = ("drift", kind)
        spec = DRIFT_KINDS.get(kind)
        if spec is None:
            raise self.fail(where, f"is not a drift kind; use one of {', '.join(DRIFT_KINDS)}", at_key=True)
        if not isinstance(entry, dict):
            raise self.fail(where, "must be a mapping with a 'rate' (0..1) and the kind's options")
        for key in entry:
            if key != "rate" and key not in spec:
                allowed = ", ".join(["rate", *spec])
                raise self.fail((*where, str(key)), f"is not an option of {kind}; use {allowed}", at_key=True)
        rate = entry.get("rate")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise self.fail((*where, "rate") if "rate" in entry else where, "must be a number from 0 to 1")
        options: dict[str, Any] = {}
        for option, (check, default) in spec.items():
            if option not in entry:
                if default is ...:
                    raise self.fail(where, f"needs '{option}'")
                options[option] = default
                continue
            problem = check(entry[option])
            if problem:
                raise self.fail((*where, option), problem)
            options[option] = entry[option]
        return Drift(kind=kind, rate=float(rate), options=options)
