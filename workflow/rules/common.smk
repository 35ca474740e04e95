# The plan (attnprof.model.plan): built once from the config and what this machine has; every path from its layout.
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from attnprof.measure.env import torch_build
from attnprof.measure.forwards import variant_fingerprint
from attnprof.model.names import RUN_FILES, SCALING_PLOTS, SHAPE_PLOTS, TIMELINE
from attnprof.model.plan import captured_elsewhere, forwards_message
from attnprof.model.variants import KEY_CONSTRAINT
from attnprof.runtime.integrity import ResultSetState
from attnprof.runtime.jobs import start_capture_workers
from attnprof.runtime.machine import cores, plan_of
from attnprof.runtime.worker import prestarts, spares_for

if _why := forwards_message(config["profiler"]):
    raise WorkflowError(_why)

# Under a cluster executor (Slurm) every job is its own allocation: captures run in fresh processes there
# (capture_mode process), and each takes the GPU its allocation has.
CLUSTER = workflow.non_local_exec or workflow.remote_exec
# The installed torch build: a param of the capture rule (a pip upgrade recaptures) and part of the auto run id.
TORCH_BUILD = torch_build()
try:
    PLAN = plan_of(config, CLUSTER, TORCH_BUILD, cores(workflow))
except ValueError as exc:
    raise WorkflowError(str(exc)) from None
L = PLAN.layout
# env.json and the report state the mode that ran
config["capture_mode"] = PLAN.capture_mode
# names the rules read
DEVICE = PLAN.device
RUN = PLAN.run
THIS_RUNS = PLAN.this_runs
AB_RUNS = PLAN.ab_runs
CUSTOM = PLAN.custom
SHAPES, VARIANTS = PLAN.grid.shapes, PLAN.grid.variants
CAPTURE_THREADS = PLAN.capture_threads
# The threads a capture or environment job holds: none where it is a client of the capture worker on a GPU run (it
# waits on the worker's socket; the light jobs run beside it even at --cores 1); its params.threads stay the
# captures' (attnprof.runtime.jobs.script_environment). On a CPU run a capture holds every core.
CLIENT_THREADS = (
    0 if DEVICE == "cuda" and PLAN.capture_mode == "worker" else CAPTURE_THREADS
)
# Snakemake runs local jobs on cores + 5 threads (snakemake/executors/local.py: the 5 for jobs of 0 threads): at most 5
# such clients at once (they queue in the worker, in Snakemake's priority order), so that the jobs that hold a core
# always find a thread instead of waiting behind the queued clients.
CLIENT_SLOTS = 5
# what one capture or environment job takes of them: one where it holds no core, else none
CLIENT_UNITS = int(CLIENT_THREADS == 0)
GPU_UNITS = PLAN.gpu_units
PLOT_NAMES, SCALING_PLOT_NAMES = list(SHAPE_PLOTS), list(SCALING_PLOTS)
capture_file, table_file, run_file = L.capture_file, L.table_file, L.run_file
# the capture-stage rules' extra params in an A/B run only: a single run's params stay as they were
AB_CAPTURE_PARAMS = (
    {"interpreter": lambda wc: PLAN.interpreter_of(wc.run)} if AB_RUNS else {}
)
AB_ENV_PARAMS = (
    {**AB_CAPTURE_PARAMS, "ab": lambda wc: PLAN.ab_record(wc.run)} if AB_RUNS else {}
)
# Under the Slurm profile an A/B run's capture-stage jobs form one group: both environments on one GPU.
AB_GROUP = "ab_gpu" if AB_RUNS else None
# a job resource: an integer
WORKER_IDLE_S = max(1, round(config["capture_worker_idle_s"]))
for _name in ("capture", "gpu"):
    if _name not in workflow.global_resources:
        workflow.register_resource(_name, max(1, len(PLAN.gpus)))
if "capture_clients" not in workflow.global_resources:
    workflow.register_resource("capture_clients", CLIENT_SLOTS)
# a per-job setting, never a limit
if "worker_idle_s" not in workflow.global_resources:
    workflow.register_resource("worker_idle_s", 10**9)

# What each result set holds and whether its derived files are whole (attnprof.runtime.integrity); read once per
# result set, lazily: a result set from elsewhere only where a target asks for it.
STATE = ResultSetState(PLAN)


def rebuild_marker(wc):
    """Input of summarize: refuses a config that would replace result set ``wc.run``'s report with a partial one,
    says (once) what of it is lost or changed, and names its rebuild marker (rule rebuild), a new one when something
    is: a changed input set reruns summarize by Snakemake's record (a result set without one ends with the command).
    """
    from snakemake.io import IOFile

    dag = workflow.dag_settings
    # summarize runs anyway where it or a rule before it is forced (the README's --forcerun extract)
    forced = dag.forceall or bool(
        set(dag.forcerun or ()) & {"extract", "rebuild", "summarize"}
    )
    recorded = workflow.persistence.metadata(IOFile(run_file("summary", wc.run)))
    command = " ".join(shlex.quote(a) for a in sys.argv)
    return STATE.marker(
        wc.run, workflow.dryrun, forced or recorded is not None, command
    )


def rel(path) -> str:
    """``path`` relative to the working directory where it lies inside it (recorded inputs then do not name this
    checkout's location), else absolute."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


PKG = Path(rel(Path(workflow.basedir) / "src" / "attnprof"))
REPORT_DIR = Path(rel(Path(workflow.basedir) / "report"))
EXPECTATIONS = rel(Path(workflow.basedir) / "config" / "expectations.yaml")
SCRIPTS = Path(rel(Path(workflow.basedir) / "scripts"))


# Every stage declares its script as the input `script` (an edit reruns it) and runs it with run_job(locals()): in a
# forked child of one preloaded process instead of a fresh Python per job (attnprof.runtime.jobs).
def script_file(name):
    return str(SCRIPTS / f"{name}.py")


def run_job(job):
    """Body of a stage's ``run:`` block (``job``: its ``locals()``); the derived files it wrote get their SHA-256
    sidecars (attnprof.runtime.integrity), so a later edit of any of them is noticed."""
    from attnprof.runtime.jobs import run_script
    from attnprof.runtime.integrity import record_outputs

    run_script(job, workflow.is_main_process)
    record_outputs(L, job["wildcards"], job["output"])


wildcard_constraints:
    run=r"[^/]+",
    # any variant name a result set from elsewhere may hold (its env.json): Python identifiers, non-ASCII included
    variant=r"[^\W\d]\w*",
    shape=KEY_CONSTRAINT,
    repeat=r"[1-9][0-9]*",


def code(script, exclude=()):
    """The package modules scripts/<script>.py imports, directly or not (attnprof.runtime.imports, read from the
    sources): inputs, so that a code change reruns the stage. ``exclude``: modules whose edits reach the stage
    another way (the capture's per-variant fingerprint)."""
    from attnprof.runtime.imports import import_closure

    files = import_closure(
        SCRIPTS / f"{script}.py", PKG, cache_file=".snakemake/attnprof/imports.json"
    )
    return [
        rel(f) for f in files if str(Path(f).relative_to(PKG.resolve())) not in exclude
    ]


# Only this config's result sets are captured here; a capture-stage output of any other (copied from a GPU node, an
# example) is never made or relabelled here: the *_elsewhere rules fail with the command that re-renders it.
THIS_RUN = "(?:" + "|".join(re.escape(r) for r in THIS_RUNS) + ")"
OTHER_RUN = rf"(?!{THIS_RUN}/)[^/]+"


def refuse_elsewhere(run, log_path):
    """Body of the *_elsewhere rules: write why to the job's log and fail the job."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(log_path).write_text(captured_elsewhere(L, run, THIS_RUNS) + "\n")
    raise WorkflowError(captured_elsewhere(L, run, THIS_RUNS))


def per_capture(name, all_repeats=False, kind="table"):
    """Input function: a capture's file or table ``name`` over the grid of the job's result set; repeat 1 only (the
    representative capture) unless ``all_repeats``."""
    return lambda wc: STATE.per_capture(wc.run, name, kind, all_repeats)


def control_capture(name, kind="table"):
    """Input function: a file of the control's captures (attnprof.model.variants.CONTROL) of the job's result set."""
    return lambda wc: STATE.control_capture(wc.run, name, kind)


def plot_files(wc):
    return STATE.plots(wc.run)


def ab_targets(wc=None):
    if not AB_RUNS:
        raise WorkflowError(
            "target ab: this config lists no environments (config environments; e.g. --configfile config/ab-cpu.yaml)"
        )
    return PLAN.ab_targets()


def compare_inputs(wc):
    """Per result set (keys '<run>/<name>'): the run tables, and every capture's ops and recipe tables."""
    return STATE.compare_inputs(wc.name)


# A GPU run in worker mode starts its capture workers (and the jobs' fork server) with the run, while Snakemake builds
# the DAG, where a capture or the environment record of it is still to be made; a CPU run with its first capture
# job (a process starting beside the captures would share the cores with their host timings).
def _capture_to_make():
    files = [run_file("env", r) for r in THIS_RUNS] + [
        f
        for r in THIS_RUNS
        for f in L.captures_of(r, SHAPES, VARIANTS, PLAN.grid.repeats, "status")
    ]
    return not all(Path(f).exists() for f in files)


if PLAN.capture_mode == "worker" and prestarts(DEVICE) and _capture_to_make():
    start_capture_workers(
        workflow,
        DEVICE,
        WORKER_IDLE_S,
        CAPTURE_THREADS,
        spares=spares_for(SHAPES, len(SHAPES) * (len(VARIANTS) + 1)),
        workers=[
            {
                **(
                    dict(PLAN.interpreter_of(r))
                    if AB_RUNS
                    else {"python": None, "env": None}
                ),
                "log": str(Path(L.log("environment", r)).parent / "capture_worker.log"),
                "gpu_choice": PLAN.gpu_choice,
            }
            for r in THIS_RUNS
        ],
    )


# A GPU run starts the jobs' fork server with the run; a CPU run with the first job that needs it.
onstart:
    if DEVICE == "cuda" and workflow.is_main_process and workflow.use_threads:
        from attnprof.runtime.jobs import start_forkserver

        start_forkserver()


def top_up_record(run):
    """Result set ``run``'s top_up.json (attnprof.analysis.verdict): this A/B run's once its checkpoint ran."""
    if run in PLAN.top_up_runs():
        STATE.check_top_up_kept(run)
        checkpoints.top_up.get()
    return STATE._recorded_top_up(run)


STATE.top_up_record = top_up_record
