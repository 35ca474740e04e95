#!/usr/bin/env bash
# GB/s (summary.csv gbps: the minimum traffic, q, k, v read and the output written once, over the trace device time
# per forward) against Nsight Compute on the H200, at the decode shape of config/beyond.yaml (8 sequences, 32 query
# heads on 8 key/value heads, head_dim 128, one query against 8192 keys, bf16): ncu's DRAM throughput (% of the peak
# it reports) of the kernels of one forward, their duration-weighted mean, against the trace's GB/s. It is also a
# smoke run of the capture path on CUDA (process isolation, the registry's builders). Usage:
#   bash benchmarks/gbps_h200.sh        # results in $OUT: gbps_h200.json, the result set's tarball, the log
set -euo pipefail
source tools/device-env.sh
run=$(device_run_id -decode)
rm -rf "results/$run"
start=$(date +%s.%N)
set +e
timeout --signal=TERM "${DECODE_TIMEOUT_S:-420}" snakemake counters html --cores 16 --keep-going --configfile benchmarks/configs/decode.yaml 2>&1 | tee "$OUT/snakemake.log"
rc=${PIPESTATUS[0]}
set -e
finish_run decode "$rc" "$start" "$run" '{"target": "counters html", "config": "benchmarks/configs/decode.yaml", "cores": 16}'
python3 - "results/$run" "$OUT/gbps_h200.json" <<'PY'
import glob, json, sys
from pathlib import Path
import pandas as pd
from attnprof.analysis.tables import derive_columns
run, out = Path(sys.argv[1]), Path(sys.argv[2])
summary = derive_columns(pd.read_csv(run / "summary.csv"))
peak_tb_s = 4.8  # H200 datasheet HBM3e bandwidth; ncu's dram__throughput is a % of the peak it reads from the device
rows = []
for path in sorted(glob.glob(str(run / "counters" / "*" / "*.csv"))):
    c = pd.read_csv(path)
    variant = Path(path).stem
    s = summary[summary["variant"] == variant]
    if c.empty or s.empty:
        continue
    w = c["duration_ns"] / c["duration_ns"].sum()
    ncu_pct = float((c["dram_throughput_pct"] * w).sum())
    rows.append({"variant": variant, "kernels": len(c), "ncu_dram_pct_weighted": round(ncu_pct, 2),
                 "ncu_gb_s_at_datasheet_peak": round(ncu_pct / 100 * peak_tb_s * 1e3, 1),
                 "ncu_kernel_us": round(c["duration_ns"].sum() / 1e3, 2),
                 "trace_device_ms": float(s["device_ms_per_forward"].iloc[0]), "trace_gbps": float(s["gbps"].iloc[0])})
json.dump({"run": str(run), "rows": rows, "summary": summary[["variant", "status", "device_ms_per_forward", "gbps"]].to_dict("records")},
          open(out, "w"), indent=1, default=str)
print(json.dumps(rows, indent=1))
PY
ls -la "$OUT"
