"""The column registry: every column a result set's CSV tables hold, declared once.

A declaration names its columns, the tables that hold them (:data:`TABLES`), their unit, what they
mean and, for a column the report's summary table heads, its header (:class:`ReportHeader`).
``docs/results.md`` is generated from it (``python -m attnprof.model.columns > docs/results.md``: the
prose of ``results_template.md`` beside this file, each ``{{columns <table>}}`` line replaced by that
table's columns), and the report's summary table takes its headers from it
(attnprof.render.common: template global ``columns``). tests/test_columns.py fails when a table
that the pipeline writes has a column not declared here, or a declared column it does not write.

Adding a summary column: compute it (attnprof.analysis.tables), declare it here, and, to show it in the
report, add the template cell (report/report.html.j2, its header ``{{ th("name") }}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: table key -> (file(s), what one row is); the keys are those :func:`declare` takes, in the doc's order.
TABLES: dict[str, tuple[str, str]] = {
    "summary": ("summary.csv", "one row per variant and shape"),
    "repeats": ("repeats.csv", "one row per capture (variant, shape, repeat)"),
    "kernels": ("kernels.csv, tables/<shape>/<variant>/r<k>/kernels.csv",
                "one row per GPU event name and variant (kernels.csv: repeat 1 of every capture)"),
    "forwards": ("tables/<shape>/<variant>/r<k>/forwards.csv", "one row per profiled forward"),
    "launches": ("tables/<shape>/<variant>/r<k>/launches.csv", "one row per CUDA runtime/driver API call name"),
    "ops": ("tables/<shape>/<variant>/r<k>/ops.csv", "one row per aten op name (every nesting level)"),
    "backwards": ("tables/<shape>/<variant>/r<k>/backwards.csv",
                  "one row per backward range; header only when no backward was profiled"),
    "kernels_backward": ("tables/<shape>/<variant>/r<k>/kernels_backward.csv",
                         "the kernel table of the backward ranges"),
    "ops_backward": ("tables/<shape>/<variant>/r<k>/ops_backward.csv", "the op table of the backward ranges"),
    "recipe": ("tables/<shape>/<variant>/r<k>/recipe.csv",
               "one row per step of every complete forward, in order: what compare's recipe diff aligns"),
    "recipe_backward": ("tables/<shape>/<variant>/r<k>/recipe_backward.csv", "the same for the backward ranges"),
    "control": ("control.csv", "one row per capture (repeat) of the control workload: the profiler's self-check"),
}


@dataclass(frozen=True)
class ReportHeader:
    """How the report heads a column: ``header`` (text of the ``<th>``; ``cpu_header`` in place of it on a
    CPU run, when given), ``hint`` (a second, smaller line: what the cell shows besides the value) and
    ``digits`` (significant digits of the value, attnprof.model.fmt.format_number)."""

    header: str
    hint: str = ""
    cpu_header: str | None = None
    digits: int = 3


@dataclass(frozen=True)
class Column:
    """One column of the tables ``tables`` (keys of :data:`TABLES`): ``unit`` ('' for none), ``description``
    (markdown), ``report`` (its summary-table header, or None) and ``group`` (the columns declared with it,
    which the doc lists in one row)."""

    name: str
    tables: tuple[str, ...]
    unit: str
    description: str
    report: ReportHeader | None = None
    group: tuple[str, ...] = ()
    formula: str | None = None


#: Every declared column, in declaration order (one entry per column and declaration).
COLUMNS: list[Column] = []


def declare(tables: str | tuple[str, ...], names: str, unit: str, description: str,
            report: ReportHeader | None = None, formula: str | None = None) -> None:
    """Declare the columns ``names`` (space-separated) of ``tables`` with one unit and description (and
    ``report``, only for a declaration of one column). ``formula``: a column computed from other columns of
    its table, a ``pandas.DataFrame.eval`` expression (one column only; attnprof.analysis.tables.derive_columns
    fills it wherever the table is written, so the declaration is all the code it needs). Raises ValueError for
    an unknown table, or a column already declared for one of the tables."""
    tables = (tables,) if isinstance(tables, str) else tables
    group = tuple(names.split())
    _check_declaration(tables, group, report, formula)
    for name in group:
        twice = [t for t in tables if any(c.name == name and t in c.tables for c in COLUMNS)]
        if twice:
            raise ValueError(f"column {name!r} declared twice for {twice}")
        COLUMNS.append(Column(name, tables, unit, description, report, group, formula))


def _check_declaration(tables: tuple[str, ...], group: tuple[str, ...], report: ReportHeader | None,
                       formula: str | None) -> None:
    """Raise ValueError for a declaration (:func:`declare`) of an unknown table, or of a report header or formula
    for more than one column."""
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise ValueError(f"column {group[0]!r}: unknown table(s) {unknown}; known: {list(TABLES)}")
    for what, given in (("a report header", report), ("a formula", formula)):
        if given is not None and len(group) != 1:
            raise ValueError(f"columns {group}: {what} belongs to one column")


def columns_of(table: str) -> dict[str, Column]:
    """name -> :class:`Column` of one table (a key of :data:`TABLES`), in declaration order. Raises
    KeyError for an unknown table."""
    if table not in TABLES:
        raise KeyError(f"no table {table!r}; known: {list(TABLES)}")
    return {c.name: c for c in COLUMNS if table in c.tables}


def formulas(table: str) -> dict[str, str]:
    """name -> formula of the columns of ``table`` declared with one (:func:`declare`), in declaration order."""
    return {name: c.formula for name, c in columns_of(table).items() if c.formula}


# --- summary.csv ----------------------------------------------------------------------------------------------
_S = "summary"
declare(tuple(TABLES), "variant", "", "the variant's name (built in: attnprof.model.variants.VARIANTS, or one of `custom_variants`)",
        ReportHeader("variant"))
declare(tuple(TABLES), "shape_key", "", "the shape's key (above)")
declare(_S, "batch heads seq_len head_dim dtype causal device", "",
        "what ran (q, k, v are [batch, heads, seq_len, head_dim])")
declare(_S, "kv_heads q_len causal_alignment", "",
        "grouped-query and decode shapes: key/value heads (= `heads` without grouping), query length (= `seq_len`, the "
        "key/value length, when square), and `lower_right`/`upper_left` where the causal mask depends on it (empty "
        "otherwise)")
declare(_S, "compile_first_call_s", "s",
        "torch.compile variants: the first call (trace, compile, run; wall seconds up to a synchronize), never part of "
        "the other numbers")
declare(_S, "compile_cache", "",
        "inductor's FX-graph cache verdict over the first call (`hit`, `miss`, `partial`, `bypass`, `none`)")
declare((_S, "repeats", "control"), "status", "",
        "`ok`, `unsupported`, `out_of_memory`, `failed` (from the capture) or `incomplete_trace` (fewer complete forwards "
        "than `profiler.min_complete_forwards`, see below)")
declare((_S, "repeats"), "reason", "",
        "PyTorch's message (for `unsupported`, also PyTorch's warnings saying why each backend refused) or the trace "
        "file and both forward counts")
declare(_S, "kernels_per_forward", "count",
        "GPU kernels (not memcpy/memset) whose launch call started inside a forward's `record_function` range, counted "
        "per complete forward; empty on a CPU run, and empty when complete forwards differ (then `forward_groups` lists "
        "each group)", ReportHeader("kernels / forward", "+ memcpy, memset"))
declare(_S, "memcpy_per_forward memset_per_forward", "count", "the same for memcpys and memsets")
declare(_S, "device_ms_per_forward", "ms",
        "sum of those GPU events' durations per forward: per repeat the median over its *timed* forwards (complete, "
        "every GPU event with valid times), then the median of the repeats' medians; empty when fewer than "
        "`min_complete_forwards` forwards are timed", ReportHeader("device ms / fwd", "median of repeats; rerun; IQR"))
declare(_S, "device_ms_min device_ms_max device_ms_q1 device_ms_q3", "ms",
        "within-capture spread: min, max and quartiles over the timed forwards of the repeat whose median is stated "
        "(the middle one)")
declare(_S, "cpu_ms_per_forward", "ms",
        "duration of the forward's CPU range (host time to issue it) over the complete forwards: the median of the "
        "repeats' medians",
        ReportHeader("CPU ms / fwd", "median of repeats; captures; IQR", cpu_header="host ms / fwd"))
declare(_S, "cpu_ms_min cpu_ms_max cpu_ms_q1 cpu_ms_q3", "ms",
        "the middle repeat's min, max and quartiles of the forward's CPU range")
declare(_S, "gpus", "",
        "the GPUs this variant and shape's repeats ran on, by UUID, `;`-separated (on a node of several GPUs a repeat "
        "takes whichever GPU is free, so its rerun interval holds the spread between GPUs too); empty on a CPU run")
declare(_S, "repeats repeats_ok repeats_note", "",
        "captures of this variant and shape (`config.repeats`), those counted (status `ok`, a copy of another counted "
        "once), and every repeat not counted in a time, named with the reason: its status, a round missing, a copy, "
        "a time its trace lacks (impossible GPU times), a host time its own timed calls contradict; also counts that "
        "differ between repeats, then left empty")
declare(_S, "device_ms_run_lo device_ms_run_hi", "ms",
        "the rerun interval, same machine and same sitting: 95 % prediction interval for the median a rerun with as "
        "many repeats will state (Student's t over the log repeat medians, each cell's between-process variance "
        "moderated over the other cells of its variant: `attnprof.analysis.stats.between_run_interval`, `squeeze_var`)")
declare(_S, "cpu_ms_run_lo cpu_ms_run_hi", "ms",
        "host time over the captures, no parametric interval: the lowest capture median (the floor) and the highest; "
        "one new capture falls inside with probability (n-1)/(n+1) for n captures (`attnprof.analysis.stats.host_range`)")
declare(_S, "device_ms_run_sd_pct cpu_ms_run_sd_pct", "%",
        "standard deviation of the log repeat medians ×100 (device: the pooled one the interval uses): about the "
        "relative spread between repeats")
declare(_S, "device_ms_run_df", "",
        "degrees of freedom of the device time's between-process variance (pooled over the variant's shapes; a cell "
        "whose variance is larger than the pool beyond chance keeps its own)")
declare(_S, "device_ms_backward_run_lo device_ms_backward_run_hi cpu_ms_backward_run_lo cpu_ms_backward_run_hi", "ms",
        "the same interval for the backward's times per backward")
declare(_S, "timed_ms_median", "ms",
        "repeat 1 only (later repeats profile only): independent timing after the trace: single calls bracketed by "
        "CUDA events (`cuda_events`) or `perf_counter` on CPU, rotating input sets; the median",
        ReportHeader("timed ms", "repeat 1: median, IQR"))
declare(_S, "timed_ms_q1 timed_ms_q3 timed_ms_min timed_ms_max", "ms",
        "quartiles (linear interpolation between order statistics), min and max of those timed calls")
declare(_S, "timed_repeats", "count",
        "how many calls were timed (`timing.repeats`, fewer for a long forward: `timing.budget_s`, at least "
        "`timing.min_repeats`, or 3 for a GPU forward of 25 ms or more, whose CUDA-graph replays are skipped)")
declare(_S, "timing_method", "", "`cuda_events` or `perf_counter`")
declare((_S, "repeats"), "host_load_1m", "",
        "1-minute load average of the host when the capture started (`os.getloadavg`; summary.csv: repeat 1's); "
        "empty where the platform has none")
declare((_S, "repeats"), "forwards_complete", "count", "forwards complete by the rule below")
declare(_S, "forwards_expected forwards_profiled forwards_timed", "count",
        "forwards the schedule asked for (`active`), found in the trace, and complete with valid GPU times")
declare(_S, "incomplete_forwards", "",
        "forward numbers (from 0, as in `forwards.csv`) that lost GPU events, e.g. `0-5`")
declare(_S, "bad_time_events", "count",
        "GPU events with impossible times (`ts` or `dur` missing, not finite or ≤ 0, starting before their launch call, "
        "ending later than the trace's CPU span again after its last CPU event, or overlapping another GPU event on the "
        "same device and stream): counted, kept out of every sum and span")
declare(_S, "forward_groups", "",
        "JSON list, only when complete forwards differ: per group `kernels`, `memcpy`, `memset`, `forwards` (how many), "
        "`forward_ids`, `device_ms` (median over the group's timed forwards)")
declare(_S, "trace_note", "", "the trace's defects in words (empty when none); shown in the report's row")
declare(_S, "rel_error", "",
        "‖out − ref‖/‖ref‖ against a float64 reference computed in blocks (per batch, head and query block, so it fits "
        "beside any shape that profiled)", ReportHeader("rel. error", digits=2))
declare(_S, "rel_error_ok", "", "`rel_error` within the dtype's tolerance (`config.tolerance`)")
declare(_S, "result_note", "",
        "when `rel_error_ok` is false: the wrong result in words (its relative error, the tolerance it is above), and "
        "that it is left out of every ranking (page 1, the findings, the expectations); empty otherwise")
declare(_S, "checks_missing", "",
        "checks after the profile that did not finish (`phase: reason`, e.g. `correctness: out_of_memory ...`); the "
        "trace and its tables stand")
declare(_S, "graph_ms_median graph_ms_q1 graph_ms_q3 graph_ms_min graph_ms_max", "ms",
        "one forward captured in a CUDA graph, replays timed between CUDA events: median, quartiles, min, max; empty "
        "for a forward of 25 ms or more, whose launch gaps are under 1 % of it (docs/costs.md)")
declare(_S, "graph_error", "", "why a variant could not be captured in a CUDA graph")
declare(_S, "peak_memory_mb", "MiB",
        "`torch.cuda.max_memory_allocated()` over the profiled steps (result sets captured before `held_memory_mb` "
        "existed: over warm-up and steps)")
declare(_S, "held_memory_mb", "MiB",
        "`torch.cuda.memory_allocated()` when the profiled steps began: inputs, the warm-up's output, library "
        "workspaces and whatever else the capture process held (in a warm capture worker this depends on the captures "
        "before)")
declare(_S, "forward_memory_mb", "MiB",
        "`peak_memory_mb - held_memory_mb`: the most memory the profiled steps allocated beyond what was held; depends "
        "on the variant and shape only (the report's \"fwd MiB\" and the memory scaling plot)")
declare(_S, "forward_gflop", "GFLOP",
        "FLOP of one forward, PyTorch `benchmarks/transformer/sdpa.py` convention: B·H·(4·S²·D + 2·S²), halved when "
        "causal; with q_len ≠ kv_len, B·H·(4·P·D + 2·P) for the P query-key pairs the causal mask lets through "
        "(`Shape.visible_pairs`)")
declare(_S, "flop_per_byte", "FLOP/B",
        "`forward_gflop` over the minimum traffic (q and the output B·H·Sq·D each, k and v B·KVH·Skv·D each, read or "
        "written once)")
declare(_S, "tflops tflops_graph", "TFLOP/s",
        "achieved TFLOP/s over the trace device time, and over the CUDA-graph median")
declare(_S, "gbps", "GB/s",
        "achieved memory throughput: the minimum traffic of `flop_per_byte` (q, k, v read and the output written once) "
        "over the trace device time per forward, 10^9 bytes per second; the figure of merit where a forward moves "
        "more bytes than it computes (decode, q_len 1: the H200's datasheet peak is 4.8 TB/s)",
        formula="1e3 * forward_gflop / flop_per_byte / device_ms_per_forward")
declare(_S, "oom_bytes", "B", "for `out_of_memory`: the bytes the allocator asked for (from PyTorch's message)")
declare((_S, "repeats"), "backward_status", "",
        "the backward's outcome (`passes: [forward, backward]`): as `status`, its own; empty when it was not asked for")
declare(_S, "backward_reason", "", "PyTorch's reason, or the backward counts when `incomplete_trace`")
declare(_S, "backwards_profiled backwards_complete backwards_timed", "count",
        "the backward's completeness counts, as those of the forwards")
declare(_S, "backward_note", "", "the backward ranges' defects in words")
declare((_S, "repeats"), "kernels_per_backward", "count",
        "kernels per complete backward, when all launched the same work (GPU runs)")
declare(_S, "memcpy_per_backward memset_per_backward", "count", "the same for memcpys and memsets")
declare((_S, "repeats"), "device_ms_per_backward", "ms",
        "device time per backward: median over timing-complete backwards (summary.csv: the median of the repeats' "
        "medians)")
declare(_S, "device_ms_backward_min device_ms_backward_max device_ms_backward_q1 device_ms_backward_q3", "ms",
        "their spread (the middle repeat's)")
declare((_S, "repeats"), "cpu_ms_per_backward", "ms",
        "host time of the backward ranges (the caller waits there for the engine), median over complete backwards")
declare(_S, "cpu_ms_backward_min cpu_ms_backward_max cpu_ms_backward_q1 cpu_ms_backward_q3", "ms",
        "their spread (the middle repeat's)")
declare(_S, "grad_rel_error_dq grad_rel_error_dk grad_rel_error_dv", "",
        "the backward's float64 check (phase `grad_correctness`): ‖g − ref‖/‖ref‖ of dq, dk and dv against autograd "
        "through the blockwise float64 reference, same inputs and output gradient as the profiled steps")
declare(_S, "grad_rel_error_ok", "",
        "all three within the dtype's tolerance (`config.tolerance`, the forward's); a NaN is not")
declare(_S, "backward_gflop", "GFLOP",
        "FLOP of one backward: 2.5 × the forward's (`attnprof.analysis.tables.BACKWARD_FLOP_RATIO`: five GEMMs of the "
        "forward's size where it does two, FlashAttention-2's accounting, as PyTorch's sdpa.py and flash-attn's "
        "benchmarks count)")
declare(_S, "backward_flop_per_byte", "FLOP/B",
        "`backward_gflop` over twice the forward's minimum traffic (reads q, k, v, out, d_out; writes dq, dk, dv)")
declare(_S, "backward_tflops", "TFLOP/s", "achieved TFLOP/s of a backward over its device time per backward")
declare(_S, "compile_backward_first_call_s", "s",
        "torch.compile variants: the first backward call (compiles the backward graph), timed apart, never profiled")
declare(_S, "compile_backward_cache", "", "inductor's FX-graph cache verdict over that first backward call")

# --- repeats.csv ------------------------------------------------------------------------------------------------
declare("repeats", "gpu_uuid gpu_name", "",
        "the GPU the capture ran on, as nvidia-smi names it (status.json `gpu`: the GPU its job held, by UUID); empty "
        "on a CPU run, and for a capture made before GPUs were recorded")
declare("repeats", "gpu_power_limit_w", "W", "that GPU's power limit (nvidia-smi `power.limit`), when it was read")
declare("repeats", "gpu_max_sm_clock_mhz", "MHz", "that GPU's highest SM clock (nvidia-smi `clocks.max.sm`), when it was read")
declare("repeats", "started_at", "s",
        "when the capture began (Unix time, the capture record's `capture_started_at`): compare pairs an A/B run's rounds "
        "only where every capture of round k began before every capture of round k + 1 (both sides interleaved)")
declare(("repeats", "control"), "repeat", "", "the repeat, 1 .. `config.repeats` (`r<k>` of the capture's folder)")
declare("repeats", "kernels_per_forward memcpy_per_forward memset_per_forward", "count",
        "this capture's own counts per complete forward (as in summary.csv)")
declare("repeats", "device_ms_per_forward cpu_ms_per_forward", "ms",
        "this capture's own medians per forward (as in summary.csv, of this repeat alone)")
declare("repeats", "format", "",
        "the table's format version, the same in every row (2; a repeats.csv without the column is version 1: see "
        "Format versions below)")

# --- kernels.csv and the per-capture tables ------------------------------------------------------------------
_K = ("kernels", "kernels_backward")
declare(_K, "kernel", "", "full demangled name")
declare(_K, "label", "", "short readable name")
declare(_K, "category", "", "`kernel`, `memcpy`, `memset`")
declare(_K, "device", "",
        "the GPU it ran on: `args.device`, the `id` of a `deviceProperties` entry in `device.json` (occupancy limits "
        "and architecture always come from the entry of the kernel's own `device`)")
declare("kernels", "calls_per_forward", "count", "the count per complete forward when all agree, else empty")
declare("kernels_backward", "calls_per_backward", "count", "the count per complete backward when all agree, else empty")
declare(_K, "calls_min calls_max", "count", "fewest and most calls in one counted range, always")
declare(_K, "total_us", "µs", "over the timed forwards (backwards)")
declare("kernels", "us_per_forward", "µs", "`total_us` / timed forwards")
declare("kernels_backward", "us_per_backward", "µs", "`total_us` / timed backwards")
declare(_K, "mean_us", "µs", "per call")
declare(_K, "share_pct", "%", "of the variant's device time")
declare(_K, "grid block", "", "launch metadata from the trace, `XxYxZ`")
declare(_K, "registers_per_thread shared_memory_bytes", "", "launch metadata from the trace (bytes for shared memory)")
declare(_K, "est_occupancy_pct", "%",
        "the profiler's estimated achieved occupancy; 0 for driver-API launches")
declare(_K, "launch_api", "", "`cudaLaunchKernel`, `cuLaunchKernelEx`, …")
declare(_K, "op", "", "the aten op that issued the launch, by External id")

_F = ("forwards", "backwards")
declare("forwards", "forward", "", "the forward's number in the capture, from 0")
declare("backwards", "backward", "", "the backward's number in the capture, from 0")
declare(_F, "cpu_us", "µs", "duration of the range on the CPU")
declare(_F, "device_us", "µs", "sum of the durations of the valid-time events")
declare(_F, "device_busy_us", "µs",
        "the time those events kept the GPU busy: the union of their intervals; below `device_us` only where events "
        "overlap on different streams, and then the trace note states both, as medians per forward; not carried to "
        "`summary.csv`")
declare(_F, "device_span_us", "µs", "first start to last end of valid-time events")
declare(_F, "kernels memcpy memset", "count", "every GPU event")
declare(_F, "launch_calls", "count", "calls that enqueue GPU work (rule below)")
declare(_F, "launches_without_gpu_event gpu_events_without_launch duplicate_gpu_events", "count",
        "completeness counts (rule below)")
declare(_F, "duplicate_launches", "count", "launch calls whose correlation id another launch call also carries")
declare(_F, "bad_time_events", "count", "events with impossible times (as in summary.csv)")
declare(_F, "stream_overlap_events", "count", "of those, events overlapping another GPU event on their stream")
declare(_F, "graph_launches", "count", "launch calls that replay a CUDA graph")
declare(_F, "range_ok complete timing_complete", "", "the completeness verdicts (rule below)")
declare(_F, "signature", "", "the range's work, for telling forwards that differ apart")
declare(_F, "unattributed_gpu_events", "count",
        "GPU events of the whole trace launched outside every forward; normally 0")
declare("backwards", "ambiguous_launches", "count",
        "engine-thread launches in the windows of two backward ranges, attributed to neither (both incomplete)")
declare("backwards", "other_thread_launches", "count",
        "launches inside the backward's window from a thread that is not the autograd engine's: left out")

_C = ("launches", "ops", "ops_backward")
declare("launches", "api", "", "the CUDA runtime/driver API call")
declare(("ops", "ops_backward"), "op", "", "the aten op")
declare(("launches", "ops"), "calls_per_forward", "count", "calls per complete forward (median)")
declare("ops_backward", "calls_per_backward", "count", "calls per complete backward (median)")
declare(_C, "calls_min calls_max", "count", "fewest and most calls in one counted range")
declare(_C, "mean_us", "µs", "mean host duration of one call")

declare(("recipe", "recipe_backward"), "forward", "", "the forward's (backward's) number in the capture, from 0")
declare(("recipe", "recipe_backward"), "step", "", "the step's place in its forward, from 0: GPU events by start time on a GPU run, "
        "top-level aten ops by start time on a CPU run")
declare(("recipe", "recipe_backward"), "category", "", "`kernel`, `memcpy`, `memset` (GPU run) or `op` (CPU run)")
declare(("recipe", "recipe_backward"), "name", "", "full demangled kernel name or aten op name")
declare(("recipe", "recipe_backward"), "label", "", "short readable name (the recipe diff aligns on it)")
declare(("recipe", "recipe_backward"), "grid block", "", "launch metadata from the trace, `XxYxZ` (GPU run)")
declare(("recipe", "recipe_backward"), "dur_us", "µs", "the step's duration: device time on a GPU run, inclusive host time of the op on a CPU run")
declare(("recipe", "recipe_backward"), "time_ok", "", "the trace's times of the step are valid (always true for ops)")
declare(("recipe", "recipe_backward"), "start_us", "µs",
        "the step's start after the start of its forward's (backward's) range: on the device on a GPU run, on the host "
        "on a CPU run (the report's interactive timeline draws it)")
declare(("recipe", "recipe_backward"), "launch_api", "", "the API call that launched the step (GPU run; empty on a CPU run)")
declare(("recipe", "recipe_backward"), "launch_us launch_dur_us", "µs",
        "that call's start after the start of the range, and its host duration (GPU run; empty on a CPU run)")

declare("control", "reason", "", "why the capture failed, else empty")
declare("control", "forwards_complete", "count", "complete forwards of the capture")
declare("control", "kernels memcpy memset", "count",
        "per complete forward (GPU run; known by construction: 2, 1, 0)")
declare("control", "aten::mm aten::add aten::copy_", "count",
        "calls per complete forward (ops.csv; known by construction: 1, 1, 1)")

# --- docs/results.md ----------------------------------------------------------------------------------------
_PLACEHOLDER = re.compile(r"^\{\{columns (\w+)\}\}$", re.MULTILINE)


def columns_markdown(table: str) -> str:
    """One table's columns as a markdown table (``| column | unit | meaning |``) after a line naming its file(s)
    and what one row is; one row per declaration;
    a column with a report header names it. Raises KeyError for an unknown table."""
    cols = columns_of(table)
    files, row = TABLES[table]
    lines = [f"{', '.join(f'`{f}`' for f in files.split(', '))}: {row}.", "", "| column | unit | meaning |", "|---|---|---|"]
    for c in {c.group: c for c in cols.values()}.values():  # a declaration's columns share all but their name
        meaning = c.description
        if c.formula:
            meaning += f"; computed: `{c.formula}`"
        if c.report is not None:
            meaning += f"; report column \"{c.report.header}\""
        lines.append(f"| {', '.join(f'`{n}`' for n in c.group)} | {c.unit} | " + meaning.replace("|", "\\|") + " |")  # a | inside a cell ends it
    return "\n".join(lines)


def results_markdown(template: str) -> str:
    """``template`` (markdown) with every line ``{{columns <table>}}`` replaced by :func:`columns_markdown` of that
    table. Raises ValueError for a table no line asks for (a declared table missing from the doc) and KeyError
    for an unknown one."""
    asked = _PLACEHOLDER.findall(template)
    missing = [t for t in TABLES if t not in asked]
    if missing:
        raise ValueError(f"the results template has no {{{{columns ...}}}} line for {missing}")
    return _PLACEHOLDER.sub(lambda m: columns_markdown(m.group(1)), template)


#: The doc's prose, with the ``{{columns <table>}}`` lines.
TEMPLATE = Path(__file__).with_name("results_template.md")


if __name__ == "__main__":
    print(results_markdown(TEMPLATE.read_text()), end="")
