"""The `secrets` check: credentials in the working tree, the git history, the tapes and command output."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import CheckResult, Finding, register
from grader.checks.canary import canary_result, start_canary, summarize
from grader.checks.loud_miss import probe_key_fingerprint
from grader.details import counted
from grader.secrets import HistoryError, RuleError, Scanner, SecretFinding, is_git_repo
from grader.secrets.gitdir import scan_git_dir
from grader.secrets.history import scan_history_with
from grader.secrets.tree import scan_tree_with
from grader.tapes import tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["secrets"]

_SUMMARY_SHOWN = 3
_KIND_WORDS = {"tree": "file", "tape": "tape", "history": "history", "output": "command output"}


# Last: the scan also reads the output of every command the other checks ran; the canary record probe
# runs in the background meanwhile.
@register("secrets", phase="last", probes=start_canary)
def secrets(ctx: Context) -> CheckResult:
    """Scans the tree, every commit of every ref, the tapes (gzip/base64 bodies too) and command output.

    Zip archives (known by content, whatever their name) are opened in memory and each member scanned as a
    file is (`archive.zip:member:line`); gzip, xz and bzip2 files are inflated. Path names are read as
    text too, the tree's and every commit's: a key used as a file name is found at `path:0` (the name
    itself, shown with the key redacted).

    Files are read the way a person opening them would: UTF-16/32 text (what Windows PowerShell's ``>``
    writes) is transcoded rather than skipped as binary, and JSON ``\\u00XX`` escapes are read as the
    characters they stand for.

    In-repo suppressions (`gitleaks:allow`, `.gitleaksignore`, `pragma: allowlist secret`, `# nosec`) are
    ignored: a submission cannot silence this check. Command output is whatever other checks captured in
    `ctx.outputs` by the time this check runs. The canary recording probe (grader/checks/canary.py) runs
    the manifest's record_command against the stand-in with a generated key and counts where that key shows
    up afterwards; it starts alongside the other checks, and its output is scanned with the rest (the
    canary key itself there is the probe's leak, not another finding).

    Facts:
        findings: credentials found, all kinds together (in_tree + in_tapes + in_history + in_output
            + canary_leaks)
        in_tree: findings in working-tree files that are not tapes, zip members and file names included
        in_tapes: findings in tapes (recordings) of the working tree
        in_history: findings in git history, one per secret at the commit that introduced it (a key still
            in the tree is counted here too); commit messages and headers (author and committer names and
            e-mails), annotated tag messages, ref names and every commit's path names included
            (`sha:commit message:line`, `sha:commit header:line`, `tag NAME:tag message:line`, `refs:line`,
            `sha:path:0`); for an archive, the `.git` it shipped, read as files (its config, reflogs and
            objects no ref reaches: `.git/PATH:line`)
        in_output: findings in the output of commands the grader ran
        rules_loaded: number of secret rules in grader/rules/secrets.toml
        bytes_scanned: bytes read from files, blobs and outputs
        files_scanned: working-tree files read
        tapes_scanned: tapes in the working tree, as cassette-hygiene counts them (every one is scanned)
        commits_scanned: commits reachable from any ref (0 without git history)
        outputs_scanned: command outputs scanned
        canary_leaks: files (tapes included) and output streams in which the canary recording probe found
            the generated key it gave the manifest's record_command (each counted once)
        canary_probe: "ran", or "not available: <why>" (no record_command or api_key_env, no environment)
        canary_skipped: the probe applied but was not run (the grade's budget was spent, or the replay suite
            hung): a key the recording writes or prints was not looked for (red team 7, R7-2)
        unscanned: files, history blobs, compressed bodies and zip members not read to their end (past
            256 MiB each, a zip past 256 MiB inflated or 10,000 members, an encrypted, corrupt or unknown-
            method member, or unreadable): a key there would not be found, so the row needs a reviewer's
            look (red team 5, G1; red team 6, H2)
        summary: e.g. "no credentials in 42 files, 17 commits, 12 tapes and 3 command outputs" or
            "2 credentials: openai-project-key at cassettes/ab.json:12 (sk-proj-…[redacted]), ..."
    """
    try:
        scanner = Scanner()
    except RuleError as exc:
        return CheckResult(facts={"summary": f"not run: {exc}"}, not_assessable=str(exc))
    cassette_dir = ctx.manifest.cassette_dir
    tape_dirs = (cassette_dir.as_posix(),) if cassette_dir is not None else ()
    details: list[str] = []

    # Before any scan: the probe's own output is one of those scanned.
    canary = canary_result(ctx)
    found = scan_tree_with(scanner, ctx.repo, tape_dirs=tape_dirs)
    submitted_history = ctx.workspace.commit is not None
    if is_git_repo(ctx.repo) and submitted_history:
        try:
            found += scan_history_with(scanner, ctx.repo, tape_dirs=tape_dirs)
        except HistoryError as exc:
            details.append(f"history not scanned: {exc}")
    else:
        details.append("no git history: only the working tree was scanned")
    if ctx.workspace.shipped_git is not None:
        found += scan_git_dir(
            scanner, ctx.workspace.shipped_git, known={(f.rule, f.fingerprint) for f in found}
        )
    probe_key = probe_key_fingerprint(ctx)
    for label, text in list(ctx.outputs):
        hits = scanner.scan_text(text, source=label or "command output")
        if label == canary.output_label:
            hits = [f for f in hits if f.fingerprint != canary.fingerprint]
        hits = [f for f in hits if not probe_key or f.fingerprint != probe_key]  # loud-miss's own key
        found += hits

    stats = scanner.stats
    # One definition of a tape for every row: the tape reader's (the scanner's own notion is wider on
    # purpose, so that nothing under a cassette folder is skipped for size or binary content).
    tapes = len(tapes_of(ctx))
    counts = {kind: sum(f.kind == kind for f in found) for kind in _KIND_WORDS}
    facts: dict[str, object] = {
        "findings": len(found) + len(canary.leaks),
        "in_tree": counts["tree"],
        "in_tapes": counts["tape"],
        "in_history": counts["history"],
        "in_output": counts["output"],
        "rules_loaded": len(scanner.rules),
        "bytes_scanned": stats.bytes,
        "files_scanned": stats.files,
        "tapes_scanned": tapes,
        "commits_scanned": stats.commits,
        "outputs_scanned": stats.outputs,
        "canary_leaks": len(canary.leaks),
        "canary_probe": canary.status,
        "canary_skipped": canary.skipped,
        "unscanned": len(stats.unscanned) + len(canary.unscanned),
        "summary": summarize(
            _summary(found, stats.files, stats.commits, tapes, stats.outputs), canary, len(found)
        )
        + _unscanned(stats.unscanned + canary.unscanned),
    }
    if canary.no_room and not found:
        # Nothing found, and the probe that would have looked for a key the recording leaks had no room to
        # run: the grader's disk decides nothing here, neither the cap nor full marks.
        reason = canary.status.removeprefix("not available: ")
        facts["summary"] = f"not assessable: {reason} (the canary record probe's copy)"
        return CheckResult(facts=facts, details=details, not_assessable=reason)
    findings = [_to_finding(f) for f in found] + canary.leaks
    details += [f"{_KIND_WORDS[f.kind]}: {f.render()}" for f in found]
    details += canary.details
    details += [f"skipped {line}" for line in stats.skipped]
    details += [f"not fully scanned: {line}" for line in stats.unscanned + canary.unscanned]
    return CheckResult(facts=facts, findings=findings, details=details)


def _to_finding(f: SecretFinding) -> Finding:
    where = {"history": " (in git history)", "output": " (in command output)", "tape": " (in a tape)"}
    inside = f", inside a {f.encoding} body" if f.encoding else ""
    message = f"{f.description}: {f.redacted}{where.get(f.kind, '')}{inside}; revoke it and remove it"
    return Finding(rule=f.rule, message=message, location=f.location)


def _unscanned(lines: list[str]) -> str:
    if not lines:
        return ""
    more = f" and {len(lines) - 1} more" if len(lines) > 1 else ""
    return f"; not fully scanned, a reviewer must look: {lines[0]}{more}"


def _summary(found: list[SecretFinding], files: int, commits: int, tapes: int, outputs: int) -> str:
    if not found:
        scope = [counted(files, "file"), counted(commits, "commit"), counted(tapes, "tape")]
        return f"no credentials in {', '.join(scope)} and {counted(outputs, 'command output')}"
    shown = ", ".join(f"{f.rule} at {f.location} ({f.redacted})" for f in found[:_SUMMARY_SHOWN])
    more = f", and {len(found) - _SUMMARY_SHOWN} more" if len(found) > _SUMMARY_SHOWN else ""
    return f"{counted(len(found), 'credential')}: {shown}{more}"
