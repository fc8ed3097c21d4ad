"""Masked-token pre-training's loss, validation, masking batches and predictor (BERT). The record that
names them: aiayn.train.tasks.mlm."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor

from aiayn.config import Config
from aiayn.data.batching import BatchIterator
from aiayn.data.errors import DataError
from aiayn.data.text import PreparedText
from aiayn.data.text_batching import MaskedBatch, MaskingCollate
from aiayn.data.tokenizer import ENCODER_SPECIALS
from aiayn.distributed import DistInfo
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.tasks.mlm import MLMSettings
from aiayn.train.tasks.spec import Predict, TaskBase, sentence_batches, task_options


def masking_collate(prepared: PreparedText, task: MLMSettings, seed: int) -> MaskingCollate:
    """The masking collate for a prepared text's tokenizer (its [MASK], [CLS] and [SEP] pieces)."""
    tok = prepared.tokenizer
    mask_id, cls_id, sep_id = (tok.piece_id(p) for p in ENCODER_SPECIALS)
    if mask_id is None or cls_id is None or sep_id is None:
        raise DataError(
            f"the tokenizer {tok.path} lacks the pieces {list(ENCODER_SPECIALS)} the encoder-only tasks need"
        )
    return MaskingCollate(
        tok.vocab_size,
        mask_id,
        cls_id,
        sep_id,
        seed=seed,
        mask_prob=task.mask_prob,
        mask_token=task.mask_token,
        random_token=task.random_token,
    )


class MLMTask(TaskBase[PreparedText]):
    """Cross-entropy (label smoothing as optim.label_smoothing) at the chosen positions only, normalised
    by their count. Validation: loss, nll, perplexity and accuracy of the masked tokens over the whole
    validation text, with masks drawn from `seed` (the same at every validation)."""

    def __init__(self, cfg: Config, *rest: Any) -> None:  # TaskBase's arguments
        super().__init__(cfg, *rest)
        self.valid_collate = masking_collate(self.prepared, task_options(cfg, MLMSettings), cfg.train.seed)

    def tokens(self, batch: MaskedBatch) -> int:
        return batch.tokens

    def _forward(self, model: torch.nn.Module, b: MaskedBatch) -> tuple[Tensor, Tensor]:
        """Logits (n, V) and gold ids (n,) at the batch's n chosen positions."""
        b = b.to(self.device, non_blocking=True)
        with self.autocast():
            logits = model(b.ids, b.segments, where=b.where)  # (n, V), through a DDP/compile wrapper if any
        return logits, b.targets

    def loss(self, model: torch.nn.Module, batch: MaskedBatch) -> tuple[Tensor, Tensor]:
        logits, target = self._forward(model, batch)
        loss, nll, _ = label_smoothed_nll(logits, target, self.label_smoothing, self.model_config.pad_id)
        return loss, nll

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        loss = nll = tokens = correct = 0.0
        for b in BatchIterator(
            self.prepared.splits["valid"], self.max_tokens, shuffle=False, collate_fn=self.valid_collate
        ):
            logits, target = self._forward(model, b)
            ls, n, k = label_smoothed_nll(logits, target, self.label_smoothing, self.model_config.pad_id)
            loss, nll, tokens = loss + ls.item(), nll + n.item(), tokens + k.item()
            correct += (logits.argmax(-1) == target).sum().item()
        return {
            "loss": loss / tokens,
            "nll": nll / tokens,
            "ppl": math.exp(min(nll / tokens, 50.0)),
            "accuracy": correct / tokens,
        }


def train_batches(cfg: Config, prepared: PreparedText, dist: DistInfo, device: torch.device) -> BatchIterator:
    collate = masking_collate(prepared, task_options(cfg, MLMSettings), cfg.train.seed)
    return sentence_batches(cfg, prepared, dist, device, collate_fn=collate)


def filled_masks(run: str, device: str | None) -> Predict:
    """Each line's [MASK]s filled in: a JSON list with, for each [MASK], its 5 likeliest pieces (Hugging
    Face's fill-mask records: score, token, token_str, sequence), best first."""
    from aiayn.decode.fill_mask import FillMask

    fill = FillMask.load(run, device)
    return lambda lines: [[[dataclasses.asdict(c) for c in mask] for mask in text] for text in fill.fill(lines)]
