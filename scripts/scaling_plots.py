"""Snakemake script: run-wide scaling plots and roofline (rule scaling_plots). Logic: attnprof.render.plots."""
from attnprof.runtime.logs import script_log

sm = snakemake  # noqa: F821
with script_log(sm.log[0]) as log:
    from pathlib import Path
    import pandas as pd
    from attnprof.render.plots import make_scaling
    from attnprof.analysis.records import load_calibration

    paths = make_scaling(pd.read_csv(sm.input.summary), load_calibration(sm.input.calibration),
                         Path(sm.output[0]).parent, sm.params.dpi)
    print("\n".join(map(str, paths)), file=log)
