# Stage 2: read one trace (no GPU needed) into kernel, forward, launch and op tables.


rule extract:
    input:
        code("trace", "tables", "backward", "names"),
        trace="results/{run}/captures/{shape}/{variant}/trace.json.gz",
        status="results/{run}/captures/{shape}/{variant}/status.json",
    output:
        kernels="results/{run}/tables/{shape}/{variant}/kernels.csv",
        forwards="results/{run}/tables/{shape}/{variant}/forwards.csv",
        launches="results/{run}/tables/{shape}/{variant}/launches.csv",
        ops="results/{run}/tables/{shape}/{variant}/ops.csv",
        device="results/{run}/tables/{shape}/{variant}/device.json",
        # the backward's ranges (config passes; attnprof.backward): header-only without them
        backwards="results/{run}/tables/{shape}/{variant}/backwards.csv",
        kernels_backward="results/{run}/tables/{shape}/{variant}/kernels_backward.csv",
        ops_backward="results/{run}/tables/{shape}/{variant}/ops_backward.csv",
    log:
        "results/{run}/logs/extract/{shape}/{variant}.log",
    conda:
        "../envs/attnprof.yaml"
    params:
        range_name=config["profiler"]["range_name"],
    script:
        "../../scripts/extract.py"
