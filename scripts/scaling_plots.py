"""Snakemake script: run-wide scaling plots and roofline (rule scaling_plots). Logic: attnprof.plots."""
import json
from pathlib import Path

import pandas as pd

from attnprof.plots import make_scaling

sm = snakemake  # noqa: F821
paths = make_scaling(pd.read_csv(sm.input.summary), json.loads(Path(sm.input.calibration).read_text()),
                     Path(sm.output[0]).parent, sm.params.dpi)
with open(sm.log[0], "w") as log:
    print("\n".join(map(str, paths)), file=log)
