"""Snakemake script: per-capture tables from the trace (rule extract). Logic: attnprof.analysis.tables.

The record and the trace are read first: an unreadable or incomplete record raises RecordError, an
unreadable trace TraceError (each naming the file and the cause), and a record that disagrees with its
folder or its trace (attnprof.analysis.records.check_capture_record), or a trace in a schema attnprof does not
know, refuses the capture, before any table is written."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    import json
    from attnprof.analysis.tables import analyse_trace, forward_table, kernel_table, launch_api_table, op_table
    from attnprof.analysis.trace import TraceError, device_properties, events_frame, load_trace
    import pandas as pd
    from attnprof.analysis.recipe import RECIPE_COLUMNS, recipe_table, write_recipe
    from attnprof.analysis.backward import analyse_passes, backward_tables, empty_backward_tables
    from attnprof.analysis.records import check_capture_record, devices_used, load_status, trace_schema_problem

    variant, shape = sm.wildcards.variant, sm.wildcards.shape
    status = load_status(sm.input.status)  # in the current format (attnprof.model.formats)
    trace = load_trace(sm.input.trace)
    # which capture this is: the record against its folder and its trace (GPU, CUDA build, GPU or CPU trace)
    events = events_frame(trace)
    categories = events["cat"].value_counts().to_dict()
    # the GPUs the trace's kernels, memcpys and memsets ran on (their args.device): the record's GPU must be one of
    # those, not merely one listed in deviceProperties (a trace can list several)
    props = devices_used(device_properties(trace), (a[0] for a in events["gpu_args"].dropna()))
    check_capture_record(status, sm.input.status, props, trace_path=sm.input.trace,
                         trace_meta={k: trace.get(k) for k in ("cuda_runtime_version", "cuda_driver_version")},
                         trace_categories=categories)
    if status["status"] in ("ok", "incomplete_trace") and (why := trace_schema_problem(categories, status["device"] == "cuda")):
        raise TraceError(f"{sm.input.trace}: {why}")
    # the range name the capture used (its own record), else the config's
    range_name = status.get("range_name") or sm.params.range_name
    # a capture that profiled its backward (config passes): both passes, each with its own ranges
    # (attnprof.analysis.backward); otherwise the forward alone, as before, and header-only backward tables
    backward = (status.get("passes") or {}).get("backward", {}).get("status") in ("ok", "incomplete_trace")
    if backward:
        frames, bwd_frames = analyse_passes(trace, range_name, status.get("backward_range_name"),
                                            expect_gpu=status.get("device") == "cuda")
    else:
        frames = analyse_trace(trace, range_name, expect_gpu=status.get("device") == "cuda")
    bwd = backward_tables(bwd_frames, variant, shape) if backward else empty_backward_tables()
    bwd["backwards"].to_csv(sm.output.backwards, index=False)
    bwd["kernels_backward"].to_csv(sm.output.kernels_backward, index=False)
    bwd["ops_backward"].to_csv(sm.output.ops_backward, index=False)
    # each complete forward's (backward's) work in order: compare's recipe diff (attnprof.analysis.recipe)
    on_gpu = status.get("device") == "cuda"
    # each kernel's name once per table (attnprof.analysis.recipe.write_recipe): names are templates of up to a few kB
    write_recipe(recipe_table(frames, variant, shape, on_gpu), sm.output.recipe)
    write_recipe(recipe_table(bwd_frames, variant, shape, on_gpu) if backward else pd.DataFrame(columns=RECIPE_COLUMNS),
                 sm.output.recipe_backward)
    comp = frames["completeness"]
    print(f"{variant} {shape}: status {status['status']}, {len(frames['ranges'])} forwards "
          f"({int(comp['complete'].sum())} complete, {int(comp['timing_complete'].sum())} with valid GPU times), "
          f"{len(frames['gpu'])} GPU events", file=log)
    kernel_table(frames, variant, shape).to_csv(sm.output.kernels, index=False)
    forward_table(frames, variant, shape).to_csv(sm.output.forwards, index=False)
    launch_api_table(frames, variant, shape).to_csv(sm.output.launches, index=False)
    op_table(frames, variant, shape).to_csv(sm.output.ops, index=False)
    with open(sm.output.device, "w") as fh:
        json.dump(device_properties(trace), fh, indent=2, sort_keys=True)
    # compare reads these without a rebuild: it checks each against the SHA-256 written here (attnprof.runtime.integrity)
    from attnprof.model.plan import Layout
    from attnprof.runtime.integrity import record_checksums

    run_dir = Layout.capture_of(sm.output.ops, Layout.TABLES)["run_dir"]
    record_checksums(run_dir, [sm.output.ops, sm.output.recipe, sm.output.recipe_backward])
