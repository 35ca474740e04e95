"""The run's plan, built once from the config and the machine, and the one home of a result set's layout.

:func:`build_plan` is a plain function (no Snakemake, no file written, no GPU probed: the caller hands it what it
found, :class:`Machine`), so it is unit-tested on its own (tests/test_plan.py). The Snakefile builds the plan once
and every rule reads it; :class:`Layout` spells every path of a result set (``results/<run>/captures/...``,
``tables/...``, ``plots/...``, the run tables), so no rule, script or module spells them by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

from attnprof.model.config import ab_compare_name, ab_run_name, capture_rank
from attnprof.model.formats import current_record
from attnprof.model.gpus import mixed_models, select_gpus
from attnprof.model.names import (CAPTURE_FILES, CAPTURE_TABLES, REPEAT_PREFIX, RUN_FILES, SCALING_PLOTS, SHAPE_PLOTS,
                                  TIMELINE, repeat_dir, repeat_of)
from attnprof.model.variants import CONTROL, ends_capture_process, expand_shapes

#: The command that re-renders a result set captured elsewhere (README, "Render elsewhere").
RENDER_COMMAND = ".venv/bin/snakemake --profile workflow/profiles/render results/{run}/report.pdf"


@dataclass(frozen=True)
class Layout:
    """Every path of a result set, ``<root>/<run>/...``, and the one reading of a capture's or a table's path back
    into its (shape, variant, repeat); the ``{...}`` defaults give Snakemake patterns."""

    root: str = "results"
    #: The folders of a result set: the captures (primary records: trace and status.json per capture), their tables
    #: and the figures (derived, re-made from the captures).
    CAPTURES: ClassVar[str] = "captures"
    TABLES: ClassVar[str] = "tables"
    PLOTS: ClassVar[str] = "plots"

    @classmethod
    def around(cls, run_dir) -> tuple[Layout, str]:
        """(the layout, the result set) of the result set folder ``run_dir``: ``results/x`` -> (Layout("results"), "x")."""
        return cls(str(Path(run_dir).parent)), Path(run_dir).name

    def run_dir(self, run: str = "{run}") -> str:
        return f"{self.root}/{run}"

    def run_file(self, name: str, run: str = "{run}") -> str:
        """Result set ``run``'s file ``name`` (RUN_FILES: summary, repeats, kernels, findings, env, ...)."""
        return f"{self.run_dir(run)}/{RUN_FILES[name]}"

    @staticmethod
    def in_run(folder: str, shape: str = "{shape}", variant: str = "{variant}", repeat: int | str | None = "{repeat}") -> str:
        """The folder of one capture's files inside its result set: ``captures/<shape>/<variant>/r<k>`` (``folder``
        :data:`CAPTURES`; :data:`TABLES`: its tables); ``repeat`` None: the (shape, variant) folder of every repeat."""
        return f"{folder}/{shape}/{variant}" + ("" if repeat is None else f"/{repeat_dir(repeat)}")

    def capture_dir(self, run: str = "{run}", shape: str = "{shape}", variant: str = "{variant}",
                    repeat: int | str = "{repeat}") -> str:
        return f"{self.run_dir(run)}/{self.in_run(self.CAPTURES, shape, variant, repeat)}"

    def capture_file(self, name: str, run: str = "{run}", **where) -> str:
        """A capture's file ``name`` (CAPTURE_FILES: trace, status)."""
        return f"{self.capture_dir(run, **where)}/{CAPTURE_FILES[name]}"

    def capture_link(self, name: str, shape: str, variant: str, repeat: int = 1) -> str:
        """A capture's file ``name`` relative to its result set's folder: a link from the report beside it."""
        return f"{self.in_run(self.CAPTURES, shape, variant, repeat)}/{CAPTURE_FILES[name]}"

    def table_file(self, name: str, run: str = "{run}", shape: str = "{shape}", variant: str = "{variant}",
                   repeat: int | str = "{repeat}") -> str:
        """A capture's table ``name`` (CAPTURE_TABLES: kernels, forwards, launches, ops, device, recipe, ...)."""
        return f"{self.run_dir(run)}/{self.in_run(self.TABLES, shape, variant, repeat)}/{CAPTURE_TABLES[name]}"

    @classmethod
    def capture_of(cls, path, folder: str | None = None) -> dict | None:
        """What the path of a capture's file says (``<run_dir>/captures/<shape>/<variant>/r<k>/<file>``; ``folder``
        :data:`TABLES`: of one of its tables): {"run_dir" (a Path), "shape_key", "variant", "repeat"}; None for a path
        not in that layout."""
        p = Path(path)
        if len(p.parents) < 5 or p.parents[3].name != (folder or cls.CAPTURES) or (repeat := repeat_of(p.parent.name)) is None:
            return None
        return {"run_dir": p.parents[4], "shape_key": p.parents[2].name, "variant": p.parents[1].name, "repeat": repeat}

    def plot(self, name: str, run: str = "{run}", shape: str | None = "{shape}") -> str:
        """A per-shape figure (``shape`` given) or a run-wide one (``shape=None``)."""
        return f"{self.run_dir(run)}/{self.PLOTS}/" + (f"{shape}/{name}.png" if shape else f"{name}.png")

    def counters(self, ext: str, run: str = "{run}", shape: str = "{shape}", variant: str = "{variant}") -> str:
        return f"{self.run_dir(run)}/counters/{shape}/{variant}.{ext}"

    def log(self, name: str, run: str = "{run}") -> str:
        return f"{self.run_dir(run)}/logs/{name}.log"

    def rebuild_marker(self, run: str = "{run}", epoch: str = "{epoch}") -> str:
        """Rule rebuild's marker of result set ``run`` (attnprof.runtime.integrity.ResultSetState)."""
        return f"{self.run_dir(run)}/logs/rebuild/epoch-{epoch}"

    def capture_log(self, stage: str, run: str = "{run}") -> str:
        """The log of a per-capture job of ``stage`` (capture, extract)."""
        return f"{self.run_dir(run)}/logs/{stage}/{{shape}}/{{variant}}/{repeat_dir('{repeat}')}.log"

    def compare_file(self, ext: str, name: str = "{name}") -> str:
        return f"{self.root}/compare/{name}/compare.{ext}"

    def compare_log(self, step: str, name: str = "{name}") -> str:
        return f"{self.root}/compare/{name}/compare_{step}.log"

    def history_file(self, ext: str, name: str = "{name}") -> str:
        """A history's file (config history; attnprof.analysis.history): history.{json,csv,html,pdf}."""
        return f"{self.root}/history/{name}/history.{ext}"

    def legacy_captures(self, run: str) -> list[Path]:
        """Status records of a result set made before repeats (not in an r<k>/ folder)."""
        return sorted(Path(self.run_dir(run)).glob(f"{self.in_run(self.CAPTURES, '*', '*', None)}/{CAPTURE_FILES['status']}"))

    def control_shapes(self, run: str) -> list[str]:
        """The shapes result set ``run`` holds captures of the profiler's control at (attnprof.analysis.control)."""
        return sorted(p.parent.name for p in Path(self.run_dir(run)).glob(self.in_run(self.CAPTURES, "*", CONTROL, None)))

    def has_captures(self, run: str) -> bool:
        """Whether result set ``run`` holds its captures (a copy may come without them)."""
        return Path(self.run_dir(run), self.CAPTURES).is_dir()

    def captures_of(self, run: str, shapes, variants, repeats: int, name: str) -> list[str]:
        """File ``name`` (e.g. "status") of every capture of ``run``: shapes x variants x repeats 1..``repeats``."""
        return [self.capture_file(name, run, shape=s, variant=v, repeat=k)
                for s in shapes for v in variants for k in range(1, repeats + 1)]

    def tables_of(self, run: str, shapes, variants, repeats) -> list[str]:
        """Every per-capture table of those captures (``repeats``: a count, or the list of repeats)."""
        reps = range(1, repeats + 1) if isinstance(repeats, int) else repeats
        return [self.table_file(n, run, s, v, k) for n in CAPTURE_TABLES for s in shapes for v in variants for k in reps]

    def plots_of(self, run: str, shapes) -> list[str]:
        return ([self.plot(p, run, s) for s in shapes for p in [*SHAPE_PLOTS, TIMELINE]]
                + [self.plot(p, run, None) for p in SCALING_PLOTS])


#: The run tables whose writers record their checksums (scripts/summarize.py, scripts/findings.py).
CHECKSUMMED = ("summary", "repeats", "kernels", "findings", "control")


@dataclass(frozen=True)
class Grid:
    """What one result set holds: its shape keys, variants and repeats, and the shapes its control was captured at."""

    shapes: tuple[str, ...]
    variants: tuple[str, ...]
    repeats: int
    control_shapes: tuple[str, ...]


@dataclass(frozen=True)
class Machine:
    """What the caller found on this machine: the GPUs CUDA_VISIBLE_DEVICES leaves visible (``visible``, each with
    ``name`` and ``uuid``; None: not probed or no nvidia-smi), the first GPU's name by another way (``detected``),
    Snakemake's torch build, each A/B environment's (by name), whether a cluster executor runs the jobs, and the
    cores a CPU capture takes."""

    visible: tuple = ()
    detected: str | None = None
    torch_build: Mapping = field(default_factory=dict)
    env_builds: Mapping = field(default_factory=dict)
    cluster: bool = False
    cores: int = 1


@dataclass(frozen=True)
class Plan:
    """The run, decided once: device, result sets, grid, A/B environments, GPUs, capture mode and compare."""

    device: str
    gpu_name: str | None
    run: str
    this_runs: tuple[str, ...]
    ab_runs: Mapping[str, str]  # result set -> environment name
    ab_compare: str | None
    environments: Mapping[str, Mapping]
    torch_version: str
    ab_torch: Mapping[str, str]
    grid: Grid
    custom: Mapping
    gpus: tuple
    capture_mode: str
    capture_threads: int
    gpu_units: int
    gpu_choice: str
    compare_runs: tuple[str, ...]
    compare_name: str
    # an A/B run's rounds added where undecided (config top_up; attnprof.analysis.verdict): rounds 0 when off or
    # when this is no A/B run
    top_up: Mapping = field(default_factory=lambda: {"rounds": 0, "time_s": 0.0})
    # config history: the result sets of the series in build order, and its folder under results/history/
    history_runs: tuple[str, ...] = ()
    history_name: str = "unset"
    layout: Layout = Layout()

    # --- per result set -------------------------------------------------------------------------------------
    def torch_version_of(self, run: str) -> str:
        """The torch build (text) result set ``run`` captures with: its environment's in an A/B run."""
        return self.ab_torch.get(run, self.torch_version)

    def interpreter_of(self, run: str) -> Mapping:
        """{python, env} of the environment that result set ``run`` (an A/B run's) captures in."""
        return self.environments[self.ab_runs[run]]

    def ab_record(self, run: str) -> dict:
        """What env.json records of the A/B run that result set ``run`` belongs to (key ``ab``)."""
        return {"run": self.run, "environment": self.ab_runs[run], "environments": list(self.environments),
                "python": self.interpreter_of(run)["python"], "env": dict(self.interpreter_of(run)["env"])}

    def grid_of(self, run: str) -> Grid:
        """The grid of result set ``run``: this config's for its own result sets, else the one recorded in that
        result set's env.json (a result set captured elsewhere re-renders here without its grid in our config)."""
        return self.grid if run in self.this_runs else recorded_grid(self.layout, run)

    def capture_priority(self, run: str, repeat, variant: str) -> int:
        """Rule capture's priority: round k of every environment before round k + 1 of any, ABBA within a round
        (attnprof.model.config.ab_priority), and the captures that end their capture process last in their round."""
        return capture_rank(int(repeat), self.ab_runs.get(run), list(self.environments), self.grid.repeats,
                            ends_capture_process(variant, variant in self.custom))

    def compare_runs_of(self, name: str) -> list[str]:
        """The result sets compare folder ``name`` compares: an A/B run's own, else config compare.runs."""
        return list(self.ab_runs) if name == self.ab_compare else list(self.compare_runs)

    def top_up_runs(self) -> tuple[str, ...]:
        """The result sets whose rows may get rounds added (attnprof.analysis.verdict): an A/B run's with top-up on."""
        return tuple(self.ab_runs) if self.top_up["rounds"] > 0 else ()

    def ab_targets(self) -> list[str]:
        reports = [self.layout.run_file(ext, run) for run in self.ab_runs for ext in ("html", "pdf")]
        return reports + [self.layout.compare_file(ext, self.ab_compare) for ext in ("json", "html", "pdf")]


def rounds_of(record: Mapping | None, base: int) -> dict[tuple[str, str], int]:
    """{(shape_key, variant): rounds in all} of the rows a top-up record (attnprof.analysis.verdict.plan_top_up's,
    as a result set's top_up.json holds it; :func:`load_top_up`) added rounds to; the other cells have ``base``.
    An absent record: {}."""
    return {(r["shape_key"], r["variant"]): max(int(r["rounds"]), base) for r in (record or {}).get("rows", [])}


def load_top_up(path: str | Path, grid: Grid | None = None, added: int = 0,
                on_disk: Mapping | None = None) -> dict | None:
    """A result set's top_up.json (None where it has none), checked: an object whose ``rows`` is a list of
    objects each with a text ``variant`` and ``shape_key`` and whole ``rounds`` from 1 to 100; with the result set's
    ``grid`` (its base rounds: ``grid.repeats``) and the most rounds its design adds (``added``: config
    top_up.rounds), each row a cell of the grid with at most ``repeats + added`` rounds; with ``on_disk``
    ({(shape_key, variant): the highest repeat captured}, :func:`captured_rounds`), no cell holding captures beyond
    the rounds the record gives it (they would be left out of repeats.csv, silently). Raises ValueError naming the
    file, what is wrong and the fix (its rounds decide which captures a result set holds)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read ({exc}): {_top_up_fix(path)}") from None
    rows = record.get("rows") if isinstance(record, dict) else None
    if not isinstance(rows, list) or not all(_top_up_row(r) for r in rows):
        raise ValueError(f"{path} is not a top-up record attnprof wrote (rows must list variant, shape_key and "
                         f"rounds from 1 to 100): {_top_up_fix(path)}")
    if grid is not None and (why := _top_up_beyond(record, grid, added, on_disk or {})):
        raise ValueError(f"{path} {why} (edited by hand, or of another result set?): {_top_up_fix(path)}")
    return record


def _top_up_beyond(record: Mapping, grid: Grid, added: int, on_disk: Mapping) -> str | None:
    """What of top-up ``record`` lies outside ``grid`` and its design (:func:`load_top_up`), or None."""
    cells = {(s, v) for s in grid.shapes for v in grid.variants}
    if outside := [f"{r['variant']} at {r['shape_key']}" for r in record["rows"] if (r["shape_key"], r["variant"]) not in cells]:
        return f"names rows outside the result set's grid ({', '.join(outside[:5])})"
    most = grid.repeats + added
    if over := [f"{r['variant']} at {r['shape_key']}: {r['rounds']}" for r in record["rows"] if r["rounds"] > most]:
        return (f"gives rounds beyond its design ({', '.join(over[:5])}; at most {most}: repeats {grid.repeats} plus "
                f"top_up.rounds {added})")
    rounds = rounds_of(record, grid.repeats)
    if left := [f"{v} at {s}: r{k}" for (s, v), k in sorted(on_disk.items()) if k > rounds.get((s, v), grid.repeats)]:
        return (f"leaves captures on disk unaccounted for ({', '.join(left[:5])}{', ...' if len(left) > 5 else ''}"
                " captured, beyond the rounds the record gives those rows)")
    return None


def captured_rounds(layout: Layout, run: str, grid: Grid) -> dict[tuple[str, str], int]:
    """{(shape_key, variant): the highest repeat of the cell with a capture record on disk} of ``run``'s grid."""
    def highest(shape: str, variant: str) -> int:
        folder = Path(layout.capture_dir(run, shape, variant, 1)).parent  # its repeats' folders, r<k>/
        return max((repeat_of(p.parent.name) or 0 for p in folder.glob(f"*/{CAPTURE_FILES['status']}")), default=0)

    return {(s, v): highest(s, v) for s in grid.shapes for v in grid.variants}


def recorded_top_up_rounds(layout: Layout, run: str) -> int:
    """The most rounds top-up could add to a row of result set ``run`` (config top_up.rounds its env.json records;
    0 where it records none, or top-up off: above 0 when the result set was captured with top-up on)."""
    try:
        top_up = _recorded(layout, run)["config"].get("top_up")
        return int(top_up["rounds"]) if top_up_on(top_up) else 0
    except (ValueError, TypeError, AttributeError, KeyError):
        return 0


def _top_up_fix(path: Path) -> str:
    return ("copy it again from where the result set was captured (it says which rounds were added), or, in this "
            f"config's A/B run, delete it and make it anew by naming it: snakemake {path} (the top_up checkpoint; a "
            "plain rerun does not notice that it is gone), then run again")


def _top_up_row(row) -> bool:
    return (isinstance(row, dict) and isinstance(row.get("variant"), str) and isinstance(row.get("shape_key"), str)
            and isinstance(row.get("rounds"), int) and not isinstance(row.get("rounds"), bool) and 1 <= row["rounds"] <= 100)


def _recorded(layout: Layout, run: str) -> dict:
    env_path = Path(layout.run_file("env", run))
    if not env_path.exists():
        raise ValueError(f"{env_path} not found: cannot tell the shapes and variants of result set {run!r}. "
                         f"Re-render {layout.run_dir(run)} first: {_render_fix(layout, run)} (a result set copied "
                         f"from where it was captured holds its env.json: copy the whole folder)")
    try:
        recorded = json.loads(env_path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{env_path} cannot be read ({exc}): copy the result set again from where it was captured "
                         f"(its env.json is written there)") from None
    if isinstance(recorded, dict):  # in the current format (attnprof.model.formats; FormatError: a ValueError)
        recorded = current_record("env", recorded, env_path)
    if missing := _missing_keys(recorded):
        raise ValueError(f"{env_path} has no {' or '.join(repr(k) for k in missing)}: it is not an env.json that "
                         f"attnprof wrote (or it was cut short or edited), so the shapes and variants of result set "
                         f"{run!r} are unknown. Copy {env_path} again from where the result set was captured.")
    return recorded


def top_up_on(top_up) -> bool:
    """Whether config ``top_up`` ({rounds, time_s}) adds rounds at all: both above 0. Off, an A/B run looks once
    (attnprof.analysis.verdict.design_of); with ``time_s`` 0 no round could be added, and a second look would only
    split the error rate."""
    top_up = top_up if isinstance(top_up, Mapping) else {}
    try:
        return int(top_up.get("rounds") or 0) > 0 and float(top_up.get("time_s") or 0) > 0
    except (TypeError, ValueError):
        return False


def _missing_keys(recorded) -> list[str]:
    """The keys an env.json needs to tell a result set's grid that ``recorded`` lacks: ``config`` (a mapping),
    ``device`` (cpu or cuda), then ``config.shapes`` and ``config.variants``."""
    if not isinstance(recorded, dict):
        return ["config", "device"]
    cfg = recorded.get("config")
    missing = [k for k, ok in (("config", isinstance(cfg, dict)), ("device", recorded.get("device") in ("cpu", "cuda")))
               if not ok]
    return missing or [f"config.{k}" for k in ("shapes", "variants") if k not in cfg]


def _render_fix(layout: Layout, run: str) -> str:
    command = RENDER_COMMAND.format(run=run)
    example = Path("examples") / run
    return f"cp -r {example} {layout.root}/ && {command}" if example.is_dir() else command


def recorded_grid(layout: Layout, run: str) -> Grid:
    """The grid recorded in result set ``run``'s env.json (in the current format: attnprof.model.formats). Raises
    ValueError naming the file and the fix when that file is missing, unreadable, in a format version this code
    cannot read or lacks ``config``/``device``, and for a result set whose captures are in the layout from before
    repeats."""
    recorded = _recorded(layout, run)
    cfg = recorded["config"]
    try:
        shapes = tuple(s.key for s in expand_shapes(cfg["shapes"][recorded["device"]]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{layout.run_file('env', run)}: config.shapes has no valid grid for device "
                         f"{recorded['device']!r} ({exc}); copy it again from where the result set was captured") from None
    if legacy := layout.legacy_captures(run):
        raise ValueError(f"{layout.run_dir(run)} was made before repeats ({legacy[0]} is not in a {REPEAT_PREFIX}<k>/ "
                         f"folder): move its captures with: python tools/migrate_repeats.py {layout.run_dir(run)}")
    # the control is held to what env.json records (captures_control: the version that captured it captures the
    # control), as compare does; one on disk counts too (a version-1 env.json that cannot say)
    with_control = recorded.get("captures_control") is True or (shapes and shapes[0] in layout.control_shapes(run))
    control = shapes[:1] if shapes and with_control else ()
    return Grid(shapes, tuple(cfg["variants"]), int(cfg["repeats"]), control)


def _build_text(build: Mapping) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(build.items()))


def _chosen_gpus(config: Mapping, machine: Machine) -> list:
    """The GPUs config ``gpus`` chooses among the visible ones: none on a CPU run, under a cluster executor (each
    job takes its allocation's) and, with device auto, where none is visible."""
    if config["device"] == "cpu" or machine.cluster or (config["device"] == "auto" and not machine.visible):
        return []
    try:
        chosen = select_gpus(list(machine.visible or []), config["gpus"])
    except ValueError as exc:
        raise ValueError(f"config {exc}" if str(exc).startswith("gpus:") else f"nvidia-smi: {exc}") from None
    if (mixed := mixed_models(chosen)) is not None:
        raise ValueError(f"config {mixed}")
    return chosen


def _run_name(config: Mapping, device: str, gpu_name: str | None, build: Mapping, ab: bool,
              name_run: Callable, slug: Callable) -> str:
    """``run: auto`` (or ``auto-<suffix>``) named from the device and torch build; an A/B run's from the device
    alone (its builds are the environments'); any other value as given."""
    run = config["run"]
    if not (run == "auto" or run.startswith("auto-")):
        return run
    if ab:
        return (slug(gpu_name) if device == "cuda" and gpu_name else "cpu") + run[len("auto"):]
    return name_run(device, gpu_name, build) + run[len("auto"):]


def _device(config: Mapping, chosen: list, detected: str | None) -> tuple[str, str | None]:
    """(device, GPU name): device auto is cuda where a GPU is named (a chosen one's, else the one found)."""
    gpu_name = (next((g.name for g in chosen if g.name), None) or detected) if config["device"] in ("auto", "cuda") else None
    return (config["device"] if config["device"] != "auto" else "cuda" if gpu_name else "cpu"), gpu_name


def _environments(config: Mapping) -> dict:
    return {name: {"python": spec["python"], "env": dict(spec.get("env") or {})}
            for name, spec in (config.get("environments") or {}).items()}


def _compare_name(config: Mapping) -> str:
    name = config["compare"]["name"]
    return ("__vs__".join(config["compare"]["runs"]) if name == "auto" else name) or "unset"


def _history(config: Mapping) -> tuple[tuple[str, ...], str]:
    """(runs, name) of config ``history``; name auto: the first and last run joined by ``__to__``."""
    history = config.get("history") or {}
    runs = tuple(history.get("runs") or ())
    name = history.get("name", "auto")
    return runs, (("__to__".join(runs[:1] + runs[-1:]) if name == "auto" else name) or "unset")


def _top_up(config: Mapping, ab: bool) -> dict:
    """config ``top_up`` of an A/B run ({rounds, time_s}); rounds 0 (off) for any other run (nothing to pair) and
    for ``time_s`` 0, which could add no round and would only split the error rate over a second look."""
    top_up = {"rounds": 0, "time_s": 0.0, **(config.get("top_up") or {})}
    return {"rounds": int(top_up["rounds"]) if ab and top_up_on(top_up) else 0, "time_s": float(top_up["time_s"])}


def _gpu_resources(mode: str, ab: bool, gpus: tuple, cluster: bool) -> tuple[int, str]:
    """(units of 'capture'/'gpu' a capture job takes, the GPUs it chooses from): in worker mode a single run's
    captures take none (the worker serves one at a time) unless it runs on several GPUs; under a cluster executor
    each job takes its allocation's GPU ("any")."""
    units = 0 if mode == "worker" and not ab and len(gpus) <= 1 else 1
    return units, "any" if cluster else (",".join(g.uuid for g in gpus) or "all")


def build_plan(config: Mapping, machine: Machine, name_run: Callable, slug: Callable) -> Plan:
    """The plan of ``config`` on ``machine`` (config validated; ``name_run``/``slug``: attnprof.measure.env's
    default_run_id and slug). Raises ValueError with the config key for a choice of GPUs that cannot be."""
    chosen = _chosen_gpus(config, machine)
    device, gpu_name = _device(config, chosen, machine.detected)
    environments = _environments(config)
    run = _run_name(config, device, gpu_name, machine.torch_build, bool(environments), name_run, slug)
    ab_runs = {ab_run_name(run, name): name for name in environments}
    shapes = tuple(s.key for s in expand_shapes(config["shapes"][device]))
    # an A/B run keeps both environments on one device (its pairing compares them there): the first GPU only
    gpus = tuple(chosen[:1] if ab_runs else chosen) if device == "cuda" else ()
    mode = "process" if machine.cluster else config["capture_mode"]
    units, choice = _gpu_resources(mode, bool(ab_runs), gpus, machine.cluster)
    return Plan(
        device=device, gpu_name=gpu_name, run=run, this_runs=tuple(ab_runs) or (run,), ab_runs=ab_runs,
        ab_compare=ab_compare_name(run) if ab_runs else None, environments=environments,
        torch_version=_build_text(machine.torch_build),
        ab_torch={r: _build_text(machine.env_builds[name]) for r, name in ab_runs.items()},
        grid=Grid(shapes, tuple(config["variants"]), int(config["repeats"]), shapes[:1]),
        custom=dict(config.get("custom_variants") or {}), gpus=gpus, capture_mode=mode,
        capture_threads=machine.cores if device == "cpu" else 1, gpu_units=units, gpu_choice=choice,
        compare_runs=tuple(config["compare"]["runs"]), compare_name=_compare_name(config),
        top_up=_top_up(config, bool(ab_runs)), history_runs=_history(config)[0], history_name=_history(config)[1],
    )


def forwards_message(profiler: Mapping) -> str | None:
    """Why no capture could ever be complete with these profiler settings, or None."""
    if profiler["min_complete_forwards"] <= profiler["schedule"]["active"]:
        return None
    return (f"profiler.min_complete_forwards ({profiler['min_complete_forwards']}) is larger than "
            f"profiler.schedule.active ({profiler['schedule']['active']}): no capture could ever be complete")


def captured_elsewhere(layout: Layout, run: str, this_runs) -> str:
    """Why a capture-stage output of result set ``run`` (not this config's) cannot be made here, and the command
    that re-renders that result set instead."""
    ours = " or ".join(layout.run_dir(r) for r in this_runs)
    return (f"{layout.run_dir(run)} is not this configuration's result set ({ours}); it was captured elsewhere "
            f"or with another config, and this machine must not add captures to it or relabel it. Re-render it "
            f"from its traces: {RENDER_COMMAND.format(run=run)} "
            f"(or pass --config run={run} with that result set's own config to capture into it here).")
