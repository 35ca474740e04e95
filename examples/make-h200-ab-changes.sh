#!/usr/bin/env bash
# Issue 39's A/B on one H200 with the default config (3 base rounds, top-up on): one torch build, two environments
# that differ in one variable (ATTNPROF_AB_CHANGE), the seven built-in variants and three user variants whose B
# changes their device work by a known kind and size (examples/ab_change_variants.py): an added elementwise kernel
# (about +7 %), a kernel about 4 % longer, one about 1 % longer. Right answers: added_kernel and longer_kernel
# "slower" (the kernel named in the recipe diff for the first), slightly_longer "the same within 2 %", the seven
# built-in variants never slower or faster.
#
#   bash examples/make-h200-ab-changes.sh
#
# Writes $OUT/ab-changes.tgz (results/nvidia-h200@{base,changed} and results/compare/nvidia-h200-ab) and the log.
set -euo pipefail
source tools/device-env.sh
py=$(command -v python3)
cat > "$OUT/ab-changes-h200.yaml" <<YAML
run: auto
variants: [naive, naive_inplace, sdpa_math, sdpa_efficient, sdpa_flash, sdpa_cudnn, sdpa_auto, added_kernel, longer_kernel, slightly_longer]
custom_variants:
  added_kernel: {function: "examples.ab_change_variants:added_kernel", description: "B adds one elementwise kernel"}
  longer_kernel: {function: "examples.ab_change_variants:longer_kernel", description: "B's sleep kernel ~4 % longer"}
  slightly_longer: {function: "examples.ab_change_variants:slightly_longer", description: "B's sleep kernel ~1 % longer"}
shapes:
  cuda:
    - {batch: [8], heads: [16], seq_len: [1024], head_dim: [64], dtype: [bf16], causal: [true]}
  cpu:
    - {batch: [2], heads: [8], seq_len: [512], head_dim: [64], dtype: [fp32], causal: [true]}
environments:
  base: {python: $py}
  changed: {python: $py, env: {ATTNPROF_AB_CHANGE: "1"}}
YAML
ab_run base changed "$OUT/ab-changes-h200.yaml" "${AB_TIMEOUT_S:-540}"
python3 - <<'PY'
import json
pair = json.load(open("results/compare/nvidia-h200-ab/compare.json"))["pairs"][0]
print("paired:", pair.get("paired"), "joint:", {k: v for k, v in pair["joint"].items() if k != "detectable"})
for r in pair["rows"]:
    print(f"{r['variant']:16s} {r['verdict']:14s} ratio {r['ratio'] or float('nan'):.4f} "
          f"[{r['ratio_lo'] or float('nan'):.4f}, {r['ratio_hi'] or float('nan'):.4f}] rounds {r['repeats_a']} "
          f"added {r['kernels_added']} {r['why'][:90]}")
PY
tar czf "$OUT/ab-changes.tgz" results/nvidia-h200@base results/nvidia-h200@changed results/compare/nvidia-h200-ab
gzip -f "$OUT/snakemake.log"
ls -la "$OUT"
