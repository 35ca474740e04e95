"""The H200 history example's known changes (examples/make-h200-history.sh): three user variants whose device work
each environment ("build" b1..b5 of one torch build) sets by a variable, read at call time in that environment's
capture process. Each is cuDNN's fused attention (SDPA at the study shape: about 0.058 ms on an H200) followed by a
``torch.cuda._sleep`` kernel of BASE_CYCLES plus the variable's cycles (100,000 cycles: about 50 us at 1.98 GHz), so
that a forward is about 0.11 ms and 2,150 cycles are about 1 % of it (issue 39's A/B measured 8,600 cycles as
+4.0 %: examples/make-h200-ab-changes.sh):

- ``step_kernel`` (ATTNPROF_HIST_STEP=1): one elementwise kernel added (the output scaled by 1.0, exact: about 7 us
  for 16 MiB in and out, roughly +7 %; issue 39 measured +7.4 %);
- ``spike``: the sleep kernel ATTNPROF_HIST_SPIKE cycles longer;
- ``drift``: the sleep kernel ATTNPROF_HIST_DRIFT cycles longer.

The true sizes are measured, not assumed: each run's trace times every kernel. On a CPU there is no sleep kernel
(the variants then run SDPA, and the step's multiplication)."""
import os

# cuDNN's SDPA then a sleep kernel of the given cycles (BASE_CYCLES: about 50 us), as issue 39's A/B measured them
from examples.ab_change_variants import BASE_CYCLES, _forward


def _extra(name: str) -> int:
    return int(os.environ.get(name, "0"))


def step_kernel(q, k, v, *, causal, scale):
    out = _forward(q, k, v, causal, scale, BASE_CYCLES)
    return out * 1.0 if _extra("ATTNPROF_HIST_STEP") else out


def spike(q, k, v, *, causal, scale):
    return _forward(q, k, v, causal, scale, BASE_CYCLES + _extra("ATTNPROF_HIST_SPIKE"))


def drift(q, k, v, *, causal, scale):
    return _forward(q, k, v, causal, scale, BASE_CYCLES + _extra("ATTNPROF_HIST_DRIFT"))
