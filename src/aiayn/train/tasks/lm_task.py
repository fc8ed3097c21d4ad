"""Language modelling's loss, validation, batches (blocks of running text, or sentences) and predictor.
The record that names them: aiayn.train.tasks.lm."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from aiayn.config import BOS_ID, Config
from aiayn.data.batching import BatchIterator
from aiayn.data.text import PreparedText
from aiayn.data.text_batching import BlockIterator, TextBatch, TextCollate, stream_blocks
from aiayn.distributed import DistInfo
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.tasks.lm import document_stream, settings
from aiayn.train.tasks.spec import Predict, TaskBase, sentence_batches


class LMTask(TaskBase[PreparedText]):
    """Next-token cross-entropy (label smoothing as optim.label_smoothing; 0 is plain likelihood) over
    blocks of `block_size` tokens (input ids[:, :-1], targets ids[:, 1:]), or over sentences (input
    BOS + text, targets text + EOS, pad positions ignored). Validation: loss, nll and perplexity per
    token over the whole validation text (consecutive blocks, or every sentence)."""

    def __init__(self, cfg: Config, *rest: Any) -> None:  # TaskBase's arguments
        super().__init__(cfg, *rest)
        own = settings(cfg)
        self.block_size, self.batch_size = own.block_size, own.batch_size

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


def train_batches(
    cfg: Config, prepared: PreparedText, dist: DistInfo, device: torch.device
) -> BlockIterator | BatchIterator:
    own = settings(cfg)
    if own.block_size is None:
        return sentence_batches(cfg, prepared, dist, device, collate_fn=TextCollate())
    stream = document_stream(prepared.splits["train"])
    return BlockIterator(stream, own.block_size, own.batch_size, cfg.train.seed, dist.rank, dist.world_size)


def continuations(run: str, device: str | None) -> Predict:
    """Each line's greedy continuation, on one line (`aiayn generate` samples and streams)."""
    from aiayn.decode.lm import LanguageModel
    from aiayn.decode.sampling import Sampling

    lm = LanguageModel.load(run, device)
    return lambda lines: [lm.generate(x, Sampling(temperature=0, max_tokens=50)).replace("\n", " ") for x in lines]
