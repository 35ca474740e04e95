#!/usr/bin/env bash
# Issue 19's cost row "study shape from cold" with the default repeats (3): the study shape's 7 variants,
# `snakemake --cores 1 html` and then `--cores 16 html`, each from cold (no capture worker running, a fresh
# result set). Writes $OUT/study_cold_h200.json and the two Snakemake logs.
set -euo pipefail
source tools/device-env.sh
declare -A wall
for cores in 1 16; do
  pkill -f "attnprof.runtime.worker serve" || true
  sleep 1
  rm -rf results/study-cold
  start=$(date +%s.%N)
  snakemake --cores "$cores" html --configfile benchmarks/configs/study.yaml --config run=study-cold > "$OUT/study_cold_cores$cores.log" 2>&1
  wall[$cores]=$(python3 -c "import time; print(round(time.time() - $start, 2))")
  echo "cores $cores: ${wall[$cores]} s"
done
python3 - "$OUT" "${wall[1]}" "${wall[16]}" <<'PY'
import json, sys
out, w1, w16 = sys.argv[1:]
json.dump({"what": "study shape, 7 variants x 3 repeats, snakemake html from cold (no capture worker)",
           "cores_1_s": float(w1), "cores_16_s": float(w16)}, open(f"{out}/study_cold_h200.json", "w"), indent=1)
PY
gzip -f "$OUT"/study_cold_cores*.log
