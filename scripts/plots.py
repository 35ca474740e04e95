"""Snakemake script: the figures of one shape (rule plots). Logic: attnprof.render.plots."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    from pathlib import Path
    import pandas as pd
    from attnprof.render.plots import make_all

    shape = sm.wildcards.shape
    summary = pd.read_csv(sm.input.summary)
    summary = summary[summary["shape_key"] == shape].reset_index(drop=True)
    kernels = pd.read_csv(sm.input.kernels)
    if len(kernels):
        kernels = kernels[kernels["shape_key"] == shape]
    paths = make_all(summary, kernels, Path(sm.output[0]).parent, sm.params.dpi)
    print("\n".join(map(str, paths)), file=log)
