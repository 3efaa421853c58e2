"""``python -m <package> "message"`` prints one JSON object; ``--file tickets.jsonl [--table]`` triages many.

Exit codes: 0 ok, 1 bad input or a bad model answer, 2 a cassette miss (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .agent import triage
from .cassette import CassetteMiss
from .client import CASSETTE_DIR, ReplayMiss, build_client


def _miss_in_chain(exc: BaseException | None) -> CassetteMiss | ReplayMiss | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (CassetteMiss, ReplayMiss)):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _ledger() -> Path:
    folder = Path(os.environ.get("CASSETTE_DIR") or CASSETTE_DIR)  # where the cassette layer writes it
    return Path(os.environ.get("CASSETTE_MISS_LOG") or folder / ".misses.jsonl")


def _ledger_size() -> int:
    try:
        return _ledger().stat().st_size
    except OSError:
        return 0


def _read_tickets(path: Path) -> list[dict[str, Any]]:
    tickets = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            ticket = json.loads(line)
            if not isinstance(ticket.get("message"), str):
                raise ValueError
        except (ValueError, AttributeError):
            raise SystemExit(f'{path}:{number}: expected a JSON object with a "message" string') from None
        tickets.append(ticket)
    return tickets


def _table(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = [f"{'message':<52} {'intent':<10} {'human':<6} expected"]
    agree = 0
    for ticket, result in rows:
        text = ticket["message"].replace("\n", " ")
        text = text if len(text) <= 50 else text[:49] + "…"
        expected = ""
        if "intent" in ticket:
            ok = ticket["intent"] == result["intent"] and ticket.get("needs_human") == result["needs_human"]
            agree += ok
            expected = "ok" if ok else f"MISMATCH {ticket['intent']}/{str(ticket.get('needs_human')).lower()}"
        lines.append(f"{text:<52} {result['intent']:<10} {str(result['needs_human']).lower():<6} {expected}")
    lines.append(f"{agree}/{len(rows)} agree with their labels")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    if args.file is None and args.message is None:
        print("triage: error: give a message, or --file tickets.jsonl", file=sys.stderr)
        return 1
    if args.file is None:
        print(json.dumps(triage(args.message), ensure_ascii=False))
        return 0
    tickets = _read_tickets(Path(args.file))
    with build_client() as client:
        rows = [(t, triage(t["message"], client=client)) for t in tickets]
    if args.table:
        print(_table(rows))
    else:
        for _, result in rows:
            print(json.dumps(result, ensure_ascii=False))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description="Triage support messages.")
    parser.add_argument("message", nargs="?", help="one support message")
    parser.add_argument("--file", help='a JSONL file of {"message": ...} objects')
    parser.add_argument("--table", action="store_true", help="with --file: print a table instead of JSONL")
    args = parser.parse_args(argv)
    before = _ledger_size()
    try:
        return _run(args)
    except SystemExit as exc:
        print(f"triage: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        miss = _miss_in_chain(exc)
        if miss is not None:
            print(f"triage: error: {miss}", file=sys.stderr)
            return 2
        if _ledger_size() > before:
            # An SDK may re-wrap the miss beyond recognition; the ledger still saw it.
            print(f"triage: error: cassette miss (see {_ledger()}); run `make record`", file=sys.stderr)
            return 2
        print(f"triage: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
