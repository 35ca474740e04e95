#!/usr/bin/env bash
# Issue 20 part 3 on the H200: the control capture through the whole workflow (capture, extract, summarize, report).
# A small grid (one shape, two variants, two repeats) into a result set of its own; then control.csv must hold
# kernels 2, memcpy 1, memset 0 in every repeat, and the report's methods the line
# "Profiler self-check: the control workload (1 GEMM, 1 elementwise, 1 memcpy DtoD per step) counted 2 kernels,
# 1 memcpy, 0 memset per forward ..., as constructed." (a "FAILED" line and a page-1 line otherwise: report them).
# Usage: bash benchmarks/control_workflow_h200.sh
set -euo pipefail
run=control-check-h200
snakemake --cores 1 "results/$run/report.html" --config run=$run repeats=2 'variants=[sdpa_math,sdpa_flash]' \
  'shapes={cuda: {batch: [8], heads: [16], seq_len: [1024], head_dim: [64], dtype: [bf16], causal: [true]}}'
cat "results/$run/control.csv"
python - "$run" <<'PY'
import re, sys
html = open(f"results/{sys.argv[1]}/report.html").read()
line = re.search(r'<li id="self-check"[^>]*>(.*?)</li>', html, re.S).group(1)
print(line)
sys.exit(0 if "as constructed" in line else 1)
PY
