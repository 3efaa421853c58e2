"""Answers given when this repository was baked (the only templated Python line in the package)."""

PACKAGE, PROVIDER, DEFAULT_MODEL = "support_triage_agent", "openai-compatible", "gpt-4o-mini"  # noqa: E501
