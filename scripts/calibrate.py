"""Snakemake script: calibration.json (rule calibrate). Logic: attnprof.calibrate."""
import json

from attnprof.calibrate import calibrate

sm = snakemake  # noqa: F821
result = calibrate(sm.params.device)
with open(sm.output[0], "w") as fh:
    json.dump(result, fh, indent=2, sort_keys=True)
with open(sm.log[0], "w") as log:
    print(json.dumps(result), file=log)
