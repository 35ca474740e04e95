#!/usr/bin/env bash
# How examples/nvidia-h200_* was made: the default config on one H200, in parts that each fit a
# 10-minute machine lease. Each part continues the result set of the previous one (results/ and
# .snakemake/ restored from PART_IN, a tarball of the previous part) and leaves its own tarball in
# $OUT. On a machine you keep, `snakemake --cores 16 html` does the same in one go.
#
#   bash examples/make-h200-example.sh 1            # calibration + the seq_len sweep at head_dim 64 up to 8192
#   PART_IN=part1.tgz bash examples/make-h200-example.sh 2   # the rest, then summary, findings, plots, report.html
#
# The PDF is rendered elsewhere (no Pango on the GPU machine):
#   snakemake --profile workflow/profiles/render results/<run>/report.pdf
set -euo pipefail
part=${1:?part 1 or 2}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if [ -d .whl ]; then  # the GPU image has torch, pandas, matplotlib, jinja2; Snakemake travels as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH
fi
if [ -n "${PART_IN:-}" ]; then
  tar xzf "$PART_IN"
  # the checkout was just copied here: make its files older than the restored outputs, so that
  # Snakemake's mtime trigger does not take the copy for a code change (params and code are still checked)
  find Snakefile config src scripts report workflow -type f -exec touch -d '2000-01-01' {} +
fi
run=$(python3 -c "import sys; sys.path.insert(0, 'src'); from attnprof.env import default_run_id, detect_gpu, torch_build; print(default_run_id('cuda', detect_gpu(), torch_build()))")
echo "result set: results/$run"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
shapes_part1="b8_h16_s1024_d64_bf16_causal b8_h16_s512_d64_bf16_causal b8_h16_s2048_d64_bf16_causal b8_h16_s4096_d64_bf16_causal b8_h16_s8192_d64_bf16_causal"
variants=$(python3 -c "import yaml; print(' '.join(yaml.safe_load(open('config/config.yaml'))['variants']))")
if [ "$part" = 1 ]; then
  targets="results/$run/calibration.json results/$run/env.json"
  for s in $shapes_part1; do for v in $variants; do targets="$targets results/$run/tables/$s/$v/kernels.csv"; done; done
else
  targets=html
fi
set +e
timeout --signal=TERM "${PART_TIMEOUT_S:-520}" snakemake --cores 16 --keep-going $targets 2>&1 | tee "$OUT/snakemake-part$part.log"
rc=${PIPESTATUS[0]}
set -e
echo "snakemake exit: $rc"
tar czf "$OUT/part$part.tgz" results .snakemake/metadata
gzip -f "$OUT/snakemake-part$part.log"
ls -la "$OUT"
