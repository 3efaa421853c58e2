"""The cassette take-home grader: acquire a submission, replay it offline in a sandbox, score a rubric."""

import sysconfig

# CPython before 3.12 fills sysconfig's variables on first use without a lock (gh-92452): threads that
# ask at once can read None (uv's find_uv_bin then raised TypeError, and `grade batch --jobs 2` lost a
# candidate as "not assessable"). The grader grades, probes and drifts in threads: fill them once here.
sysconfig.get_config_vars()

__version__ = "0.1.0"

__all__ = ["__version__"]
