"""A fixed, config-free git identity for the repositories tests create (no user or system config leaks in)."""

from __future__ import annotations

import os

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Candidate",
    "GIT_AUTHOR_EMAIL": "candidate@example.invalid",
    "GIT_COMMITTER_NAME": "Candidate",
    "GIT_COMMITTER_EMAIL": "candidate@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
