"""The H200 A/B of issue 39 (examples/make-h200-ab-changes.sh): three user variants whose B environment
(ATTNPROF_AB_CHANGE=1) changes their device work by a known kind and size, beside the seven built-in variants that
B leaves alone. Each is cuDNN's fused attention (SDPA, the study shape: about 0.058 ms on an H200) followed by a
``torch.cuda._sleep`` kernel of BASE_CYCLES (about 50 us at 1.98 GHz), so that their forwards are about 0.11 ms:

- ``added_kernel``: B adds one elementwise kernel (the output scaled by 1.0, exact: about 7 us for 16 MiB in and
  out, roughly +7 %); the recipe diff must name it;
- ``longer_kernel``: B's sleep kernel runs 8,600 cycles longer (about 4.3 us, roughly +4 %);
- ``slightly_longer``: B's sleep kernel runs 2,150 cycles longer (about 1.1 us, roughly +1 %: within 2 %).

The true sizes are measured, not assumed: each run's trace times every kernel. Read at call time, in the capture
process of each environment. On a CPU there is no sleep kernel (the variants are for the GPU)."""
import os

import torch
import torch.nn.functional as F

BASE_CYCLES = 100_000
LONGER_CYCLES = 8_600
SLIGHTLY_CYCLES = 2_150


def _changed() -> bool:
    return os.environ.get("ATTNPROF_AB_CHANGE") == "1"


def _forward(q, k, v, causal, scale, cycles):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    if q.is_cuda:
        torch.cuda._sleep(cycles)
    return out


def added_kernel(q, k, v, *, causal, scale):
    out = _forward(q, k, v, causal, scale, BASE_CYCLES)
    return out * 1.0 if _changed() else out


def longer_kernel(q, k, v, *, causal, scale):
    return _forward(q, k, v, causal, scale, BASE_CYCLES + (LONGER_CYCLES if _changed() else 0))


def slightly_longer(q, k, v, *, causal, scale):
    return _forward(q, k, v, causal, scale, BASE_CYCLES + (SLIGHTLY_CYCLES if _changed() else 0))
