"""The model-metadata check: does every tape say which model, endpoint and time it was recorded against?"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from grader.checks import CheckResult, Finding, register
from grader.details import counted
from grader.loopback import is_loopback
from grader.standin import fingerprints
from grader.tapes import Tape, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["metadata"]

_MAX_LISTED = 20


@register("metadata")
def metadata(ctx: Context) -> CheckResult:
    """Every tape names its model, endpoint and recording time.

    Read from the kit's ``meta`` block; for other recorders wherever the recording keeps them, by
    meaning (grader/recordings.py): a metadata block under any name (``meta``, ``provenance``, top-level
    fields such as ``recorded_on`` or ``model_served``), the request and response bodies, a Gemini-style URL
    (model), the URL or host (endpoint), and last the response ``date`` header (time). The details say where
    each was found. Invalid tapes (unreadable, symlinks, too large) are not counted here; the hygiene check
    reports them.

    Facts:
        tapes: readable tapes found
        with_model: tapes naming the model they asked for
        with_endpoint: tapes naming the endpoint (API host)
        with_time: tapes carrying a recording time
        models: sorted distinct models the tapes name
        disagreeing: tapes whose model differs from the manifest's default_model (0 when it is unknown)
        loopback_tapes: tapes whose endpoint is a loopback address or localhost (a local stand-in such as the
            kit's own, never a real model endpoint), or that hold answers only the kit's stand-in gives (the
            response id it derives from the request, its system fingerprint) whatever endpoint they name;
            the default rubric gives such a recording at most 2
        summary: one line, e.g. "41/41 tapes name a model (gpt-4o-mini), endpoint and recording time"
    """
    all_tapes = tapes_of(ctx)
    tapes = [t for t in all_tapes if t.format != "invalid"]
    invalid = len(all_tapes) - len(tapes)
    default_model = ctx.manifest.default_model

    lacking: dict[str, list[Tape]] = {"model": [], "endpoint": [], "recording time": []}
    models: set[str] = set()
    disagreeing: list[Tape] = []
    for tape in tapes:
        named = _models(tape)
        models |= named
        if not named:
            lacking["model"].append(tape)
        if not tape.endpoint:
            lacking["endpoint"].append(tape)
        if not tape.recorded_at:
            lacking["recording time"].append(tape)
        if default_model and named and default_model not in named:
            disagreeing.append(tape)

    details: list[str] = _sources(tapes)
    findings: list[Finding] = []
    for item, missing in lacking.items():
        for tape in missing[:_MAX_LISTED]:
            details.append(f"{tape.path}:1 names no {item}")
            findings.append(Finding("model-metadata", f"tape names no {item}", f"{tape.path}:1"))
        if len(missing) > _MAX_LISTED:
            details.append(f"... and {len(missing) - _MAX_LISTED} more tapes naming no {item}")
    for tape in disagreeing[:_MAX_LISTED]:
        details.append(f"{tape.path}:1 model {tape.model} differs from default_model {default_model}")
    if invalid:
        details.append(f"{invalid} invalid tape(s) not counted (see cassette-hygiene)")

    local = [t for t in tapes if is_loopback(t.endpoint)]
    # Metadata is what the tape says; the answer is what the server did. The stand-in's response ids are a
    # hash of the request, so a tape holding one was answered there whatever endpoint it names.
    disguised = [t for t in tapes if not is_loopback(t.endpoint) and _standin_answered(t)]
    loopback = local + disguised
    if local:
        details.insert(
            0,
            f"{counted(len(local), 'tape')} recorded against {local[0].endpoint} "
            f"(e.g. {local[0].path}): a local stand-in, not a real model endpoint",
        )
    if disguised:
        details.insert(
            0,
            f"{counted(len(disguised), 'tape')} name {disguised[0].endpoint or 'no endpoint'} but hold the "
            f"kit stand-in's own answers (e.g. {disguised[0].path}: the response id the stand-in derives "
            "from that request): not a real model endpoint",
        )
    facts = {
        "tapes": len(tapes),
        "loopback_tapes": len(loopback),
        "with_model": len(tapes) - len(lacking["model"]),
        "with_endpoint": len(tapes) - len(lacking["endpoint"]),
        "with_time": len(tapes) - len(lacking["recording time"]),
        "models": sorted(models),
        "disagreeing": len(disagreeing),
    }
    # "" when every such tape names a real endpoint: the stand-in is known by its answers, not by a host.
    facts["summary"] = _summary(facts, sorted(models), invalid, (local[0].endpoint or "") if local else "")
    return CheckResult(facts=facts, findings=findings, details=details)


_SHOWN = {
    "model": "model",
    "served_model": "served model",
    "endpoint": "endpoint",
    "recorded_at": "recorded_at",
}


def _sources(tapes: list[Tape]) -> list[str]:
    """Where each item was read, most common first: ``recorded_at from provenance.recorded_at (10 tapes, e.g.
    tapes/a.json)``: the reviewer can open the file and see the field."""
    lines = []
    for name, shown in _SHOWN.items():
        where: dict[str, list[Tape]] = {}
        for tape in tapes:
            if tape.sources.get(name):
                where.setdefault(tape.sources[name], []).append(tape)
        for source, holding in sorted(where.items(), key=lambda kv: -len(kv[1])):
            noun = "tape" if len(holding) == 1 else "tapes"
            lines.append(f"{shown} from {source} ({len(holding)} {noun}, e.g. {holding[0].path})")
    return lines


def _models(tape: Tape) -> set[str]:
    named = {tape.model} if tape.model else set()
    if tape.format != "kit":  # a vcrpy cassette can hold several requests, each naming its own model
        named |= {i.model for i in tape.interactions if i.model}
    return named


def _summary(facts: dict[str, object], models: list[str], invalid: int, loopback_host: str) -> str:
    total = facts["tapes"]
    if not total:
        return "no readable tapes" + (f" ({invalid} invalid)" if invalid else "")
    shown = ", ".join(models[:3]) + (f", +{len(models) - 3} more" if len(models) > 3 else "")
    parts = [f"{facts['with_model']}/{total} tapes name a model" + (f" ({shown})" if shown else "")]
    if facts["with_endpoint"] == total and facts["with_time"] == total:
        parts[0] += ", endpoint and recording time"
    else:
        parts.append(f"{facts['with_endpoint']}/{total} an endpoint")
        parts.append(f"{facts['with_time']}/{total} a recording time")
    if facts["disagreeing"]:
        parts.append(f"{facts['disagreeing']} disagree with default_model")
    if invalid:
        parts.append(f"{invalid} invalid not counted")
    local = facts.get("loopback_tapes")
    if local:
        # First: it is why the default rubric stops this row at 2 (docs/rubric.md, "Provenance").
        if local == total:
            which = "the only tape was" if total == 1 else f"all {total} tapes were"
        else:
            which = f"{local} of {total} tapes " + ("was" if local == 1 else "were")
        where = (
            f"{loopback_host}: a local stand-in such as the kit's"
            if loopback_host
            else "the kit's stand-in, by its own answers, whatever endpoint the tapes name"
        )
        parts.insert(0, f"{which} recorded against a loopback endpoint ({where}), not a real model")
    return "; ".join(parts)


def _standin_answered(tape: Tape) -> bool:
    if not tape.text:
        return False
    for inter in tape.interactions[:3]:
        if not isinstance(inter.request_body, dict):
            continue
        path = inter.path or (urlsplit(inter.url).path if inter.url else "") or "/v1/chat/completions"
        if any(mark in tape.text for mark in fingerprints(path, inter.request_body)):
            return True
    return False
