"""Snakemake script: env.json (rule environment). Logic: attnprof.env."""
import json

from attnprof.env import capture_environment

sm = snakemake  # noqa: F821
env = {"run": sm.params.run, "device": sm.params.device, **capture_environment(), "config": sm.params.config}
with open(sm.output[0], "w") as fh:
    json.dump(env, fh, indent=2, sort_keys=True, default=str)
