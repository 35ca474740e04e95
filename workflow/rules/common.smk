# Shared names: device, run id, shapes and the code/template files each stage depends on.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from attnprof.env import default_run_id, detect_gpu, torch_build
from attnprof.variants import expand_shapes

GPU_NAME = detect_gpu() if config["device"] in ("auto", "cuda") else None
DEVICE = config["device"] if config["device"] != "auto" else ("cuda" if GPU_NAME else "cpu")
# The installed torch version is a param of the capture rule: a pip upgrade reruns captures
# (Snakemake's software-env trigger does not see pip), and the auto run id changes with it.
TORCH_BUILD = torch_build()
TORCH_VERSION = " ".join(f"{k}={v}" for k, v in sorted(TORCH_BUILD.items()))
RUN = (
    config["run"]
    if config["run"] != "auto"
    else default_run_id(DEVICE, GPU_NAME, TORCH_BUILD)
)
RUN_DIR = f"results/{RUN}"
SHAPES = [s.key for s in expand_shapes(config["shapes"][DEVICE])]
VARIANTS = list(config["variants"])
PKG = Path(workflow.basedir) / "src" / "attnprof"
REPORT_DIR = Path(workflow.basedir) / "report"
EXPECTATIONS = str(Path(workflow.basedir) / "config" / "expectations.yaml")

# GPU captures never overlap, whatever --cores says: every capture job takes one unit
# of the global 'capture' resource (and of 'gpu' on CUDA), and there is one of each
# unless the command line sets more.
for _name in ("capture", "gpu"):
    if _name not in workflow.global_resources:
        workflow.register_resource(_name, 1)


wildcard_constraints:
    run=r"[^/]+",
    variant="|".join(VARIANTS),
    shape=r"b\d+_h\d+_s\d+_d\d+_(bf16|fp16|fp32)_(causal|full)",


def code(*modules):
    """Package modules a stage runs: declared as inputs so that a code change reruns it."""
    return [str(PKG / f"{m}.py") for m in modules]


def per_capture(pattern):
    """Input function: a per-(shape, variant) path pattern over the configured grid, in the
    job's own result set."""
    return lambda wc: expand(pattern, run=wc.run, shape=SHAPES, variant=VARIANTS)
