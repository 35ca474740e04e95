#!/usr/bin/env bash
# The H200 interleaved A/A (issue 32): one torch build, two environments that differ only in a variable no code
# reads (ATTNPROF_AA_SIDE), captured interleaved (ABBA rounds, then the rounds top-up adds to rows look 1 left
# undetermined) on one H200 in one run. Nothing changed, so every
# row must come out "same" or "undetermined", never slower/faster, and compare's page 1 states the expected number
# of false "changed" rows. The default sweep without its two seq_len 16384 points (7 of the 9 shapes: the two
# environments x 3 rounds of all nine take about 690 s, beyond one 10-minute machine lease).
#
#   bash examples/make-h200-aa.sh
#
# Writes $OUT/aa.tgz (results/nvidia-h200@{a,b} and results/compare/nvidia-h200-ab: an A/B run names its compare <run>-ab) and the log. Render the PDFs
# elsewhere: snakemake --profile workflow/profiles/render results/compare/nvidia-h200-ab/compare.pdf
set -euo pipefail
source tools/device-env.sh
py=$(command -v python3)
cat > "$OUT/aa-h200.yaml" <<YAML
run: auto
repeats: 3
# rounds only where undecided (docs/statistics.md): bounded so that the whole run fits one lease
top_up: {rounds: 3, time_s: ${AA_TOP_UP_S:-60}}
shapes:
  cuda:
    - {batch: [8], heads: [16], seq_len: [1024, 512, 2048, 4096, 8192], head_dim: [64], dtype: [bf16], causal: [true]}
    - {batch: [8], heads: [16], seq_len: [1024, 4096], head_dim: [128], dtype: [bf16], causal: [true]}
  cpu:
    - {batch: [2], heads: [8], seq_len: [512], head_dim: [64], dtype: [fp32], causal: [true]}
environments:
  a: {python: $py, env: {ATTNPROF_AA_SIDE: "a"}}
  b: {python: $py, env: {ATTNPROF_AA_SIDE: "b"}}
YAML
ab_run a b "$OUT/aa-h200.yaml" "${AA_TIMEOUT_S:-540}"
tar czf "$OUT/aa.tgz" results/nvidia-h200@a results/nvidia-h200@b results/compare/nvidia-h200-ab 2>/dev/null || true
gzip -f "$OUT/snakemake.log"
ls -la "$OUT"
