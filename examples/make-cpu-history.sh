#!/usr/bin/env bash
# The CPU history example (issue 41): one torch build, four environments ("builds" b1..b4) that differ only in
# variables that set the work of three test variants (examples/history_cpu_variant.py), captured interleaved in
# one A/B run, rounds in mirror order (b1 .. b4, b4 .. b1), one thread per capture (--cores 1), then `snakemake history`.
#
#   bash examples/make-cpu-history.sh        (about 20 minutes on 2 busy cores)
#
# The right answers (times are host times per forward: the judged threshold is compare.noise_floor_host, 20 %):
# - hist_step:  2 -> 3 -> 3 -> 2 SDPA calls: a step slower at b1 -> b2 (about 1.5x) with aten::cumsum (and the
#               ops that fold it in) added, recovered at b3 -> b4 (the same ops removed);
# - hist_spike: 2 -> 2 -> 3 -> 2: one event, b3 only (about 1.5x), never two steps;
# - hist_drift: 20 -> 24 -> 28 -> 32 matrix products: every link below the threshold (about 1.14x-1.2x), a drift
#               slower between b1 and b4 (about 1.5x), never a step;
# - no link where every variant moved together.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
cfg=$(mktemp --suffix .yaml)
cat > "$cfg" <<YAML
run: cpu-history
device: cpu
repeats: 4
capture_worker_idle_s: 1800
top_up: {rounds: 0}
variants: [hist_step, hist_spike, hist_drift]
custom_variants:
  hist_step: {function: "examples.history_cpu_variant:step_forward", description: "SDPA 2 or 3 times (+cumsum at 3)"}
  hist_spike: {function: "examples.history_cpu_variant:spike_forward", description: "SDPA 2 or 3 times"}
  hist_drift: {function: "examples.history_cpu_variant:drift_forward", description: "SDPA and 20-32 matrix products"}
shapes:
  cpu: {batch: [1], heads: [4], seq_len: [256], head_dim: [64], dtype: [fp32], causal: [true]}
environments:
  b1: {python: $py, env: {ATTNPROF_HIST_STEP: "2", ATTNPROF_HIST_SPIKE: "2", ATTNPROF_HIST_DRIFT: "20"}}
  b2: {python: $py, env: {ATTNPROF_HIST_STEP: "3", ATTNPROF_HIST_SPIKE: "2", ATTNPROF_HIST_DRIFT: "24"}}
  b3: {python: $py, env: {ATTNPROF_HIST_STEP: "3", ATTNPROF_HIST_SPIKE: "3", ATTNPROF_HIST_DRIFT: "28"}}
  b4: {python: $py, env: {ATTNPROF_HIST_STEP: "2", ATTNPROF_HIST_SPIKE: "2", ATTNPROF_HIST_DRIFT: "32"}}
history: {runs: [cpu-history@b1, cpu-history@b2, cpu-history@b3, cpu-history@b4], name: cpu-history}
YAML
.venv/bin/snakemake --cores 1 history --configfile config/config.yaml "$cfg"
$py - <<'PY'
import json
doc = json.load(open("results/history/cpu-history/history.json"))
labels = [b["label"] for b in doc["builds"]]
for c in doc["cells"]:
    links = " ".join(f"{l['verdict']}:{l['ratio'] or float('nan'):.3f}" for l in c["links"])
    print(f"{c['variant']:11s} {links}")
    for e in c["events"]:
        print(f"  {e['kind']} {e['direction']} {labels[e['start']]}->{labels[e['end']]} {e['ratio']:.3f} {e.get('state')}")
for i, l in enumerate(doc["links"]):
    for s in l["structural"]:
        print(f"{labels[i]}->{labels[i + 1]}: {s['variant']} {s['what']} {s['b']}")
PY
