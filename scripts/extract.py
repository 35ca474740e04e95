"""Snakemake script: per-capture tables from the trace (rule extract). Logic: attnprof.tables."""
import json

from attnprof.tables import analyse_trace, forward_table, kernel_table, launch_api_table, op_table
from attnprof.trace import device_properties, load_trace

sm = snakemake  # noqa: F821
variant, shape = sm.wildcards.variant, sm.wildcards.shape
trace = load_trace(sm.input.trace)
frames = analyse_trace(trace, sm.params.range_name)
status = json.loads(open(sm.input.status).read())
with open(sm.log[0], "w") as log:
    print(f"{variant} {shape}: status {status['status']}, {len(frames['ranges'])} forwards, {len(frames['gpu'])} GPU events", file=log)
kernel_table(frames, variant, shape).to_csv(sm.output.kernels, index=False)
forward_table(frames, variant, shape).to_csv(sm.output.forwards, index=False)
launch_api_table(frames, variant, shape).to_csv(sm.output.launches, index=False)
op_table(frames, variant, shape).to_csv(sm.output.ops, index=False)
with open(sm.output.device, "w") as fh:
    json.dump((device_properties(trace) or [{}])[0], fh, indent=2, sort_keys=True)
