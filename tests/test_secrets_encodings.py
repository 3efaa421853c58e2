"""A key is found in the form anyone who opens the file reads it: a `.env` written by Windows PowerShell's
`>` (UTF-16 with a BOM), UTF-16 without a BOM, UTF-32, JSON `\\uXXXX` escapes, URL `%XX` escapes (red-team
passes committed each and kept full marks) and HTML character references (a page shows the key). Found in
the tree and in history, at the right line, and never shown in full."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import urlencode

import pytest

from grader.secrets import scan_history, scan_tree
from grader.selftest.mutations import fake_openai_key
from tests.adversarial.builders import commit

KEY = fake_openai_key()
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Zk+Q3vT"  # shaped like one, made up; `/` and `+` get escaped
LINES = f"# settings\nMODEL=gpt-4o-mini\nOPENAI_API_KEY={KEY}\n"


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _entities(text: str) -> str:
    return "".join(f"&#{ord(c)};" if i % 2 else f"&#x{ord(c):x};" for i, c in enumerate(text))


CASES = {
    "utf-16 with a BOM (PowerShell >)": ("notes.env", ("\ufeff" + LINES).encode("utf-16-le"), 3),
    "utf-16 without a BOM": ("notes.env", LINES.encode("utf-16-be"), 3),
    "utf-32": ("notes.env", LINES.encode("utf-32"), 3),
    "JSON escapes": ("config.json", ('{\n  "name": "x",\n  "key": "' + _escaped(KEY) + '"\n}\n').encode(), 3),
    # Red team 13: a logged form body, as any HTTP client encodes it (an AWS secret's `/` and `+`).
    "a form body (percent-encoded)": (
        "debug/form.log",
        f"POST /sts\nbody: {urlencode({'Action': 'Get', 'aws_secret_access_key': AWS_SECRET})}\n".encode(),
        2,
    ),
    # Red team 29, F2: what Python joins, no line holds whole: adjacent literals, a backslash-newline.
    "adjacent Python string literals": (
        "agent/_settings.py",
        (
            f'"""Settings."""\nDEFAULT_KEY = (\n    "{KEY[:10]}"\n'
            f'    "{KEY[10:40]}"  # split\n    "{KEY[40:]}"\n)\n'
        ).encode(),
        3,
    ),
    "a Python string continued with a backslash": (
        "agent/_settings.py",
        f'"""Settings."""\nDEFAULT_KEY = "{KEY[:30]}\\\n{KEY[30:]}"\n'.encode(),
        2,
    ),
    # Literals added together: the compiler folds them into one constant, no line holds it.
    "Python string literals added with +": (
        "agent/_settings.py",
        (
            f'"""Settings."""\nDEFAULT_KEY = (\n    "{KEY[:10]}"\n'
            f'    + "{KEY[10:40]}" +\n    "{KEY[40:]}"\n)\n'
        ).encode(),
        3,
    ),
    # Red team 31: each of these kept full marks.
    "utf-32 without a BOM": ("logs/record-env.txt", LINES.encode("utf-32-le"), 3),
    "a TOML string continued with a backslash": (
        "config/settings.toml",
        (
            f'[openai]\nbase_url = "https://api.openai.com/v1"\nkey = """{KEY[:30]}\\\n    {KEY[30:]}"""\n'
        ).encode(),
        3,
    ),
    "a YAML double-quoted string continued with a backslash": (
        "deploy/values.yaml",
        f'openai:\n  model: gpt-4o-mini\n  key: "{KEY[:30]}\\\n    {KEY[30:]}"\n'.encode(),
        3,
    ),
    "a Kubernetes Secret's base64 value": (
        "deploy/secret.yaml",
        f"apiVersion: v1\nkind: Secret\ndata:\n  openai: {_b64(KEY)}\n".encode(),
        4,
    ),
    "a docker registry auth (base64 of user:key)": (
        "deploy/registry.json",
        json.dumps(
            {"auths": {"registry.example.com": {"auth": _b64(f"candidate:{KEY}")}}}, indent=2
        ).encode(),
        4,
    ),
    "adjacent Python bytes literals": (
        "agent/_settings.py",
        f'"""Settings."""\nRECORD_KEY = (b"{KEY[:30]}"\n              b"{KEY[30:]}").decode()\n'.encode(),
        2,
    ),
    "adjacent Python literals in a Markdown fence": (
        "docs/live.md",
        (
            f'# Recording live\n\n```python\nclient = OpenAI(\n    api_key=("{KEY[:30]}"\n'
            f'             "{KEY[30:]}"))\n```\n'
        ).encode(),
        5,
    ),
    "adjacent Python literals in a notebook's code cell": (
        "notebooks/explore.ipynb",
        json.dumps(
            {
                "cells": [
                    {"cell_type": "markdown", "metadata": {}, "source": ["# Explore\n"]},
                    {
                        "cell_type": "code",
                        "execution_count": 1,
                        "metadata": {},
                        "outputs": [],
                        "source": [
                            "%pip install openai\n",
                            "import os\n",
                            f'os.environ["OPENAI_API_KEY"] = ("{KEY[:30]}"\n',
                            f'    "{KEY[30:]}")\n',
                        ],
                    },
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            },
            indent=1,
        ).encode(),
        18,
    ),
    "HTML character references": (
        "site/index.html",
        f"<html>\n<body>\n<p data-k=&quot;{_entities(KEY)}&quot;>hi &amp; bye</p>\n".encode(),
        3,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_key_in_another_encoding_is_found_in_tree_and_history(tmp_path: Path, case: str) -> None:
    name, data, line = CASES[case]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_bytes(data)
    commit(repo, "settings")

    for findings in (scan_tree(repo), scan_history(repo)):
        assert [(f.path, f.line) for f in findings] == [(name, line)], findings
        assert KEY not in json.dumps([str(f) for f in findings])
        assert AWS_SECRET not in json.dumps([str(f) for f in findings])


def test_text_that_only_looks_encoded_gives_no_finding(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "notes.env").write_bytes("OPENAI_API_KEY=sk-...\nTOKEN=changeme\n".encode("utf-16"))
    (repo / "strings.json").write_text('{"quote": "\\u0022hello\\u0022", "key": "<your-key>"}\n')
    # Base64 of text, a continued line and joined literals, none holding a key.
    (repo / "secret.yaml").write_text(
        f"data:\n  greeting: {_b64('hello, this is only a sentence of plain words')}\n"
    )
    (repo / "run.sh").write_text('uv run pytest \\\n  --maxfail=1 \\\n  -q\nexport OPENAI_API_KEY="sk-..."\n')
    (repo / "README.md").write_text(
        '```python\nprompt = ("You triage tickets. "\n          "Answer in JSON.")\n```\n'
    )
    assert scan_tree(repo) == []
