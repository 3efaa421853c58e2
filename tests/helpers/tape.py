"""One real kit tape for small generated submissions: offline-replay needs a recording to show a replay."""

from __future__ import annotations

from pathlib import Path

_GOOD = Path(__file__).resolve().parents[1] / "fixtures" / "tapes" / "kit" / "good" / "46d63935ffc6a518.json"

# files= entry for the make_submission fixture: {"cassettes/<key>.json": text}
A_TAPE = {f"cassettes/{_GOOD.name}": _GOOD.read_text(encoding="utf-8")}
