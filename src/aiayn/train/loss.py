"""Label-smoothed cross entropy (paper §5.4, ε_ls = 0.1), without a dense (N, V) target.

Where the smoothing mass goes (a choice the paper leaves open): the gold token keeps 1 - ε and
ε is spread uniformly over the V - 2 classes that are neither the gold token nor <pad>
(the Annotated Transformer / OpenNMT choice). The pad column gets no mass, since the model
should never be taught to emit padding, and positions whose gold token is <pad> are ignored.

With q the smoothed target and lp = log_softmax(z) the model's log-probabilities, the per-token loss is

    -Σ_v q_v lp_v = (1 - ε)·(-lp_gold) + ε/(V-2)·(-(Σ_v lp_v - lp_gold - lp_pad))

and its gradient is p - q. Forward and backward are written out by hand (fairseq's one gather and
one row sum, then p - q in a single buffer): log_softmax's fused kernel writes the one (N, V)
buffer, which the backward turns into p in place (so a graph cannot be back-propagated twice:
autograd then raises). Autograd through log_softmax + gather + sum would build four (N, V)
temporaries in the backward pass. Speed against F.cross_entropy: `python bench/kernels.py loss`.
"""

from __future__ import annotations

import torch
from torch import Tensor


class _SmoothedNLL(torch.autograd.Function):
    """(N, V) float logits, (N,) target -> per-token (smoothed loss, NLL), each (N,)."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
        vocab = logits.size(-1)
        lp = torch.log_softmax(logits, dim=-1)  # (N, V): the only (N, V) buffer, reused by backward
        nll = -lp.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        if epsilon > 0:
            others = lp[:, pad_id] - nll - lp.sum(dim=-1)  # -Σ lp_v over v ∉ {gold, pad}
            loss = (1.0 - epsilon) * nll + (epsilon / (vocab - 2)) * others
        else:
            loss = nll.clone()
        ctx.save_for_backward(lp, target)
        ctx.epsilon, ctx.pad_id = epsilon, pad_id
        return loss, nll

    @staticmethod
    def backward(ctx, g_loss: Tensor, g_nll: Tensor) -> tuple[Tensor, None, None, None]:
        lp, target = ctx.saved_tensors
        eps, pad = ctx.epsilon, ctx.pad_id
        u = g_loss * (eps / (lp.size(-1) - 2))  # (N,) weight of q on each smoothed class
        g = lp.exp_()  # p, in place: backward runs once and lp is this function's own buffer
        g.mul_((g_loss + g_nll).unsqueeze(1))  # both targets sum to 1: p times both upstream grads
        if eps > 0:
            g.sub_(u.unsqueeze(1))
            g[:, pad] += u  # q_pad = 0
        g.scatter_add_(1, target.unsqueeze(1), (u - g_loss * (1.0 - eps) - g_nll).unsqueeze(1))  # gold
        return g, None, None, None


def label_smoothed_nll(
    logits: Tensor, target: Tensor, epsilon: float = 0.1, pad_id: int = 0
) -> tuple[Tensor, Tensor, Tensor]:
    """logits (B, T, V) or (N, V), target (B, T) or (N,) ->
    (smoothed loss summed over non-pad tokens, true NLL summed likewise, number of non-pad tokens).

    Sums, not means: the caller divides by the token count of the whole (global) batch.
    """
    vocab = logits.size(-1)
    target = target.reshape(-1)  # (N,)
    loss, nll = _SmoothedNLL.apply(logits.float().reshape(-1, vocab), target, epsilon, pad_id)  # float32 under AMP
    keep = target != pad_id  # (N,)
    zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
    return (torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum(), keep.sum())
