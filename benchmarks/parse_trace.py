"""Trace parsing at scale (issue 10): wall time and peak memory of the extract path on large traces.

Usage (from the repository root, in the project's environment):

    python benchmarks/parse_trace.py                     # 30, 100 and 311 MB traces: measure, write parse_trace.json ["after"]
    python benchmarks/parse_trace.py --readers load_trace --repeat 1 --label before   # another code state, kept under "before"
    python benchmarks/parse_trace.py --generate out.json.gz --mb 311                  # only write a trace

Generator: a large trace that reads like a real one, made from committed H200 captures
(tests/fixtures/h200/<variant>/trace.json.gz; default sdpa_math, the most events per forward,
and naive, the one with memcpy, memset and driver launches). Each profiled forward -- its
``attn_fwd`` range and everything in it: aten ops, runtime/driver API calls, the kernels,
memcpys and memsets those calls launched (found by correlation id), their ``ac2g`` flow
events and the GPU-side annotation -- belongs to its variant's block; blocks are written
again and again, variant after variant, each copy shifted in time (one block period later,
whole microseconds, so ``ts`` keeps Kineto's three decimals) with fresh correlation and
External ids (above every id written before), until the uncompressed JSON reaches the target
size. Everything outside the blocks (metadata events, profiler steps, device properties) is
written once. The result stays valid for the completeness rule: every launch finds its GPU
event by correlation id and ranges of a thread never overlap (checked when measuring: every
forward must come out complete, or the benchmark stops). Layout and compression follow
Kineto's export (an event over a few lines, gzip level 9).

Measurement: each size runs in a fresh Python process (``--repeat`` times, the fastest
counts) for each reader: ``load_trace``, and ``json.loads`` -- the design before issue 10
(the whole text decoded into one dict per event, the frame built from those dicts), in the
same run for comparison. Wall time covers what the workflow does with a trace --
scripts/extract.py (read, analyse_trace with expect_gpu, the kernel/forward/launch/op tables
written as CSV, deviceProperties as JSON) and the part of scripts/summarize.py that reads a
capture's output (summary_row from the forward CSV) -- imports excluded. Peak RSS is the
child's own ``ru_maxrss`` (os.wait4), interpreter and imported libraries included
(``import_rss_mb`` gives that part). MB are 10**6 bytes of uncompressed JSON; MB/s = size /
wall time. ``load_avg_1m`` (before and after the repeats) shows how busy the machine was.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "h200"
RESULT = Path(__file__).with_suffix(".json")
RANGE = "attn_fwd"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
CPU_CATS = ("user_annotation", "cpu_op", *LAUNCH_CATS)
TS_SLOT, CORR_SLOT, EXT_SLOT = "\x00ts\x00", "\x00corr\x00", "\x00ext\x00"


# --- generator ----------------------------------------------------------------------------------

def _read(variant: str) -> dict:
    with gzip.open(FIXTURES / variant / "trace.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def forward_blocks(trace: dict) -> tuple[list[list[dict]], list[dict]]:
    """The trace's events split into one block per ``attn_fwd`` range (the range, the CPU
    events of its thread inside it, the GPU events and flows those launches correlate to, the
    GPU annotations of its ops) and the rest."""
    events = trace["traceEvents"]
    ranges = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") == RANGE),
                    key=lambda e: e["ts"])
    owner: dict[int, int] = {}
    for i, r in enumerate(ranges):
        for e in events:
            if (e.get("ph") == "X" and e.get("cat") in CPU_CATS and e.get("tid") == r["tid"]
                    and r["ts"] <= e["ts"] <= r["ts"] + r["dur"]):
                owner[id(e)] = i
    corr = {e["args"]["correlation"]: owner[id(e)] for e in events if id(e) in owner and "correlation" in e.get("args", {})}
    ext = {e["args"]["External id"]: owner[id(e)] for e in events if id(e) in owner and "External id" in e.get("args", {})}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") in GPU_CATS and args.get("correlation") in corr:
            owner[id(e)] = corr[args["correlation"]]
        elif e.get("cat") == "ac2g" and e.get("id") in corr:
            owner[id(e)] = corr[e["id"]]
        elif e.get("cat") == "gpu_user_annotation" and args.get("External id") in ext:
            owner[id(e)] = ext[args["External id"]]
    blocks: list[list[dict]] = [[] for _ in ranges]
    rest = []
    for e in events:
        (blocks[owner[id(e)]] if id(e) in owner else rest).append(e)
    return blocks, rest


def _layout(event: dict) -> str:
    """One event as Kineto lays it out: the scalar fields on one line, args on the next ones."""
    head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in event.items() if k != "args")
    if "args" not in event:
        return "  {\n    " + head + "\n  }"
    args = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in event["args"].items())
    return "  {\n    " + head + ",\n    \"args\": {\n      " + args + "\n    }\n  }"


def _template(event: dict) -> str:
    """``_layout`` with %-slots for ts, correlation (or flow id) and External id, in that order."""
    e = dict(event, ts=TS_SLOT)
    if "args" in e:
        e["args"] = dict(e["args"])
        if "correlation" in e["args"]:
            e["args"]["correlation"] = CORR_SLOT
        if "External id" in e["args"]:
            e["args"]["External id"] = EXT_SLOT
    if e.get("cat") == "ac2g":
        e["id"] = CORR_SLOT
    text = _layout(e).replace("%", "%%")
    for slot in (TS_SLOT, CORR_SLOT, EXT_SLOT):
        text = text.replace(json.dumps(slot), f"%({slot.strip(chr(0))})s")
    return text


def _ids(events: list[dict]) -> tuple[int, int]:
    """Largest correlation (or flow) id and largest External id of ``events``."""
    corr = [e["args"]["correlation"] for e in events if "correlation" in (e.get("args") or {})]
    corr += [e["id"] for e in events if e.get("cat") == "ac2g"]
    ext = [e["args"]["External id"] for e in events if "External id" in (e.get("args") or {})]
    return max(corr, default=0), max(ext, default=0)


class Template:
    """One variant's trace as text templates: its forwards (``blocks``) and the rest."""

    def __init__(self, variant: str):
        self.trace = _read(variant)
        blocks, rest = forward_blocks(self.trace)
        if not blocks:
            raise SystemExit(f"{variant}: no {RANGE} ranges in the fixture")
        every = [e for b in blocks for e in b]
        self.forwards = len(blocks)
        self.t0 = min(e["ts"] for e in every)  # start of the first forward
        self.span = max(e["ts"] + e.get("dur", 0) for e in self.trace["traceEvents"] if isinstance(e.get("ts"), float)) - self.t0
        self.max_corr, self.max_ext = _ids(self.trace["traceEvents"])
        self.block_corr, self.block_ext = _ids(every)
        self.blocks = [self._slots(e) for e in every]
        self.rest = [self._slots(e) for e in rest]

    @staticmethod
    def _slots(e: dict) -> tuple:
        args = e.get("args") or {}
        return e["ts"], args.get("correlation", e.get("id") if e.get("cat") == "ac2g" else None), args.get("External id"), _template(e)


def _fill(events: list[tuple], shift: int, corr_add: int, ext_add: int) -> list[str]:
    out = []
    for ts, corr, ext, text in events:
        fields = {"ts": f"{ts + shift:.3f}"}
        if corr is not None:
            fields["corr"] = corr + corr_add
        if ext is not None:
            fields["ext"] = ext + ext_add
        out.append(text % fields)
    return out


def generate(path: Path, mb: float, variants: list[str]) -> dict:
    """Write a gzipped trace of at least ``mb`` MB of JSON (10**6 bytes) to ``path``; returns its
    size, event and forward counts. Variant i's own events keep their places relative to its
    first forward, which starts at the first variant's; their ids get i times the largest id of
    all variants added. Copy c of the forwards (variant c mod n) starts c block periods later
    (whole microseconds), ids above every id of the originals and of the copies before it."""
    temps = [Template(v) for v in variants]
    base = temps[0].trace
    start = int(temps[0].t0)
    period = int(max(t.span for t in temps)) + 100
    own_corr, own_ext = max(t.max_corr for t in temps) + 1, max(t.max_ext for t in temps) + 1
    copy_corr, copy_ext = max(t.block_corr for t in temps) + 1, max(t.block_ext for t in temps) + 1
    head = {k: v for k, v in base.items() if k not in ("traceEvents", "traceName")}
    opening = "\n  {\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()) + ",\n  \"traceEvents\": [\n"
    closing = "\n  ],\n  \"traceName\": \"parse_trace benchmark\"\n}\n"
    target = int(mb * 1e6)
    written, n_events, copies, forwards = 0, 0, 0, 0
    with gzip.open(path, "wb", compresslevel=9) as fh:
        def put(text: str) -> None:
            nonlocal written
            data = text.encode()
            fh.write(data)
            written += len(data)
        put(opening)
        rest = [text for i, t in enumerate(temps) for text in _fill(t.rest, start - int(t.t0), i * own_corr, i * own_ext)]
        put(",\n".join(rest))
        n_events += len(rest)
        while written + len(closing) < target:
            t = temps[copies % len(temps)]
            chunk = _fill(t.blocks, start - int(t.t0) + (copies + 1) * period,
                          len(temps) * own_corr + copies * copy_corr, len(temps) * own_ext + copies * copy_ext)
            put(",\n" + ",\n".join(chunk))
            n_events += len(chunk)
            forwards += t.forwards
            copies += 1
        put(closing)
    return {"path": str(path), "uncompressed_bytes": written, "gzip_bytes": path.stat().st_size, "events": n_events,
            "forwards": forwards, "variants": variants}


# --- measurement --------------------------------------------------------------------------------

#: How the child reads the trace: ``load_trace`` (the project's reader) or ``json.loads`` (the
#: whole text decoded by the standard library into one dict per event, as load_trace did before
#: issue 10; analyse_trace then builds its frame from those dicts).
READERS = {
    "load_trace": "trace = load_trace(path)",
    "json.loads": "with gzip.open(path, 'rt', encoding='utf-8') as fh:\n    trace = json.loads(fh.read())",
}

CHILD = r"""
import gzip, json, resource, shutil, sys, tempfile, time
from pathlib import Path
t_import = time.perf_counter()
import pandas as pd
from attnprof.analysis.tables import analyse_trace, forward_table, kernel_table, launch_api_table, op_table, summary_row
from attnprof.analysis.trace import device_properties, load_trace
from attnprof.analysis.recipe import recipe_table
try:
    from attnprof.analysis.recipe import write_recipe
except ImportError:  # before recipe.csv stored each name once
    def write_recipe(frame, path):
        frame.to_csv(path, index=False)
import_s = time.perf_counter() - t_import
import_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
path, status, read = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
out = Path(tempfile.mkdtemp())
t0 = time.perf_counter()
exec(read)                                                          # scripts/extract.py from here
if read.startswith("trace = load_trace"):  # extract's own checks of the record against its trace (events_frame)
    from attnprof.analysis.records import devices_used
    from attnprof.analysis.trace import events_frame
    events = events_frame(trace)
    categories = events["cat"].value_counts().to_dict()
    props = devices_used(device_properties(trace), (a[0] for a in events["gpu_args"].dropna()))
t1 = time.perf_counter()
frames = analyse_trace(trace, "attn_fwd", expect_gpu=True)
t2 = time.perf_counter()
kernel_table(frames, "v", "s").to_csv(out / "kernels.csv", index=False)
forward_table(frames, "v", "s").to_csv(out / "forwards.csv", index=False)
launch_api_table(frames, "v", "s").to_csv(out / "launches.csv", index=False)
op_table(frames, "v", "s").to_csv(out / "ops.csv", index=False)
write_recipe(recipe_table(frames, "v", "s", True), out / "recipe.csv")
with open(out / "device.json", "w") as fh:
    json.dump(device_properties(trace), fh, indent=2, sort_keys=True)
status["schedule"] = {"active": len(frames["ranges"])}
row = summary_row(status, pd.read_csv(out / "forwards.csv"), path)  # scripts/summarize.py, per capture
t3 = time.perf_counter()
shutil.rmtree(out)
comp = frames["completeness"]
print(json.dumps({"load_s": t1 - t0, "analyse_s": t2 - t1, "tables_s": t3 - t2, "seconds": t3 - t0,
                  "import_s": import_s, "import_rss_kb": import_rss, "forwards": len(comp),
                  "forwards_complete": int(comp["complete"].sum()), "gpu_events": len(frames["gpu"])}))
"""


def measure_once(path: Path, reader: str) -> dict:
    """One fresh process running the extract path on ``path``: its timings and peak RSS."""
    with gzip.open(FIXTURES / "sdpa_math" / "status.json.gz", "rt") as fh:
        status = json.load(fh)
    status["min_complete_forwards"] = 1
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), json.dumps(status), READERS[reader]],
                                stdout=out, stderr=err, text=True, cwd=ROOT)
        _, wait_status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not the children's maximum
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode:
        raise SystemExit(f"measurement failed on {path}:\n{stderr}")
    rec = json.loads(stdout.strip().splitlines()[-1])
    rec["peak_rss_mb"] = usage.ru_maxrss / 1024  # kB on Linux
    rec["import_rss_mb"] = rec.pop("import_rss_kb") / 1024
    return rec


BARE = ("import gzip, json, sys, time\nt0 = time.perf_counter()\n"
        "with gzip.open(sys.argv[1], 'rt', encoding='utf-8') as fh:\n    json.load(fh)\n"
        "print(time.perf_counter() - t0)")


def bare_load_s(path: Path, repeat: int) -> float:
    """Seconds a bare ``json.load`` of the gzipped trace takes in a fresh process (the fastest of ``repeat``): the
    yardstick of issue 34 ("the extract job within 2x a bare json.load")."""
    return min(float(subprocess.run([sys.executable, "-c", BARE, str(path)], capture_output=True, text=True,
                                    check=True).stdout) for _ in range(repeat))


def measure(path: Path, info: dict, repeat: int, reader: str) -> dict:
    load = os.getloadavg()[0]
    runs = [measure_once(path, reader) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["seconds"])
    bare = bare_load_s(path, repeat)
    mb = info["uncompressed_bytes"] / 1e6
    if best["forwards_complete"] != best["forwards"] or best["forwards"] != info["forwards"]:
        raise SystemExit(f"{path}: {best['forwards_complete']} of {best['forwards']} forwards complete, "
                         f"{info['forwards']} written: the generated trace is not valid")
    return {"uncompressed_mb": round(mb, 1), "gzip_mb": round(info["gzip_bytes"] / 1e6, 1), "events": info["events"],
            "forwards": info["forwards"], "gpu_events": best["gpu_events"],
            "mb_per_s": round(mb / best["seconds"], 1), "seconds": round(best["seconds"], 2),
            "load_trace_s": round(best["load_s"], 2), "analyse_trace_s": round(best["analyse_s"], 2),
            "tables_s": round(best["tables_s"], 2), "bare_json_load_s": round(bare, 2),
            "over_bare_json_load": round(best["seconds"] / bare, 2),
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs)), "import_rss_mb": round(best["import_rss_mb"]),
            "seconds_all_runs": [round(r["seconds"], 2) for r in runs],
            "load_avg_1m": [round(load, 2), round(os.getloadavg()[0], 2)]}


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    mem = next((int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), None) if Path("/proc/meminfo").exists() else None
    versions = {}
    for pkg in ("attnprof", "pandas", "numpy", "msgspec"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)), "memory_mb": mem,
            "python": platform.python_version(), "platform": platform.platform(), "versions": versions}


def summary(doc: dict) -> dict:
    """Per size: MB/s and peak RSS of every measured design, side by side."""
    designs = {"before": (doc.get("before") or {}).get("sizes", {}),
               "after": (doc.get("after") or {}).get("sizes", {}),
               "json.loads, same run as after": ((doc.get("after") or {}).get("json.loads") or {}).get("sizes", {})}
    sizes = sorted({s for d in designs.values() for s in d}, key=float)
    return {s: {name: {"mb_per_s": d[s]["mb_per_s"], "peak_rss_mb": d[s]["peak_rss_mb"]}
                for name, d in designs.items() if s in d} for s in sizes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=311.0, help="size of the trace --generate writes (MB of JSON)")
    ap.add_argument("--generate", type=Path, help="only write a trace of --mb MB to this path (.json.gz)")
    ap.add_argument("--sizes", default="30,100,311", help="trace sizes to measure, MB of JSON")
    ap.add_argument("--variants", default="sdpa_math,naive", help="fixtures whose forwards the traces repeat")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per size; the fastest counts")
    ap.add_argument("--readers", default="load_trace,json.loads",
                    help="load_trace, and json.loads for the design before issue 10 in the same run")
    ap.add_argument("--label", default="after", help="key of parse_trace.json to write (other keys are kept)")
    ap.add_argument("--workdir", type=Path, help="where generated traces go (default: a temporary directory)")
    ap.add_argument("--output", type=Path, default=RESULT)
    args = ap.parse_args()
    variants = args.variants.split(",")
    if args.generate:
        print(json.dumps(generate(args.generate, args.mb, variants), indent=1))
        return
    work = args.workdir or Path(tempfile.mkdtemp(prefix="parse_trace_"))
    work.mkdir(parents=True, exist_ok=True)
    readers = args.readers.split(",")
    results: dict[str, dict] = {r: {} for r in readers}
    for size in (float(s) for s in args.sizes.split(",")):
        path = work / f"trace_{size:g}mb_{'_'.join(variants)}.json.gz"
        info_path = path.with_suffix(".info.json")
        if path.exists() and info_path.exists():
            info = json.loads(info_path.read_text())
        else:
            info = generate(path, size, variants)
            info_path.write_text(json.dumps(info))
        for reader in readers:
            results[reader][f"{size:g}"] = rec = measure(path, info, args.repeat, reader)
            print(f"{size:g} MB, {reader}: {rec['mb_per_s']} MB/s, {rec['seconds']} s, peak RSS {rec['peak_rss_mb']} MB",
                  flush=True)
    doc = json.loads(args.output.read_text()) if args.output.exists() else {}
    doc["goal"] = {"mb_per_s_min": 40, "peak_rss_mb_max_at_311": 1000, "issue": 10}
    doc["method"] = ("generated traces (benchmarks/parse_trace.py: the forwards of tests/fixtures/h200/" + ",".join(variants)
                     + " repeated with shifted times and fresh ids, gzip level 9); wall time of the extract path (load_trace,"
                     " analyse_trace with expect_gpu, the kernel/forward/launch/op/recipe CSVs, deviceProperties JSON, summary_row"
                     " from the forward CSV) in a fresh process, imports excluded, best of the repeats; peak RSS = ru_maxrss"
                     " of that process, interpreter and imports included; MB = 10**6 bytes of uncompressed JSON")
    record = {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(), "repeat": args.repeat}
    main_reader = readers[0]
    record.update(reader=main_reader, sizes=results[main_reader])
    for reader in readers[1:]:
        record[reader] = {"reader": READERS[reader], "sizes": results[reader]}
    doc[args.label] = record
    doc["summary"] = summary(doc)
    args.output.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.output} [{args.label}]")


if __name__ == "__main__":
    main()
