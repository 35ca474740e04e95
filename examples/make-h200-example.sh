#!/usr/bin/env bash
# How examples/nvidia-h200_* was made: the default config on one H200 in one go (the capture
# worker makes the 63 captures + calibration fit well inside a 10-minute machine lease), then
# a tarball of the result set in $OUT. After it, the study shape alone from scratch in the
# worker design (issue 10's "study shape" row).
#
#   bash examples/make-h200-example.sh
#
# .whl/ and the environment: tools/device-env.sh. The PDF is rendered elsewhere (no Pango on the GPU machine):
#   snakemake --profile workflow/profiles/render results/<run>/report.pdf
set -euo pipefail
source tools/device-env.sh
run=$(device_run_id)
echo "result set: results/$run"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
rm -rf "results/$run"
start=$(date +%s.%N)
set +e
timeout --signal=TERM "${SWEEP_TIMEOUT_S:-480}" snakemake --cores 16 --keep-going html 2>&1 | tee "$OUT/snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run sweep "$rc" "$start" "$run" '{"target": "html", "cores": 16}'
# then the study shape alone from scratch in the worker design (issue 10's "study shape" row)
python3 benchmarks/capture_design.py --configs study --modes worker --cores 1 --out "$OUT/study_worker_h200.json" || true
cp results/design_study_worker/snakemake.log "$OUT/study_worker_snakemake.log" 2>/dev/null || true  # job by job
ls -la "$OUT"
