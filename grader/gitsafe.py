"""git on a submission's repository without running anything the repository configures.

A repository's ``.git/config`` is the candidate's (or was written by their suite while it ran):
``gpg.program`` with ``log.showSignature``, ``core.fsmonitor``, ``diff.external``, textconv drivers,
filters, hooks and credential helpers all name programs git would run as the grader. Every git command the
grader runs on a submission goes through ``argv``/``env`` here: no system or global config, each of those
settings overridden on the command line (which wins over the repository's), replace refs ignored, and only
the protocols the caller allows. Commands that could print a diff also take ``--no-textconv --no-ext-diff``
(a textconv driver is named by the tree's own ``.gitattributes``, so it cannot be overridden by name). The
grader runs git only on copies nothing sandboxed could write (the pristine copy).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["RAW_LOG", "argv", "env"]

_FALSE = shutil.which("false") or "/bin/false"
# `git log` options of every walk over a submission's history: raw blob ids in full, and none of the
# features that run a program the repository's config names (textconv, external diff, signature
# verification). Each walk adds its own rename detection (--no-renames / --find-renames).
RAW_LOG = ("--raw", "--no-abbrev", "--no-textconv", "--no-ext-diff", "--no-show-signature")
_OVERRIDES = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.sshCommand=ssh -o BatchMode=yes",
    "core.pager=cat",
    "core.attributesFile=/dev/null",
    "core.symlinks=true",
    "log.showSignature=false",
    f"gpg.program={_FALSE}",
    f"gpg.openpgp.program={_FALSE}",
    f"gpg.x509.program={_FALSE}",
    f"gpg.ssh.program={_FALSE}",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "diff.external=",
    "diff.noprefix=false",
    "credential.helper=",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "safe.directory=*",
    "advice.detachedHead=false",
    "init.defaultBranch=main",
    "protocol.allow=never",
    "protocol.ext.allow=never",
    "extensions.partialClone=",  # no promisor remote: a missing object is an error, never a fetch
)


def argv(*args: str, protocols: Sequence[str] = ()) -> list[str]:
    """``git -c ... ARGS``: every override above, plus ``protocol.<name>.allow=always`` per ``protocols``."""
    out = ["git"]
    for item in _OVERRIDES:
        out += ["-c", item]
    for name in protocols:
        out += ["-c", f"protocol.{name}.allow=always"]
    return [*out, *args]


def env(home: Path | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The grader's environment minus every ``GIT_*`` variable, with config files and prompts switched off.

    ``home``: a grader-owned folder for ``HOME``/``XDG_CONFIG_HOME`` (created), so no user config is read.
    """
    out = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        out.update(HOME=str(home), XDG_CONFIG_HOME=str(home))
    out.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_ATTR_NOSYSTEM="1",
        GIT_NO_REPLACE_OBJECTS="1",
        # A repository marked as a partial clone fetches a missing object from its "promisor" remote on
        # first touch (`ext::sh payload` runs a program): never fetch during a read.
        GIT_NO_LAZY_FETCH="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS=_FALSE,
        SSH_ASKPASS=_FALSE,
        GIT_PAGER="cat",
        GIT_EXTERNAL_DIFF="",
        GIT_SSH_COMMAND="ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
        LC_ALL="C",
    )
    out.pop("GIT_EXTERNAL_DIFF")  # an empty value is not "none" to every git version: leave it unset
    if extra:
        out.update(extra)
    return out
