"""The README's A/B of two settings in one environment (config/ab-variable.yaml): naive attention (matmul, scale,
masked_fill, softmax, matmul, as the built-in ``naive``) whose environment B (``ATTNPROF_AB_EXTRA_OP=1``) computes
the scores matmul twice, keeping the second: one known added op (one more ``aten::matmul`` with its ``bmm`` in every
forward, about a third more arithmetic) in one variant, no change in the others, and the same output, so the float64
check holds on both sides. Read at call time, in the capture process of each environment (its variables are part of
the capture worker's key)."""
import os

import torch


def forward(q, k, v, *, causal, scale):
    scores = (q @ k.transpose(-2, -1)) * scale
    if os.environ.get("ATTNPROF_AB_EXTRA_OP") == "1":
        scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        s_q, s_k = scores.shape[-2:]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(1 + s_k - s_q)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
