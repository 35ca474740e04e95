"""What the plan needs to know of this machine (attnprof.model.plan.Machine), probed once where Snakemake plans."""

from __future__ import annotations

import os
from pathlib import Path

from attnprof.measure.env import default_run_id, detect_gpu, slug, torch_build_of
from attnprof.measure.gpus import run_gpus
from attnprof.model.plan import Machine, build_plan


def probe_machine(config: dict, cluster: bool, build: dict, cores: int) -> Machine:
    """The visible GPUs (one nvidia-smi call; none on a CPU run or under a cluster executor), the first GPU's name
    where they name none, and each A/B environment's torch build (its interpreter, about 0.1 s each). Raises
    ValueError naming the config key (an environment's interpreter that is not an executable, a build it cannot
    read) or nvidia-smi."""
    visible = ()
    if config["device"] != "cpu" and not cluster:
        try:
            visible = tuple(run_gpus("all"))
        except ValueError as exc:
            raise ValueError(f"nvidia-smi: {exc}") from None
    detected = detect_gpu() if config["device"] in ("auto", "cuda") and not any(g.name for g in visible) else None
    return Machine(visible=visible, detected=detected, torch_build=build, cluster=cluster, cores=cores,
                   env_builds=environment_builds(config.get("environments") or {}))


def environment_builds(environments: dict) -> dict:
    """Each A/B environment's torch build, by name. Raises ValueError naming ``environments.<name>.python``."""
    builds = {}
    for name, spec in environments.items():
        exe = Path(spec["python"])
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            raise ValueError(f"config environments.{name}.python: {spec['python']!r} is not an executable file "
                             f"(relative paths are from the working directory {Path.cwd()}); create it, e.g. "
                             "python3 -m venv .venv-b && .venv-b/bin/pip install torch==2.14.1 -e .")
        try:
            builds[name] = torch_build_of(spec["python"], dict(spec.get("env") or {}))
        except RuntimeError as exc:
            raise ValueError(f"config environments: {exc}") from None
    return builds


def cores(workflow) -> int:
    """Snakemake's core count; 1 where it was given none (--report, --lint: they run no job)."""
    from snakemake.exceptions import WorkflowError

    try:
        return workflow.cores
    except WorkflowError:
        return 1


def plan_of(config: dict, cluster: bool, build: dict, cores: int):
    """The run's plan (attnprof.model.plan.build_plan) on this machine. Raises ValueError naming the config key."""
    return build_plan(config, probe_machine(config, cluster, build, cores), default_run_id, slug)
