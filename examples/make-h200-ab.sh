#!/usr/bin/env bash
# The H200 A/B example (issue 20 part 1): one torch build, two environments that differ in one variable,
# captured interleaved on one H200 in one run (config environments, docs/running.md "A/B on one device").
# B sets ATTNPROF_AB_EXTRA_SLEEP=1, which adds 7,000 GPU cycles of torch.cuda._sleep to the sleep_attn variant
# (examples/ab_sleep_variant.py; about 3.5 us, ~3 % of its forward): a known change in one variant, none in
# the seven others. Expected: sleep_attn "slower" with a ratio near the sleep kernel's measured share, the seven
# built-in variants "same" (or inconclusive), never slower/faster.
#
#   bash examples/make-h200-ab.sh
#
# Writes $OUT/ab.tgz (results/nvidia-h200@{base,sleep} and results/compare/nvidia-h200-ab) and the log.
# The PDFs are rendered elsewhere (no Pango on the GPU machine):
#   snakemake --profile workflow/profiles/render results/compare/nvidia-h200-ab/compare.pdf
set -euo pipefail
source tools/device-env.sh
py=$(command -v python3)
cat > "$OUT/ab-h200.yaml" <<YAML
run: auto
repeats: 6
variants: [naive, naive_inplace, sdpa_math, sdpa_efficient, sdpa_flash, sdpa_cudnn, sdpa_auto, sleep_attn]
custom_variants:
  sleep_attn: {function: "examples.ab_sleep_variant:forward"}
shapes:
  cuda:
    - {batch: [8], heads: [16], seq_len: [1024], head_dim: [64], dtype: [bf16], causal: [true]}
  cpu:
    - {batch: [2], heads: [8], seq_len: [512], head_dim: [64], dtype: [fp32], causal: [true]}
environments:
  base: {python: $py}
  sleep: {python: $py, env: {ATTNPROF_AB_EXTRA_SLEEP: "1"}}
YAML
ab_run base sleep "$OUT/ab-h200.yaml" "${AB_TIMEOUT_S:-540}"
python3 - <<'PY'
import json
pair = json.load(open("results/compare/nvidia-h200-ab/compare.json"))["pairs"][0]
print("paired:", pair.get("paired"))
for r in pair["rows"]:
    print(f"{r['variant']:16s} {r['verdict']:14s} ratio {r['ratio'] or float('nan'):.4f} "
          f"[{r['ratio_lo'] or float('nan'):.4f}, {r['ratio_hi'] or float('nan'):.4f}] rounds {r['repeats_a']}")
PY
tar czf "$OUT/ab.tgz" results/nvidia-h200@base results/nvidia-h200@sleep results/compare/nvidia-h200-ab
gzip -f "$OUT/snakemake.log"
ls -la "$OUT"
