"""A user variant for the tests: attention written out by hand (the documented signature),
with a setup hook that builds the causal mask once, outside the profiled forwards."""
import torch


def setup(shape: dict, device: str) -> dict:
    s = shape["seq_len"]
    mask = torch.ones(s, s, dtype=torch.bool, device=device).tril() if shape["causal"] else None
    return {"mask": mask}


def forward(q, k, v, *, causal, scale, mask=None):
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def wrong(q, k, v, *, causal, scale):
    """Forgets the causal mask: the float64 check must flag it."""
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v
