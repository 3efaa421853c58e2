"""`grade merge OUT SHARD_DIR...`: gather the folders of `grade batch FILE --shard I/N` into one batch folder.

Each shard folder is a batch folder whose ``batch.json`` says which slice of which FILE it graded
(``shard``: index, count, the number of candidates FILE listed, FILE's sha256) and which rubric (its sha256,
with a byte copy in ``rubric.yaml``). Merging checks that every shard came from the same FILE and rubric and
that the N slices are all there once, then copies each candidate's stored run into OUT (a new folder, as for
`grade batch`) and writes ``summary.csv``, ``summary.md`` and ``batch.json`` in file order: the folder a
single `grade batch FILE` would have written, on which `grade rescore` works the same way. Nothing is moved:
the shard folders are left as they were.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.batch import (
    BATCH_FILE,
    BATCH_SCHEMA,
    NOT_ASSESSABLE,
    RUBRIC_COPY,
    Entry,
    Outcome,
    run_digests,
    write_summary,
)
from grader.errors import BadInput
from grader.rubric import load_rubric
from grader.runstore import check_store_folder, load_run, write_json

__all__ = ["MergeResult", "merge_shards"]


@dataclass(frozen=True)
class MergeResult:
    out: Path
    candidates: int
    graded: int


@dataclass(frozen=True)
class _Shard:
    folder: Path
    manifest: dict[str, Any]

    @property
    def info(self) -> dict[str, Any]:
        return dict(self.manifest["shard"])


def merge_shards(out: Path, folders: Sequence[Path]) -> MergeResult:
    """Check the shards, then write the merged batch into ``out`` (new or empty). BadInput on any mismatch."""

    if not folders:
        raise BadInput("give the shard folders to merge: grade merge OUT SHARD_DIR...")
    check_store_folder(out)
    shards = [_read_shard(Path(f)) for f in folders]
    _check_same_round(shards)
    rubric_bytes = (shards[0].folder / RUBRIC_COPY).read_bytes()
    items = sorted(
        ((item, shard) for shard in shards for item in shard.manifest["candidates"]),
        key=lambda pair: int(pair[0].get("line", 0)),
    )
    _check_candidates(items, shards)
    for item, shard in items:  # before anything is written: a refused merge leaves no OUT
        _check_digests(shard.folder / item["folder"], shard.info.get("digests", {}).get(item["folder"]))

    out.mkdir(parents=True, exist_ok=True)
    try:
        for item, shard in items:
            _copy_run(shard.folder / item["folder"], out / item["folder"])
        (out / RUBRIC_COPY).write_bytes(rubric_bytes)
        graded = _write_batch(out, shards, [item for item, _ in items])
    except BaseException:
        # Half a merged folder would look like a whole round: leave nothing behind.
        shutil.rmtree(out, ignore_errors=True)
        raise
    return MergeResult(out, len(items), graded)


# ------------------------------------------------------------------------------------------- checking


def _read_shard(folder: Path) -> _Shard:

    path = folder / BATCH_FILE
    if not folder.is_dir() or folder.is_symlink():
        raise BadInput(f"{folder}: not a folder; pass the folders `grade batch --shard I/N` wrote")
    if not path.is_file():
        raise BadInput(f"{folder}: no {BATCH_FILE}; pass the folders `grade batch --shard I/N` wrote")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the batch manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != BATCH_SCHEMA:
        raise BadInput(f"{path}: not a {BATCH_SCHEMA} manifest")
    info = manifest.get("shard")
    if not isinstance(info, dict) or not all(
        isinstance(info.get(k), int) for k in ("index", "count", "listed")
    ):
        raise BadInput(f"{folder}: not a shard (a batch run without --shard); nothing to merge it with")
    if not isinstance(manifest.get("candidates"), list):
        raise BadInput(f"{path}: not a {BATCH_SCHEMA} manifest")
    rubric = folder / RUBRIC_COPY
    if not rubric.is_file() or rubric.is_symlink():
        raise BadInput(f"{folder}: {RUBRIC_COPY} is missing; copy the whole shard folder")
    sha = hashlib.sha256(rubric.read_bytes()).hexdigest()
    if sha != (manifest.get("rubric") or {}).get("sha256"):
        raise BadInput(f"{rubric}: does not match the rubric sha256 in {BATCH_FILE}; was it edited?")
    return _Shard(folder, manifest)


def _check_same_round(shards: list[_Shard]) -> None:
    first = shards[0]
    for shard in shards[1:]:
        for what, key in (("batch file", "source_sha256"), ("number of shards", "count")):
            if shard.info.get(key) != first.info.get(key):
                raise BadInput(
                    f"{shard.folder}: graded from another {what} than {first.folder} "
                    f"({key} {shard.info.get(key)!r} vs {first.info.get(key)!r}); merge shards of one round"
                )
        if shard.manifest["rubric"].get("sha256") != first.manifest["rubric"].get("sha256"):
            raise BadInput(
                f"{shard.folder}: graded with another rubric than {first.folder} "
                f"({str(shard.manifest['rubric'].get('sha256'))[:12]} vs "
                f"{str(first.manifest['rubric'].get('sha256'))[:12]}); merge shards of one round"
            )
    seen: dict[int, Path] = {}
    for shard in shards:
        index = shard.info["index"]
        if index in seen:
            raise BadInput(_given_twice(seen[index], shard.folder, index, shard.info["count"]))
        seen[index] = shard.folder
    missing = [str(i) for i in range(1, first.info["count"] + 1) if i not in seen]
    if missing:
        raise BadInput(
            f"shard {', '.join(missing)} of {first.info['count']} missing: pass every shard folder "
            "(a round merged without a shard would lose its candidates)"
        )


def _given_twice(first: Path, second: Path, index: int, count: int) -> str:
    if first.resolve() == second.resolve():
        return (
            f"the shard folder {second} is given twice (it is shard {index} of {count}); "
            "pass each shard folder once"
        )
    return (
        f"{first} and {second} are both shard {index} of {count} (the same slice graded twice); "
        f"pass only one of them, plus one folder for each other shard"
    )


def _check_candidates(items: list[tuple[dict[str, Any], _Shard]], shards: list[_Shard]) -> None:
    listed = shards[0].info["listed"]
    if len(items) != listed:
        raise BadInput(f"the shards hold {len(items)} candidates but the batch file listed {listed}")
    folders: set[str] = set()
    for item, shard in items:
        folder = str(item.get("folder", "")) if isinstance(item, dict) else ""
        # The folder name comes from a file anyone can edit: one plain name inside the shard folder.
        if not folder or Path(folder).name != folder or folder in {".", ".."}:
            raise BadInput(f"{shard.folder / 'batch.json'}: bad candidate folder {folder!r}")
        if folder.lower() in folders:
            raise BadInput(f"{shard.folder}: candidate folder {folder!r} is in two shards")
        folders.add(folder.lower())


def _check_digests(source: Path, recorded: object) -> None:
    """The stored run is what the shard's batch.json says it graded: an edited report is refused."""

    if not isinstance(recorded, dict):
        return  # a shard from before digests were recorded: nothing to compare with
    now = run_digests(source)
    for name, digest in recorded.items():
        if now.get(str(name)) != digest:
            raise BadInput(
                f"{source / str(name)}: does not match the digest in batch.json; was it edited? "
                "Merge the shard folders as `grade batch --shard` wrote them"
            )


def _copy_run(source: Path, dest: Path) -> None:
    if source.is_symlink() or not source.is_dir():
        raise BadInput(f"{source}: missing or a link; a shard's candidates must be real folders")
    # Links inside a stored run are never followed out of it: copied as links, which re-scoring refuses.
    shutil.copytree(source, dest, symlinks=True)


# ------------------------------------------------------------------------------------------- writing


def _write_batch(out: Path, shards: list[_Shard], items: list[dict[str, Any]]) -> int:

    rubric = load_rubric(out / RUBRIC_COPY)
    outcomes = []
    for item in items:
        folder = str(item["folder"])
        run = load_run(out / folder)
        entry = Entry(
            str(item.get("candidate", folder)), str(item.get("target", "")), int(item["line"]), folder
        )
        if run.report is None:
            outcomes.append(Outcome(entry, NOT_ASSESSABLE, reason=str(item.get("reason") or run.reason)))
        else:
            outcomes.append(Outcome(entry, "graded", report=run.report))
    write_summary(out, outcomes, rubric)
    first = shards[0].manifest
    write_json(
        out / BATCH_FILE,
        {
            "schema": BATCH_SCHEMA,
            "created_at": max(str(s.manifest.get("created_at", "")) for s in shards),
            "source": first.get("source", ""),
            "rubric": first["rubric"],
            "candidates": items,
            "merged": {
                "source_sha256": shards[0].info.get("source_sha256", ""),
                "shards": [
                    {
                        "index": s.info["index"],
                        "folder": str(s.folder),
                        "created_at": s.manifest.get("created_at"),
                    }
                    for s in sorted(shards, key=lambda s: s.info["index"])
                ],
            },
        },
    )
    return sum(1 for o in outcomes if o.report is not None)
