"""Tape history is evidence: a recorded answer edited in a later commit is a finding naming both commits.

Real git repositories throughout: the sample solution's recorded tapes (kit format) and vcrpy cassettes
recorded against the stand-in, committed, then changed the way a candidate would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.acquire import acquire
from grader.tape_history import TapeHistory, tape_edits
from tests.adversarial.builders import commit, sample_copy
from tests.helpers.bake import standin
from tests.helpers.git import GIT_ENV
from tests.vcr_builders import build_vcr_submission

REPO = Path(__file__).resolve().parents[1]


def _head(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _tapes(repo: Path) -> list[Path]:
    return sorted((repo / "cassettes").glob("*.json"))


def _edit_kit(path: Path, change: Any) -> None:
    tape = json.loads(path.read_text(encoding="utf-8"))
    change(tape)
    path.write_text(json.dumps(tape, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _relabel(tape: dict[str, Any]) -> None:
    # What a hand edit of an answer does: the label changes, the completion's id and times stay.
    message = tape["response"]["body"]["choices"][0]["message"]
    answer = json.loads(message["content"])
    answer["intent"] = "shipping" if answer["intent"] != "shipping" else "refund"
    message["content"] = json.dumps(answer)


def _bump_id(tape: dict[str, Any]) -> None:
    # A change to the answer that the sample's suite does not read: the suite still passes, so only the
    # history can tell.
    tape["response"]["body"]["id"] += "x"


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, str]:
    repo = commit(sample_copy(tmp_path / "sub"), "record the tapes")
    return repo, _head(repo)


def test_a_hand_edited_answer_is_a_finding_naming_both_commits_and_the_tape(recorded) -> None:
    repo, first = recorded
    tape = _tapes(repo)[3]
    _edit_kit(tape, _bump_id)
    commit(repo, "tidy")
    second = _head(repo)

    found = tape_edits(repo, "cassettes")
    assert len(found.edits) == 1, found
    edit = found.edits[0]
    rel = f"cassettes/{tape.name}"
    assert (edit.path, edit.before, edit.after) == (rel, first[:7], second[:7])
    line = tape.read_text(encoding="utf-8").splitlines()[edit.line - 1]
    assert edit.location == f"{second[:7]}:{rel}:{edit.line}" and '"response"' in line
    assert first[:7] in edit.message and second[:7] in edit.message


def test_re_recording_the_whole_set_at_once_is_not_an_edit(recorded) -> None:
    repo, _ = recorded
    for tape in _tapes(repo):
        _edit_kit(tape, _bump_id)
    commit(repo, "re-record everything")
    assert tape_edits(repo, "cassettes").edits == []


def _restamp(tape: dict[str, Any]) -> None:
    tape["meta"]["recorded_at"] = "2027-01-02T03:04:05Z"


@pytest.mark.parametrize("restamp_edited", [True, False], ids=["edited-tape-restamped", "edited-tape-as-is"])
def test_restamping_every_tape_does_not_hide_a_hand_edit(recorded, restamp_edited: bool) -> None:
    # Red-team finding: every tape modified in the edit's commit looked like a re-recording of the set.
    repo, first = recorded
    tapes = _tapes(repo)
    edited = tapes[2]
    for tape in tapes:
        if tape != edited or restamp_edited:
            _edit_kit(tape, _restamp)
    _edit_kit(edited, _bump_id)
    commit(repo, "re-record")
    second = _head(repo)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        (f"cassettes/{edited.name}", first[:7], second[:7])
    ]


def test_a_re_recording_that_also_restamps_is_still_not_an_edit(recorded) -> None:
    repo, _ = recorded
    for tape in _tapes(repo):
        _edit_kit(tape, _restamp)
        _edit_kit(tape, _bump_id)
    commit(repo, "re-record everything")
    assert tape_edits(repo, "cassettes").edits == []


def test_deleting_a_tape_and_putting_it_back_edited_is_an_edit(recorded) -> None:
    repo, first = recorded
    tape = _tapes(repo)[4]
    saved = tape.read_text(encoding="utf-8")
    tape.unlink()
    commit(repo, "drop a tape")
    tape.write_text(saved, encoding="utf-8")
    _edit_kit(tape, _bump_id)
    commit(repo, "record it again")
    third = _head(repo)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        (f"cassettes/{tape.name}", first[:7], third[:7])
    ]


def test_moving_a_tape_and_editing_it_in_one_commit_is_an_edit(recorded) -> None:
    repo, first = recorded
    tape = _tapes(repo)[6]
    moved = tape.with_name("renamed.json")
    tape.rename(moved)
    _edit_kit(moved, _bump_id)
    commit(repo, "tidy names")
    second = _head(repo)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        ("cassettes/renamed.json", first[:7], second[:7])
    ]


@pytest.mark.parametrize("hops", [1, 2])
def test_moving_the_tape_folder_and_editing_a_tape_in_the_same_commit_is_an_edit(recorded, hops: int) -> None:
    """Red team 27, F2: `git mv cassettes tapes` with one answer edited in that commit scored 55/57 against
    50/57 for the twin: read with the new folder alone, every tape looked new. Through two moves too."""
    repo, first = recorded
    for hop in range(hops):
        old, new = (
            ("cassettes", "recordings")
            if hop == 0 and hops == 2
            else (
                "recordings" if hops == 2 else "cassettes",
                "tapes",
            )
        )
        (repo / old).rename(repo / new)
        if hop == hops - 1:
            _edit_kit(sorted((repo / new).glob("*.json"))[4], _bump_id)
        commit(repo, f"rename {old}/ to {new}/ (shorter paths)")
    second = _head(repo)

    found = tape_edits(repo, "tapes")
    edited = sorted((repo / "tapes").glob("*.json"))[4].name
    assert [(e.path, e.before, e.after) for e in found.edits] == [(f"tapes/{edited}", first[:7], second[:7])]
    # A move alone is no edit: moved once more, the finding is the same one, where the edit was made.
    (repo / "tapes").rename(repo / "cassettes2")
    commit(repo, "rename again, nothing edited")
    assert tape_edits(repo, "cassettes2").edits == found.edits


def test_copying_the_tape_folder_and_editing_a_tape_in_the_copy_is_an_edit(recorded) -> None:
    """Red team 28, F1: `cassettes/` copied to `tapes/` (the original kept), one answer edited in the copy
    and the manifest pointed at it: 52/57 against 47/57 for the twin. Compared with the tape it was copied
    from; a copy alone, or a whole set recorded anew into the new folder, is no edit."""
    import shutil

    repo, first = recorded
    shutil.copytree(repo / "cassettes", repo / "tapes")
    commit(repo, "keep a copy of the recording")
    assert tape_edits(repo, "tapes").edits == []

    edited = sorted((repo / "tapes").glob("*.json"))[4]
    _edit_kit(edited, _relabel)
    commit(repo, "point the agent at tapes/")
    second = _head(repo)
    found = tape_edits(repo, "tapes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        (f"tapes/{edited.name}", first[:7], second[:7])
    ]

    # In one commit, as the red team did: the copy and the edit together.
    repo2 = commit(sample_copy(repo.parent / "again"), "record the tapes")
    shutil.copytree(repo2 / "cassettes", repo2 / "tapes")
    _edit_kit(repo2 / "tapes" / edited.name, _relabel)
    commit(repo2, "copy and edit")
    assert [e.path for e in tape_edits(repo2, "tapes").edits] == [f"tapes/{edited.name}"]


def test_recording_every_tape_anew_into_another_folder_is_not_an_edit(recorded) -> None:
    import shutil

    repo, _ = recorded
    shutil.copytree(repo / "cassettes", repo / "tapes")
    for tape in sorted((repo / "tapes").glob("*.json")):
        _edit_kit(tape, _bump_id)
    _edit_kit(sorted((repo / "tapes").glob("*.json"))[2], _relabel)  # the model answers otherwise today
    commit(repo, "record everything again into tapes/ (cassettes/ kept for comparison)")
    assert tape_edits(repo, "tapes").edits == []
    # One tape recorded again on its own, into another folder: its own id and times, not an edit.
    one = sorted((repo / "cassettes").glob("*.json"))[5]
    (repo / "tapes2").mkdir()
    (repo / "tapes2" / one.name).write_text(one.read_text(encoding="utf-8"), encoding="utf-8")
    _edit_kit(repo / "tapes2" / one.name, lambda tape: (_bump_id(tape), _relabel(tape)))
    commit(repo, "record the refund ticket again")
    assert tape_edits(repo, "tapes2").edits == []


def test_deleting_every_tape_and_recording_them_anew_is_not_an_edit(recorded) -> None:
    repo, _ = recorded
    saved = {tape: tape.read_text(encoding="utf-8") for tape in _tapes(repo)}
    for tape in saved:
        tape.unlink()
    commit(repo, "drop the tapes")
    for tape, text in saved.items():
        tape.write_text(text, encoding="utf-8")
        _edit_kit(tape, _bump_id)
    commit(repo, "record everything again")
    assert tape_edits(repo, "cassettes").edits == []


def test_deleting_every_tape_and_putting_them_back_with_one_edited_is_an_edit(recorded) -> None:
    repo, first = recorded
    saved = {tape: tape.read_text(encoding="utf-8") for tape in _tapes(repo)}
    for tape in saved:
        tape.unlink()
    commit(repo, "drop the tapes")
    for tape, text in saved.items():
        tape.write_text(text, encoding="utf-8")
    edited = _tapes(repo)[1]
    _edit_kit(edited, _bump_id)
    commit(repo, "record everything again")
    third = _head(repo)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        (f"cassettes/{edited.name}", first[:7], third[:7])
    ]


def test_deleting_a_tape_or_changing_its_request_is_not_an_edit(recorded) -> None:
    repo, _ = recorded
    first, second, third = _tapes(repo)[:3]
    first.unlink()

    def new_question(tape: dict[str, Any]) -> None:
        tape["request"]["body"]["messages"][-1]["content"] += "?"
        tape["response"]["body"]["id"] += "x"

    _edit_kit(second, new_question)
    commit(repo, "drop one, re-ask one")

    def new_key(tape: dict[str, Any]) -> None:
        tape["key"] = "0" * 16
        tape["response"]["body"]["id"] += "x"

    _edit_kit(third, new_key)
    commit(repo, "re-key one")
    assert tape_edits(repo, "cassettes").edits == []


def test_an_edit_after_several_commits_names_the_commit_that_held_the_answer(recorded) -> None:
    repo, _ = recorded
    (repo / "NOTES.md").write_text("notes\n", encoding="utf-8")
    tape = _tapes(repo)[0]
    _edit_kit(tape, lambda t: t["meta"].update(recorded_at="2026-11-30T00:00:00Z"))  # meta only
    commit(repo, "fix the date")
    dated = _head(repo)
    _edit_kit(tape, _bump_id)
    commit(repo, "small fix")
    assert [(e.before, e.after) for e in tape_edits(repo, "cassettes").edits] == [
        (dated[:7], _head(repo)[:7])
    ]


def test_the_submissions_git_config_runs_nothing_while_history_is_read(recorded, tmp_path: Path) -> None:
    # A signed commit, and a .git/config that verifies signatures with the candidate's program and sets
    # an fsmonitor and an external diff: git would run them as the grader if it read this config.
    repo, _ = recorded
    marker = tmp_path / "ran"
    program = tmp_path / "evil.sh"
    program.write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n", encoding="utf-8")
    program.chmod(0o755)
    env = {**os.environ, **GIT_ENV, "HOME": str(tmp_path)}
    _edit_kit(_tapes(repo)[1], _bump_id)
    commit(repo, "tidy")
    # Make HEAD a signed commit: the same commit object with a gpgsig header (git verifies it with
    # gpg.program whenever a log shows signatures).
    raw = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "commit", "HEAD"], env=env, capture_output=True, check=True
    ).stdout
    head, _, message = raw.partition(b"\n\n")
    signature = b"gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEz\n -----END PGP SIGNATURE-----"
    signed = head + b"\n" + signature + b"\n\n" + message
    sha = (
        subprocess.run(
            ["git", "-C", str(repo), "hash-object", "-t", "commit", "-w", "--stdin"],
            input=signed,
            env=env,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    subprocess.run(["git", "-C", str(repo), "update-ref", "HEAD", sha], env=env, check=True)
    for key, value in (
        ("log.showSignature", "true"),
        ("gpg.program", str(program)),
        ("core.fsmonitor", str(program)),
        ("diff.external", str(program)),
        ("core.hooksPath", str(tmp_path)),
    ):
        subprocess.run(["git", "-C", str(repo), "config", key, value], env=env, check=True)
    # The trap is live: a plain git log in this repository runs the program.
    subprocess.run(["git", "-C", str(repo), "log", "-1"], env=env, capture_output=True, check=False)
    assert marker.exists()
    marker.unlink()

    found = tape_edits(repo, "cassettes")
    assert len(found.edits) == 1
    assert not marker.exists()


@pytest.mark.slow
def test_a_vcr_cassette_edit_is_found_by_request_not_by_position(tmp_path: Path) -> None:
    with standin() as base_url:
        sub = build_vcr_submission(tmp_path / "vcr", "recording", base_url)
    repo = sub.repo
    first, second = (repo / c for c in sub.cassettes[:2])
    data = [yaml.safe_load(p.read_text(encoding="utf-8")) for p in (first, second)]
    combined = repo / "tests" / "cassettes" / "test_triage" / "both.yaml"
    both = {"interactions": data[0]["interactions"] + data[1]["interactions"], "version": 1}
    combined.write_text(yaml.safe_dump(both, sort_keys=False), encoding="utf-8")
    commit(repo, "one cassette for two")

    # Reordered, nothing changed: no edit.
    both["interactions"].reverse()
    combined.write_text(yaml.safe_dump(both, sort_keys=False), encoding="utf-8")
    commit(repo, "reorder")
    reordered = _head(repo)
    assert tape_edits(repo, None).edits == []

    # The (now first) interaction's recorded answer edited by hand.
    body = both["interactions"][0]["response"]["body"]
    answer = json.loads(body["string"])
    answer["choices"][0]["message"]["content"] = '{"intent": "refund", "needs_human": false}'
    body["string"] = json.dumps(answer)
    combined.write_text(yaml.safe_dump(both, sort_keys=False), encoding="utf-8")
    commit(repo, "fix typo")
    edits = tape_edits(repo, None).edits
    rel = "tests/cassettes/test_triage/both.yaml"
    assert [(e.path, e.before, e.after) for e in edits] == [(rel, reordered[:7], _head(repo)[:7])]
    lines = combined.read_text(encoding="utf-8").splitlines()
    assert lines[edits[0].line - 1].strip().startswith("response")


@pytest.mark.slow
@pytest.mark.parametrize("restamp_all", [False, True], ids=["one-tape", "every-tape-restamped"])
def test_grading_a_hand_edited_tape_caps_offline_replay_at_2_and_says_why(
    recorded, restamp_all: bool
) -> None:
    repo, first = recorded
    tape = _tapes(repo)[5]
    for other in _tapes(repo) if restamp_all else ():
        _edit_kit(other, _restamp)  # hiding the edit among metadata changes to every tape
    _edit_kit(tape, _bump_id)
    commit(repo, "tidy")
    second = _head(repo)
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(repo), "--format", "json", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["passed"] > 0  # the suite itself is green
    assert facts["tape_edits"] == 1 and row["score"] == 2
    assert f"cassettes/{tape.name}" in row["evidence"]
    assert first[:7] in row["evidence"] and second[:7] in row["evidence"]
    finding = next(f for f in report["findings"] if f["rule"] == "tape-edited")
    assert finding["location"].startswith(f"{second[:7]}:cassettes/{tape.name}:")


def test_a_history_padded_with_rewrites_still_shows_the_edit_within_its_cap(
    recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A red-team pass rewrote a 1 MB padding tape in 1,200 commits (then deleted it) to make the history
    # scan outlast the grade's budget. Reading is capped; tapes still at HEAD are read first, newest first.
    import grader.tape_history as history

    monkeypatch.setattr(history, "_MAX_HISTORY_BYTES", 200_000)
    repo, _ = recorded
    tape = _tapes(repo)[0]
    _edit_kit(tape, _bump_id)
    commit(repo, "tidy one answer")
    edited = _head(repo)
    padding = repo / "cassettes" / "zz-padding.json"
    for n in range(12):
        base = json.loads(_tapes(repo)[1].read_text(encoding="utf-8"))
        base["request"]["body"]["padding"] = ["x" * 100] * 200 + [str(n)]
        base["response"]["body"]["id"] = f"pad-{n}"
        padding.write_text(json.dumps(base, indent=2), encoding="utf-8")
        commit(repo, f"padding {n}")
    padding.unlink()
    commit(repo, "drop the padding")
    later = _tapes(repo)[2]
    _edit_kit(later, _bump_id)
    commit(repo, "tidy another answer")

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.after) for e in found.edits] == [
        (tape.relative_to(repo).as_posix(), edited[:7]),
        (later.relative_to(repo).as_posix(), _head(repo)[:7]),
    ]
    assert any("not compared" in note for note in found.notes), found.notes


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(repo.parent)}
    argv = ["git", "-C", str(repo), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_an_edit_behind_an_orphan_first_parent_is_found(recorded) -> None:
    # Red team 4, F4: HEAD merges an orphan commit holding the edited tape (first parent) with the original
    # recording (second parent); on the first-parent line the edited tape is simply its first version.
    repo, original = recorded
    tape = _tapes(repo)[3]
    _edit_kit(tape, _bump_id)
    _git(repo, "add", "-A")
    orphan = _git(repo, "commit-tree", _git(repo, "write-tree"), "-m", "import into the new layout")
    merge = _git(repo, "commit-tree", _git(repo, "write-tree"), "-p", orphan, "-p", original, "-m", "merge")
    _git(repo, "reset", "-q", "--hard", merge)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        (f"cassettes/{tape.name}", original[:7], orphan[:7])
    ], found


def test_a_branch_that_changed_a_tape_after_it_was_recorded_is_not_blamed_on_the_recording(recorded) -> None:
    # The other parent's version is newer (its branch forked after the recording): HEAD kept the original.
    repo, _ = recorded
    _git(repo, "checkout", "-q", "-b", "experiment")
    _edit_kit(_tapes(repo)[3], _bump_id)
    commit(repo, "try another answer")
    _git(repo, "checkout", "-q", "main")
    (repo / "NOTES.md").write_text("notes\n", encoding="utf-8")
    commit(repo, "notes")
    _git(repo, "merge", "-q", "-s", "ours", "--no-edit", "experiment")
    assert tape_edits(repo, "cassettes").edits == []


def test_merge_pass_judges_the_whole_set_per_adding_commit(recorded) -> None:
    # An orphan line that added its tapes over two commits: the first gave each of its five tapes a new
    # answer (a re-recording of what it added), the second copied five and edited one. Only that one is an
    # edit; judged as one set (the first changed tape's adding commit), all six were reported.
    repo, original = recorded
    tapes = _tapes(repo)
    first, second = tapes[:5], tapes[5:10]
    saved = {tape: tape.read_text(encoding="utf-8") for tape in tapes}
    for tape in tapes[5:]:
        tape.unlink()
    for tape in first:
        _edit_kit(tape, _bump_id)
    _git(repo, "add", "-A")
    one = _git(repo, "commit-tree", _git(repo, "write-tree"), "-m", "record the first tickets")
    for tape in tapes[5:]:
        tape.write_text(saved[tape], encoding="utf-8")
    edited = second[0]
    _edit_kit(edited, _bump_id)
    _git(repo, "add", "-A")
    two = _git(repo, "commit-tree", _git(repo, "write-tree"), "-p", one, "-m", "record the rest")
    merge = _git(repo, "commit-tree", _git(repo, "write-tree"), "-p", two, "-p", original, "-m", "merge")
    _git(repo, "reset", "-q", "--hard", merge)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        (f"cassettes/{edited.name}", original[:7], two[:7])
    ], found


def _orphan_import(repo: Path, message: str = "Import project into new repository layout") -> str:
    """Commit the working tree as a parentless commit and make it the branch's head (red team 4, F4b)."""
    _git(repo, "add", "-A")
    orphan = _git(repo, "commit-tree", _git(repo, "write-tree"), "-m", message)
    _git(repo, "reset", "-q", "--hard", orphan)
    return orphan


@pytest.mark.parametrize("keep", ["annotated-tag", "branch", "tag-past-a-deletion"])
def test_an_edit_whose_original_only_another_ref_holds_is_found(recorded, keep: str) -> None:
    # Red team 4, F4b: HEAD is an orphan commit holding the edited tape; the original recording is kept in
    # the repository under a tag (or a branch) that HEAD's history does not reach.
    repo, original = recorded
    if keep == "annotated-tag":
        _git(repo, "tag", "-a", "rehearsal", "-m", "stand-in rehearsal history", original)
        ref = "tag rehearsal"
    elif keep == "branch":
        _git(repo, "branch", "rehearsal", original)
        ref = "branch rehearsal"
    else:  # the tag names a later commit of that line, one without any tape
        _git(repo, "rm", "-q", "-r", "cassettes")
        _git(repo, "commit", "-q", "-m", "drop the rehearsal tapes")
        _git(repo, "tag", "-a", "rehearsal", "-m", "stand-in rehearsal history")
        _git(repo, "checkout", "-q", "main", "--", ".")
        _git(repo, "reset", "-q", "--hard", original)
        ref = "tag rehearsal"
    tape = _tapes(repo)[3]
    _edit_kit(tape, _bump_id)
    orphan = _orphan_import(repo)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after, e.ref) for e in found.edits] == [
        (f"cassettes/{tape.name}", original[:7], orphan[:7], ref)
    ], found
    assert original[:7] in found.edits[0].message and orphan[:7] in found.edits[0].message
    assert ref in found.edits[0].message


def test_an_edited_tape_moved_away_from_its_tagged_original_is_found(recorded) -> None:
    repo, original = recorded
    _git(repo, "tag", "rehearsal", original)
    tape = _tapes(repo)[2]
    moved = tape.with_name("ticket-3.json")
    tape.rename(moved)
    _edit_kit(moved, _bump_id)
    orphan = _orphan_import(repo)

    found = tape_edits(repo, "cassettes")
    assert [(e.path, e.before, e.after) for e in found.edits] == [
        ("cassettes/ticket-3.json", original[:7], orphan[:7])
    ], found


def test_unrelated_tags_and_branches_of_an_honest_repository_are_not_edits(recorded, tmp_path: Path) -> None:
    repo, original = recorded
    _git(repo, "tag", "-a", "v0", "-m", "first recording", original)  # a tag on an older honest commit
    # A branch that re-recorded the whole set after the recording, never merged.
    _git(repo, "checkout", "-q", "-b", "rerecord")
    for tape in _tapes(repo):
        _edit_kit(tape, _bump_id)
    commit(repo, "re-record everything")
    # A branch that tried another answer by hand, never merged: not what is graded.
    _git(repo, "checkout", "-q", "-b", "experiment", original)
    _edit_kit(_tapes(repo)[1], _bump_id)
    commit(repo, "try another answer")
    # A separate recording of the whole set on a line of its own (an earlier attempt).
    _git(repo, "checkout", "-q", "--orphan", "attempt-1")
    for tape in _tapes(repo):
        _edit_kit(tape, lambda t: t["response"]["body"].update(id=t["response"]["body"]["id"] + "-old"))
    commit(repo, "first attempt")
    _git(repo, "checkout", "-q", "-f", "main")
    (repo / "NOTES.md").write_text("notes\n", encoding="utf-8")
    commit(repo, "notes")
    _git(repo, "tag", "v1")
    # A feature branch that recorded one more ticket, merged; a branch forked from it that tried another
    # answer for that ticket, never merged (HEAD's version was written by the merge commit).
    _git(repo, "checkout", "-q", "-b", "feature")
    extra = repo / "cassettes" / "extra.json"
    extra.write_text(_tapes(repo)[0].read_text(encoding="utf-8"), encoding="utf-8")

    def new_ticket(tape: dict[str, Any]) -> None:
        tape["key"] = "f" * 16
        tape["request"]["body"]["messages"][-1]["content"] += " (one more)"

    _edit_kit(extra, new_ticket)
    commit(repo, "record one more ticket")
    _git(repo, "checkout", "-q", "-b", "feature-try")
    _edit_kit(extra, _bump_id)
    commit(repo, "try another answer for it")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "--no-edit", "feature")

    assert tape_edits(repo, "cassettes") == TapeHistory([], [])
    # The grader's own clone (remote-tracking branches, every tag), and the same ref graded at an older tag.
    for target, where in ((str(repo), "ws"), (f"{repo}#v0", "ws-v0")):
        workspace = acquire(target, tmp_path / where)
        assert workspace.pristine is not None
        assert tape_edits(workspace.pristine, "cassettes") == TapeHistory([], []), target


def test_commits_outside_heads_history_are_compared_within_a_cap(
    recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    import grader.tape_history as history

    monkeypatch.setattr(history, "_MAX_REF_DIFFS", 0)
    repo, original = recorded
    _git(repo, "tag", "rehearsal", original)
    _edit_kit(_tapes(repo)[0], _bump_id)
    _orphan_import(repo)

    found = tape_edits(repo, "cassettes")
    assert found.edits == []
    assert any("outside HEAD's history not compared" in note for note in found.notes), found.notes


@pytest.mark.slow
def test_grading_an_orphan_head_whose_original_a_tag_keeps_caps_offline_replay(recorded) -> None:
    # Red team 4, F4b, through the real `grade` (the grader's own clone of the repository: tags come along).
    repo, original = recorded
    _git(repo, "tag", "-a", "rehearsal", "-m", "stand-in rehearsal history", original)
    tape = _tapes(repo)[5]
    _edit_kit(tape, _bump_id)
    orphan = _orphan_import(repo)
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(repo), "--format", "json", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["passed"] > 0  # the suite itself is green
    assert facts["tape_edits"] == 1 and row["score"] == 2 < row["max"]
    assert f"cassettes/{tape.name}" in row["evidence"] and "tag rehearsal" in row["evidence"]
    assert original[:7] in row["evidence"] and orphan[:7] in row["evidence"]
    finding = next(f for f in report["findings"] if f["rule"] == "tape-edited")
    assert finding["location"].startswith(f"{orphan[:7]}:cassettes/{tape.name}:")


def _rekey_all(repo: Path, change_answer: Any) -> Path | None:
    """One commit giving every tape a new key and a stored request without `max_tokens` (a new normalization
    rule), each file renamed to its new key, as a re-keying script would; ``change_answer(i)`` says whether
    tape i's answer changes too. Returns the first tape whose answer changed, at its new path."""
    changed = None
    for i, path in enumerate(_tapes(repo)):
        tape = json.loads(path.read_text(encoding="utf-8"))
        tape["request"]["body"].pop("max_tokens")
        tape["key"] = f"{int(tape['key'], 16) ^ 0xFFFF:016x}"
        if change_answer(i):
            _bump_id(tape)
        target = path.with_name(f"{tape['key']}.json")
        path.unlink()
        target.write_text(
            json.dumps(tape, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        if change_answer(i) and changed is None:
            changed = target
    commit(repo, "drop max_tokens from the key and re-key the tapes")
    return changed


def test_re_keying_every_tape_does_not_hide_a_hand_edited_answer(recorded) -> None:
    # Red team 6, H8: every tape given a new key and stored request in one commit (no model asked: 23 answers
    # byte for byte as before) looked like a re-recording of the set, and hid the one answer edited with them.
    repo, first = recorded
    edited = _rekey_all(repo, lambda i: i == 3)
    second = _head(repo)
    assert edited is not None

    found = tape_edits(repo, "cassettes")

    assert [(e.path, e.before, e.after) for e in found.edits] == [
        (f"cassettes/{edited.name}", first[:7], second[:7])
    ]
    (edit,) = found.edits
    assert edit.rekeyed == "max_tokens" and "a re-key, not a re-recording" in edit.message


@pytest.mark.parametrize("answers", ["kept", "all-new"])
def test_re_keying_alone_or_re_recording_under_a_new_key_rule_is_not_an_edit(recorded, answers: str) -> None:
    repo, _ = recorded
    _rekey_all(repo, lambda i: answers == "all-new")
    assert tape_edits(repo, "cassettes").edits == []
