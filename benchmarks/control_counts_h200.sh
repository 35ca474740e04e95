#!/usr/bin/env bash
# Issue 20 part 3: check on the H200 that the control's forward (attnprof.measure.forwards._control_forward) runs
# the counts attnprof.model.variants.CONTROL_COUNTS["cuda"] claims: 2 kernels (cuBLAS GEMM + add), 1 memcpy DtoD,
# 0 memsets per forward. Prints each forward's GPU events and the check's verdict. Usage: bash benchmarks/control_counts_h200.sh
set -euo pipefail
source tools/device-env.sh  # msgspec (the trace reader) from .whl/
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" python3 - <<'PY'
import json, tempfile, torch
from torch.profiler import ProfilerActivity, profile, record_function
from attnprof.analysis.tables import analyse_trace, forward_table, assess_forwards
from attnprof.analysis.control import check_control
from attnprof.measure.forwards import make_forward
from attnprof.model.variants import Shape
f, ctx = make_forward("control", Shape(1, 1, 8, 8, "fp32"), "cuda")
for _ in range(3): f(None, None, None)
torch.cuda.synchronize()
with ctx, profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
    for _ in range(5):
        with record_function("attn_fwd"):
            f(None, None, None)
    torch.cuda.synchronize()
path = tempfile.mktemp(suffix=".json"); p.export_chrome_trace(path)
frames = analyse_trace(json.load(open(path)), "attn_fwd", True)
print(frames["gpu"][["forward", "category", "name"]].to_string())
groups = assess_forwards(forward_table(frames, "control", "s"), 5)["groups"]
print(groups)
g = groups[0]
print(check_control({"kernels": g["kernels"], "memcpy": g["memcpy"], "memset": g["memset"]}, "cuda"))
PY
