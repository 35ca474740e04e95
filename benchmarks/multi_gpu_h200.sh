#!/usr/bin/env bash
# The sweep on every GPU of the node against the same sweep on one of them, in one call on one machine (issue "Several
# GPUs of one node"): wall times and their ratio beside the ideal (the number of GPUs), each GPU's busy share of the
# capture phase, counts (identical?) and device times (inside the one-GPU run's between-run interval?). Usage, on a
# machine of several GPUs (nvidia-h200-x2, -x4, -x8):
#   bash benchmarks/multi_gpu_h200.sh                     # the default sweep (config/config.yaml)
#   CONFIG=benchmarks/configs/study.yaml bash benchmarks/multi_gpu_h200.sh   # the study shape alone (a smoke run)
# Results in $OUT: multi_gpu_h200.json, both result sets' tarballs and logs.
set -euo pipefail
source tools/device-env.sh
config=${CONFIG:-config/config.yaml}
n=$(python3 -c "from attnprof.measure.gpus import run_gpus; print(len(run_gpus()))")
cores=$(( n > 16 ? 2 * n : 16 ))
echo "GPUs: $n, --cores $cores, config $config"
declare -A wall
for mode in one all; do
  run=$(device_run_id "-gpus-$mode")
  rm -rf "results/$run"
  extra=()
  [ "$mode" = one ] && extra=("gpus=[0]")
  start=$(date +%s.%N)
  set +e
  timeout --signal=TERM "${SWEEP_TIMEOUT_S:-280}" snakemake html --cores "$cores" --configfile "$config" \
    --config "run=auto-gpus-$mode" "${extra[@]}" > "$OUT/snakemake.log" 2>&1
  rc=$?
  set -e
  finish_run "sweep_$mode" "$rc" "$start" "$run" "{\"gpus\": \"$mode\", \"config\": \"$config\", \"cores\": $cores}"
  mv "$OUT/snakemake.log.gz" "$OUT/snakemake-$mode.log.gz"
done
python3 - "$OUT" "$n" "results/$(device_run_id -gpus-one)" "results/$(device_run_id -gpus-all)" <<'PY'
import glob, json, sys
from pathlib import Path
import pandas as pd
out, n, one, everyone = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
walls = {m: json.load(open(out / f"sweep_{m}_h200.json")) for m in ("one", "all")}

def busy(run):
    """Each GPU's busy share of the capture phase: its captures' own spans over the first start to the last end."""
    recs = [json.load(open(p)) for p in glob.glob(str(run / "captures/*/*/r*/status.json"))]
    spans = [((r.get("gpu") or {}).get("uuid"), r["capture_started_at"], r["capture_started_at"] + r["capture_wall_s"]) for r in recs]
    t0, t1 = min(s for _, s, _ in spans), max(e for _, _, e in spans)
    per = {}
    for u, s, e in spans:
        per[u] = per.get(u, 0.0) + (e - s)
    return {"capture_phase_s": round(t1 - t0, 1), "busy_share": {u: round(v / (t1 - t0), 3) for u, v in per.items()},
            "captures_per_gpu": {u: sum(1 for x, _, _ in spans if x == u) for u in per}}

a, b = pd.read_csv(one / "summary.csv"), pd.read_csv(everyone / "summary.csv")
m = a.merge(b, on=["variant", "shape_key"], suffixes=("_one", "_all"))
counts = ["kernels_per_forward", "memcpy_per_forward", "memset_per_forward"]
same_counts = all(((m[f"{c}_one"] == m[f"{c}_all"]) | (m[f"{c}_one"].isna() & m[f"{c}_all"].isna())).all() for c in counts)
timed = m.dropna(subset=["device_ms_per_forward_all", "device_ms_run_lo_one", "device_ms_run_hi_one"])
inside = ((timed["device_ms_per_forward_all"] >= timed["device_ms_run_lo_one"])
          & (timed["device_ms_per_forward_all"] <= timed["device_ms_run_hi_one"]))
record = {"gpus": n, "wall_s": {k: v["wall_s"] for k, v in walls.items()}, "exit": {k: v["exit"] for k, v in walls.items()},
          "speedup": round(walls["one"]["wall_s"] / walls["all"]["wall_s"], 2), "ideal_speedup": n,
          "one": busy(one), "all": busy(everyone), "pairs": len(m), "counts_identical": bool(same_counts),
          "times_inside_one_gpu_interval": f"{int(inside.sum())} of {len(timed)}",
          "outside": timed.loc[~inside, ["variant", "shape_key", "device_ms_per_forward_one", "device_ms_run_lo_one",
                                         "device_ms_run_hi_one", "device_ms_per_forward_all"]].to_dict("records")}
json.dump(record, open(out / "multi_gpu_h200.json", "w"), indent=1, default=str)
print(json.dumps({k: v for k, v in record.items() if k != "outside"}, indent=1, default=str))
PY
