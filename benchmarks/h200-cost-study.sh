#!/usr/bin/env bash
# Issue 40's two remaining figures on one fresh H200, in one device call of at most 600 s (the steps' timeouts add
# up to 450 s; the wheels' install and the disk-cache warm-up take about 20 s more):
#
#   1. study: the study shape (7 variants + the control x 3 repeats) from cold, `snakemake --cores 1 html`
#      (target <= 40 s); its wall time split as benchmarks/cost_h200_report.py splits it: Snakemake's start to the
#      first capture, the captures, the last capture to the report (and each round's span and processes);
#   2. ab: the A/B of the 7 built-in variants at the study shape, environments base and changed with the same
#      python (changed sets ATTNPROF_AB_CHANGE=1, which no built-in variant reads: an A/A in effect), the default
#      3 rounds with the top-up held back (top_up rounds 0; AB_TOP_UP=1 keeps the default top-up), both reports and
#      the paired compare, `--cores 16` (target <= 200 s; 311-364 s before).
#
# Run from the repository root on the GPU machine, with .whl/ carried (tools/device-env.sh installs Snakemake
# from it):
#
#   bash benchmarks/h200-cost-study.sh
#
# Each step starts from scratch (no results/, no .snakemake/) and is tarred into $OUT as soon as it ends
# ($OUT/<step>.tgz: its result sets, its log, its JSON; plots and PDFs left out); $OUT/cost_study_h200.json and the
# last lines printed are the summary. STUDY_TIMEOUT_S (120) and AB_TIMEOUT_S (330) set the steps' limits.
set -uo pipefail
source tools/device-env.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
command -v snakemake || { echo "no snakemake: carry .whl/ (tools/device-env.sh)"; exit 1; }
# the disk cache as a run after another finds it (cost_h200.sh did the same before its study runs): the figure is
# the pipeline's, not the first read of torch's files from a fresh disk
python3 -c "import torch, pandas, matplotlib; print('torch', torch.__version__)"
py=$(command -v python3)

# step NAME TIMEOUT_S CORES ARGS...: snakemake from scratch; $OUT/NAME.json (wall time, exit, the result sets it
# wrote), the log beside each result set, $OUT/NAME.tgz
step() {
  local name=$1 limit=$2 cores=$3 start rc
  shift 3
  rm -rf results .snakemake
  start=$(date +%s.%N)
  timeout --signal=TERM "$limit" snakemake --cores "$cores" --keep-going "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  python3 - "$name" "$rc" "$start" "$cores" "$OUT" <<'PY'
import json, sys, time
from pathlib import Path
name, rc, start, cores, out = sys.argv[1:]
sets = sorted(p.name for p in Path("results").iterdir() if p.is_dir() and p.name != "compare") \
    if Path("results").exists() else []
record = {"step": name, "cores": int(cores), "wall_s": round(time.time() - float(start), 2), "exit": int(rc),
          "timed_out": int(rc) in (124, 137), "result_sets": sets}
json.dump(record, open(f"{out}/{name}.json", "w"), indent=1)
print(json.dumps(record))
PY
  for run in results/*/; do [ "$run" != results/compare/ ] && cp "$OUT/$name.log" "$run/snakemake.log"; done
  tar czf "$OUT/$name.tgz" --exclude='*/plots/*' --exclude='*.pdf' results "$OUT/$name.log" "$OUT/$name.json" 2>/dev/null
  gzip -f "$OUT/$name.log"
  mv results "/tmp/results-$name"  # kept for the summary; the next step starts from scratch
}

step study "${STUDY_TIMEOUT_S:-120}" 1 html --configfile benchmarks/configs/study.yaml --config run=study

top_up="top_up: {rounds: 0}"
[ "${AB_TOP_UP:-0}" = 1 ] && top_up=""
cat > "$OUT/ab-study.yaml" <<YAML
run: abstudy
variants: [naive, naive_inplace, sdpa_math, sdpa_efficient, sdpa_flash, sdpa_cudnn, sdpa_auto]
shapes:
  cuda: {batch: [8], heads: [16], seq_len: [1024], head_dim: [64], dtype: [bf16], causal: [true]}
  cpu: {batch: [2], heads: [8], seq_len: [512], head_dim: [64], dtype: [fp32], causal: [true]}
environments:
  base: {python: $py}
  changed: {python: $py, env: {ATTNPROF_AB_CHANGE: "1"}}
$top_up
YAML
step ab "${AB_TIMEOUT_S:-330}" 16 results/abstudy@base/report.html results/abstudy@changed/report.html \
  results/compare/abstudy-ab/compare.html --configfile config/config.yaml "$OUT/ab-study.yaml"

# the summary: each step's wall time and exit; the study's stages and rounds, the A/B's rounds per result set and
# compare's verdicts
python3 - "$OUT" <<'PY'
import collections, json, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from cost_h200_report import rounds, stages

out = Path(sys.argv[1])
summary = {"how": "bash benchmarks/h200-cost-study.sh", "targets_s": {"study": 40, "ab": 200}, "steps": {}}
for name in ("study", "ab"):
    rec = json.loads((out / f"{name}.json").read_text())
    root = Path(f"/tmp/results-{name}")
    for run in rec["result_sets"]:
        d = root / run
        try:
            rec.setdefault("rounds", {})[run] = rounds(d)
            if name == "study":
                rec["stages"] = stages(d, rec["wall_s"])
        except Exception as exc:  # a step cut short: say so, keep the rest
            rec.setdefault("errors", []).append(f"{run}: {type(exc).__name__}: {exc}")
    compare = root / "compare" / "abstudy-ab" / "compare.json"
    if name == "ab" and compare.exists():
        rows = json.loads(compare.read_text())["pairs"][0]["rows"]
        rec["verdicts"] = dict(collections.Counter(r["verdict"] for r in rows))
        rec["ratios"] = {r["variant"]: r.get("ratio") for r in rows}
    rec["met"] = rec["exit"] == 0 and rec["wall_s"] <= summary["targets_s"][name]
    summary["steps"][name] = rec
(out / "cost_study_h200.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
PY
ls -la "$OUT"
