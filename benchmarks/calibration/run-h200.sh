#!/usr/bin/env bash
# Issue 19's calibration on one H200, in one machine lease (device tool: carry [".whl"]):
#   1. the default sweep with the default repeats (3): the example's result set, and the cost row;
#   2. A/B with a known change: calib-a then calib-b (benchmarks/calibration/calib-{a,b}.yaml), the study
#      shape, 5 repeats each; only sleep_attn differs (a longer torch.cuda._sleep kernel in B);
#   3. (second call: SECOND=1) the default sweep again into <run>-rerun: the A/A pair with 1.
# Each result set is tarred into $OUT; compare and the PDFs are made on the CPU machine
# (benchmarks/calibration/calibrate.py).
set -euo pipefail
source tools/device-env.sh
# attnprof.analysis.stats (summarize and after) needs scipy; where the GPU image lacks it the captures and their tables
# are still made (--keep-going) and the result set is summarised and rendered on the CPU machine
python3 -c "import scipy; print('scipy', scipy.__version__)" || echo "no scipy here: summarize on the CPU machine"
run=$(device_run_id)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
sweep() {  # sweep NAME RUN EXTRA...
  local name=$1 r=$2; shift 2
  rm -rf "results/$r"
  local start; start=$(date +%s.%N)
  set +e
  timeout --signal=TERM "${SWEEP_TIMEOUT_S:-420}" snakemake --cores 16 --keep-going html "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  set -e
  cp "$OUT/$name.log" "$OUT/snakemake.log"
  finish_run "$name" "$rc" "$start" "$r" '{"target": "html", "cores": 16}'
  mv "$OUT/snakemake.log.gz" "$OUT/$name.log.gz"; rm -f "$OUT/$name.log"
}
if [ -z "${SECOND:-}" ]; then
  sweep sweep "$run"
  for ab in a b; do
    sweep "calib-$ab" "calib-$ab" --configfile "benchmarks/calibration/calib-$ab.yaml"
  done
else
  sweep rerun "$run-rerun" --config "run=auto-rerun"
fi
ls -la "$OUT"
