"""Label-smoothed cross entropy (paper §5.4, ε_ls = 0.1), without a dense (N, V) target.

Where the smoothing mass goes (a choice the paper leaves open): the gold token keeps 1 - ε and
ε is spread uniformly over the V - 2 classes that are neither the gold token nor <pad>
(the Annotated Transformer / OpenNMT choice). The pad column gets no mass, since the model
should never be taught to emit padding, and positions whose gold token is <pad> are ignored.

With q the smoothed target and p the model, the per-token loss is the cross entropy

    -Σ_v q_v log p_v = (1 - ε)·(-log p_gold) + ε/(V-2)·(-Σ_v log p_v + log p_gold + log p_pad)

so one gather and one row sum do the work (fairseq's trick); no (N, V) target is built.
"""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float = 0.1,
                       pad_id: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """logits (B, T, V) or (N, V), target (B, T) or (N,) ->
    (smoothed loss summed over non-pad tokens, true NLL summed likewise, number of non-pad tokens).

    Sums, not means: the caller divides by the token count of the whole (global) batch.
    """
    vocab = logits.size(-1)
    lprobs = torch.log_softmax(logits.float(), dim=-1).view(-1, vocab)  # (N, V), float32 even under AMP
    target = target.reshape(-1)  # (N,)
    keep = target != pad_id  # (N,)
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,) -log p_gold
    if epsilon > 0:
        # -Σ over the V-2 classes other than gold and pad
        others = -lprobs.sum(dim=-1) - nll + lprobs[:, pad_id]  # (N,)
        loss = (1.0 - epsilon) * nll + (epsilon / (vocab - 2)) * others
    else:
        loss = nll
    zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
    return (torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum(),
            keep.sum())
