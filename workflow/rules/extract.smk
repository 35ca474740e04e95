# Stage 2: read one trace (no GPU needed) into kernel, forward, launch and op tables.


rule extract:
    input:
        code("trace", "tables"),
        trace="results/{run}/captures/{shape}/{variant}/trace.json.gz",
        status="results/{run}/captures/{shape}/{variant}/status.json",
    output:
        kernels="results/{run}/tables/{shape}/{variant}/kernels.csv",
        forwards="results/{run}/tables/{shape}/{variant}/forwards.csv",
        launches="results/{run}/tables/{shape}/{variant}/launches.csv",
        ops="results/{run}/tables/{shape}/{variant}/ops.csv",
        device="results/{run}/tables/{shape}/{variant}/device.json",
    log:
        "results/{run}/logs/extract/{shape}/{variant}.log",
    conda:
        "../envs/attnprof.yaml"
    params:
        range_name=config["profiler"]["range_name"],
    script:
        "../../scripts/extract.py"
