"""Classification's loss, validation, batches and predictor (a pooled head on the encoder). The record
that names them: aiayn.train.tasks.classify."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.config import Config
from aiayn.data.batching import BatchIterator
from aiayn.data.text import PreparedText
from aiayn.data.text_batching import TextBatch
from aiayn.decode.classifier import classify_logits, encoder_collate
from aiayn.distributed import DistInfo
from aiayn.scoring import class_scores, confusion_matrix
from aiayn.train.tasks.spec import Predict, TaskBase, sentence_batches


class ClassifyTask(TaskBase[PreparedText]):
    """Cross-entropy of the pooled head's logits against the labels, summed over examples and normalised
    by their count (label smoothing as optim.label_smoothing, torch's: ε spread over all classes).
    Validation: loss, nll, accuracy and macro F1 over the validation split, plus each class's F1 as
    `f1_<label>`."""

    def __init__(self, cfg: Config, *rest: Any) -> None:  # TaskBase's arguments
        super().__init__(cfg, *rest)
        self.names = list(self.prepared.label_names)

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


def train_batches(cfg: Config, prepared: PreparedText, dist: DistInfo, device: torch.device) -> BatchIterator:
    collate = encoder_collate(prepared.tokenizer, prepared.labels["train"])
    return sentence_batches(cfg, prepared, dist, device, collate_fn=collate)


def labels(run: str, device: str | None) -> Predict:
    """Each line's predicted label (a line: TEXT, or TEXT<TAB>TEXT_B for a sentence pair)."""
    from aiayn.decode.classifier import Classifier

    clf = Classifier.load(run, device or "cpu")

    def predict(lines: list[str]) -> list[str]:
        parts = [x.split("\t", 1) for x in lines]
        b = [p[1] if len(p) > 1 else "" for p in parts] if any(len(p) > 1 for p in parts) else None
        return [clf.labels[i] for i in clf.predict([p[0] for p in parts], b)]

    return predict
