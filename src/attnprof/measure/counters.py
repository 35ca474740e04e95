"""Hardware counters (optional stage): Nsight Compute (``ncu``) on the kernels of one forward.

The trace's per-kernel data holds what the profiler *estimates* (``est. achieved occupancy %``,
which Kineto leaves at 0 for kernels launched with ``cuLaunchKernelEx``: cuDNN's and cuBLAS'
nvjet kernels on Hopper) and the launch configuration from which attnprof computes a
theoretical limit. The counters say what the kernel *achieved*.

Two entry points:

* ``python -m attnprof.measure.counters child SPEC.json`` -- the profiled program: builds the variant's
  forward at the shape (:func:`attnprof.measure.forwards.make_forward`, the capture's inputs), runs
  ``warmup_calls`` untraced calls and a synchronize, then ``forwards`` forwards (1 by default),
  each inside ``torch.cuda.nvtx.range(RANGE)``. ``ncu --nvtx --nvtx-include RANGE/`` profiles
  only the kernels launched inside that push/pop range, so warm-up, cuDNN/cuBLAS plan set-up
  and the input generation (``randn``) are never measured.
* :func:`measure` -- runs ``ncu --clock-control none --nvtx --nvtx-include RANGE/ --metrics ...
  -o REPORT python -m attnprof.measure.counters child SPEC.json``, reads the report back with
  ``ncu --import REPORT --csv --page raw`` and writes one row per kernel (:func:`parse_raw_csv`).
  Returns a status record: ``ok``, ``skipped`` (no ``ncu`` on PATH, a CPU run, or ncu refused
  the counters: ``ERR_NVGPUCTRPERM``, quoted in ncu's own words) or ``failed`` (anything else,
  with the end of ncu's output). ``python -m attnprof.measure.counters measure SPEC.json OUT.csv``
  runs it from a shell and writes ``OUT.json`` beside the CSV.

Clocks: ``--clock-control none`` leaves the GPU's clocks as they are (ncu otherwise locks them
to base clock, and the numbers would describe a slower GPU than the trace's).

Metrics (:data:`METRICS`, :data:`TENSOR_METRICS`; names as ``ncu --query-metrics`` lists them on
an H200, GH100, Nsight Compute 2025.3.1; their meaning from the Nsight Compute *Kernel Profiling Guide*, "Metrics
Reference" and "Metrics Structure": ``.avg.pct_of_peak_sustained_active`` is the average over
units in percent of the peak sustained rate over the cycles the unit was active,
``..._elapsed`` over all elapsed cycles of the kernel). Every value is kept with the unit ncu
prints in its CSV (``%`` for all the percentages, ``ns`` for the duration).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnprof.measure.env import interpreter_environ
from attnprof.model.variants import Shape

#: NVTX push/pop range around the measured forwards; ``--nvtx-include RANGE/`` selects it
#: (the trailing ``/`` names a push/pop range of the default domain, ncu's filter syntax).
RANGE = "attnprof_counters"

#: metric -> (column name in the counters CSV, what it measures). Percentages.
METRICS: dict[str, tuple[str, str]] = {
    "sm__warps_active.avg.pct_of_peak_sustained_active":
        ("achieved_occupancy_pct", "achieved occupancy: active warps per active cycle over the SM's maximum, %"),
    "sm__maximum_warps_per_active_cycle_pct":
        ("theoretical_occupancy_pct", "theoretical occupancy: warps the launch configuration allows per SM, % of the maximum"),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed":
        ("sm_throughput_pct", "SM throughput (Speed of Light: the busiest SM sub-unit), % of peak over the kernel's time"),
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed":
        ("memory_throughput_pct", "memory throughput (Speed of Light: busiest of DRAM, L2, L1), % of peak"),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed":
        ("dram_throughput_pct", "DRAM throughput, % of peak over the kernel's time"),
    "gpu__time_duration.sum":
        ("duration_ns", "kernel duration under ncu (clocks not locked), ns"),
    "launch__registers_per_thread": ("registers_per_thread", "registers per thread of the launch"),
    "launch__occupancy_limit_registers": ("blocks_limit_registers", "blocks per SM the registers allow"),
    "launch__occupancy_limit_shared_mem": ("blocks_limit_shared_mem", "blocks per SM the shared memory allows"),
    "launch__occupancy_limit_warps": ("blocks_limit_warps", "blocks per SM the warp slots allow"),
}

#: Tensor-pipe metrics: base name -> (suffix, column, what it measures). Each one that
#: ``ncu --query-metrics`` lists on the GPU is measured (:func:`tensor_metrics`). On the H200
#: (GH100, Nsight Compute 2025.3.1) the query lists ``sm__pipe_tensor_cycles_active`` ("# of cycles
#: where tensor pipe was active"), ``sm__pipe_tensor_op_hmma_cycles_active`` ("HMMA/HFMA2.MMA/HGMMA/QGMMA
#: ops": the warpgroup HGMMA is counted under hmma there, so it equals the first for bf16 work) and
#: the instruction counters ``sm__inst_executed_pipe_tensor_op_gmma`` ("HGMMA/QGMMA/IGMMA/BGMMA ops":
#: warpgroup ``wgmma``, cuDNN's sm90 kernel and cuBLAS' nvjet) and ``..._op_hmma``; there is no
#: ``sm__pipe_tensor_op_gmma_cycles_active``. The instruction counts tell the two tensor paths apart
#: (mma.sync: the sm80 flash and memory-efficient kernels; wgmma: sm90 kernels).
TENSOR_METRICS: dict[str, tuple[str, str, str]] = {
    "sm__pipe_tensor_cycles_active": (".avg.pct_of_peak_sustained_active", "tensor_pipe_pct",
                                      "tensor pipe active (any tensor instruction), % of peak over active cycles"),
    "sm__inst_executed_pipe_tensor_op_gmma": (".sum", "tensor_gmma_inst",
                                              "warp instructions on the tensor pipe that are warpgroup MMAs (wgmma: HGMMA/QGMMA/IGMMA/BGMMA)"),
    "sm__inst_executed_pipe_tensor_op_hmma": (".sum", "tensor_hmma_inst",
                                              "warp instructions on the tensor pipe of the HMMA class (on GH100 HGMMA included)"),
}


#: ncu's marker for "no permission to read the GPU's performance counters".
PERMISSION_MARKERS = ("ERR_NVGPUCTRPERM", "does not have permission to access NVIDIA GPU Performance Counters")

#: Columns of the counters CSV before the metrics.
ID_COLUMNS = ["variant", "shape_key", "id", "kernel", "grid", "block"]


def _tail(text: str, n: int = 2000) -> str:
    return text[-n:].strip()


def permission_message(output: str) -> str | None:
    """ncu's own line(s) saying it may not read the counters (``ERR_NVGPUCTRPERM``), or None."""
    lines = [ln.strip() for ln in output.splitlines() if any(m in ln for m in PERMISSION_MARKERS)]
    return " ".join(dict.fromkeys(lines)) if lines else None


def _ncu_errors(output: str) -> str:
    """ncu's ``==ERROR==`` and ``==WARNING==`` lines, joined."""
    return " ".join(ln.strip() for ln in output.splitlines() if ln.startswith(("==ERROR==", "==WARNING=="))).strip()


def query_base_metrics(ncu: str, timeout_s: float = 120) -> set[str]:
    """Base metric names ``ncu --query-metrics`` lists for the GPU in this machine (first word
    of each table row). Empty set when the query fails."""
    try:
        proc = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {m.group(1) for m in re.finditer(r"^([a-z0-9_]+__[A-Za-z0-9_]+)\s", proc.stdout, re.M)}


def tensor_metrics(available: set[str]) -> dict[str, tuple[str, str]]:
    """The :data:`TENSOR_METRICS` whose base name is in ``available``: full metric name (base and
    suffix) -> (column, description)."""
    return {base + suffix: (col, desc) for base, (suffix, col, desc) in TENSOR_METRICS.items() if base in available}


def ncu_command(ncu: str, metrics: list[str], report: Path, spec_path: Path) -> list[str]:
    """The profiling command: clocks left alone, only kernels inside the NVTX range :data:`RANGE`."""
    return [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/", "--metrics", ",".join(metrics),
            "--force-overwrite", "--export", str(report), sys.executable, "-m", "attnprof.measure.counters", "child", str(spec_path)]


def parse_raw_csv(text: str, columns: dict[str, tuple[str, str]] | None = None) -> tuple:
    """Parse ``ncu --import REPORT --csv --page raw`` output: a header row (``"ID"``, ...,
    ``"Kernel Name"``, ``"Block Size"``, ``"Grid Size"``, then one column per metric), a row of
    units, then one row per profiled kernel. Lines before the header (``==PROF==`` messages)
    are skipped, and so are ``==``-prefixed lines after it. Raises ValueError (naming what is
    missing) for a CSV without the ID or Kernel Name column, or with no units row. Percentages
    outside 0..100 and unparseable cells become NaN. Returns ``(table, units)``: ``table`` one row per kernel with
    :data:`ID_COLUMNS`' id, kernel, grid, block (``"8x8x16"``, as the kernels tables write
    them) and each metric of ``columns`` (default: every one attnprof may ask for, :data:`METRICS` and all of
    :data:`TENSOR_METRICS`) that the CSV holds, under
    its column name, as a float (the raw page also lists every device attribute: those are
    left out); ``units`` {column: unit} from the units row ('' where ncu gives none)."""
    import pandas as pd

    columns = columns if columns is not None else {**METRICS, **tensor_metrics(set(TENSOR_METRICS))}
    raw = _raw_table(text)
    units_row, rows = raw.iloc[0], raw.iloc[1:].reset_index(drop=True)
    empty = pd.Series([""] * len(rows), dtype=str)
    data = {
        "id": pd.to_numeric(rows["ID"], errors="coerce").astype("Int64"),
        "kernel": rows["Kernel Name"],
        "grid": rows.get("Grid Size", empty).map(_dims),
        "block": rows.get("Block Size", empty).map(_dims),
    }
    units = {name: str(units_row[metric]).strip() for metric, (name, _) in columns.items() if metric in raw.columns}
    data.update({name: _metric_values(rows[metric], units[name]) for metric, (name, _) in columns.items()
                 if metric in raw.columns})
    return pd.DataFrame(data), units


def _metric_values(cells, unit: str):
    """One metric's column of ncu's CSV (text cells) as floats: thousands separators only ("1,234.5"); a decimal
    comma ("1.234,5") or an unparseable cell is no number (NaN, shown as such), and so is a percentage of peak
    (``unit`` "%") outside 0..100 (or inf)."""
    import pandas as pd

    text = cells.where(~cells.str.fullmatch(r"[\d.]*,\d{1,2}"), "")
    value = pd.to_numeric(text.str.replace(",", "", regex=False), errors="coerce")
    return value.where((value >= 0) & (value <= 100)) if unit == "%" else value


def _raw_table(text: str):
    """ncu's raw CSV page as text cells, from its header row on, without the ``==``-prefixed lines ncu may print
    after the table too (==PROF==/==WARNING==/==ERROR==: not kernels). Raises ValueError when there is no header,
    the CSV cannot be read, it lacks the ID or Kernel Name column, or it has no units row."""
    import pandas as pd

    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") in the output")
    body = [ln for ln in lines[start:] if ln.strip() and not ln.startswith("==")]
    try:
        raw = pd.read_csv(io.StringIO("\n".join(body)), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"ncu's CSV cannot be read: {exc}") from None
    missing = [c for c in ("ID", "Kernel Name") if c not in raw.columns]
    if missing:
        raise ValueError(f"ncu's CSV has no {missing} column (columns: {list(raw.columns)[:8]}...)")
    if raw.empty:
        raise ValueError("ncu's CSV has a header but no units row and no kernel")
    return raw


def _dims(text: str) -> str:
    """ncu's ``(8, 8, 16)`` as ``8x8x16``; '' when absent."""
    return "x".join(re.findall(r"\d+", str(text)))


def make_spec(variant: str, shape_key: str, device: str, seed: int, warmup_calls: int, custom: dict | None = None) -> dict:
    """The spec :func:`measure` and :func:`child` take: one measured forward after ``warmup_calls``."""
    return {"variant": variant, **({"custom": dict(custom)} if custom else {}), "shape": Shape.from_key(shape_key).as_dict(),
            "device": device, "seed": seed, "warmup_calls": warmup_calls, "forwards": 1}


def _record(spec: dict, status: str, reason: str, **extra) -> dict:
    return {"variant": spec["variant"], "shape_key": Shape(**spec["shape"]).key, "status": status, "reason": reason, **extra}


def measure(spec: dict, out_csv: Path, timeout_s: float = 300, ncu: str | None = None, raw_csv: Path | None = None) -> dict:
    """Measure the kernels of one forward of ``spec`` (keys: variant, shape (Shape fields),
    device, seed, warmup_calls, forwards, optional custom) under ncu and write ``out_csv``
    (one row per kernel: :data:`ID_COLUMNS` then the metric columns; header only when nothing
    was measured). Never raises for ncu's or the variant's failures. Returns the status record:
    status ``ok`` | ``skipped`` | ``failed``, ``reason``, ``metrics`` {column: ncu metric},
    ``units`` {column: unit}, ``kernels`` (rows written), ``command``, ``wall_s``, ``ncu``
    (path and ``--version``) and, when ncu ran and did not succeed, ``output_tail``. ``raw_csv``:
    where to keep ncu's own CSV (``--page raw``) as read, when given."""
    import pandas as pd

    out_csv = Path(out_csv)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(columns=ID_COLUMNS).to_csv(out_csv, index=False)  # the empty table unless measured
    t0 = time.perf_counter()
    if spec.get("device") != "cuda":
        return _record(spec, "skipped", f"{spec.get('device')} run: hardware counters need a CUDA GPU")
    ncu = ncu or shutil.which("ncu")
    if not ncu:
        return _record(spec, "skipped", "ncu (Nsight Compute) not found on PATH")
    version = _ncu_version(ncu)
    columns = {**METRICS, **tensor_metrics(query_base_metrics(ncu))}
    with tempfile.TemporaryDirectory(prefix="attnprof-ncu-") as tmp:
        spec_path, report = Path(tmp, "spec.json"), Path(tmp, "counters")
        spec_path.write_text(json.dumps(spec))
        cmd = ncu_command(ncu, list(columns), report, spec_path)
        base = {"metrics": {c: m for m, (c, _) in columns.items()}, "command": " ".join(cmd[:-1] + ["SPEC.json"]),
                "ncu": {"path": ncu, "version": version}}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s, env=interpreter_environ())
        except subprocess.TimeoutExpired as exc:  # its stdout: bytes or None, whatever text= says (subprocess docs)
            return _record(spec, "failed", f"ncu timed out after {timeout_s} s", **base, wall_s=round(time.perf_counter() - t0, 3),
                           output_tail=_tail((exc.stdout or b"").decode(errors="replace")))
        output = proc.stdout + proc.stderr
        wall = round(time.perf_counter() - t0, 3)
        rep = report.with_suffix(".ncu-rep")
        failure = _run_failure(proc, output, rep)
        if failure:
            return _record(spec, *failure, **base, output_tail=_tail(output), wall_s=wall)
        imp = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"],
                             capture_output=True, text=True, errors="replace", timeout=timeout_s)
        if raw_csv:
            Path(raw_csv).write_text(imp.stdout)
        try:
            table, units = parse_raw_csv(imp.stdout, columns)
        except ValueError as exc:
            return _record(spec, "failed", f"{exc}; {_ncu_errors(output + imp.stderr)}"[:1000], **base,
                           output_tail=_tail(output + imp.stdout + imp.stderr), wall_s=wall)
    if table.empty:
        return _record(spec, "failed", f"ncu profiled no kernel inside the NVTX range {RANGE}: {_ncu_errors(output)}", **base,
                       output_tail=_tail(output), wall_s=wall)
    record = _record(spec, "ok", "", **base, units=units, kernels=len(table), wall_s=wall)
    table = pd.concat([pd.DataFrame({"variant": spec["variant"], "shape_key": record["shape_key"]}, index=table.index), table], axis=1)
    table.to_csv(out_csv, index=False)
    child = _child_line(output)
    return {**record, **({"child": child} if child else {})}


def _run_failure(proc, output: str, rep: Path) -> tuple[str, str] | None:
    """Why ncu's run left no report to read, as (status, reason): skipped when it may not read the GPU's performance
    counters, failed when it exited with an error or wrote no report ``rep``; None when it succeeded."""
    denied = permission_message(output)
    if denied:
        return "skipped", f"ncu may not read the GPU's performance counters: {denied}"
    if proc.returncode != 0 or not rep.exists():
        why = _ncu_errors(output) or f"ncu exited with code {proc.returncode}"
        return "failed", why[:1000]
    return None


def _ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.strip().splitlines()[-1] if out.strip() else ""


def _child_line(output: str) -> dict | None:
    """The child's own summary (a JSON line prefixed ``attnprof_counters_child:``)."""
    return next((json.loads(ln.split(":", 1)[1]) for ln in output.splitlines() if ln.startswith("attnprof_counters_child:")),
                None)


def child(spec: dict) -> dict:
    """The program ncu profiles (module docstring): warm-up, then ``spec['forwards']`` forwards
    (default 1), each in the NVTX range :data:`RANGE`, each followed by a synchronize."""
    import torch

    from attnprof.measure.capture import make_inputs
    from attnprof.measure.forwards import make_forward

    shape = Shape(**spec["shape"])
    torch.manual_seed(spec.get("seed", 0))
    forward, context = make_forward(spec["variant"], shape, "cuda", spec.get("custom"))
    q, k, v = make_inputs(shape, "cuda", 1, spec.get("seed", 0))[0]
    with torch.no_grad(), context:
        for _ in range(spec.get("warmup_calls", 3)):
            forward(q, k, v)
        torch.cuda.synchronize()
        for _ in range(spec.get("forwards", 1)):
            with torch.cuda.nvtx.range(RANGE):
                forward(q, k, v)
            torch.cuda.synchronize()
    return {"variant": spec["variant"], "shape_key": shape.key, "torch": torch.__version__,
            "device_name": torch.cuda.get_device_name()}


def main(argv: list[str]) -> int:
    usage = "usage: python -m attnprof.measure.counters child SPEC.json | measure SPEC.json OUT.csv [TIMEOUT_S]"
    if len(argv) >= 3 and argv[1] == "child":
        info = child(json.loads(Path(argv[2]).read_text()))
        print("attnprof_counters_child:" + json.dumps(info), flush=True)
        return 0
    if len(argv) >= 4 and argv[1] == "measure":
        out_csv = Path(argv[3])
        record = measure(json.loads(Path(argv[2]).read_text()), out_csv, float(argv[4]) if len(argv) > 4 else 300,
                         raw_csv=out_csv.with_suffix(".ncu.csv"))
        out_csv.with_suffix(".json").write_text(json.dumps(record, indent=2, sort_keys=True))
        print(f"{record['variant']} {record['shape_key']}: {record['status']} {record['reason']} "
              f"({record.get('kernels', 0)} kernels, {record.get('wall_s', 0)} s)")
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
