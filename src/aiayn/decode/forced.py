"""Teacher-forced scores of given translations: how surprised a run's model is by each target given its
source, as cross-entropy per target token (EOS included), the measure behind dual conditional
cross-entropy filtering (Junczys-Dowmunt, 2018; aiayn.dual_scores).

    scorer = ForcedScorer("runs/de-en")
    h = scorer.cross_entropy(["Ein Hund rennt."], ["A dog runs."])   # (1,) nats a token
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from aiayn.checkpoint import find_tokenizer, load_translation_model
from aiayn.data.batching import BatchIterator
from aiayn.data.encoded import EncodedSplit
from aiayn.data.tokenizer import Tokenizer, collapse_whitespace, replace_lone_surrogates
from aiayn.devices import resolve_device
from aiayn.hub import resolve_run


class ForcedScorer:
    """A run's model and tokenizer, scoring pairs by teacher forcing in token-budget batches."""

    def __init__(self, run: str | os.PathLike, device: str | None = None, max_tokens: int = 8192) -> None:
        local = resolve_run(run)
        self.device = resolve_device(device)
        self.model = load_translation_model(local, self.device)
        self.tokenizer = Tokenizer(find_tokenizer(local))
        self.max_tokens = max_tokens

    @torch.no_grad()
    def cross_entropy(self, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        """(N,) float32: -log p(target | source) / (target pieces + 1) of each pair, in nats. Pieces past
        the model's positions are cut off (a pair that long is rare and scored on its start)."""
        if not len(src):
            return np.zeros(0, dtype=np.float32)
        most = self.model.config.max_positions - 1
        encode = self.tokenizer.encode_batch

        def pieces(lines: Sequence[str]) -> list[list[int]]:
            return [ids[:most] for ids in encode([replace_lone_surrogates(collapse_whitespace(x)) for x in lines])]

        split = EncodedSplit.from_ids(pieces(src), pieces(tgt), self.tokenizer.vocab_size)
        longest = max(int(split.src_lengths.max()), int(split.tgt_lengths.max()) + 1)
        out = np.zeros(len(src), dtype=np.float32)
        pad = self.model.config.pad_id
        for b in BatchIterator(split, max(self.max_tokens, longest), shuffle=False):
            b = b.to(self.device)
            logp = torch.log_softmax(self.model(b.src, b.tgt_in).float(), dim=-1)  # (B, T, V)
            nll = -logp.gather(-1, b.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
            real = b.tgt_out != pad
            per = (nll * real).sum(1) / real.sum(1)  # (B,)
            out[b.ids.numpy()] = per.cpu().numpy()
        return out
