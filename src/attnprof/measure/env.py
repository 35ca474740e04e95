"""The environment a result set was captured in, and the run id derived from it.

Parse-time helpers (:func:`detect_gpu`, :func:`default_run_id`) do not import torch:
the Snakefile calls them on every invocation, dry runs included.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from attnprof.measure.gpus import node_gpus, nvidia_smi, visible_gpus


def detect_gpu() -> str | None:
    """Name of the first GPU this process may use (e.g. 'NVIDIA H200'): the first that nvidia-smi lists and
    CUDA_VISIBLE_DEVICES leaves visible (:func:`attnprof.measure.gpus.visible_gpus`), or None."""
    try:
        gpus = visible_gpus(node_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    except ValueError:  # GPU rows in another format
        gpus = None
    named = [g.name for g in gpus or [] if g.name]  # a MIG instance has no model of its own in nvidia-smi's list
    if named or gpus == []:
        return named[0] if named else None
    # rows in another format, or MIG instances only: the first GPU nvidia-smi lists by name
    rows = [r for r in nvidia_smi("name") if r and not r.lower().startswith(("no devices", "nvidia-smi has failed"))]
    return rows[0] if rows else None


def package_version(name: str) -> str | None:
    """Installed version of a distribution, without importing it; None if absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def slug(text: str) -> str:
    """File-name-safe lower-case form: 'NVIDIA H200' -> 'nvidia-h200', '2.11.0+cu130' -> '2.11.0-cu130'."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def torch_build() -> dict:
    """torch's version and the CUDA it was built with, read from ``torch/version.py``
    without importing torch, and the cuDNN wheel's version when one is installed.
    Keys: torch, cuda, cudnn (None where unknown)."""
    import importlib.util

    info = {"torch": package_version("torch"), "cuda": None, "cudnn": None}
    spec = importlib.util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        version_py = Path(next(iter(spec.submodule_search_locations))) / "version.py"
        if version_py.exists():
            text = version_py.read_text()
            for key, pattern in (("torch", r"^__version__\s*=\s*['\"]([^'\"]+)"), ("cuda", r"^cuda\s*(?::\s*\S+)?\s*=\s*['\"]([^'\"]+)")):
                if m := re.search(pattern, text, re.M):
                    info[key] = m.group(1)
    info["cudnn"] = next((dist.version for dist in importlib.metadata.distributions()
                          if (dist.metadata["Name"] or "").lower().startswith("nvidia-cudnn")), None)
    return info


#: The source folder of this checkout (the one holding attnprof/): another environment's Python (config
#: ``environments``) runs this checkout's code from here, so it needs only the third-party packages.
SOURCE_DIR = Path(__file__).resolve().parents[2]


def interpreter_environ(overrides: dict | None = None) -> dict:
    """The process environment for another Python environment's capture processes (config ``environments``):
    this process's (os.environ) with ``overrides`` set over it and :data:`SOURCE_DIR` put first on
    PYTHONPATH, so that its interpreter imports this checkout's attnprof (not one installed there).
    Returns a new dict; values are strings."""
    env = {**os.environ, **{k: str(v) for k, v in (overrides or {}).items()}}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_DIR), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                                        if p and p != str(SOURCE_DIR)]]))
    return env


def torch_build_of(python: str, overrides: dict | None = None) -> dict:
    """:func:`torch_build` as Python executable ``python`` sees it (its own site-packages; read without
    importing torch, in a subprocess of about 0.1 s). Raises RuntimeError naming the executable and its
    error output when it cannot run or cannot find torch (``torch`` None: not installed there)."""
    code = "import json; from attnprof.measure.env import torch_build; print(json.dumps(torch_build()))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                             env=interpreter_environ(overrides))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot run the Python executable {python!r}: {exc}") from None
    if out.returncode != 0:
        hint = " (an A/B environment needs Python 3.11 or later)" if "SyntaxError" in out.stderr else ""
        raise RuntimeError(f"{python} could not read its torch build (exit {out.returncode}){hint}: "
                           f"{out.stderr.strip()[-600:]}")
    try:
        build = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError(f"{python} did not answer as a Python interpreter with attnprof on its path (it printed "
                           f"{out.stdout.strip()[-200:]!r}): is it a Python executable?") from None
    if not build.get("torch"):
        raise RuntimeError(f"{python} has no torch installed (install it there, e.g. {python} -m pip install torch)")
    return build


def call_in_interpreter(python: str, overrides: dict | None, target: str, args: list | None = None):
    """Call ``target`` ("module:function", e.g. "attnprof.measure.env:capture_environment") with ``args``
    (JSON values) in a fresh process of Python executable ``python`` with ``overrides`` set
    (:func:`interpreter_environ`) and return its JSON result: an A/B run's environment record and calibration
    under ``capture_mode: process`` (a Slurm run). Raises RuntimeError naming the executable, the call and
    the end of its error output when it fails."""
    code = ("import importlib, json, sys; m, f = sys.argv[1].split(':'); "
            "r = getattr(importlib.import_module(m), f)(*json.loads(sys.argv[2])); "
            "sys.stdout.write('\\n' + json.dumps(r, default=str))")
    out = subprocess.run([python, "-c", code, target, json.dumps(args or [])], capture_output=True, text=True,
                         env=interpreter_environ(overrides))
    if out.returncode != 0:
        raise RuntimeError(f"{target} failed in {python} (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def default_run_id(device: str, gpu_name: str | None, build: dict) -> str:
    """Run id for ``run: auto``: ``<gpu or cpu>_torch<version>[_cu<cuda>][_cudnn<version>]``,
    e.g. ``nvidia-h200_torch2.11.0-cu130_cu13.0_cudnn9.19.0.56``, so that a result set
    captured after an upgrade of torch, CUDA or cuDNN (or on another GPU) lands beside the
    old one."""
    where = slug(gpu_name) if device == "cuda" and gpu_name else "cpu"
    run = f"{where}_torch{slug(build.get('torch') or 'unknown')}"
    if device == "cuda":
        run += f"_cu{build['cuda']}" if build.get("cuda") else ""
        run += f"_cudnn{build['cudnn']}" if build.get("cudnn") else ""
    return run


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else platform.processor() or the
    machine type."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def host_load() -> dict:
    """What else the host was doing when a capture started: 1-minute load average (None where
    os.getloadavg is missing) and the logical CPU count."""
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    return {"load_avg_1m": load, "cpu_count": os.cpu_count()}


def capture_environment() -> dict:
    """Versions and hardware the captures ran with: GPU name and count, driver, torch,
    CUDA (torch build), cuDNN, Python, Snakemake, platform. Imports torch."""
    import torch

    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "snakemake": package_version("snakemake"),
        "pandas": package_version("pandas"),
        "matplotlib": package_version("matplotlib"),
        "cuda_available": torch.cuda.is_available(),
        "gpu_name": None,
        "gpu_count": 0,
        "driver": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu_name=props.name,
            gpu_count=torch.cuda.device_count(),
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
        )
        env["driver"] = next(iter(nvidia_smi("driver_version")), None)
    return env
