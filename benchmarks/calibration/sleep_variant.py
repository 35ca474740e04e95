"""A test-only user variant for the change-verdict calibration (issue 19): cuDNN's fused attention plus a
fixed-length ``torch.cuda._sleep`` kernel, the same kernel list in A and B, a known extra device time in B.

``forward_a`` sleeps :data:`BASE_CYCLES` GPU clock cycles, ``forward_b`` :data:`BASE_CYCLES` +
:data:`EXTRA_CYCLES` (about 3 % of the forward at the study shape on an H200: 7,000 cycles are 3.5 us at
1.98 GHz beside a forward of about 0.058 + 0.050 ms). The known change is measured, not assumed: the sleep
kernel's own duration in each run's trace (benchmarks/calibration/calibrate.py).
On a CPU there is no sleep kernel: the forward is cuDNN-free SDPA alone (the variant is for the GPU)."""
import torch
import torch.nn.functional as F

BASE_CYCLES = 100_000
EXTRA_CYCLES = 7_000


def _forward(q, k, v, causal, scale, cycles):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    if q.is_cuda:
        torch.cuda._sleep(cycles)
    return out


def forward_a(q, k, v, *, causal, scale):
    return _forward(q, k, v, causal, scale, BASE_CYCLES)


def forward_b(q, k, v, *, causal, scale):
    return _forward(q, k, v, causal, scale, BASE_CYCLES + EXTRA_CYCLES)
