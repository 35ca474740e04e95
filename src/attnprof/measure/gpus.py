"""The GPUs a run may use, and which one a capture runs on.

Discovery (:func:`run_gpus`, no torch: the Snakefile calls it at parse time) reads ``nvidia-smi``'s list of the node's
GPUs, keeps those ``CUDA_VISIBLE_DEVICES`` makes visible and then those the config key ``gpus`` chooses
(:func:`attnprof.model.gpus.visible_gpus`, :func:`attnprof.model.gpus.select_gpus`). Every capture process is started with ``CUDA_VISIBLE_DEVICES`` set to its GPU's UUID
(:func:`pinned_environ`): whatever order CUDA enumerates the node's GPUs in, ``cuda:0`` in the capture is that GPU.

Assignment (:func:`claim_gpu`): with several GPUs, a capture job takes the first of the run's GPUs that no other
capture job holds, by a non-blocking ``flock`` on that GPU's claim file, and holds it while its capture runs. Snakemake
starts at most as many capture jobs as the run has GPUs (the ``gpu`` resource), so a job finds a free one at once
unless another run or user holds it; then it waits for whichever is released first.

Both files, the claim and the device lock that the capture itself holds
(:func:`attnprof.measure.lock.device_lock`), are named by the GPU's UUID, not by an index, and are shared by every user
of the node (mode 0666 in ``/tmp``): two runs, or two users, whatever their ``CUDA_VISIBLE_DEVICES`` says, never
capture on one GPU at once.

Stand-in GPUs for tests without one: the environment variable ``ATTNPROF_NVIDIA_SMI`` replaces nvidia-smi's answer
(its CSV rows, as :data:`QUERY` asks for them).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import time
from pathlib import Path

from attnprof.measure.lock import gpu_file, lock_folder, open_shared
from attnprof.model.gpus import QUERY, Gpu, parse_nvidia_smi, select_gpus, visible_gpus

#: Test hook: CSV rows that stand in for nvidia-smi's answer to :data:`QUERY`.
STANDIN_ENV = "ATTNPROF_NVIDIA_SMI"


def nvidia_smi(query: str, options: str = "noheader") -> list[str]:
    """Rows of ``nvidia-smi --query-gpu=<query> --format=csv,<options>``; [] when nvidia-smi is missing or fails."""
    try:  # not installed (FileNotFoundError: nothing of that name on PATH), not runnable, or stuck
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", f"--format=csv,{options}"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def node_gpus() -> list[Gpu]:
    """Every GPU of the node, from nvidia-smi (or :data:`STANDIN_ENV`); [] when nvidia-smi is missing, fails or lists
    no GPU. Raises ValueError (:func:`attnprof.model.gpus.parse_nvidia_smi`) for GPU rows in another format."""
    text = os.environ.get(STANDIN_ENV)
    if text is None:
        text = "\n".join(nvidia_smi(QUERY, "noheader,nounits"))
    if not any(line.strip()[:1].isdigit() for line in text.splitlines()):
        return []  # no GPU row: nvidia-smi said so in words ('No devices were found') or printed nothing
    return parse_nvidia_smi(text)


def run_gpus(choice="all", environ: dict | None = None) -> list[Gpu]:
    """The GPUs a run captures on: the node's (:func:`node_gpus`), those visible (:func:`visible_gpus`, from
    ``environ``'s CUDA_VISIBLE_DEVICES, default this process's), those ``choice`` keeps (:func:`select_gpus`).
    [] without nvidia-smi. Raises ValueError as :func:`select_gpus` does."""
    environ = os.environ if environ is None else environ
    return select_gpus(visible_gpus(node_gpus(), environ.get("CUDA_VISIBLE_DEVICES")), choice)


def pinned_environ(gpu: Gpu, env: dict | None = None) -> dict:
    """``env`` (the variables set over a capture process's environment) with ``CUDA_VISIBLE_DEVICES`` set to
    ``gpu``'s UUID, so that the capture process sees that GPU alone, as ``cuda:0``."""
    return {**(env or {}), "CUDA_VISIBLE_DEVICES": gpu.uuid}


@contextlib.contextmanager
def claim_gpu(gpus: list[Gpu], folder: str | Path, poll_s: float = 0.2, say=None):
    """Hold the claim of one GPU of ``gpus`` for the block; yields the :class:`Gpu`. Takes the first whose claim is
    free, in ``gpus``' order; when none is, waits for whichever is released first (``say``, a callable, is told
    once). The claim goes with the process that holds it (a flock). Raises ValueError for an empty list."""
    import fcntl

    if not gpus:
        raise ValueError("no GPU to claim")
    with contextlib.ExitStack() as files:
        claims = [files.enter_context(open_shared(gpu_file(g.uuid, "claim", folder))) for g in gpus]
        for attempt in itertools.count():
            for gpu, fh in zip(gpus, claims):
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield gpu
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)
                return
            if attempt == 0 and say is not None:
                say(f"all {len(gpus)} GPUs of the run are busy with other captures: waiting for one")
            time.sleep(poll_s)


@contextlib.contextmanager
def job_gpu(device: str, choice="all", say=None):
    """The GPU a capture-stage job (capture, calibrate, environment) runs its work on, held for the block; yields a
    :class:`Gpu`, or None where there is none to name (a CPU run; CUDA without nvidia-smi; ``choice`` 'any', a
    cluster job: the capture process then takes the device as CUDA gives it, and records which). With one GPU it is taken at once (the capture worker's queue orders that run's
    captures); with several, through :func:`claim_gpu`. Raises ValueError as :func:`select_gpus` does."""
    # choice 'any', a cluster job: its allocation's GPU as CUDA gives it; the capture records which
    gpus = run_gpus(choice) if device == "cuda" and choice != "any" else []
    if len(gpus) < 2:
        yield gpus[0] if gpus else None
        return
    with claim_gpu(gpus, lock_folder(), say=say) as gpu:
        yield gpu


def gpu_choice(resources) -> list[str] | str:
    """A capture-stage job's ``gpu_choice`` resource as :func:`job_gpu` takes it: the run's GPUs by UUID
    (comma-separated) as a list; 'all' (no GPU listed at parse time, and a job of an older workflow without the
    resource); 'any' (under a cluster executor: the job's own allocation, taken as CUDA gives it)."""
    value = str(getattr(resources, "gpu_choice", None) or "all")
    return value if value in ("all", "any") else value.split(",")


def per_job_allocation(resources) -> bool:
    """Whether each capture-stage job has a GPU allocation of its own (a cluster executor: ``gpu_choice`` 'any'): the
    GPUs one job sees are then not the run's."""
    return gpu_choice(resources) == "any"


@contextlib.contextmanager
def job_environ(device: str, resources, env: dict | None = None, say=None):
    """A capture-stage job's GPU and the variables its work's process gets: yields ``(gpu, env)``, the
    :class:`Gpu` of :func:`job_gpu` (held for the block; from the job's ``gpu_choice`` resource, :func:`gpu_choice`)
    and ``env`` (an A/B environment's variables, or None) pinned to it (:func:`pinned_environ`); ``(None, env)``
    where there is no GPU to name. Raises ValueError as :func:`job_gpu` does."""
    with job_gpu(device, gpu_choice(resources), say=say) as gpu:
        yield gpu, (env if gpu is None else pinned_environ(gpu, env))
