#!/usr/bin/env bash
# How examples/compare_h200_beyond_rerun was made: config/beyond.yaml captured again on one H200 (another lease than
# examples/nvidia-h200_*-beyond, so another sitting), as results/<id>-beyond-rerun, html only (no hardware
# counters: the compare does not read them). Then the study shape from cold at --cores 1 with the same code
# (benchmarks/configs/study.yaml), for the cost figure. Each result set is tarred into $OUT as soon as its step ends.
# The compare itself runs anywhere, from the two committed result sets (README, "Compare two result sets"):
#   compare: {runs: [<id>-beyond, <id>-beyond-rerun], name: h200_beyond_rerun, noise_floor: 0.02}
#
#   bash examples/make-h200-beyond-rerun.sh
set -euo pipefail
source tools/device-env.sh
run=$(device_run_id -beyond-rerun)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
start=$(date +%s.%N)
set +e
timeout --signal=TERM "${RERUN_TIMEOUT_S:-400}" snakemake html --cores 16 --keep-going --configfile config/beyond.yaml \
  --config run="$run" 2>&1 | tee "$OUT/beyond_rerun_snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run beyond_rerun "$rc" "$start" "$run" '{"target": "html", "config": "config/beyond.yaml", "cores": 16}'
pkill -f "attnprof.runtime.worker" || true  # the rerun's idle supervisors hold GPU memory
start=$(date +%s.%N)
set +e
timeout --signal=TERM "${STUDY_TIMEOUT_S:-90}" snakemake html --cores 1 --configfile benchmarks/configs/study.yaml \
  --config run=study_cold 2>&1 | tee "$OUT/study_snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run study "$rc" "$start" study_cold '{"target": "html", "config": "benchmarks/configs/study.yaml", "cores": 1}'
ls -la "$OUT"
