#!/usr/bin/env bash
# How examples/nvidia-h200_*-beyond was made: config/beyond.yaml (the study's variants plus
# naive_compiled and flex_attention at the study, a grouped-query and a decode shape) on one
# H200, then a tarball of the result set in $OUT. torch.compile's caches start empty (a fresh
# machine), so the compile times are cold ones.
#
#   bash examples/make-h200-beyond.sh
#
# .whl/ and the environment: tools/device-env.sh. The PDF is rendered elsewhere:
#   snakemake --profile workflow/profiles/render results/<run>/report.pdf
set -euo pipefail
source tools/device-env.sh
run=$(device_run_id -beyond)
echo "result set: results/$run"
rm -rf "results/$run"
start=$(date +%s.%N)
set +e
# the hardware counters first (they run after every capture; rule measure_counters), then the
# report, which shows them (its input lists the counters that exist when it is planned)
timeout --signal=TERM "${BEYOND_TIMEOUT_S:-540}" snakemake counters --cores 16 --keep-going --configfile config/beyond.yaml "$@" 2>&1 | tee "$OUT/snakemake.log"
timeout --signal=TERM 120 snakemake html --cores 16 --keep-going --configfile config/beyond.yaml "$@" 2>&1 | tee -a "$OUT/snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run beyond "$rc" "$start" "$run" '{"target": "html", "config": "config/beyond.yaml", "cores": 16}'
ls -la "$OUT"
