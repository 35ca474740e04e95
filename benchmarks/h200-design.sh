#!/usr/bin/env bash
# Issue 10's GPU rows and its side-by-side check, in one device call (about 7 minutes):
#  1. benchmarks/capture_design.py: the study shape and one large shape (seq_len 8192),
#     `snakemake --cores 1 html` from scratch, the per-process design against the capture
#     worker, alternating; counts and device times compared capture by capture;
#  2. the study shape from cold (no capture worker running) and again with the worker warm.
# Result: $OUT/h200_design.tgz (the JSON records, the Snakemake logs job by job; no traces).
#
#   bash benchmarks/h200-design.sh
set -euo pipefail
source tools/device-env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
pkill -f "[a]ttnprof[.]worker" || true
mkdir -p "$OUT/design"
python3 benchmarks/capture_design.py --configs study large --cores 1 --out "$OUT/design/capture_design_h200.json" || true
for run in results/design_*; do cp "$run/snakemake.log" "$OUT/design/$(basename "$run").log" || true; done
pkill -f "[a]ttnprof[.]worker" || true
sleep 2
for phase in cold warm; do
  python3 benchmarks/capture_design.py --configs study --modes worker --cores 1 --out "$OUT/design/study_${phase}_h200.json" || true
  cp results/design_study_worker/snakemake.log "$OUT/design/study_${phase}.log" || true
done
tar czf "$OUT/h200_design.tgz" -C "$OUT" design
ls -la "$OUT"
