"""The capture stage's progress lines (the capture, its lock, the capture worker and process), kept apart so that
every module of the stage imports them from below it."""

from __future__ import annotations

import sys
import time


def log(msg: str) -> None:
    """Progress line on stderr (Snakemake shows it, or sends it to the rule's log)."""
    print(f"[attnprof {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
