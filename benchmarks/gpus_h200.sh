#!/usr/bin/env bash
# The GPU each capture runs on, checked on the H200 (issue "Several GPUs of one node"; the multi-GPU run itself needs
# a machine of several GPUs): nvidia-smi's list as attnprof reads it (attnprof.measure.gpus), torch's UUID of the GPU
# a pinned capture process sees, a capture whose process sees another GPU than its job holds (refused), and the study
# shape's 7 variants x 3 repeats through the workflow, each record naming its GPU. Usage:
#   bash benchmarks/gpus_h200.sh        # results in $OUT: gpus_h200.json, the result set's tarball, the log
set -euo pipefail
source tools/device-env.sh
nvidia-smi --query-gpu=index,uuid,name,power.limit,clocks.max.sm,memory.total --format=csv,noheader,nounits | tee "$OUT/nvidia_smi.csv"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
python3 - "$OUT/discovery.json" <<'PY'
import json, os, sys, tempfile
from pathlib import Path
from attnprof.measure.gpus import node_gpus, pinned_environ, run_gpus
from attnprof.runtime.isolation import run_isolated
gpus = run_gpus("all")
out = {"node": [g.as_dict() for g in node_gpus()], "run": [g.as_dict() for g in gpus]}
spec = {"variant": "sdpa_flash", "shape": {"batch": 8, "heads": 16, "seq_len": 1024, "head_dim": 64, "dtype": "bf16", "causal": True},
        "device": "cuda", "schedule": {"wait": 1, "warmup": 1, "active": 3}, "warmup_calls": 1, "range_name": "attn_fwd",
        "timing": {"repeats": 10, "input_sets": 2}, "seed": 0, "tolerance": {"bf16": 2e-2}, "min_complete_forwards": 3}
d = Path(tempfile.mkdtemp())
# pinned to the GPU by UUID, as a capture job does: the record names it, and torch's UUID agrees
rec = run_isolated({**spec, "gpu": gpus[0].as_dict()}, d / "a.json.gz", d / "a.json", 300, env=pinned_environ(gpus[0]))
out["pinned"] = {k: rec.get(k) for k in ("status", "reason", "gpu", "device_name")}
# a job that holds a GPU its capture process does not see: refused, naming both UUIDs
other = {**gpus[0].as_dict(), "uuid": "GPU-00000000-0000-0000-0000-000000000000"}
rec = run_isolated({**spec, "gpu": other}, d / "b.json.gz", d / "b.json", 300)
out["mismatch"] = {k: rec.get(k) for k in ("status", "reason", "gpu")}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps(out, indent=1))
PY
run=$(device_run_id -gpus)
rm -rf "results/$run"
start=$(date +%s.%N)
set +e
timeout --signal=TERM "${GPUS_TIMEOUT_S:-360}" snakemake html --cores 16 --configfile benchmarks/configs/study.yaml --config run=auto-gpus 2>&1 | tee "$OUT/snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run gpus "$rc" "$start" "$run" '{"target": "html", "config": "benchmarks/configs/study.yaml", "cores": 16}'
python3 - "results/$run" "$OUT/discovery.json" "$OUT/gpus_h200.json" <<'PY'
import glob, json, sys
from pathlib import Path
import pandas as pd
run, discovery, out = Path(sys.argv[1]), json.load(open(sys.argv[2])), Path(sys.argv[3])
records = [json.load(open(p)) for p in sorted(glob.glob(str(run / "captures/*/*/r*/status.json")))]
gpu = [{"variant": r["variant"], "repeat": r["repeat"], "status": r["status"], **(r.get("gpu") or {})} for r in records]
summary = pd.read_csv(run / "summary.csv")
repeats = pd.read_csv(run / "repeats.csv")
env = json.load(open(run / "env.json"))
record = {**(json.load(open(out)) if out.exists() else {}), "discovery": discovery, "captures": gpu,
          "torch_agrees": all((g.get("torch_uuid") or "").lower() in g.get("uuid", "").lower() for g in gpu if g.get("uuid")),
          "env_gpus": env.get("gpus"), "summary_gpus": summary["gpus"].tolist(),
          "repeats_gpu_uuid": repeats["gpu_uuid"].unique().tolist(),
          "summary": summary[["variant", "status", "kernels_per_forward", "device_ms_per_forward", "device_ms_run_lo",
                              "device_ms_run_hi"]].to_dict("records")}
json.dump(record, open(out, "w"), indent=1, default=str)
print(json.dumps({k: record[k] for k in ("torch_agrees", "summary_gpus", "repeats_gpu_uuid")}, default=str))
PY
