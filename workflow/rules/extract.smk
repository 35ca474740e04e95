# Stage 2: read one trace (no GPU needed) into kernel, forward, launch and op tables.


rule extract:
    input:
        code("extract"),
        script=script_file("extract"),
        trace=capture_file("trace"),
        status=capture_file("status"),
    output:
        kernels=table_file("kernels"),
        forwards=table_file("forwards"),
        launches=table_file("launches"),
        ops=table_file("ops"),
        device=table_file("device"),
        # the backward's ranges (config passes; attnprof.analysis.backward): header-only without them
        backwards=table_file("backwards"),
        kernels_backward=table_file("kernels_backward"),
        ops_backward=table_file("ops_backward"),
        # each complete forward's work in order (attnprof.analysis.recipe): compare's recipe diff
        recipe=table_file("recipe"),
        recipe_backward=table_file("recipe_backward"),
    log:
        L.capture_log("extract"),
    params:
        range_name=config["profiler"]["range_name"],
    run:
        run_job(locals())
