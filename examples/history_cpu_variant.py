"""The CPU history example's known changes (examples/make-cpu-history.sh): three variants whose work is set per
environment by a variable, read at call time in each environment's capture process, so that the environments of one
torch build form a series of "builds" with changes planted where the script says:

- ``step_forward`` (variant hist_step): SDPA repeated ATTNPROF_HIST_STEP times (2 or 3); at 3 it also adds one
  ``aten::cumsum`` over the output (an op added, a structural step);
- ``spike_forward`` (hist_spike): SDPA repeated ATTNPROF_HIST_SPIKE times (2 or 3);
- ``drift_forward`` (hist_drift): SDPA once and ATTNPROF_HIST_DRIFT products of a 256 x 256 matrix (the work that
  grows a little from build to build).
"""
import os

import torch
import torch.nn.functional as F


def _sdpa(q, k, v, causal, scale, times):
    out = q
    for _ in range(times):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return out


def step_forward(q, k, v, *, causal, scale):
    times = int(os.environ.get("ATTNPROF_HIST_STEP", "2"))
    out = _sdpa(q, k, v, causal, scale, times)
    return out + 0 * torch.cumsum(out, dim=-1) if times >= 3 else out


def spike_forward(q, k, v, *, causal, scale):
    return _sdpa(q, k, v, causal, scale, int(os.environ.get("ATTNPROF_HIST_SPIKE", "2")))


def drift_forward(q, k, v, *, causal, scale):
    m = q.new_ones(256, 256) / 256
    x = m
    for _ in range(int(os.environ.get("ATTNPROF_HIST_DRIFT", "20"))):
        x = torch.mm(x, m)
    return _sdpa(q, k, v, causal, scale, 1) + 0 * x.sum()
