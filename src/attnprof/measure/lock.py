"""The device's capture lock: one exclusive file lock (flock) per GPU (by UUID, for every user), or per user and device
kind where no GPU is named, held by every
capture (:func:`attnprof.measure.capture.capture`) and by the calibration
(:func:`attnprof.measure.calibrate.calibrate`) for their whole length, so that two of them never run on
one device at once, whichever process runs them."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

#: Where the capture lock files are: one directory for the whole machine, not TMPDIR (a job's TMPDIR follows
#: its Snakemake ``tmpdir`` resource, so two runs could lock two files).
LOCK_DIR = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()


def lock_folder() -> Path:
    """Where the capture locks and GPU claims are: :data:`LOCK_DIR`, or the directory the environment variable
    ATTNPROF_CAPTURE_LOCK_DIR names (the tests give each test process its own)."""
    return Path(os.environ.get("ATTNPROF_CAPTURE_LOCK_DIR") or LOCK_DIR)


def capture_lock_path(device: str, gpu_uuid: str | None = None) -> Path:
    """The file whose exclusive lock (flock) each capture on ``device`` ('cuda' | 'cpu') holds
    for its whole length, in :func:`lock_folder`: on a GPU named by its UUID (``gpu_uuid``,
    :mod:`attnprof.measure.gpus`) one per GPU, shared by every user of the node; else one per user
    and device kind."""
    if gpu_uuid:
        from attnprof.measure.gpus import gpu_file

        return gpu_file(gpu_uuid, "lock", lock_folder())
    return lock_folder() / f"attnprof-capture-{os.getuid()}-{device}.lock"


@contextlib.contextmanager
def device_lock(device: str, gpu_uuid: str | None = None):
    """Hold :func:`capture_lock_path`'s lock; yields the seconds spent waiting for it. Captures on
    one GPU never overlap, whichever process runs them: a capture worker serves one capture
    at a time, but a run with another environment or package (another ``--cores``, an edit to
    the package during the run, a second run beside it, another user's run) has a worker of its own, and
    ``capture_mode: process`` has none. The lock goes with the process that holds it."""
    import fcntl

    t0 = time.perf_counter()
    path = capture_lock_path(device, gpu_uuid)
    try:
        if gpu_uuid:
            from attnprof.measure.gpus import open_shared

            fh = open_shared(path)
        else:
            fh = open(path, "a")
    except OSError as exc:
        raise RuntimeError(f"the capture lock {path} cannot be opened ({exc.strerror}); it lives in /tmp, or in the "
                           "directory ATTNPROF_CAPTURE_LOCK_DIR names, which must exist and be writable") from exc
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            from attnprof.measure.capture import log  # here: capture imports this module

            log(f"waiting for another capture on {gpu_uuid or device} to end (lock {path})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield round(time.perf_counter() - t0, 3)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
