import atexit
import copy
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from attnprof.findings import load_run_data
from attnprof.analysis.tables import analyse_trace, concat_tables, forward_table, kernel_table, launch_api_table, op_table, summary_row
from attnprof.analysis.trace import device_properties, load_trace

# Each test process (an xdist worker) has its own capture lock (attnprof.measure.lock.capture_lock_path): the
# tests' captures measure nothing that another test's capture could disturb, and the tests that hold
# a capture for seconds (kills, timeouts) would otherwise hold up the other worker's.
# (set in every process that imports this file: an xdist worker would otherwise inherit the controller's)
os.environ["ATTNPROF_CAPTURE_LOCK_DIR"] = tempfile.mkdtemp(prefix=f"attnprof-test-locks-{os.getpid()}-")
atexit.register(shutil.rmtree, os.environ["ATTNPROF_CAPTURE_LOCK_DIR"], True)

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
VARIANTS = ["naive", "naive_inplace", "sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto"]
ROOT = Path(__file__).resolve().parents[1]


#: What a checkout's workflow is made of: the Snakefile and what it reads (rules, schemas, profiles,
#: scripts, templates, config, the package it puts on sys.path).
WORKFLOW_FILES = ["Snakefile", "workflow", "profiles", "scripts", "report", "config", "src"]


def copy_workflow(dest: Path) -> Path:
    """The workflow's files (:data:`WORKFLOW_FILES`, without caches) copied to ``dest``, so that a test
    can change their content or run it in a directory of its own; returns ``dest``."""
    for name in WORKFLOW_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def fixture_status(variant: str) -> dict:
    with gzip.open(FIXTURES / variant / "status.json.gz", "rt") as fh:
        return json.load(fh)


def fixture_trace(variant: str) -> dict:
    return load_trace(FIXTURES / variant / "trace.json.gz")


def build_tables(traces: dict[str, dict], statuses: dict[str, dict], range_name: str = "attn_fwd") -> dict:
    """Run the extract + summarize stages in memory, as the workflow does on files."""
    out = {"summary": [], "kernels": [], "launches": [], "ops": [], "forwards": {}}
    for v, trace in traces.items():
        st = statuses[v]
        frames = analyse_trace(trace, range_name)
        fw = forward_table(frames, v, st["shape_key"])
        out["forwards"][v] = fw
        out["summary"].append(summary_row(st, fw))
        out["kernels"].append(kernel_table(frames, v, st["shape_key"]))
        out["launches"].append(launch_api_table(frames, v, st["shape_key"]))
        out["ops"].append(op_table(frames, v, st["shape_key"]))
    out["summary"] = pd.DataFrame(out["summary"])
    out["kernels"] = concat_tables(out["kernels"])
    return out


@pytest.fixture(scope="session")
def h200():
    traces = {v: fixture_trace(v) for v in VARIANTS}
    statuses = {v: fixture_status(v) for v in VARIANTS}
    tables = build_tables(traces, statuses)
    tables["traces"], tables["statuses"] = traces, statuses
    tables["devices"] = device_properties(traces["sdpa_flash"])
    tables["props"] = tables["devices"][0]
    return tables


@pytest.fixture(scope="session")
def h200_data(h200):
    shape = h200["statuses"]["naive"]["shape_key"]
    return load_run_data(shape, h200["summary"], h200["kernels"], h200["launches"], h200["ops"],
                         list(h200["statuses"].values()), h200["devices"])


# --- captures in a fresh process, shared ----------------------------------------------------------

@pytest.fixture(scope="session")
def fresh_capture(tmp_path_factory):
    """``fresh_capture(variant)`` -> (record, trace path, status path) of
    ``run_isolated(test_capture.spec(variant))``, run once per variant and session for the tests
    that only read a capture (each run is a Python + torch start, 2-4 s); every call gets its own
    copy of the record."""
    from attnprof.runtime.isolation import run_isolated
    from test_capture import spec

    done = {}

    def get(variant: str):
        if variant not in done:
            out = tmp_path_factory.mktemp(f"fresh_{variant}")
            rec = run_isolated(spec(variant), out / "t.json.gz", out / "s.json", timeout_s=300)
            done[variant] = (rec, out / "t.json.gz", out / "s.json")
        rec, trace, status = done[variant]
        return copy.deepcopy(rec), trace, status

    return get


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    """The whole workflow run once on the tiny CPU config (test_workflow.TINY): a copy of the repository
    with results/tiny made by ``snakemake report --cores 2``. Shared by test_workflow and
    test_snakemake_report (one xdist group, so one worker makes it once)."""
    from test_workflow import copy_repo, snakemake

    work = copy_repo(tmp_path_factory.mktemp("wf") / "repo")
    snakemake(work, "report", "--cores", "2")
    return work


# --- pytest-xdist (addopts: -n 2 --dist loadgroup) ------------------------------------------------

#: Module or session fixtures that are slow to build (a whole workflow run, a parsed 68-page PDF,
#: fresh-process captures) -> xdist group: the tests that use one run in one worker, which builds
#: it once. test_worker.py's tests share the session's warm capture worker (ATTNPROF_WORKER_TAG)
#: and the fresh captures, so they join that group. Every other test is handed out on its own.
SHARED_FIXTURES = {"run_dir": "run_dir", "workspace": "workspace", "h200_pdf": "h200_pdf", "fresh_capture": "captures",
                   # a rendered H200 report, CPU captures with a backward, parsed fixtures and rendered contexts: each
                   # module-scoped fixture is built once, in the one worker that runs its tests
                   "rendered_h200": "rendered_h200", "cpu_backward": "cpu_backward", "captured": "backward_captures",
                   "study_beyond": "study_beyond", "control_trace": "control_trace", "report_of": "control_report",
                   "result": "findings_result", "html": "report_html", "context": "report_context", "work": "target_scope"}
SHARED_MODULES = {"test_worker.py": "captures"}
#: Modules of slow tests (Snakemake runs, fresh Python + torch processes, waits), slowest first:
#: an xdist worker takes these before the many quick ones, so that no long test starts last while
#: the other worker has nothing left to do. Other modules follow in their own order.
SLOW_MODULES = ("test_travel.py", "test_user_variant.py", "test_workflow.py", "test_worker.py", "test_worker_abuse.py",
                "test_capture.py", "test_trust.py", "test_pdf.py", "test_report.py", "test_snakemake_report.py", "test_ab.py")


#: Fixtures whose every user is a test of the ``slow`` tier (pyproject's markers): they start Snakemake or capture
#: processes (a torch import and a profiler start each, about 3 s of CPU), or render a whole report's PDF.
SLOW_FIXTURES = {"run_dir", "workspace", "fresh_capture", "rendered_h200", "own_worker", "captured"}


def is_slow(item) -> bool:
    """Whether ``item`` belongs to the slow tier: marked ``slow`` or ``workflow``, or using a :data:`SLOW_FIXTURES` one
    (a parametrize argument of the same name is no use of the fixture: it replaces it)."""
    params = set(item.callspec.params) if hasattr(item, "callspec") else set()
    return bool(item.get_closest_marker("slow") or item.get_closest_marker("workflow")
                or SLOW_FIXTURES & (set(item.fixturenames) - params))


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # before the other hooks (xdist's and -m's among them): the slow tier, the order in an xdist worker, the group marks
    for item in items:
        if is_slow(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):
        rank = {name: i for i, name in enumerate(SLOW_MODULES)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module's own order stays
    for item in items:
        groups = [group for name, group in SHARED_FIXTURES.items() if name in item.fixturenames]
        group = groups[0] if groups else SHARED_MODULES.get(item.path.name)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    result = yield
    # after them: --dist loadgroup sends a group to one worker by the '@<group>' suffix that xdist
    # (3.8) adds to each marked test's node id through item._nodeid, which pytest 9.2's structured
    # node ids no longer read (pytest-dev/pytest-xdist#1386: every group silently falls apart and
    # each worker builds the shared fixture itself). Add the suffix the way xdist means to, where
    # its own did not take; nothing to do on a pytest or an xdist where it does.
    if getattr(config.option, "loadgroup", False):
        for item in items:
            marks = item.iter_markers("xdist_group")
            group = "_".join(sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks}))
            if group and not item.nodeid.endswith(f"@{group}") and hasattr(item, "_id"):
                try:
                    from _pytest.nodeid import NodeId
                except ImportError:  # another pytest: the tests still run, only slower
                    break
                item._id = NodeId.parse(f"{item.nodeid}@{group}")
    return result


#: Modules whose process is a capture (a torch import and a profiler start): a quick-tier test must not start one.
CAPTURE_MODULES = ("attnprof.runtime.worker", "attnprof.runtime.isolation")
#: Snakemake options that run no job: the only Snakemake calls a quick-tier test may make (a parse, a plan).
NO_JOB_OPTIONS = ("-n", "--dry-run", "--dryrun", "--lint", "--list-rules", "--summary")


def slow_start(args) -> str | None:
    """What makes the command ``args`` (a list, as ``subprocess.Popen`` takes it, or a string) a slow-tier start, or
    None: ``python -m`` of a :data:`CAPTURE_MODULES` module, or Snakemake (``-m snakemake`` or its executable) without
    one of :data:`NO_JOB_OPTIONS`."""
    words = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    modules = {b for a, b in zip(words, words[1:]) if a == "-m"} | {w[2:] for w in words if w.startswith("-m") and len(w) > 2}
    for module in CAPTURE_MODULES:
        if module in modules:
            return f"a capture process ({module})"
    runs_snakemake = "snakemake" in modules or bool(words) and Path(words[0]).name == "snakemake"
    if runs_snakemake and not set(words) & set(NO_JOB_OPTIONS):
        return "Snakemake with jobs"
    return None


@pytest.fixture(autouse=True)
def _quick_tier_guard(request, monkeypatch):
    """In a quick-tier test (not marked ``slow``), starting a capture process or Snakemake with jobs fails the test
    with what to do, before anything starts: the quick tier stays quick by a rule, not by a stopwatch."""
    if request.node.get_closest_marker("slow"):
        return

    def refuse(what: str, args) -> None:
        shown = " ".join(map(str, args))[:160] if isinstance(args, (list, tuple)) else str(args)[:160]
        pytest.fail(f"{request.node.nodeid} starts {what} ({shown}) but is not in the slow tier: mark it "
                    "@pytest.mark.slow (docs/contributing.md, 'Tests and lint')", pytrace=False)

    popen_init = subprocess.Popen.__init__

    def guarded_popen(self, args, *a, **k):
        what = slow_start(args)
        if what:
            refuse(what, args)
        popen_init(self, args, *a, **k)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_popen)
    import snakemake_cli  # the tests' Snakemake runner (a fork server): its arguments are Snakemake's own

    cli_run = snakemake_cli.run

    def guarded_run(args, *a, **k):
        if not set(map(str, args)) & set(NO_JOB_OPTIONS):
            refuse("Snakemake with jobs", ["snakemake", *args])
        return cli_run(args, *a, **k)

    monkeypatch.setattr(snakemake_cli, "run", guarded_run)


#: Set by the controlling pytest process for its xdist workers, which parse the command line again and cannot tell
#: named tests from the default ``testpaths``: tests were named, so every tier runs.
_NAMED = "ATTNPROF_TESTS_NAMED"


def pytest_configure(config):
    """Tests named on the command line (a file, a node id) run whatever their tier: the default ``-m 'not slow'``
    applies only to a ``pytest`` without test names or an ``-m`` of its own, so that ``pytest tests/test_worker.py``
    runs that file's slow tests too."""
    if config.option.markexpr != "not slow":
        return
    if hasattr(config, "workerinput"):
        named = os.environ.get(_NAMED) == "1"
    else:
        given_m = any(a == "-m" or a.startswith("-m") and not a.startswith("--") for a in config.invocation_params.args)
        named = config.args_source == pytest.Config.ArgsSource.ARGS and not given_m
        os.environ[_NAMED] = "1" if named else "0"
    if named:
        config.option.markexpr = ""


def pytest_terminal_summary(terminalreporter, config):
    """Say how to run the tests that the default ``-m 'not slow'`` left out, so that nobody takes the quick tier for
    the whole suite."""
    if config.option.markexpr == "not slow":  # (the count is not known here: xdist's workers deselect)
        terminalreporter.write_line("the quick tier only: slow tests (Snakemake runs, capture processes, kills, compiles, "
                                    "whole-report PDFs) were left out; the same command with `-m slow` runs them, CI runs "
                                    "both tiers")


# --- mutation testing (mutmut 3: pyproject [tool.mutmut], benchmarks/mutation.py) -----------------

#: Functions of the mutated modules that each fixture called while it was built (mutmut's stats run).
_FIXTURE_HITS: dict[str, set[str]] = {}


def _mutmut_hits() -> set[str] | None:
    """mutmut's set of the functions that the running test has called, while mutmut records which
    tests call which functions (it then runs only those tests against a function's mutants); None
    otherwise, and always outside mutmut."""
    if os.environ.get("MUTANT_UNDER_TEST") != "stats" or "mutmut.state" not in sys.modules:
        return None
    return sys.modules["mutmut.state"].state()._stats


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    # mutmut credits the calls made while a shared fixture (h200, h200_data) is built to the first
    # test that built it only: credit them to every test that uses the fixture
    hits = _mutmut_hits()
    if hits is None:
        return (yield)
    shared = {name: defs[-1] for name, defs in item._fixtureinfo.name2fixturedefs.items() if defs[-1].scope != "function"}
    fresh = [name for name, d in shared.items() if d.cached_result is None]
    result = yield
    for name in fresh:
        _FIXTURE_HITS.setdefault(name, set()).update(hits)
    for name in shared:
        hits |= _FIXTURE_HITS.get(name, set())
    return result
