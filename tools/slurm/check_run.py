"""Check a result set that tools/slurm/run-cpu-default.sh produced through workflow/profiles/slurm.

    python tools/slurm/check_run.py RESULTS_DIR SNAKEMAKE_LOG SLURM_LOGDIR

Prints one line per check (ok / FAIL) and exits 1 if any failed. Checks:
  - report.html and report.pdf exist and are what they say;
  - summary.csv has a row for every variant and shape of the run's config (read from env.json); every
    row is ok, except a backend PyTorch has no CPU kernel for (sdpa_efficient, sdpa_cudnn) on a CPU
    run, which must be `unsupported` with PyTorch's reason; every ok row has its per-forward numbers
    (kernels per forward on a GPU; on a CPU run that column is empty by design, docs/results.md, so
    the CPU ms per forward, the complete-forward count and the float64 check);
  - the captures ran in fresh processes (capture_mode process: env.json's config, no status.json
    with a worker record, no capture_worker.log);
  - every Snakemake job but the local target rule ran as a Slurm job of this run (squeue), COMPLETED,
    with a Slurm log file; capture, environment and calibrate on partition gpu with gres:gpu:1,
    the rest on partition cpu.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

CPU_UNSUPPORTED = {"sdpa_efficient", "sdpa_cudnn"}  # no CPU kernel in PyTorch's CPU SDPA dispatcher
GPU_RULES = {"capture", "environment", "calibrate"}  # the profile's set-resources put these on the gpu partition

failures: list[str] = []


def check(ok: bool, what: str) -> bool:
    print(f"[check] {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)
    return ok


def number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def check_report(results: Path) -> None:
    html, pdf = results / "report.html", results / "report.pdf"
    check(html.is_file() and "<html" in html.read_text(errors="replace")[:2000].lower(),
          f"{html} exists ({html.stat().st_size if html.exists() else 0} bytes)")
    check(pdf.is_file() and pdf.read_bytes()[:5] == b"%PDF-", f"{pdf} exists ({pdf.stat().st_size if pdf.exists() else 0} bytes)")


def check_summary(results: Path, env: dict) -> None:
    from attnprof.model.variants import expand_shapes

    device = env["device"]
    cfg = env["config"]
    variants = list(cfg["variants"])
    shapes = [s.key for s in expand_shapes(cfg["shapes"][device])]
    rows = list(csv.DictReader((results / "summary.csv").open()))
    have = {(r["variant"], r["shape_key"]): r for r in rows}
    missing = [(v, s) for v in variants for s in shapes if (v, s) not in have]
    check(not missing, f"summary.csv: {len(rows)} rows, one per variant and shape ({len(variants)} x {len(shapes)}, device {device})"
          + (f"; missing {missing}" if missing else ""))
    min_complete = cfg["profiler"]["min_complete_forwards"]
    for (v, s), r in sorted(have.items(), key=lambda kv: variants.index(kv[0][0]) if kv[0][0] in variants else 99):
        status = r["status"]
        v = v if len(shapes) == 1 else f"{v} {s}"  # the label of this row in the lines below
        if status == "unsupported" and device == "cpu" and r["variant"] in CPU_UNSUPPORTED:
            check(bool(r["reason"]), f"{v}: unsupported on the CPU, as expected ({r['reason'][:70]}...)")
            continue
        if status != "ok":
            check(False, f"{v}: status {status}" + (f" ({r['reason'][:100]})" if r.get("reason") else ""))
            continue
        complete = number(r["forwards_complete"]) or 0
        cpu_ms = number(r["cpu_ms_per_forward"])
        kernels = number(r["kernels_per_forward"])
        per_forward = (
            f"{complete:.0f}/{r['forwards_expected']} forwards complete, cpu {cpu_ms:.2f} ms/fwd" if cpu_ms else "no cpu ms/fwd"
        )
        if device == "cuda":
            good = kernels is not None and number(r["device_ms_per_forward"]) is not None
            per_forward = f"{r['kernels_per_forward']} kernels/fwd, {r['device_ms_per_forward']} device ms/fwd, " + per_forward
        else:
            good = r["kernels_per_forward"] == ""  # empty on a CPU run (docs/results.md)
            per_forward = "kernels/fwd empty (CPU run), " + per_forward
        good = good and complete >= min_complete and cpu_ms is not None and cpu_ms > 0 and r["rel_error_ok"] == "True"
        check(good, f"{v}: ok, {per_forward}, rel_error {number(r['rel_error']):.1e} (ok={r['rel_error_ok']})")


def check_capture_mode(results: Path, env: dict) -> None:
    mode = env["config"]["capture_mode"]
    workers = [p.parent.name for p in sorted(results.glob("captures/*/*/status.json")) if "worker" in json.loads(p.read_text())]
    n = len(list(results.glob("captures/*/*/status.json")))
    worker_log = results / "logs" / "capture_worker.log"
    check(mode == "process" and not workers and not worker_log.exists(),
          f"capture_mode {mode} (env.json); status.json with a worker record: {len(workers)} of {n}; "
          f"capture_worker.log {'present' if worker_log.exists() else 'absent'}")


def check_slurm(snakemake_log: Path, slurm_logdir: Path) -> None:
    log = snakemake_log.read_text(errors="replace")
    m = re.search(r"SLURM run ID: (\S+)", log)
    if not check(m is not None, "snakemake log names the SLURM run ID"):
        return
    run_id = m.group(1)
    total = re.search(r"^total\s+(\d+)", log, re.M)
    local = len(re.findall(r"^localrule \w+:", log, re.M))
    expected = int(total.group(1)) - local if total else -1
    out = subprocess.run(["squeue", "-h", "--states=all", "--name", run_id, "-o", "%i|%T|%P|%k"],
                         capture_output=True, text=True, check=True).stdout
    jobs = [line.split("|", 3) for line in out.splitlines() if line.strip()]
    rule_of = {j[0]: re.sub(r"_wildcards_.*$", "", j[3]).removeprefix("rule_") for j in jobs}
    states = Counter(j[1] for j in jobs)
    check(len(jobs) == expected and set(states) == {"COMPLETED"},
          f"Slurm jobs of run {run_id}: {len(jobs)} (Snakemake planned {expected} + {local} local), states {dict(states)}")
    per_rule: dict[str, Counter] = {}
    for jobid, _state, partition, _comment in jobs:
        per_rule.setdefault(rule_of[jobid], Counter())[partition] += 1
    wrong = {r: dict(c) for r, c in per_rule.items() if set(c) != {"gpu" if r in GPU_RULES else "cpu"}}
    check(not wrong, "partitions: " + ", ".join(f"{r} {sum(c.values())}x {'/'.join(c)}" for r, c in sorted(per_rule.items()))
          + (f"; wrong: {wrong}" if wrong else ""))
    gres_bad = []
    for jobid, rule in rule_of.items():
        if rule in GPU_RULES:
            info = subprocess.run(["scontrol", "-o", "show", "job", jobid], capture_output=True, text=True).stdout
            if "TresPerJob=gres:gpu:1" not in info and "TresPerJob=gres/gpu:1" not in info:
                gres_bad.append(jobid)
    check(not gres_bad, f"capture/environment/calibrate jobs hold gres:gpu:1 ({sum(r in GPU_RULES for r in rule_of.values())} jobs)"
          + (f"; without: {gres_bad}" if gres_bad else ""))
    logs = sorted(slurm_logdir.glob("rule_*/*/*.log"))
    missing_logs = [j for j in rule_of if not any(p.name == f"{j}.log" for p in logs)]
    check(not missing_logs, f"Slurm log files: {len(logs)} in {slurm_logdir}" + (f"; missing for jobs {missing_logs}" if missing_logs else ""))


def main() -> int:
    results, snakemake_log, slurm_logdir = (Path(a) for a in sys.argv[1:4])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    env = json.loads((results / "env.json").read_text())
    check_report(results)
    check_summary(results, env)
    check_capture_mode(results, env)
    check_slurm(snakemake_log, slurm_logdir)
    print(f"[check] {'all checks passed' if not failures else f'{len(failures)} check(s) FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
