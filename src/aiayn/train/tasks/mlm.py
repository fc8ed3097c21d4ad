"""Masked-token pre-training of the encoder-only model (BERT: Devlin et al., 2019, §3.1 Task #1)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from aiayn.config import Config, ConfigError, DataConfig
from aiayn.data.batching import BatchIterator
from aiayn.data.errors import DataError
from aiayn.data.pipeline import Options
from aiayn.data.text import PreparedText, prepare_text
from aiayn.data.text_batching import MaskedBatch, MaskingCollate
from aiayn.data.tokenizer import ENCODER_SPECIALS
from aiayn.distributed import DistInfo
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.tasks.spec import TEXT_CORPORA, Predict, TaskBase, TaskSpec, register, sentence_batches, task_options


@dataclasses.dataclass
class MLMSettings:
    """The `task:` section of an mlm run (BERT's masking)."""

    mask_prob: float = 0.15  # share of the non-special tokens chosen for prediction
    mask_token: float = 0.8  # ... of which this share becomes [MASK]
    random_token: float = 0.1  # ... and this share a random token (the rest stays as it was)

    def __post_init__(self) -> None:
        if (
            not 0 < self.mask_prob < 1
            or self.mask_token < 0
            or self.random_token < 0
            or self.mask_token + self.random_token > 1
        ):
            raise ConfigError(
                "task.mask_prob must lie in (0, 1), mask_token and random_token in [0, 1] with a sum <= 1"
            )


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


def prepare_lines(
    cfg: Config, data: DataConfig, run_dir: Path | None, options: Options, labelled: bool = False
) -> PreparedText:
    """One example a line, encoded with the encoder's specials ([CLS], [SEP], [MASK]): mlm and classify."""
    if data.text_unit != "line":
        raise ConfigError(f"task {cfg.task.name} reads one example a line: set data.text_unit: line")
    return prepare_text(data, run_dir, labelled=labelled, specials=ENCODER_SPECIALS, options=options)


def encoder_row(cfg: Config) -> tuple[int, str, str]:
    return cfg.data.max_len + 2, "[CLS] a [SEP] b [SEP] with a, EOS and b within data.max_len", "data.max_len"


def train_batches(cfg: Config, prepared: PreparedText, dist: DistInfo, device: torch.device) -> BatchIterator:
    collate = masking_collate(prepared, task_options(cfg, MLMSettings), cfg.train.seed)
    return sentence_batches(cfg, prepared, dist, device, collate_fn=collate)


def filled_masks(run: str, device: str | None) -> Predict:
    """Each line's [MASK]s filled in: a JSON list with, for each [MASK], its 5 likeliest pieces (Hugging
    Face's fill-mask records: score, token, token_str, sequence), best first."""
    from aiayn.decode.fill_mask import FillMask

    fill = FillMask.load(run, device)
    return lambda lines: [[[dataclasses.asdict(c) for c in mask] for mask in text] for text in fill.fill(lines)]


SPEC = register(
    TaskSpec(
        name="mlm",
        summary="masked-token pre-training (encoder-only, BERT)",
        hub_tag="fill-mask",
        model_kind="encoder-only",
        settings=MLMSettings,
        measures={"accuracy": True},
        corpora=TEXT_CORPORA,
        prepare=prepare_lines,
        train_batches=train_batches,
        longest_row=encoder_row,
        build=MLMTask,
        predictor=filled_masks,
    )
)
