#!/usr/bin/env bash
# How examples/nvidia-h200_*-beyond was made: config/beyond.yaml (the study's variants plus
# naive_compiled and flex_attention at the study, a grouped-query and a decode shape) on one
# H200, then a tarball of the result set in $OUT. torch.compile's caches start empty (a fresh
# machine), so the compile times are cold ones. With passes [forward, backward] each capture also
# checks dq, dk and dv against float64 (phase grad_correctness) and the summary has backward TFLOP/s
# (issue 25). Afterwards, apart from the result set (it never enters the committed example), one
# capture of a deliberately wrong backward (tests/user_variants/attnprof_test_wrong_grad.py: dk
# doubled) at the study's shape must be flagged with its backward time kept: $OUT/wrong_grad.json.
#
#   bash examples/make-h200-beyond.sh
#
# .whl/ and the environment: tools/device-env.sh. The PDF is rendered elsewhere:
#   snakemake --profile workflow/profiles/render results/<run>/report.pdf
set -euo pipefail
source tools/device-env.sh
run=$(device_run_id -beyond)
echo "result set: results/$run"
rm -rf "results/$run"
start=$(date +%s.%N)
set +e
# the hardware counters first (they run after every capture; rule measure_counters), then the
# report, which shows them (its input lists the counters that exist when it is planned)
timeout --signal=TERM "${BEYOND_TIMEOUT_S:-540}" snakemake counters --cores 16 --keep-going --configfile config/beyond.yaml "$@" 2>&1 | tee "$OUT/snakemake.log"
timeout --signal=TERM 120 snakemake html --cores 16 --keep-going --configfile config/beyond.yaml "$@" 2>&1 | tee -a "$OUT/snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run beyond "$rc" "$start" "$run" '{"target": "html", "config": "config/beyond.yaml", "cores": 16}'
# the wrong backward (issue 25): flagged (grad_rel_error_ok false, dk's error about 1), its times still there
PYTHONPATH="$PYTHONPATH:$PWD/tests/user_variants" timeout 300 python3 - "$OUT/wrong_grad" <<'PY' 2>&1 | tee "$OUT/wrong_grad.log"
import json, sys
from pathlib import Path
from attnprof.analysis.backward import analyse_passes, backward_summary, backward_tables
from attnprof.analysis.trace import load_trace
from attnprof.measure.capture import DEFAULT_TOLERANCE
from attnprof.runtime.isolation import run_isolated
from attnprof.model.variants import Shape
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
shape = Shape(8, 16, 1024, 64, "bf16", True)
spec = {"variant": "wrong_dk", "custom": {"function": "attnprof_test_wrong_grad:forward"}, "shape": shape.as_dict(),
        "device": "cuda", "schedule": {"wait": 1, "warmup": 2, "active": 10}, "warmup_calls": 3, "range_name": "attn_fwd",
        "timing": {"repeats": 20, "input_sets": 4}, "seed": 0, "tolerance": DEFAULT_TOLERANCE, "passes": ["forward", "backward"]}
rec = run_isolated(spec, out / "trace.json.gz", out / "status.json", timeout_s=240)
_, bwd = analyse_passes(load_trace(out / "trace.json.gz"), "attn_fwd", expect_gpu=True)
row = backward_summary(rec, backward_tables(bwd, "wrong_dk", shape.key)["backwards"])
keep = ("backward_status", "grad_rel_error_dq", "grad_rel_error_dk", "grad_rel_error_dv", "grad_rel_error_ok",
        "kernels_per_backward", "device_ms_per_backward", "backward_tflops")
result = {"status": rec["status"], "rel_error_ok": rec.get("rel_error_ok"), **{k: row[k] for k in keep}}
(out.parent / "wrong_grad.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result, indent=1))
flagged = result["grad_rel_error_ok"] is False and abs(result["grad_rel_error_dk"] - 1) < 0.05
print("wrong backward", "FLAGGED, times kept" if flagged and result["device_ms_per_backward"] else "NOT FLAGGED: see status.json")
PY
ls -la "$OUT"
