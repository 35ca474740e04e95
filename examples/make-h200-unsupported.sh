#!/usr/bin/env bash
# How examples/h200_unsupported_backends was made: the three fused backends at three small shapes where some of
# them cannot run (head_dim 512, fp32, seq_len 1) on one H200, default repeats; the report quotes PyTorch's reason
# for every refusal (docs/h200.md, "Where a backend cannot run").
#
#   bash examples/make-h200-unsupported.sh
#
# Writes $OUT/unsupported.tgz (results/h200_unsupported_backends) and the log. The PDF is rendered elsewhere:
#   snakemake --profile workflow/profiles/render results/h200_unsupported_backends/report.pdf
set -euo pipefail
source tools/device-env.sh
cat > "$OUT/unsupported-h200.yaml" <<YAML
run: h200_unsupported_backends
variants: [sdpa_efficient, sdpa_flash, sdpa_cudnn]
shapes:
  cuda:
    - {batch: [1], heads: [2], seq_len: [128], head_dim: [512], dtype: [bf16], causal: [true]}
    - {batch: [1], heads: [2], seq_len: [128], head_dim: [64], dtype: [fp32], causal: [true]}
    - {batch: [1], heads: [2], seq_len: [1], head_dim: [64], dtype: [bf16], causal: [true]}
  cpu:
    - {batch: [1], heads: [2], seq_len: [128], head_dim: [64], dtype: [fp32], causal: [true]}
YAML
rm -rf results/h200_unsupported_backends
start=$(date +%s.%N)
set +e
timeout --signal=TERM "${UNSUPPORTED_TIMEOUT_S:-240}" snakemake results/h200_unsupported_backends/report.html --cores 16 \
  --keep-going --configfile config/config.yaml "$OUT/unsupported-h200.yaml" 2>&1 | tee "$OUT/snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run unsupported "$rc" "$start" h200_unsupported_backends '{"target": "report.html", "cores": 16}'
