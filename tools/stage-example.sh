#!/usr/bin/env bash
# Stage a result set captured elsewhere (a tarball of results/<run>/ from a GPU machine) as a
# committed example: render its tables, plots, report.html and report.pdf here with the render
# profile, then copy what an example keeps (traces and status records, the run's files, plots
# and the report; not the per-capture tables, which anyone re-derives from the traces) to
# examples/<run>/.
#
#   tools/stage-example.sh /path/to/sweep.tgz [snakemake.log.gz]
#   tools/stage-example.sh examples/<run>        # re-render a committed example with the current code
#
# A tarball of an A/B run holds several result sets (and results/compare/, which is left out): each is staged.
set -euo pipefail
src=$1
log=${2:-}
tmp=$(mktemp -d)
if [ -d "$src" ]; then  # a committed example: its traces, status records, counters and records
  mkdir -p "$tmp/results"
  cp -r "$src" "$tmp/results/"
  if [ -z "$log" ] && [ -f "$src/snakemake.log.gz" ]; then log=$tmp/snakemake.log.gz; cp "$src/snakemake.log.gz" "$log"; fi
else
  tar xzf "$src" -C "$tmp"
fi
stage() {
  local run=$1 dest
  rm -rf "results/$run"
  mkdir -p results
  cp -r "$tmp/results/$run" results/
  snakemake --profile workflow/profiles/render "results/$run/report.pdf" --forcerun extract --quiet rules
  dest="examples/$run"
  rm -rf "$dest"
  mkdir -p "$dest"
  (cd "results/$run" && find captures -name trace.json.gz -o -name status.json; [ -d counters ] && find counters -type f || true) |
    while read -r f; do mkdir -p "$dest/$(dirname "$f")"; cp "results/$run/$f" "$dest/$f"; done
  for f in calibration.json capture_worker.log env.json findings.json kernels.csv summary.csv repeats.csv control.csv top_up.json report.html report.pdf; do
    if [ -f "results/$run/$f" ]; then cp "results/$run/$f" "$dest/"; fi
  done
  cp -r "results/$run/plots" "$dest/"
  if [ -n "$log" ]; then cp "$log" "$dest/snakemake.log.gz"; fi
  echo "staged $dest ($(du -sh "$dest" | cut -f1))"
}
for run in $(ls "$tmp/results"); do
  if [ "$run" != compare ]; then stage "$run"; fi
done
rm -rf "$tmp"
