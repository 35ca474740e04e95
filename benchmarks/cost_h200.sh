#!/usr/bin/env bash
# Issue 40 on one fresh H200, one device call: the study shape from cold at --cores 1 with the code before
# (OLD) and after (NEW) the cost work, then the default sweep at --cores 16 with NEW. Each step has its own
# timeout and its result set is tarred into $OUT as it ends (wall times in $OUT/cost_h200.json).
#
#   bash benchmarks/cost_h200.sh OLD_TGZ NEW_TGZ WHEELS_DIR
#
#   STEPS="sweep_new study_new" bash benchmarks/cost_h200.sh OLD_TGZ NEW_TGZ WHEELS_DIR   # some steps, in this order
#
# OLD_TGZ, NEW_TGZ: `git archive` of the two commits (examples/ left out); WHEELS_DIR: Snakemake's wheels and
# msgspec (tools/device-env.sh). The trees run apart in /tmp/old and /tmp/new, each with its own results/.
set -uo pipefail
old_tgz=$(realpath "$1") new_tgz=$(realpath "$2") wheels=$(realpath "$3")
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl || exit 1
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
for tree in old new; do mkdir -p "/tmp/$tree" && tar xzf "$(eval echo "\$${tree}_tgz")" -C "/tmp/$tree"; done
python3 -c "import torch, pandas, matplotlib; print(torch.__version__)"  # the same disk cache for both designs

# step TREE NAME TIMEOUT_S CORES ARGS...: snakemake in /tmp/TREE from scratch; wall time into $OUT/NAME.json,
# the result set (status records, tables, traces, log; no plots) into $OUT/NAME.tgz
step() {
  local tree=$1 name=$2 limit=$3 cores=$4
  shift 4
  (
    cd "/tmp/$tree" || exit 1
    export PYTHONPATH=/tmp/site:/tmp/$tree/src
    start=$(date +%s.%N)
    timeout --signal=TERM "$limit" snakemake --cores "$cores" --keep-going html "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    wall=$(python3 -c "import time; print(round(time.time() - $start, 2))")
    run=$(ls -t results | head -1)
    echo "{\"step\": \"$name\", \"tree\": \"$tree\", \"cores\": $cores, \"wall_s\": $wall, \"exit\": $rc, \"run\": \"$run\"}" \
      | tee "$OUT/$name.json"
    cp "$OUT/$name.log" "results/$run/snakemake.log"
    tar czf "$OUT/$name.tgz" --exclude='*/plots/*' --exclude='*.pdf' "results/$run" "$OUT/$name.json"
    rm -f "$OUT/$name.log"
  )
}
# STEPS picks and orders the steps (default: the two study runs, then the sweep with NEW); SWEEP_TIMEOUT_S (340)
# bounds each sweep
for s in ${STEPS:-study_old study_new sweep_new}; do
  pkill -f attnprof.runtime.worker && sleep 2  # an earlier call's idle capture workers hold GPU memory (docs/costs.md)
  case $s in
    study_old|study_new) step "${s#study_}" "$s" 120 1 --configfile benchmarks/configs/study.yaml --config run="$s" ;;
    sweep_old|sweep_new) step "${s#sweep_}" "$s" "${SWEEP_TIMEOUT_S:-340}" 16 ;;
    *) echo "unknown step $s" ;;
  esac
done
ls -la "$OUT"
