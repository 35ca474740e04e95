"""The device's capture lock: one exclusive file lock (flock) per GPU (by UUID, for every user), or per user and device
kind where no GPU is named, held by every
capture (:func:`attnprof.measure.capture.capture`) and by the calibration
(:func:`attnprof.measure.calibrate.calibrate`) for their whole length, so that two of them never run on
one device at once, whichever process runs them; and the files of those locks and of the GPU claims
(:func:`attnprof.measure.gpus.claim_gpu`), shared by every user of the node."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

from attnprof.measure.progress import log

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
        fh = open_shared(path) if gpu_uuid else open(path, "a")
    except OSError as exc:
        raise RuntimeError(f"the capture lock {path} cannot be opened ({exc.strerror}); it lives in /tmp, or in the "
                           "directory ATTNPROF_CAPTURE_LOCK_DIR names, which must exist and be writable") from exc
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another capture on {gpu_uuid or device} to end (lock {path})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield round(time.perf_counter() - t0, 3)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- the files that keep two captures off one GPU -----------------------------------------------------

def gpu_file(uuid: str, what: str, folder: str | Path) -> Path:
    """``<folder>/attnprof-gpu-<uuid>.<what>``: the claim ('claim') or the capture lock ('lock') of one GPU, shared
    by every user (no user id in the name)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in uuid)
    return Path(folder) / f"attnprof-gpu-{safe}.{what}"


def open_shared(path: Path):
    """Open ``path`` for a flock, shared by every user of the node: an existing file as it is (read-write, else
    read-only: a flock needs neither write access nor ownership, and Linux's ``fs.protected_regular`` refuses
    ``O_CREAT`` on another user's file in a sticky directory such as /tmp even at mode 0666); a new one created
    readable and writable by all (0666 whatever the umask). Raises RuntimeError naming the file and the cause."""
    folder = path.parent
    if not folder.is_dir():
        raise RuntimeError(f"the GPU lock file {path} cannot be made: its folder {folder} does not exist (it is /tmp, or "
                           "the folder ATTNPROF_CAPTURE_LOCK_DIR names)")
    for flags in (os.O_RDWR, os.O_RDONLY):
        try:
            return os.fdopen(os.open(path, flags), "r+" if flags == os.O_RDWR else "r")
        except FileNotFoundError:
            break
        except PermissionError:
            continue
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise RuntimeError(f"the GPU lock file {path} cannot be opened or made ({exc.strerror}): its folder {folder} "
                           "must be writable by every user of the GPUs (it is /tmp, or the folder "
                           "ATTNPROF_CAPTURE_LOCK_DIR names)") from exc
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return os.fdopen(fd, "r+")
