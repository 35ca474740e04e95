# Shared names: device, run id, shapes and the code/template files each stage depends on.
import json
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from attnprof.model.config import (
    ab_compare_name,
    capture_rank,
    ab_run_name,
    lost_captures,
    subset_message,
)
from attnprof.runtime.integrity import changed_files, lost_files, rebuild_epoch
from attnprof.measure.gpus import run_gpus
from attnprof.model.gpus import mixed_models, select_gpus
from attnprof.measure.env import (
    default_run_id,
    detect_gpu,
    slug,
    torch_build,
    torch_build_of,
)
from attnprof.model.names import (
    REPEAT_PREFIX,
    CAPTURE_FILES,
    CAPTURE_TABLES,
    RUN_FILES,
    SCALING_PLOTS,
    SHAPE_PLOTS,
    TIMELINE,
)
from attnprof.model.variants import (
    CONTROL,
    KEY_CONSTRAINT,
    ends_capture_process,
    expand_shapes,
)
from attnprof.measure.forwards import variant_fingerprint

if (
    config["profiler"]["min_complete_forwards"]
    > config["profiler"]["schedule"]["active"]
):
    raise WorkflowError(
        f"profiler.min_complete_forwards ({config['profiler']['min_complete_forwards']}) is larger than "
        f"profiler.schedule.active ({config['profiler']['schedule']['active']}): no capture could ever be complete"
    )

# Under a cluster executor (Slurm) every job is its own allocation (the main process: non-local execution; the jobs:
# remote mode): captures run in fresh processes there, and each takes the GPU its allocation has.
CLUSTER = workflow.non_local_exec or workflow.remote_exec


# The GPUs config gpus chooses among those CUDA_VISIBLE_DEVICES makes visible (attnprof.measure.gpus); none on a CPU
# run, without nvidia-smi, and under a cluster executor (each job takes the GPU of its own allocation). The run id
# names the first chosen GPU's model.
def _chosen_gpus():
    if config["device"] == "cpu" or CLUSTER:
        return []
    try:
        visible = run_gpus("all")  # one nvidia-smi call
        if config["device"] == "auto" and not visible:
            return []  # no GPU here: a CPU run, whatever gpus lists
        chosen = select_gpus(visible, config["gpus"])
    except ValueError as exc:
        raise WorkflowError(
            f"config {exc}" if str(exc).startswith("gpus:") else f"nvidia-smi: {exc}"
        )
    if (mixed := mixed_models(chosen)) is not None:
        raise WorkflowError(f"config {mixed}")
    return chosen


CHOSEN_GPUS = _chosen_gpus()
GPU_NAME = (
    next((g.name for g in CHOSEN_GPUS if g.name), None) or detect_gpu()
    if config["device"] in ("auto", "cuda")
    else None
)
DEVICE = (
    config["device"] if config["device"] != "auto" else ("cuda" if GPU_NAME else "cpu")
)
# The installed torch version is a param of the capture rule: a pip upgrade reruns captures
# (Snakemake's software-env trigger does not see pip), and the auto run id changes with it.
TORCH_BUILD = torch_build()
TORCH_VERSION = " ".join(f"{k}={v}" for k, v in sorted(TORCH_BUILD.items()))
# "auto", or "auto-<suffix>" for a result set of its own beside the default one (a different
# grid: config/beyond.yaml), e.g. nvidia-h200_torch2.11.0-cu130-beyond
RUN = (
    default_run_id(DEVICE, GPU_NAME, TORCH_BUILD) + config["run"][len("auto") :]
    if config["run"] == "auto" or config["run"].startswith("auto-")
    else config["run"]
)

# --- A/B on one device (config environments; docs/running.md, "A/B on one device") ---
# Each environment (a Python executable, and variables set for it) captures the whole grid into a result set of
# its own, results/<RUN>@<name>/ (attnprof.model.config.AB_SEPARATOR says why '@'); RUN is then the A/B run's name,
# not a result set: with run auto it is the device alone (cpu, nvidia-h200), since the torch builds are the
# environments'. Each environment's torch build is read from its own interpreter here, at parse time (a
# subprocess of about 0.1 s each): it is the torch_version param of that result set's captures, so an upgrade
# of one environment recaptures that environment only.
ENVIRONMENTS = {
    name: {"python": spec["python"], "env": dict(spec.get("env") or {})}
    for name, spec in (config.get("environments") or {}).items()
}
if ENVIRONMENTS:
    if config["run"] == "auto" or config["run"].startswith("auto-"):
        RUN = (slug(GPU_NAME) if DEVICE == "cuda" and GPU_NAME else "cpu") + config[
            "run"
        ][len("auto") :]
    for _name, _spec in ENVIRONMENTS.items():
        _exe = Path(_spec["python"])
        if not (_exe.is_file() and os.access(_exe, os.X_OK)):
            raise WorkflowError(
                f"config environments.{_name}.python: {_spec['python']!r} is not an executable file "
                f"(relative paths are from the working directory {Path.cwd()}); create it, e.g. "
                "python3 -m venv .venv-b && .venv-b/bin/pip install torch==2.14.1 -e ."
            )
# result set name -> environment name (empty without environments)
AB_RUNS = {ab_run_name(RUN, name): name for name in ENVIRONMENTS}
AB_COMPARE = ab_compare_name(RUN) if AB_RUNS else None
# the result sets this config captures into: the A/B run's, else RUN alone
THIS_RUNS = list(AB_RUNS) or [RUN]
RUN_DIR = f"results/{RUN}"


def _build_text(build):
    return " ".join(f"{k}={v}" for k, v in sorted(build.items()))


try:
    AB_TORCH = {
        run: _build_text(
            torch_build_of(ENVIRONMENTS[name]["python"], ENVIRONMENTS[name]["env"])
        )
        for run, name in AB_RUNS.items()
    }
except RuntimeError as exc:
    raise WorkflowError(f"config environments: {exc}") from None


def torch_version_of(run):
    """The torch build (text) that result set ``run`` of this config captures with: its environment's
    interpreter's in an A/B run, else Snakemake's own (TORCH_VERSION)."""
    return AB_TORCH.get(run, TORCH_VERSION)


def interpreter_of(run):
    """{python, env} of the environment that result set ``run`` (an A/B run's) captures in."""
    return ENVIRONMENTS[AB_RUNS[run]]


def ab_record(run):
    """What env.json records of the A/B run that result set ``run`` belongs to (key ``ab``): the A/B run's
    name (compare pairs two result sets only when it is the same), this environment, all of them in
    capture order, its Python and variables."""
    return {
        "run": RUN,
        "environment": AB_RUNS[run],
        "environments": list(ENVIRONMENTS),
        "python": interpreter_of(run)["python"],
        "env": interpreter_of(run)["env"],
    }


# The extra params of the capture-stage rules in an A/B run only: a single run's params stay exactly as they
# were (Snakemake reruns a job whose params changed)
AB_CAPTURE_PARAMS = (
    {"interpreter": lambda wc: interpreter_of(wc.run)} if AB_RUNS else {}
)
AB_ENV_PARAMS = (
    {
        "interpreter": lambda wc: interpreter_of(wc.run),
        "ab": lambda wc: ab_record(wc.run),
    }
    if AB_RUNS
    else {}
)


# File names come from attnprof.model.names, the one list of them; these build the paths.
def capture_file(name, run="{run}"):
    """A capture's file ``name`` (CAPTURE_FILES: trace, status) as a pattern over shape, variant and repeat."""
    return f"results/{run}/captures/{{shape}}/{{variant}}/{REPEAT_PREFIX}{{repeat}}/{CAPTURE_FILES[name]}"


def table_file(name, run="{run}"):
    """A capture's table ``name`` (CAPTURE_TABLES: kernels, forwards, launches, ops, device), per repeat."""
    return f"results/{run}/tables/{{shape}}/{{variant}}/{REPEAT_PREFIX}{{repeat}}/{CAPTURE_TABLES[name]}"


def run_file(name, run="{run}"):
    """Result set ``run``'s file ``name`` (RUN_FILES: summary, kernels, findings, env, ...)."""
    return f"results/{run}/{RUN_FILES[name]}"


SHAPES = [s.key for s in expand_shapes(config["shapes"][DEVICE])]
VARIANTS = list(config["variants"])
# Independent captures of every (variant, shape), interleaved in rounds (rule capture); the between-run
# interval of every time comes from them (attnprof.analysis.stats)
REPEATS = int(config["repeats"])
CUSTOM = dict(config.get("custom_variants") or {})  # names checked in the Snakefile
# A config with fewer shapes or variants than the result set it would write into must not
# silently replace that result set's report with a partial one. Found here, refused only where a job of that result
# set is asked for (current_set_checks, an input of summarize): never for a target in another result set (a
# copied example re-rendered, a compare).
SUBSET_PROBLEMS = {}
for _run in THIS_RUNS:
    if not Path(run_file("env", _run)).exists():
        continue
    _recorded = json.loads(Path(run_file("env", _run)).read_text())
    _cfg = _recorded.get("config", {})
    if _recorded.get("device") == DEVICE and "variants" in _cfg and "shapes" in _cfg:
        _why = subset_message(
            f"results/{_run}",
            SHAPES,
            VARIANTS,
            [s.key for s in expand_shapes(_cfg["shapes"][DEVICE])],
            list(_cfg["variants"]),
        )
        if _why:
            SUBSET_PROBLEMS[_run] = _why

# Captures that this result set's summary.csv was made from and whose trace or status is gone (deleted by
# hand, or copied without them). Snakemake does not remake a missing file whose readers are all up to date;
# as a param of summarize this list makes summarize rerun, and with it the lost captures (once they are back, the
# list changes again: summarize and the stages after it run once more, on the same data).
LOST_CAPTURES = lost_captures(
    RUN_DIR, run_file("repeats", RUN), list(CAPTURE_FILES.values())
) + lost_captures(RUN_DIR, run_file("control", RUN), list(CAPTURE_FILES.values()))
# Derived files of this result set that are gone although its report was made, or were changed after their rule
# wrote them (attnprof.runtime.integrity: a hand-edited or half-written summary): they bump the rebuild epoch below, a param
# of summarize, which reruns it, everything after it, and every missing input on the way.
_DERIVED = [
    p
    for name in CAPTURE_TABLES
    for p in expand(
        table_file(name, RUN),
        shape=SHAPES,
        variant=VARIANTS,
        repeat=range(1, REPEATS + 1),
    )
]
# the profiler's control (attnprof.analysis.control): captured at the first shape, every repeat (control_shapes)
_DERIVED += [
    p
    for name in CAPTURE_TABLES
    for p in expand(
        table_file(name, RUN),
        shape=SHAPES[:1],
        variant=[CONTROL],
        repeat=range(1, REPEATS + 1),
    )
]
# the run tables whose writers record their checksums (scripts/summarize.py, scripts/findings.py)
_CHECKSUMMED = [
    run_file(n, RUN) for n in ("summary", "repeats", "kernels", "findings", "control")
]
_DERIVED += _CHECKSUMMED
_DERIVED += [
    f"{RUN_DIR}/plots/{s}/{p}.png" for s in SHAPES for p in [*SHAPE_PLOTS, TIMELINE]
]
_DERIVED += [f"{RUN_DIR}/plots/{p}.png" for p in SCALING_PLOTS]
LOST_DERIVED = lost_files(run_file("html", RUN), _DERIVED) + [
    f"{p} (changed after it was written)" for p in changed_files(RUN_DIR, _CHECKSUMMED)
]
# summarize's parameter: changes only when something above was found (written when the run starts, onstart)
REBUILD_EPOCH = rebuild_epoch(RUN_DIR, bool(LOST_CAPTURES or LOST_DERIVED))


def current_set_checks(wc):
    """Input function of summarize, which every target inside a current result set goes through: refuses a config
    that would replace result set ``wc.run``'s report with a partial one (SUBSET_PROBLEMS), and says (once) what of
    the current result set is lost and made again. When something is, it also makes summarize rerun by modification
    time, which needs no record of Snakemake's (a result set copied here from elsewhere has none, so the changed
    rebuild parameter alone would rerun nothing while the report's later rules republished an edited summary):
    the result set's rebuild-epoch file is written now (DAG time; not in a dry run), newer than summary.csv, and
    is an input (whenever it exists). Other result sets' targets never call it.
    """
    if wc.run in SUBSET_PROBLEMS:
        raise WorkflowError(SUBSET_PROBLEMS[wc.run])
    if wc.run != RUN:
        return []
    from attnprof.runtime.integrity import EPOCH_FILE, write_epoch

    epoch_path = Path(RUN_DIR) / EPOCH_FILE
    if (LOST_CAPTURES or LOST_DERIVED) and not workflow.dryrun and not _SAID:
        write_epoch(RUN_DIR, REBUILD_EPOCH)
    # an input whenever it exists, so that the input list stays the same from one run to the next
    epoch = [str(epoch_path)] if epoch_path.exists() else []
    if _SAID:
        return epoch
    _SAID.append(wc.run)
    if LOST_DERIVED:
        print(
            f"attnprof: {len(LOST_DERIVED)} derived files of {RUN_DIR} are gone or were changed after they were made "
            f"({', '.join(LOST_DERIVED[:10])}{f', and {len(LOST_DERIVED) - 10} more' if len(LOST_DERIVED) > 10 else ''}): "
            "they are made again"
            + (
                " (a dry run does not show it where this result set came from elsewhere)"
                if workflow.dryrun
                else ""
            ),
            file=sys.stderr,
        )
    if LOST_CAPTURES:
        print(
            f"attnprof: {len(LOST_CAPTURES)} capture files that {run_file('summary', RUN)} was made from are gone "
            f"({', '.join(LOST_CAPTURES[:3])}{', ...' if len(LOST_CAPTURES) > 3 else ''}): they are captured again",
            file=sys.stderr,
        )
    return epoch


_SAID = []


def rel(path) -> str:
    """``path`` relative to the working directory when it lies inside it (the usual case: the
    repository is the working directory), so that recorded inputs do not name this checkout's
    location and a copied workspace is up to date where it lands; else absolute."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


PKG = Path(rel(Path(workflow.basedir) / "src" / "attnprof"))
REPORT_DIR = Path(rel(Path(workflow.basedir) / "report"))
PLOT_NAMES = list(SHAPE_PLOTS)
SCALING_PLOT_NAMES = list(SCALING_PLOTS)
EXPECTATIONS = rel(Path(workflow.basedir) / "config" / "expectations.yaml")
SCRIPTS = Path(rel(Path(workflow.basedir) / "scripts"))


# Every stage (the light stages: tables, findings, plots, report, compare; the capture clients: capture,
# environment, calibrate; and the hardware counters, whose ncu runs in a process of its own) declares its script as the input `script`
# and runs it with run_job(locals()): in a forked child of one preloaded process instead of a fresh
# Python per job (attnprof.runtime.jobs), in the environment a `script:` job gets. The script is an input so
# that editing it reruns the rule.
def script_file(name):
    """scripts/<name>.py, the script a stage runs (its input ``script``)."""
    return str(SCRIPTS / f"{name}.py")


def run_job(job):
    """Body of a stage's ``run:`` block: ``job`` is the block's ``locals()``."""
    from attnprof.runtime.jobs import run_script

    run_script(job, workflow.is_main_process)


# GPU captures never overlap, whatever --cores says. In capture_mode process every capture
# job takes one unit of the global 'capture' resource (and of 'gpu' on CUDA), and there is one
# of each unless the command line sets more. In capture_mode worker the run's one capture
# worker serves one capture at a time (attnprof.runtime.worker), so the jobs take none: they wait in
# its queue, already started, and the next capture begins as soon as one ends instead of after
# Snakemake has scheduled and started the next job (about 0.5 s per capture).
# Under a cluster executor (Slurm) every job is its own allocation: a worker started in one job
# would die with it while serving another's capture, so captures run in fresh processes there,
# whatever the config says (CLUSTER).
CAPTURE_MODE = "process" if CLUSTER else config["capture_mode"]
config["capture_mode"] = CAPTURE_MODE  # env.json and the report state the mode that ran
# An A/B run's captures (one capture worker per environment) take one unit each even in worker mode: Snakemake
# then starts them one at a time in its priority order (capture_priority: rounds, ABBA within a round); the
# supervisors' shared device lock (attnprof.runtime.worker) keeps them from overlapping whatever the resources say.
GPU_UNITS = 0 if CAPTURE_MODE == "worker" and not AB_RUNS else 1


# The GPUs a CUDA run captures on: config gpus among those CUDA_VISIBLE_DEVICES makes visible (attnprof.measure.gpus).
# With several, every capture-stage job takes one unit of 'capture' and 'gpu', of which there are as many as GPUs
# (unless the command line sets them), and holds one GPU's claim while its work runs: one capture per GPU at a time,
# every GPU busy, each GPU with a capture worker of its own. An A/B run keeps both environments on one device (its
# pairing compares them there): the first GPU only. Under a cluster executor each job takes the GPU its allocation
# has, so nothing is chosen here.
GPUS = (CHOSEN_GPUS[:1] if AB_RUNS else CHOSEN_GPUS) if DEVICE == "cuda" else []
if len(GPUS) > 1:
    GPU_UNITS = 1
# What a capture-stage job chooses its GPU from (attnprof.measure.gpus.job_gpu): the run's GPUs by UUID; under a
# cluster executor "any", the GPU of the job's own allocation. A resource, not a param: which GPUs a run uses changes
# no measurement, so another choice recaptures nothing.
GPU_CHOICE = "any" if CLUSTER else (",".join(g.uuid for g in GPUS) or "all")


def capture_priority(wc):
    """Rule capture's priority: round k of every environment before round k + 1 of any, ABBA within a round
    (attnprof.model.config.ab_priority; REPEATS - repeat in a single run), and within those the captures that end
    their capture process (a user variant's, a torch.compile variant's: ends_capture_process) last, so that the
    others of the round share one process."""
    return capture_rank(
        int(wc.repeat),
        AB_RUNS.get(wc.run),
        list(ENVIRONMENTS),
        REPEATS,
        ends_capture_process(wc.variant, wc.variant in CUSTOM),
    )


# Under the Slurm profile the capture-stage jobs of an A/B run (both environments' captures, env.json and the
# calibration) form one group, which the profile's group-components setting runs as one GPU job: both
# environments on the same GPU (docs/running.md, "A/B on one device")
AB_GROUP = "ab_gpu" if AB_RUNS else None
# the capture worker's idle timeout, whole seconds (a job resource: Snakemake's resources are integers)
WORKER_IDLE_S = max(1, round(config["capture_worker_idle_s"]))


# The threads of a capture (and of the environment record and the calibration, which the same capture worker
# serves): every core on a CPU run, so that no other job disturbs its timings. Also a param of the capture and
# environment rules: torch's intra-op threads are part of what a CPU capture measures, so a run with another
# --cores recaptures instead of mixing thread counts in one result set.
def _capture_threads():
    """workflow.cores on a CPU run, else 1; 1 where Snakemake was given no core count (--report, --lint and other
    invocations that run no job: Snakemake refuses to run a job without --cores, so no capture sees that value).
    """
    if DEVICE != "cpu":
        return 1
    try:
        return workflow.cores
    except WorkflowError:
        return 1


CAPTURE_THREADS = _capture_threads()
for _name in ("capture", "gpu"):
    if _name not in workflow.global_resources:
        workflow.register_resource(_name, max(1, len(GPUS)))
if (
    "worker_idle_s" not in workflow.global_resources
):  # a per-job setting, never a limit on the run
    workflow.register_resource("worker_idle_s", 10**9)


wildcard_constraints:
    run=r"[^/]+",
    # any variant name: a result set from elsewhere (its env.json) may hold variants this config
    # does not list; which ones a target covers comes from grid(run)
    variant=r"[A-Za-z_][A-Za-z0-9_]*",
    shape=KEY_CONSTRAINT,
    repeat=r"[1-9][0-9]*",


def code(script, exclude=()):
    """The package modules that scripts/<script>.py imports, directly or not (attnprof.runtime.imports.import_closure:
    read from the sources, so the rerun triggers follow the real imports): declared as inputs so that a code
    change reruns the stage. ``exclude``: module files (relative to the package, e.g. ``variants.py``) whose
    edits reach the stage another way (the capture's per-variant fingerprint)."""
    from attnprof.runtime.imports import import_closure

    files = import_closure(
        SCRIPTS / f"{script}.py", PKG, cache_file=".snakemake/attnprof/imports.json"
    )
    return [
        rel(f) for f in files if str(Path(f).relative_to(PKG.resolve())) not in exclude
    ]


# Only the current result set is captured here: the capture stages match results/<RUN>/ only,
# and a capture-stage output of any other result set (copied from a GPU node, an example,
# another config's run) is never recaptured or relabelled with this machine's environment;
# if it is missing, the *_elsewhere rules fail with captured_elsewhere()'s message.
THIS_RUN = "(?:" + "|".join(re.escape(r) for r in THIS_RUNS) + ")"
OTHER_RUN = rf"(?!{THIS_RUN}/)[^/]+"


def refuse_elsewhere(run, log_path):
    """Body of the *_elsewhere rules: write why to the job's log and fail the job."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(log_path).write_text(captured_elsewhere(run) + "\n")
    raise WorkflowError(captured_elsewhere(run))


def captured_elsewhere(run) -> str:
    """Why a capture-stage output of result set ``run`` (not the current one) cannot be made
    here, and the command that re-renders that result set instead."""
    return (
        f"results/{run} is not this configuration's result set (results/{' or results/'.join(THIS_RUNS)}); it was captured elsewhere "
        f"or with another config, and this machine must not add captures to it or relabel it. Re-render it "
        f"from its traces: snakemake --profile workflow/profiles/render results/{run}/report.pdf "
        f"(or pass --config run={run} with that result set's own config to capture into it here)."
    )


def grid(run):
    """(shape keys, variants) of result set ``run``: the current config's for the current run,
    else the config recorded in that result set's env.json, so that a result set captured
    elsewhere (a GPU node) re-renders here without its grid in our config."""
    return _grid(run)[:2]


def repeats_of(run):
    """The repeats of result set ``run`` (config ``repeats``; 1 for a result set recorded before repeats)."""
    return _grid(run)[2]


def _grid(run):
    if run in THIS_RUNS:
        return SHAPES, VARIANTS, REPEATS
    env_path = Path(run_file("env", run))
    if not env_path.exists():
        raise WorkflowError(
            f"{env_path} not found: cannot tell the shapes and variants of result set {run!r}"
        )
    recorded = json.loads(env_path.read_text())
    cfg = recorded["config"]
    shapes = [s.key for s in expand_shapes(cfg["shapes"][recorded["device"]])]
    legacy = sorted(
        Path(f"results/{run}/captures").glob(f"*/*/{CAPTURE_FILES['status']}")
    )
    if (
        legacy
    ):  # a result set made before repeats: its captures are not in r<k>/ folders
        raise WorkflowError(
            f"results/{run} was made before repeats ({legacy[0]} is not in a {REPEAT_PREFIX}<k>/ folder): move its captures "
            f"with: python tools/migrate_repeats.py results/{run}"
        )
    return shapes, list(cfg["variants"]), int(cfg.get("repeats", 1))


def per_capture(pattern, all_repeats=False):
    """Input function: a per-(shape, variant, repeat) path pattern over the grid of the job's own result
    set; repeat 1 only (the representative capture, whose tables the findings and the report's detail read)
    unless ``all_repeats`` (summarize, which computes the between-run interval)."""

    def paths(wc):
        shapes, variants, repeats = _grid(wc.run)
        return expand(
            pattern,
            run=wc.run,
            shape=shapes,
            variant=variants,
            repeat=range(1, repeats + 1) if all_repeats else [1],
        )

    return paths


def control_shapes(run):
    """The shapes result set ``run`` captures the profiler's control at (attnprof.model.variants.CONTROL, a fixed
    workload of known counts: attnprof.analysis.control): the first of its grid, every repeat, in each
    environment of an A/B run as the attention variants; none for a result set from elsewhere made before the
    control existed (no control folder in its captures: a committed example)."""
    shapes = _grid(run)[0]
    if (
        run in THIS_RUNS
        or Path(f"results/{run}/captures/{shapes[0]}/{CONTROL}").is_dir()
    ):
        return shapes[:1]
    return []


def control_capture(pattern):
    """Input function: a per-capture path pattern at the control's captures of the job's result set
    (control_shapes), every repeat; the control is never in per_capture's grid (no ranking, finding or plot).
    """

    def paths(wc):
        return expand(
            pattern,
            run=wc.run,
            shape=control_shapes(wc.run),
            variant=[CONTROL],
            repeat=range(1, repeats_of(wc.run) + 1),
        )

    return paths


def plot_files(wc):
    """Per-shape plots of the job's result set, and its run-wide scaling plots."""
    shapes, _ = grid(wc.run)
    per_shape = expand(
        f"results/{wc.run}/plots/{{shape}}/{{name}}.png",
        shape=shapes,
        name=PLOT_NAMES + [TIMELINE],
    )
    return per_shape + expand(
        f"results/{wc.run}/plots/{{name}}.png", name=SCALING_PLOT_NAMES
    )


# --- compare (workflow/rules/compare.smk) ---
COMPARE_RUNS = list(config["compare"]["runs"])
COMPARE_NAME = (
    "__vs__".join(COMPARE_RUNS)
    if config["compare"]["name"] == "auto"
    else config["compare"]["name"]
) or "unset"


def ab_targets(wc=None):
    """Target files of an A/B run: every environment's report (HTML, PDF) and the paired comparison."""
    if not AB_RUNS:
        raise WorkflowError(
            "target ab: this config lists no environments (config environments; e.g. --configfile config/ab-cpu.yaml)"
        )
    reports = [run_file(ext, run) for run in AB_RUNS for ext in ("html", "pdf")]
    return reports + [
        f"results/compare/{AB_COMPARE}/compare.{ext}" for ext in ("json", "html", "pdf")
    ]


def compare_runs_of(name):
    """The result sets that compare folder ``name`` compares: an A/B run's own (its environments, the first
    the baseline) for results/compare/<run>-ab/, else config compare.runs."""
    return list(AB_RUNS) if name == AB_COMPARE else COMPARE_RUNS


def compare_inputs(wc):
    """Per result set (keys '<run>/<name>'): summary, kernels, env, findings and every capture's ops table."""
    runs = compare_runs_of(wc.name)
    if len(runs) < 2:
        raise WorkflowError(
            "compare needs at least two result sets: set compare.runs (e.g. --configfile compare.yaml)"
        )
    files = {}
    for run in runs:
        for name in ("summary", "kernels", "env", "findings"):
            files[f"{run}/{name}"] = run_file(name, run)
        if control_shapes(run):  # the profiler's self-check (attnprof.analysis.control)
            files[f"{run}/control"] = run_file("control", run)
        shapes, variants, repeats = _grid(run)
        files[f"{run}/repeats"] = run_file("repeats", run)
        # each forward's work in order, every repeat (the recipe diff); a result set copied without its captures
        # and tables (a committed example) has none to make
        for table in ("recipe", "recipe_backward"):
            paths = expand(
                table_file(table, run),
                shape=shapes,
                variant=variants,
                repeat=range(1, repeats + 1),
            )
            # (this config's result sets are captured by this run: an A/B run's too, before their folders exist)
            if run == RUN or run in AB_RUNS or Path(f"results/{run}/captures").exists():
                files[f"{run}/{table}"] = paths
        files[f"{run}/ops"] = expand(
            table_file("ops", run),
            shape=shapes,
            variant=variants,
            repeat=1,
        )
    return files


# On a GPU run the jobs' fork server starts with the run; on a CPU run with the first job that needs it.
# Either way a capture's client is forked only after the server's imports are done, so that they never
# share the cores with a capture's CPU timings.
onstart:
    if workflow.is_main_process and (LOST_CAPTURES or LOST_DERIVED):
        from attnprof.runtime.integrity import write_epoch

        write_epoch(RUN_DIR, REBUILD_EPOCH)
    if DEVICE == "cuda" and workflow.is_main_process and workflow.use_threads:
        from attnprof.runtime.jobs import start_forkserver

        start_forkserver()
