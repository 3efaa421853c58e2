"""The drift report in text (a terminal), markdown (a review thread) or json (`grade-drift/1`, for tools).

Every string in the report goes through `grader.inert.inert_tree` first: ticket messages, the agent's
output and its error lines come from the submission, and none may carry an escape sequence to the reader.
The two human formats lead with the denominator, as the JSON does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grader.drift_report.acceptance import CONTRACT_CLASSES
from grader.drift_report.stats import Rate
from grader.inert import inert_tree

__all__ = ["FORMATS", "render"]

_ACTIVE = str.maketrans({"[": "\\[", "]": "\\]"})
_MESSAGE_WIDTH = 48
_DETAIL_WIDTH = 160


def _flat(text: Any) -> str:
    return " ".join(str(text).split())


def _short(text: Any, width: int) -> str:
    flat = _flat(text)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _verdict(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "-"
    return f"{verdict.get('intent')}{'+human' if verdict.get('needs_human') else ''}"


def _run_cell(run: dict[str, Any]) -> str:
    if run["outcome"] == "ok":
        cell = _verdict(run["verdict"])
    elif run["outcome"] == "loud":
        cell = "LOUD"
    else:
        cell = f"VIOLATION {run['class']}"
    marks = [d for d in run.get("drift") or () if d != "none"]
    return cell + (f" ({','.join(marks)})" if marks else "")


def _cells(runs: list[dict[str, Any]]) -> str:
    return "; ".join(_run_cell(r) for r in runs) or "-"


def _rate(data: dict[str, Any]) -> Rate:
    return Rate(int(data["count"]), int(data["n"]))


def _denominator(report: dict[str, Any]) -> str:
    d = report["denominator"]
    trials = "trial" if d["trials"] == 1 else "trials"
    return f"{d['tickets']} tickets x {d['trials']} {trials} = {d['runs_per_arm']} runs per arm"


def _arm_line(report: dict[str, Any], name: str) -> str:
    arm = report["arms"][name]
    kind = "stand-in profile, loopback" if arm["kind"] == "profile" else "live endpoint"
    served = f" -> {arm['served_model']}" if arm.get("served_model") else ""
    return f"{arm['spec']} ({kind}){served}"


def _recording_line(report: dict[str, Any]) -> str:
    rec = report["recording"]
    served = f", {rec['served_model']}" if rec.get("served_model") else ""
    return f"{rec.get('tapes', 0)} tapes in {rec.get('dir', '?')}{served}"


def _settings_line(report: dict[str, Any]) -> str | None:
    s = report["settings"]
    parts = []
    if s.get("replay_until") is not None:
        parts.append(f"calls 1..{s['replay_until']} of each run served from the tapes (--replay-until)")
    if s.get("model"):
        parts.append(f"model {s['model']}")
    return "; ".join(parts) or None


def _class_counts(summary: dict[str, Any], arm: str) -> str:
    counts = summary[arm]["classes"]
    shown = [f"{cls} {counts[cls]}" for cls in CONTRACT_CLASSES if counts.get(cls)]
    return ", ".join(shown) or "none"


def _tokens(summary: dict[str, Any], recording: dict[str, Any]) -> str:
    def arm(name: str) -> str:
        data = summary[name]
        if data["tokens"] is None:
            return f"{name} n/a"
        return f"{name} {data['tokens']} ({data['tokens_runs']}/{data['runs']} runs)"

    delta = summary["delta"]
    change = "no run of both arms reported usage"
    if delta["tokens"] is not None:
        base = delta["tokens_control"] or 0
        share = f", {delta['tokens'] / base:+.1%}" if base else ""
        change = f"candidate - control {delta['tokens']:+d}{share} over {delta['tokens_pairs']} paired runs"
    recorded = recording.get("tokens")
    return (
        f"recording {'n/a' if recorded is None else recorded}, {arm('control')}, {arm('candidate')}; {change}"
    )


def _latency(summary: dict[str, Any]) -> str:
    delta = summary["delta"]["seconds_median"]
    change = f" ({delta:+.2f}s)" if delta is not None else ""
    control, candidate = summary["control"]["seconds_median"], summary["candidate"]["seconds_median"]
    if control is None or candidate is None:
        return "n/a"
    return f"control {control:.2f}s, candidate {candidate:.2f}s{change}"


def _lines(report: dict[str, Any]) -> dict[str, Any]:
    """The sentences both human formats print, computed once."""
    summary = report["summary"]
    n = report["denominator"]["runs_per_arm"]
    contract = (
        f"control {summary['control']['violations']}/{summary['control']['runs']}, "
        f"candidate {summary['candidate']['violations']}/{summary['candidate']['runs']}"
    )

    def per_arm(cls: str) -> str:
        return (
            f"control {summary['control']['classes'][cls]}/{summary['control']['runs']}, "
            f"candidate {summary['candidate']['classes'][cls]}/{summary['candidate']['runs']}"
        )

    acceptance = report["acceptance"]
    return {
        "n": n,
        "contract": contract,
        "loud": per_arm("loud"),
        "termination": per_arm("termination"),
        "tool_shape": per_arm("tool_shape"),
        "tokens": _tokens(summary, report["recording"]),
        "latency": _latency(summary),
        "noise": str(_rate(report["noise_floor"])),
        "difference": str(_rate(report["difference"])),
        "verdict": acceptance["verdict"].upper(),
        "rule": f"{acceptance['rule']['name']} ({acceptance['rule']['path']})",
    }


def _problems(report: dict[str, Any]) -> list[str]:
    """One line per run that did not keep the contract or failed loudly, or differed from the recording."""
    out = []
    for ticket in report["tickets"]:
        for arm in ("control", "candidate"):
            for run in ticket[arm]:
                what = []
                if run["outcome"] != "ok":
                    what.append(f"{run['class'] or run['outcome']}: {_short(run['detail'], _DETAIL_WIDTH)}")
                if "termination" in run["differences"]:
                    what.append(f"termination: {run['calls']} calls (recording {ticket['recorded_calls']})")
                if "tool_shape" in run["differences"]:
                    tools = ", ".join(run["tools"] or ()) or "none"
                    recorded = ", ".join(ticket["recorded_tools"]) or "none"
                    what.append(f"tool_shape: tool calls {tools} (recording {recorded})")
                if not what:
                    continue
                drift = [d for d in run["drift"] if d != "none"]
                out.append(
                    f"{ticket['id']} {arm} #{run['trial']}"
                    f"{' (drift: ' + ', '.join(drift) + ')' if drift else ''}: {'; '.join(what)}"
                )
    return out


def _text(report: dict[str, Any]) -> str:
    s = _lines(report)
    out = [
        f"grade drift: {_flat(report['target'])} @ {(report.get('commit') or '(no commit)')[:12]}",
        f"denominator: {_denominator(report)}",
        f"recording: {_flat(_recording_line(report))}",
        f"control:   {_flat(_arm_line(report, 'control'))}",
        f"candidate: {_flat(_arm_line(report, 'candidate'))}",
    ]
    settings = _settings_line(report)
    if settings:
        out.append(f"settings: {_flat(settings)}")
    out.append("")
    rows = [("ticket", "message", "recorded", "control", "candidate")]
    for t in report["tickets"]:
        rows.append(
            (
                _flat(t["id"]),
                _short(t["message"], _MESSAGE_WIDTH),
                _verdict(t["recorded"]),
                _flat(_cells(t["control"])),
                _flat(_cells(t["candidate"])),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    out += [
        "  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=False)) + "  " + r[4] for r in rows
    ]
    out.append(
        "(verdict: intent, +human when needs_human; LOUD: failed naming the problem; (kind): drift injected)"
    )
    out.append("")
    out += [
        f"contract violations: {s['contract']} "
        f"({_class_counts(report['summary'], 'candidate')} in the candidate)",
        f"loud failures: {s['loud']}",
        f"termination (calls per ticket differ from the recording): {s['termination']}",
        f"tool-call shape (differs from the recording): {s['tool_shape']}",
        f"tokens: {s['tokens']}",
        f"latency (median per run): {s['latency']}",
        "",
        f"noise floor (control vs recording): {s['noise']}",
        f"candidate vs control: {s['difference']} of verdicts changed",
        "",
        f"acceptance: {s['verdict']} against {_flat(s['rule'])}",
    ]
    for check in report["acceptance"]["checks"]:
        out.append(f"  {'ok  ' if check['ok'] else 'FAIL'} {_flat(check['line'])}")
    problems = _problems(report)
    if problems:
        out += ["", "runs that did not keep the contract or differ from the recording:"]
        out += [f"  {_flat(line)}" for line in problems]
    if report.get("notes"):
        out += ["", "notes:"] + [f"  {_flat(note)}" for note in report["notes"]]
    return "\n".join(out) + "\n"


def _md(text: Any) -> str:
    return _flat(text).translate(_ACTIVE).replace("<", "&lt;")


def _cell(text: Any) -> str:
    return _md(str(text).replace("\\", "\\\\")).replace("|", "\\|")


def _markdown(report: dict[str, Any]) -> str:
    s = _lines(report)
    out = [
        f"## Drift report: {_md(report['target'])}",
        "",
        f"**Denominator: {_denominator(report)}.** Commit `{(report.get('commit') or 'none')[:12]}`.",
        "",
        f"- recording: {_md(_recording_line(report))}",
        f"- control: {_md(_arm_line(report, 'control'))}",
        f"- candidate: {_md(_arm_line(report, 'candidate'))}",
    ]
    settings = _settings_line(report)
    if settings:
        out.append(f"- settings: {_md(settings)}")
    out += [
        "",
        f"**Acceptance: {s['verdict']}** against {_md(s['rule'])}",
        "",
    ]
    out += [f"- {'✅' if c['ok'] else '❌'} {_md(c['line'])}" for c in report["acceptance"]["checks"]]
    out += [
        "",
        "| measure | value |",
        "|---|---|",
        f"| noise floor (control vs recording) | {_cell(s['noise'])} |",
        f"| candidate vs control (verdicts changed) | {_cell(s['difference'])} |",
        f"| contract violations | {_cell(s['contract'])} |",
        f"| loud failures | {_cell(s['loud'])} |",
        f"| termination differs from the recording | {_cell(s['termination'])} |",
        f"| tool-call shape differs from the recording | {_cell(s['tool_shape'])} |",
        f"| tokens | {_cell(s['tokens'])} |",
        f"| latency (median per run) | {_cell(s['latency'])} |",
        "",
        "| ticket | message | recorded | control | candidate |",
        "|---|---|---|---|---|",
    ]
    for t in report["tickets"]:
        out.append(
            f"| {_cell(t['id'])} | {_cell(_short(t['message'], _MESSAGE_WIDTH))} "
            f"| {_cell(_verdict(t['recorded']))} | {_cell(_cells(t['control']))} "
            f"| {_cell(_cells(t['candidate']))} |"
        )
    out.append("")
    out.append(
        "Verdict: intent, `+human` when needs_human; LOUD: failed naming the problem; (kind): drift injected."
    )
    problems = _problems(report)
    if problems:
        out += ["", "### Runs that did not keep the contract or differ from the recording", ""]
        out += [f"- {_md(line)}" for line in problems]
    if report.get("notes"):
        out += ["", "### Notes", ""] + [f"- {_md(note)}" for note in report["notes"]]
    return "\n".join(out) + "\n"


def _json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


_RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {"text": _text, "markdown": _markdown, "json": _json}
FORMATS = tuple(_RENDERERS)


def render(report: dict[str, Any], fmt: str) -> str:
    """The report in ``fmt`` (one of FORMATS), ending with a newline."""
    try:
        renderer = _RENDERERS[fmt]
    except KeyError:
        raise ValueError(
            f"unknown drift report format {fmt!r}; choose one of: {', '.join(FORMATS)}"
        ) from None
    return renderer(inert_tree(report))
