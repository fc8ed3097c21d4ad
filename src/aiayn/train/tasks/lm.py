"""Language modelling with the decoder-only model (GPT): predict every next token, left to right."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from aiayn.config import BOS_ID, Config, ConfigError, DataConfig
from aiayn.data.batching import BatchIterator
from aiayn.data.errors import DataError
from aiayn.data.pipeline import Options
from aiayn.data.text import PreparedText, prepare_text
from aiayn.data.text_batching import BlockIterator, TextBatch, TextCollate, stream_blocks
from aiayn.distributed import DistInfo
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.tasks.spec import TEXT_CORPORA, Predict, TaskBase, TaskSpec, register, sentence_batches, task_options


@dataclasses.dataclass
class LMSettings:
    """The `task:` section of an lm run."""

    # train on contiguous blocks of this many tokens drawn at random from the text (nanoGPT's way);
    # None: one example per line, batched under data.max_tokens like sentences
    block_size: int | None = None
    batch_size: int = 12  # blocks per batch and rank (with block_size)

    def __post_init__(self) -> None:
        if (self.block_size is not None and self.block_size < 2) or self.batch_size < 1:
            raise ConfigError("task.block_size must be >= 2 (or null) and task.batch_size >= 1")


def settings(cfg: Config) -> LMSettings:
    return task_options(cfg, LMSettings)


def document_stream(split: Any) -> np.ndarray:
    """A document split's token stream: its one example's ids without the closing EOS (memory-mapped)."""
    return split.src[: int(split.src_offsets[1]) - 1]


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


def prepare(cfg: Config, data: DataConfig, run_dir: Path | None, options: Options) -> PreparedText:
    blocks = settings(cfg).block_size is not None
    if blocks and data.text_unit != "document":
        raise ConfigError(
            "task.block_size draws blocks from running text: set data.text_unit: document "
            "(or task.block_size: null for one sentence per example)"
        )
    prepared = prepare_text(data, run_dir, options=options)
    valid = prepared.splits["valid"]
    if blocks and (len(valid) == 0 or len(document_stream(valid)) < 2):
        raise DataError(
            "the validation text has fewer than 2 tokens, so there is no next token to predict: "
            "give data.text_valid more text (or raise data.valid_fraction)"
        )
    return prepared


def train_batches(
    cfg: Config, prepared: PreparedText, dist: DistInfo, device: torch.device
) -> BlockIterator | BatchIterator:
    own = settings(cfg)
    if own.block_size is None:
        return sentence_batches(cfg, prepared, dist, device, collate_fn=TextCollate())
    stream = document_stream(prepared.splits["train"])
    return BlockIterator(stream, own.block_size, own.batch_size, cfg.train.seed, dist.rank, dist.world_size)


def longest_row(cfg: Config) -> tuple[int, str, str]:
    block_size = settings(cfg).block_size
    if block_size is not None:
        return block_size, "task.block_size", "task.block_size"
    return cfg.data.max_len, "BOS + data.max_len - 1 text tokens", "data.max_len"


def continuations(run: str, device: str | None) -> Predict:
    """Each line's greedy continuation, on one line (`aiayn generate` samples and streams)."""
    from aiayn.decode.lm import LanguageModel
    from aiayn.decode.sampling import Sampling

    lm = LanguageModel.load(run, device)
    return lambda lines: [lm.generate(x, Sampling(temperature=0, max_tokens=50)).replace("\n", " ") for x in lines]


SPEC = register(
    TaskSpec(
        name="lm",
        summary="language modelling (decoder-only, next token)",
        hub_tag="text-generation",
        model_kind="decoder-only",
        settings=LMSettings,
        corpora=TEXT_CORPORA,
        prepare=prepare,
        train_batches=train_batches,
        longest_row=longest_row,
        build=LMTask,
        predictor=continuations,
    )
)
