"""Refuse answers that would bake a broken or unsafe project.

The answers are assigned as JSON string literals (Jinja's ``tojson``), so a quote or backslash in an
answer is data here, never code.
"""

import keyword
import re
import sys

PROJECT_NAME = {{ cookiecutter.project_name | tojson }}
PROJECT_SLUG = {{ cookiecutter.project_slug | tojson }}
PACKAGE_NAME = {{ cookiecutter.package_name | tojson }}
CANDIDATE_NAME = {{ cookiecutter.candidate_name | tojson }}
PROVIDER = {{ cookiecutter.provider | tojson }}
DEFAULT_MODEL = {{ cookiecutter.default_model | tojson }}
PYTHON_VERSION = {{ cookiecutter.python_version | tojson }}

_SLUG = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_PACKAGE = re.compile(r"[a-z_][a-z0-9_]*")
# Model ids end up in TOML, Makefiles and tapes: letters, digits and . _ - : / @ are enough for every
# provider's naming (gpt-4o-mini, claude-3-5-haiku-latest, org/model:tag).
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,99}")
_PYTHON = re.compile(r"3\.(1[0-9]|[2-9][0-9])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _refuse(variable: str, value: str, allowed: str) -> None:
    print(f"cookiecutter: error: {variable}={value!r} is not allowed; {allowed}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    if not PROJECT_NAME.strip() or _CONTROL.search(PROJECT_NAME):
        _refuse("project_name", PROJECT_NAME, "use a non-empty name without control characters")
    if not _SLUG.fullmatch(PROJECT_SLUG) or len(PROJECT_SLUG) > 64:
        _refuse(
            "project_slug",
            PROJECT_SLUG,
            "use lowercase letters, digits and single hyphens, starting with a letter (e.g. support-triage)",
        )
    if not _PACKAGE.fullmatch(PACKAGE_NAME) or keyword.iskeyword(PACKAGE_NAME) or len(PACKAGE_NAME) > 64:
        _refuse(
            "package_name",
            PACKAGE_NAME,
            "use a lowercase Python identifier that is not a keyword (e.g. support_triage)",
        )
    if PACKAGE_NAME in sys.stdlib_module_names or PACKAGE_NAME in {"tests", "httpx", "httpx2", "pytest"}:
        _refuse("package_name", PACKAGE_NAME, "pick a name that does not shadow a standard or installed module")
    if not CANDIDATE_NAME.strip() or _CONTROL.search(CANDIDATE_NAME) or len(CANDIDATE_NAME) > 200:
        _refuse("candidate_name", CANDIDATE_NAME, "use your name on one line, without control characters")
    if PROVIDER not in ("openai-compatible", "anthropic"):
        _refuse("provider", PROVIDER, "choose openai-compatible or anthropic")
    if not _MODEL.fullmatch(DEFAULT_MODEL):
        _refuse(
            "default_model",
            DEFAULT_MODEL,
            "use letters, digits and . _ - : / @ only (e.g. gpt-4o-mini, claude-3-5-haiku-latest)",
        )
    if not _PYTHON.fullmatch(PYTHON_VERSION):
        _refuse("python_version", PYTHON_VERSION, "use a Python 3 minor version >= 3.10, e.g. 3.11")


main()
