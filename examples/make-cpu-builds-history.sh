#!/usr/bin/env bash
# The CPU history of real PyTorch builds (issue 41 item 7): torch 2.12.1, 2.13.0, 2.14.1 and 2.15.0, each in its own
# venv, captured interleaved in one A/B run (6 rounds in mirror order: 2.12.1 .. 2.15.0, 2.15.0 .. 2.12.1, ...), one
# thread per capture (--cores 1), the built-in variants the CPU runs (sdpa_efficient is kept: its status per build is
# part of the history), then `snakemake history` over the four result sets (examples/history-cpu-builds.yaml).
# Top-up is off: it judges every environment against the first, not the history's links.
#
# The venvs, once (the builds PyPI serves: 2.13.0 is the local CPU wheel, the others the +cu130 builds, run on the
# CPU; 2.15.0 lies above pyproject's torch pin and this machine's pip constraint, so it gets what a capture imports
# only: torch, numpy, pandas, msgspec; the capture workers run this checkout's src/ from PYTHONPATH):
#   python3 -m venv .venv     && .venv/bin/pip install torch==2.13.0 -e '.[test]'
#   python3 -m venv .venv-212 && .venv-212/bin/pip install torch==2.12.1 && .venv-212/bin/pip install -e .
#   python3 -m venv .venv-214 && .venv-214/bin/pip install torch==2.14.1 && .venv-214/bin/pip install -e .
#   python3 -m venv .venv-215 && PIP_CONSTRAINT=/dev/null .venv-215/bin/pip install torch==2.15.0 numpy pandas msgspec
#
#   bash examples/make-cpu-builds-history.sh        (about 8 minutes on 2 busy cores; 3 rounds took 3.5 minutes and left
#                                                  every link inconclusive)
#
# BUILDS="212 213 214" leaves a build out (213 is .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
name=cpu-builds
builds=(${BUILDS:-212 213 214 215})
envs=()
for b in "${builds[@]}"; do
  py=.venv-$b/bin/python
  [ "$b" = 213 ] && py=.venv/bin/python
  version=$("$py" -c "import torch; print(torch.__version__.split('+')[0])") || { echo "no torch in $py" >&2; exit 1; }
  envs+=("torch$version: {python: $py}")
done
runs=$(for e in "${envs[@]}"; do printf "%s@%s, " "$name" "${e%%:*}"; done | sed 's/, $//')
cfg=$(mktemp --suffix .yaml)
{
  cat <<YAML
run: $name
device: cpu
repeats: 6
capture_worker_idle_s: 1800
top_up: {rounds: 0}
variants: [naive, sdpa_math, sdpa_efficient, sdpa_flash, sdpa_auto]
shapes:
  cpu: {batch: [1], heads: [4], seq_len: [256], head_dim: [64], dtype: [fp32], causal: [true]}
environments:
YAML
  for e in "${envs[@]}"; do echo "  $e"; done
  echo "history: {runs: [$runs], name: $name}"
} >"$cfg"
cat "$cfg"
start=$(date +%s)
.venv/bin/snakemake --cores 1 history --configfile config/config.yaml "$cfg"
echo "wall $(($(date +%s) - start)) s"
.venv/bin/python - "results/history/$name/history.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
labels = [b["label"] for b in doc["builds"]]
num = lambda x: f"{float('nan') if x is None else x:.3f}"  # noqa: E731
for c in doc["cells"]:
    print(f"{c['variant']:14s} {' '.join(l['verdict'] + ':' + num(l['ratio']) for l in c['links'])}"
          f"  (ms: {' '.join(num(t['center']) for t in c['times'])})")
    for e in c["events"]:
        print(f"  {e['kind']} {e['direction']} {labels[e['start']]}->{labels[e['end']]} {num(e['ratio'])} {e.get('state')}")
for i, l in enumerate(doc["links"]):
    for s in l["structural"]:
        print(f"{labels[i]}->{labels[i + 1]}: {s['variant']} {s['what']} {s['b']}")
PY
