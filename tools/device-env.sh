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
  python3 -c "import sys; sys.path.insert(0, 'src'); from attnprof.env import default_run_id, detect_gpu, torch_build; print(default_run_id('cuda', detect_gpu(), torch_build()) + '${1:-}')"
}

# wall_since START: seconds since START (date +%s.%N), one decimal
wall_since() {
  python3 -c "import time; print(round(time.time() - $1, 1))"
}
