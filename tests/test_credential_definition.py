"""One definition of "a credential header in a tape": cassette-hygiene counts exactly the request headers in
which the no-credentials row's rules (grader/rules/secrets.toml) find a credential, so the rows agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.checks.canary import make_canary
from grader.checks.hygiene import hygiene
from grader.secrets import scan_tree
from tests.helpers.context import folder_context

TAPE = Path(__file__).parent / "fixtures" / "tapes" / "vcr" / "gzip_binary.yaml"
# Built at run time, shaped like the providers' keys: no key-shaped literal in the kit's source.
KEY = make_canary("OPENAI_API_KEY")
ANTHROPIC = make_canary("ANTHROPIC_API_KEY")


@pytest.mark.parametrize(
    ("header", "value", "stored"),
    [
        ("authorization", f"Bearer {KEY}", 1),  # both rows: a credential
        ("authorization", "DUMMY", 0),  # a recorder's filter: neither
        ("authorization", "Bearer abcdefghijklmnopqrstuvwxyz", 0),  # letters only: a label to both rows
        ("authorization", "Bearer ${OPENAI_API_KEY}", 0),
        ("x-api-key", ANTHROPIC, 1),
        ("proxy-authorization", f"Basic {KEY}", 1),
        ("x-custom-auth", KEY, 1),  # a provider key in any header is one
        ("user-agent", "OpenAI/Python 1.54.0", 0),
    ],
    ids=["bearer-key", "filtered", "letters-only", "env-reference", "anthropic", "proxy", "custom", "agent"],
)
def test_hygiene_and_the_secret_scan_agree_on_a_stored_header(
    tmp_path: Path, header: str, value: str, stored: int
) -> None:
    repo = tmp_path / "repo"
    (repo / "cassettes").mkdir(parents=True)
    text = TAPE.read_text(encoding="utf-8").replace(
        "      authorization:\n      - DUMMY\n", f"      {header}:\n      - {value}\n"
    )
    assert header in text
    (repo / "cassettes" / "tape.yaml").write_text(text, encoding="utf-8")

    counted = hygiene(folder_context(repo, cassette_dir=Path("cassettes"))).facts["credential_headers"]
    found = [
        f for f in scan_tree(repo, tape_dirs=("cassettes",)) if f.location.startswith("cassettes/tape.yaml")
    ]

    assert counted == len(found) == stored, (counted, [f.rule for f in found])
