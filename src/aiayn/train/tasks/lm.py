"""Language modelling with the decoder-only model (GPT): predict every next token, left to right."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from aiayn.config import BOS_ID, ModelConfig
from aiayn.data.batching import BatchIterator
from aiayn.data.text_batching import TextBatch, TextCollate, stream_blocks
from aiayn.train.loss import label_smoothed_nll


def document_stream(split: Any) -> np.ndarray:
    """A document split's token stream: its one example's ids without the closing EOS (memory-mapped)."""
    return split.src[: int(split.src_offsets[1]) - 1]


class LMTask:
    """Next-token cross-entropy (label smoothing as optim.label_smoothing; 0 is plain likelihood) over
    blocks of `block_size` tokens (input ids[:, :-1], targets ids[:, 1:]), or over sentences (input
    BOS + text, targets text + EOS, pad positions ignored). Validation: loss, nll and perplexity per
    token over the whole validation text (consecutive blocks, or every sentence)."""

    def __init__(
        self,
        model_config: ModelConfig,
        prepared: Any,
        device: torch.device,
        *,
        label_smoothing: float,
        block_size: int | None,
        batch_size: int,
        max_tokens: int,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        self.model_config, self.prepared, self.device = model_config, prepared, device
        self.label_smoothing, self.block_size, self.batch_size = label_smoothing, block_size, batch_size
        self.max_tokens, self.autocast = max_tokens, autocast

    def tokens(self, batch: TextBatch) -> int:
        return batch.tokens

    def _forward(self, model: torch.nn.Module, b: TextBatch) -> tuple[Tensor, Tensor]:
        """Logits (n, V) and gold ids (n,) at the batch's n predicted positions."""
        ids = b.ids.to(self.device, non_blocking=True)
        if self.block_size is not None:
            inp, target = ids[:, :-1], ids[:, 1:].reshape(-1)  # (B, T), (B*T,)
            with self.autocast():
                logits = model(inp)  # (B, T, V)
            return logits.flatten(0, 1), target
        bos = torch.full_like(ids[:, :1], BOS_ID)
        inp = torch.cat([bos, ids[:, :-1]], dim=1)  # (B, T): BOS + text (an EOS under padding is never scored)
        keep = (b.ids.view(-1) != self.model_config.pad_id).nonzero().squeeze(1).to(self.device)  # (n,)
        with self.autocast():
            logits = model(inp, keep=keep)  # (n, V)
        return logits, ids.view(-1).index_select(0, keep)

    def loss(self, model: torch.nn.Module, batch: TextBatch) -> tuple[Tensor, Tensor]:
        logits, target = self._forward(model, batch)
        loss, nll, _ = label_smoothed_nll(logits, target, self.label_smoothing, self.model_config.pad_id)
        return loss, nll

    def _valid_batches(self) -> Iterator[TextBatch]:
        split = self.prepared.splits["valid"]
        if self.block_size is not None:
            return stream_blocks(document_stream(split), self.block_size, self.batch_size)
        return iter(BatchIterator(split, self.max_tokens, shuffle=False, collate_fn=TextCollate()))

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        loss = nll = tokens = 0.0
        for b in self._valid_batches():
            logits, target = self._forward(model, b)
            ls, n, k = label_smoothed_nll(logits, target, self.label_smoothing, self.model_config.pad_id)
            loss, nll, tokens = loss + ls.item(), nll + n.item(), tokens + k.item()
        return {"loss": loss / tokens, "nll": nll / tokens, "ppl": math.exp(min(nll / tokens, 50.0))}
