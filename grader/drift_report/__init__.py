"""`grade drift`: re-record a submission's inputs against a control and a candidate model, and report.

docs/hiring-team.md is the user's guide; grader/schemas/grade-drift.schema.json the JSON report's schema.
"""

from __future__ import annotations

__all__: list[str] = []
