"""Where a Snakemake script's output goes: its rule's log, from its first line."""

from __future__ import annotations

import contextlib
import traceback
import warnings


@contextlib.contextmanager
def script_log(path: str):
    """Send this process's Python stdout, stderr and warnings to ``path`` (opened for
    writing) while inside; an exception raised inside is written to the log with its
    traceback before it propagates (and Snakemake reports the job failed), so a failed job
    leaves its cause in its log. Yields the open log file."""
    with open(path, "w", buffering=1) as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # every warning once per location, into the log
            try:
                yield log
            except SystemExit as exc:  # a deliberate exit: its message, if any, is the cause
                if exc.code not in (0, None):
                    print(exc.code, file=log)
                raise
            except BaseException:
                traceback.print_exc(file=log)
                raise
