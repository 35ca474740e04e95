"""The environment a result set was captured in, and the run id derived from it.

Parse-time helpers (:func:`detect_gpu`, :func:`default_run_id`) do not import torch:
the Snakefile calls them on every invocation, dry runs included.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path


def _nvidia_smi(query: str) -> list[str]:
    """Rows of ``nvidia-smi --query-gpu=<query> --format=csv,noheader``; [] when
    nvidia-smi is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def detect_gpu() -> str | None:
    """Name of the first GPU nvidia-smi lists (e.g. 'NVIDIA H200'), or None."""
    rows = _nvidia_smi("name")
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
                m = re.search(pattern, text, re.M)
                if m:
                    info[key] = m.group(1)
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-cudnn"):
            info["cudnn"] = dist.version
            break
    return info


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
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
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
        drivers = _nvidia_smi("driver_version")
        env["driver"] = drivers[0] if drivers else None
    return env
