"""Ensemble decoding: several models over one vocabulary decode as one (fairseq's `--path a:b`,
OpenNMT's `-model a b`, Marian's `--models`).

At every step each model scores the next token and the ensemble's distribution is the mean of
their probabilities, log p(y) = log(1/M sum_m p_m(y)). `Ensemble` offers what the searches need
(`config`, `encode`, `init_cache`, `step(ids, cache)`), so greedy and beam search run on it
unchanged: its "logits" are those mean log-probabilities, which a softmax leaves as they are.
Members are typically checkpoint averages of independently trained runs (paper §6.1 averages
checkpoints of one run; an ensemble of runs is the step beyond it that the paper's Table 2 lists
for other systems).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from aiayn.averaging import average_last as average
from aiayn.checkpoint import find_tokenizer, load_translation_model, model_config
from aiayn.errors import AiaynError
from aiayn.model import Transformer
from aiayn.model.cache import DecoderCache


@dataclass
class EnsembleCache:
    """One `DecoderCache` per member; rows and sources move together."""

    members: list[DecoderCache]

    def reorder(self, rows: Tensor) -> EnsembleCache:
        return EnsembleCache([c.reorder(rows) for c in self.members])

    def keep(self, sources: Tensor) -> EnsembleCache:
        return EnsembleCache([c.keep(sources) for c in self.members])


class Ensemble(nn.Module):
    """Models that share one vocabulary and its special ids, decoded as one."""

    def __init__(self, models: Sequence[Transformer]) -> None:
        super().__init__()
        if len(models) < 1:
            raise AiaynError("an ensemble needs at least one model")
        first = models[0].config
        for m in models[1:]:
            c = m.config
            if (c.vocab_size, c.pad_id, c.bos_id, c.eos_id) != (
                first.vocab_size,
                first.pad_id,
                first.bos_id,
                first.eos_id,
            ):
                raise AiaynError(
                    f"ensemble members must share one vocabulary: vocab_size/pad/bos/eos "
                    f"{first.vocab_size}/{first.pad_id}/{first.bos_id}/{first.eos_id} vs "
                    f"{c.vocab_size}/{c.pad_id}/{c.bos_id}/{c.eos_id}"
                )
        self.models = nn.ModuleList(models)
        # Outputs are bounded by the member with the fewest positions.
        self.config = dataclasses.replace(first, max_positions=min(m.config.max_positions for m in models))

    @property
    def members(self) -> list[Transformer]:
        return cast(list[Transformer], list(self.models))

    def encode(self, src: Tensor) -> list[Tensor]:
        """(B, S) source ids -> each member's memory (B, S, d_model_m)."""
        return [m.encode(src) for m in self.members]

    def init_cache(self, memory: list[Tensor], src_mask: Tensor, capacity: int = 64) -> EnsembleCache:
        return EnsembleCache([m.init_cache(mem, src_mask, capacity=capacity) for m, mem in zip(self.members, memory)])

    def step(self, ids: Tensor, cache: EnsembleCache) -> tuple[Tensor, EnsembleCache]:
        """Next-token ids (rows, T) -> mean log-probs (rows, T, V) float32, and the updated cache."""
        logps, caches = [], []
        for m, c in zip(self.members, cache.members):
            logits, c = m.step(ids, c)
            logps.append(torch.log_softmax(logits.float(), dim=-1))  # (rows, T, V)
            caches.append(c)
        mean = torch.logsumexp(torch.stack(logps), dim=0) - math.log(len(logps))  # (rows, T, V)
        return mean, EnsembleCache(caches)


def load_members(
    paths: Sequence[str | os.PathLike], device: str | torch.device = "cpu", average_last: int = 0
) -> tuple[nn.Module, Path]:
    """Load each run directory or weights file (with `average_last` K: the average of each run's last
    K step checkpoints) -> (the model, or an `Ensemble` of several; the shared spm.model).

    Members must come with byte-identical spm.model files: the same id must mean the same piece.
    """
    if not paths:
        raise AiaynError("no checkpoint given")
    models = []
    for p in paths:
        if average_last:
            if not Path(p).is_dir():
                raise AiaynError(f"--average-last needs run directories, got {p}")
            model = average(p, average_last, device)
            if model_config(model).kind != "encoder-decoder":
                raise AiaynError(f"{p} holds a {model_config(model).kind} model, not a translation model")
            models.append(cast(Transformer, model))
        else:
            models.append(load_translation_model(p, device))
    spm = [find_tokenizer(p) for p in paths]
    for p, s in zip(paths[1:], spm[1:]):
        if s.read_bytes() != spm[0].read_bytes():
            raise AiaynError(
                f"ensemble members need the same spm.model: {s} (for {p}) differs from {spm[0]} "
                f"(for {paths[0]}), so their token ids mean different pieces"
            )
    return (models[0] if len(models) == 1 else Ensemble(models)), spm[0]
