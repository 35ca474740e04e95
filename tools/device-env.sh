# Sourced by the scripts that run on the GPU machine (examples/make-h200-*.sh,
# benchmarks/h200-design.sh): $OUT, Snakemake from .whl/ (the GPU image has torch, pandas,
# matplotlib and jinja2 but no Snakemake), the package on PYTHONPATH, and the run id.
#
# .whl/ holds the wheels Snakemake needs there (bash ../shared/device/make-wheels.sh) plus
# msgspec, attnprof's trace reader, for Python 3.12:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl msgspec
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH
fi

# device_run_id [SUFFIX]: the result set this machine's default config writes (results/<id>)
device_run_id() {
  python3 -c "import sys; sys.path.insert(0, 'src'); from attnprof.measure.env import default_run_id, detect_gpu, torch_build; print(default_run_id('cuda', detect_gpu(), torch_build()) + '${1:-}')"
}

# finish_run NAME RC START RUN FIELDS: the end of a device script's Snakemake run. Writes
# $OUT/NAME_h200.json (the JSON object FIELDS plus wall_s since START (date +%s.%N), exit RC and
# the run id), says exit and wall time, tars results/RUN into $OUT/NAME.tgz and gzips the log
# ($OUT/NAME_snakemake.log where the script named it so, else $OUT/snakemake.log).
finish_run() {
  python3 - "$@" "$OUT" <<'PY'
import json, sys, time
name, rc, start, run, fields, out = sys.argv[1:]
record = {**json.loads(fields), "wall_s": round(time.time() - float(start), 2), "exit": int(rc), "run": run}
json.dump(record, open(f"{out}/{name}_h200.json", "w"), indent=1)
print(f"snakemake exit: {rc}, wall {record['wall_s']:.1f} s")
PY
  tar czf "$OUT/$1.tgz" "results/$4"
  local log="$OUT/$1_snakemake.log"
  if [ ! -f "$log" ]; then log="$OUT/snakemake.log"; fi
  gzip -f "$log"
}

# ab_run A B YAML TIMEOUT_S: an A/B run of environments A and B (config environments, in YAML over
# config/config.yaml) on this machine, from scratch, targets html only (the PDFs are rendered elsewhere):
# results/nvidia-h200@A and @B and their paired compare, results/compare/nvidia-h200-ab. Logs to
# $OUT/snakemake.log, says exit and wall time, and leaves the exit status in AB_RC.
ab_run() {
  local a=$1 b=$2 yaml=$3 limit=$4 start
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  rm -rf "results/nvidia-h200@$a" "results/nvidia-h200@$b" results/compare/nvidia-h200-ab
  start=$(date +%s.%N)
  set +e
  # the targets first: --configfile takes a list
  timeout --signal=TERM "$limit" snakemake "results/nvidia-h200@$a/report.html" "results/nvidia-h200@$b/report.html" \
    results/compare/nvidia-h200-ab/compare.html --cores 16 --keep-going --configfile config/config.yaml "$yaml" \
    2>&1 | tee "$OUT/snakemake.log"
  AB_RC=${PIPESTATUS[0]}
  set -e
  echo "snakemake exit: $AB_RC, wall $(python3 -c "import time; print(round(time.time() - $start, 1))") s"
}
