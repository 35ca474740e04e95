"""The H200 A/B example's known change (examples/make-h200-ab.sh): the calibration's sleep variant
(benchmarks/calibration/sleep_variant.py: SDPA plus a fixed-length ``torch.cuda._sleep`` kernel) whose extra
sleep is switched on by an environment variable, so that two environments of one torch build (config
``environments``) run the same kernel list and differ by a known device time: B (ATTNPROF_AB_EXTRA_SLEEP=1)
sleeps EXTRA_CYCLES more, about 3 % of the forward at the study shape. Read at call time, in the capture
process of each environment (its variables are part of the capture worker's key)."""
import os

from benchmarks.calibration.sleep_variant import BASE_CYCLES, EXTRA_CYCLES, _forward


def forward(q, k, v, *, causal, scale):
    extra = EXTRA_CYCLES if os.environ.get("ATTNPROF_AB_EXTRA_SLEEP") == "1" else 0
    return _forward(q, k, v, causal, scale, BASE_CYCLES + extra)
