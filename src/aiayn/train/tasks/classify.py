"""Sequence classification with the encoder-only model: a pooled [CLS] head over one text or a sentence
pair (BERT: Devlin et al., 2019, §3.2 and Figure 4), usually fine-tuned from an `mlm` run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.config import ModelConfig
from aiayn.data.batching import BatchIterator
from aiayn.data.errors import DataError
from aiayn.data.text import ENCODER_SPECIALS
from aiayn.data.text_batching import TextBatch, TextCollate


def encoder_collate(tokenizer: Any, labels: np.ndarray | None = None) -> TextCollate:
    """BERT's [CLS] a [SEP] (b [SEP]) layout with `tokens` counting examples."""
    cls_id, sep_id = tokenizer.piece_id(ENCODER_SPECIALS[1]), tokenizer.piece_id(ENCODER_SPECIALS[2])
    if cls_id is None or sep_id is None:
        raise DataError(
            f"the tokenizer {tokenizer.path} lacks the pieces {list(ENCODER_SPECIALS)} the encoder-only tasks need"
        )
    return TextCollate(labels, cls_id=cls_id, sep_id=sep_id, per_example=True)


def confusion_matrix(gold: Sequence[int] | np.ndarray, pred: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """(n, n) counts: row = gold class, column = predicted class."""
    m = np.zeros((n, n), dtype=np.int64)
    np.add.at(m, (np.asarray(gold, dtype=np.int64), np.asarray(pred, dtype=np.int64)), 1)
    return m


def class_scores(m: np.ndarray) -> dict[str, Any]:
    """Accuracy, per-class precision / recall / F1 / support (lists) and their macro F1 from a confusion
    matrix. A class never predicted has precision 0 (and F1 0), as scikit-learn's zero_division=0."""
    tp = np.diag(m).astype(np.float64)
    predicted, support = m.sum(0).astype(np.float64), m.sum(1).astype(np.float64)
    precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
    recall = np.divide(tp, support, out=np.zeros_like(tp), where=support > 0)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros_like(tp), where=precision + recall > 0)
    total = m.sum()
    return {
        "accuracy": float(tp.sum() / total) if total else 0.0,
        "precision": precision.tolist(),
        "recall": recall.tolist(),
        "f1": f1.tolist(),
        "support": support.astype(int).tolist(),
        "macro_f1": float(f1.mean()) if len(f1) else 0.0,
    }


def classify_logits(model: torch.nn.Module, b: TextBatch) -> Tensor:
    """(B, n_classes) logits of a batch already on the model's device."""
    return model(b.ids, b.segments, classify=True)  # through forward: a DDP wrapper syncs its gradients


class ClassifyTask:
    """Cross-entropy of the pooled head's logits against the labels, summed over examples and normalised
    by their count (label smoothing as optim.label_smoothing, torch's: ε spread over all classes).
    Validation: loss, nll, accuracy and macro F1 over the validation split, plus each class's F1 as
    `f1_<label>`."""

    def __init__(
        self,
        model_config: ModelConfig,
        prepared: Any,
        device: torch.device,
        *,
        label_smoothing: float,
        max_tokens: int,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        self.model_config, self.prepared, self.device = model_config, prepared, device
        self.label_smoothing, self.max_tokens, self.autocast = label_smoothing, max_tokens, autocast
        self.names = list(prepared.label_names)

    def tokens(self, batch: TextBatch) -> int:
        return batch.tokens

    def _forward(self, model: torch.nn.Module, b: TextBatch) -> tuple[Tensor, Tensor]:
        b = b.to(self.device, non_blocking=True)
        assert b.labels is not None
        with self.autocast():
            logits = classify_logits(model, b)  # (B, n_classes)
        return logits.float(), b.labels

    def loss(self, model: torch.nn.Module, batch: TextBatch) -> tuple[Tensor, Tensor]:
        logits, labels = self._forward(model, batch)
        nll = F.cross_entropy(logits, labels, reduction="sum")
        if self.label_smoothing == 0:
            return nll, nll.detach()
        return F.cross_entropy(logits, labels, reduction="sum", label_smoothing=self.label_smoothing), nll.detach()

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        loss = nll = 0.0
        gold, pred = [], []
        collate = encoder_collate(self.prepared.tokenizer, self.prepared.labels["valid"])
        for b in BatchIterator(self.prepared.splits["valid"], self.max_tokens, shuffle=False, collate_fn=collate):
            logits, labels = self._forward(model, b)
            nll += F.cross_entropy(logits, labels, reduction="sum").item()
            loss += F.cross_entropy(logits, labels, reduction="sum", label_smoothing=self.label_smoothing).item()
            gold.append(labels.cpu().numpy())
            pred.append(logits.argmax(-1).cpu().numpy())
        n = sum(len(g) for g in gold)
        s = class_scores(confusion_matrix(np.concatenate(gold), np.concatenate(pred), len(self.names)))
        out: dict[str, float | None] = {
            "loss": loss / n,
            "nll": nll / n,
            "accuracy": s["accuracy"],
            "macro_f1": s["macro_f1"],
        }
        out.update({f"f1_{name}": f for name, f in zip(self.names, s["f1"])})
        return out
