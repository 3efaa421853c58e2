"""Load and validate the calibration corpus (grader/selftest/corpus.yaml by default)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grader.errors import BadInput
from grader.selftest.mutations import mutations

__all__ = ["BASES", "INDEPENDENT", "Case", "default_corpus_path", "default_corpus_paths", "load_corpus"]

BASES = ("sample", "sample-shipped", "bundle")
# Submissions written by people who never saw the grader, the template or the sample (README.md there).
INDEPENDENT = Path(__file__).with_name("independent")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_CASE_KEYS = {"id", "description", "base", "bundle", "steps", "expect", "evidence", "known_gaps"}
_DEFAULT_BAND = (2, 3)


@dataclass(frozen=True)
class Case:
    id: str
    description: str
    base: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    expect: dict[str, tuple[int, int]] = field(default_factory=dict)  # row id -> inclusive band
    # every row not in `expect`; None (an independent submission's default): such a row is reported, not
    # judged, since its reviewers wrote their bands before the row existed
    others: tuple[int, int] | None = _DEFAULT_BAND
    evidence: dict[str, list[str]] = field(default_factory=dict)  # row id -> substrings (with {planted})
    bundle: str = ""  # base "bundle": a git bundle under grader/selftest/independent/, cloned as is
    # rows whose reviewers expect the grader to leave them to a person (`manual` in the corpus file): a
    # reviewer who judged the property by hand where no probe can reach it, e.g. an agent that never calls
    # a model from its one-ticket command
    manual: frozenset[str] = frozenset()
    # row id -> why the grader still lands outside the reviewers' band: reported, not failed, until the row
    # lands in band (then the selftest fails until the entry is removed, like a strict xfail)
    known_gaps: dict[str, str] = field(default_factory=dict)

    def band(self, row_id: str) -> tuple[int, int] | None:
        """The band row ``row_id`` must land in for this case; None: not banded (reported, never judged)."""
        return self.expect.get(row_id, self.others)


def default_corpus_path() -> Path:
    """The corpus of mutations of the sample shipped with the grader."""
    return Path(__file__).with_name("corpus.yaml")


def default_corpus_paths() -> list[Path]:
    """What ``grade --selftest`` grades by default: the mutations of the sample, and the submissions written
    by people who never saw the kit (so a rubric edit is checked against work the kit did not write)."""
    return [default_corpus_path(), Path(__file__).with_name("independent.yaml")]


MANUAL = "manual"  # a band meaning: the row is left to a reviewer (status manual), no score expected


def _band(value: object, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or value[0] > value[1]
    ):
        raise BadInput(f"{where}: a band is [low, high], two integers with low <= high, or 'manual'")
    return value[0], value[1]


def _case(raw: object, where: str, known: dict[str, Any]) -> Case:
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: a case is a mapping")
    unknown = set(raw) - _CASE_KEYS
    if unknown:
        raise BadInput(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    case_id = raw.get("id")
    if not isinstance(case_id, str) or not _ID.match(case_id):
        raise BadInput(f"{where}: 'id' must be lowercase letters, digits and dashes")
    where = f"{where} ({case_id})"
    base = raw.get("base")
    if base not in BASES:
        raise BadInput(f"{where}: 'base' must be one of {', '.join(BASES)}")
    steps = raw.get("steps") or []
    if not isinstance(steps, list):
        raise BadInput(f"{where}: 'steps' must be a list")
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or step.get("op") not in known:
            raise BadInput(f"{where}: steps[{i}] needs 'op', one of {', '.join(sorted(known))}")
    if base == "sample-shipped" and steps:
        raise BadInput(f"{where}: base sample-shipped is graded as shipped and takes no steps")
    bundle = raw.get("bundle") or ""
    if (base == "bundle") != bool(bundle):
        raise BadInput(f"{where}: 'bundle' (a file under grader/selftest/independent/) goes with base bundle")
    if bundle:
        if steps:
            raise BadInput(f"{where}: an independent submission is graded as written and takes no steps")
        if not isinstance(bundle, str) or ".." in Path(bundle).parts or Path(bundle).is_absolute():
            raise BadInput(f"{where}: 'bundle' is a path relative to grader/selftest/independent/")
        if not (INDEPENDENT / bundle).is_file():
            raise BadInput(f"{where}: no bundle {bundle} under grader/selftest/independent/")
    expect_raw = raw.get("expect") or {}
    if not isinstance(expect_raw, dict):
        raise BadInput(f"{where}: 'expect' maps row ids to [low, high]")
    manual = frozenset(str(k) for k, v in expect_raw.items() if v == MANUAL)
    expect = {str(k): _band(v, f"{where}: expect.{k}") for k, v in expect_raw.items() if v != MANUAL}
    # An independent submission's bands are its reviewers', written before any later row existed: a row they
    # did not band is not out of band.
    others = expect.pop("others", None if base == "bundle" else _DEFAULT_BAND)
    evidence_raw = raw.get("evidence") or {}
    if not isinstance(evidence_raw, dict) or not all(
        isinstance(v, list) and all(isinstance(s, str) and s for s in v) for v in evidence_raw.values()
    ):
        raise BadInput(f"{where}: 'evidence' maps row ids to lists of non-empty strings")
    gaps_raw = raw.get("known_gaps") or {}
    if not isinstance(gaps_raw, dict) or not all(isinstance(v, str) and v.strip() for v in gaps_raw.values()):
        raise BadInput(f"{where}: 'known_gaps' maps row ids to the reason the grader misses their band")
    return Case(
        id=case_id,
        description=str(raw.get("description") or ""),
        base=base,
        steps=[dict(s) for s in steps],
        expect=expect,
        others=others,
        evidence={str(k): list(v) for k, v in evidence_raw.items()},
        bundle=str(bundle),
        manual=manual,
        known_gaps={str(k): " ".join(v.split()) for k, v in gaps_raw.items()},
    )


def load_corpus(path: Path | None = None) -> list[Case]:
    """Every case of the corpus, validated; raises BadInput (one line) for a malformed file."""
    path = path or default_corpus_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the calibration corpus: {exc.strerror}") from None
    except yaml.YAMLError:
        raise BadInput(f"{path}: the calibration corpus is not valid YAML") from None
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("cases"), list):
        raise BadInput(f"{path}: expected 'version: 1' and a list of 'cases'")
    known = mutations()
    cases = [_case(raw, f"{path.name}: cases[{i}]", known) for i, raw in enumerate(data["cases"])]
    ids = [c.id for c in cases]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise BadInput(f"{path.name}: duplicate case id(s) {', '.join(dupes)}")
    return cases
