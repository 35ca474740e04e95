"""A user variant for the tests: a correct forward whose backward is deliberately wrong. A custom
autograd function runs SDPA in its forward and SDPA's own backward in its backward, then doubles
dk: the forward's float64 check passes, the gradients' must flag dk (relative error 1) and leave dq
and dv alone."""
import torch
import torch.nn.functional as F

#: What the backward multiplies dk by.
DK_FACTOR = 2.0


class _WrongDk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.scale = causal, scale
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors)
        with torch.enable_grad():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=ctx.causal, scale=ctx.scale)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out)
        return dq, DK_FACTOR * dk, dv, None, None


def forward(q, k, v, *, causal, scale):
    return _WrongDk.apply(q, k, v, causal, scale)
