"""Classifying text with an encoder-only run (`task: classify`): predictions, and when the input has gold
labels, accuracy, per-class precision / recall / F1, macro F1 and a confusion-matrix picture.

    clf = Classifier.load("runs/langid")
    ids = clf.predict(["A dog runs.", "Ein Hund rennt."])       # class ids; clf.labels names them
    aiayn classify -c runs/langid --input test.tsv --output preds.tsv --confusion cm.png

Input lines are the training TSV's: LABEL<TAB>TEXT (or LABEL<TAB>A<TAB>B for a run trained on sentence
pairs), or the same without the label. The run's RUN/labels.json (written when training starts) names
the classes in id order and says whether the run reads pairs. Scores: aiayn.scoring; the confusion-matrix
picture: aiayn.viz.plot_confusion.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from aiayn.checkpoint import find_in_run, find_tokenizer, load_model, model_config, resolve_weights
from aiayn.data.batching import BatchIterator
from aiayn.data.encoded import EncodedSplit
from aiayn.data.errors import DataError
from aiayn.data.io import read_lines
from aiayn.data.text_batching import TextBatch, TextCollate
from aiayn.data.tokenizer import ENCODER_SPECIALS, Tokenizer
from aiayn.errors import AiaynError


def encoder_collate(tokenizer: Any, labels: np.ndarray | None = None) -> TextCollate:
    """BERT's [CLS] a [SEP] (b [SEP]) layout with `tokens` counting examples."""
    cls_id, sep_id = tokenizer.piece_id(ENCODER_SPECIALS[1]), tokenizer.piece_id(ENCODER_SPECIALS[2])
    if cls_id is None or sep_id is None:
        raise DataError(
            f"the tokenizer {tokenizer.path} lacks the pieces {list(ENCODER_SPECIALS)} the encoder-only tasks need"
        )
    return TextCollate(labels, cls_id=cls_id, sep_id=sep_id, per_example=True)


def classify_logits(model: torch.nn.Module, b: TextBatch) -> Tensor:
    """(B, n_classes) logits of a batch already on the model's device."""
    return model(b.ids, b.segments, classify=True)  # through forward: a DDP wrapper syncs its gradients


class ClassifyError(AiaynError, ValueError):
    """A run or an input file that cannot be classified as asked."""


@dataclass
class Examples:
    """Texts read from a TSV: first texts, second texts (pairs, else None), gold labels (else None)."""

    a: list[str]
    b: list[str] | None
    gold: list[str] | None


class Classifier:
    """An encoder-only classifier with its tokenizer and class names, ready to predict."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Tokenizer,
        labels: list[str],
        pairs: bool,
        max_len: int,
        device: str | torch.device = "cpu",
    ) -> None:
        self.model, self.tokenizer, self.labels, self.pairs = model, tokenizer, labels, pairs
        self.max_len, self.device = max_len, torch.device(device)

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | torch.device = "cpu") -> Classifier:
        """A run directory (best, else newest weights) or a weights file inside one."""
        try:
            weights = resolve_weights(path)
            model = load_model(weights, device)
            tokenizer = Tokenizer(find_tokenizer(weights))
        except AiaynError as e:
            raise ClassifyError(str(e)) from None
        n = getattr(model, "n_classes", None)
        found = find_in_run(weights, "labels.json")
        if n is None or found is None:
            raise ClassifyError(
                f"{weights} is not a classifier run (a task: classify run has a classification head and labels.json)"
            )
        meta = json.loads(found.read_text())
        if len(meta["labels"]) != n:
            raise ClassifyError(f"{found} names {len(meta['labels'])} classes, the model has {n}")
        # the training truncation (text.py): the two texts plus one [SEP] within data.max_len pieces,
        # and [CLS] ... [SEP] within the model's positions
        max_len = model_config(model).max_positions - 2
        cfg = find_in_run(weights, "config.yaml")
        if cfg is not None:
            import yaml

            max_len = min(max_len, int((yaml.safe_load(cfg.read_text()).get("data") or {}).get("max_len", max_len)))
        return cls(model, tokenizer, list(meta["labels"]), bool(meta["pairs"]), max_len, device)

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer.encode_batch([" ".join(t.split()) for t in texts])  # as the training text was

    def encode(self, a: list[str], b: list[str] | None = None) -> EncodedSplit:
        ids_a, ids_b = self._ids(a), self._ids(b) if b is not None else [[] for _ in a]
        for k, (ra, rb) in enumerate(zip(ids_a, ids_b)):
            while len(ra) + len(rb) + 1 > self.max_len:  # the longer text first, as training did (BERT's)
                (ra if len(ra) >= len(rb) else rb).pop()
            ids_a[k], ids_b[k] = ra, rb
        return EncodedSplit.from_ids(ids_a, ids_b, self.tokenizer.vocab_size)

    def probabilities(self, a: list[str], b: list[str] | None = None, max_tokens: int = 8192) -> np.ndarray:
        """(N, n_classes) class probabilities of N texts (or pairs)."""
        if (b is not None) != self.pairs:
            raise ClassifyError(
                "this run classifies sentence pairs: give two texts an example"
                if self.pairs
                else "this run classifies single texts, not pairs"
            )
        out = np.zeros((len(a), len(self.labels)), dtype=np.float32)
        if not a:
            return out
        split = self.encode(a, b)
        collate = encoder_collate(self.tokenizer)
        longest = int(collate.padded_lengths(split)[0].max())  # [CLS] a [SEP] (b [SEP]): a row holds both
        with torch.no_grad():
            for batch in BatchIterator(split, max(max_tokens, longest), shuffle=False, collate_fn=collate):
                logits = classify_logits(self.model, batch.to(self.device))  # (B, n_classes)
                out[batch.index.numpy()] = torch.softmax(logits.float(), -1).cpu().numpy()
        return out

    def predict(self, a: list[str], b: list[str] | None = None, max_tokens: int = 8192) -> np.ndarray:
        """(N,) class ids (names: `self.labels`)."""
        return self.probabilities(a, b, max_tokens).argmax(-1)

    def read(self, path: str | os.PathLike) -> Examples:
        """A TSV of examples, all with gold labels or all without (decided by the number of fields)."""
        numbered = [(i + 1, x) for i, x in enumerate(read_lines(path)) if x.strip()]  # file line numbers
        bare = 2 if self.pairs else 1
        shape = "A<TAB>B" if self.pairs else "TEXT"
        if not numbered:
            raise ClassifyError(f"{path}: no examples (every line is empty)")
        counts = Counter(len(x.split("\t")) for _, x in numbered)
        usual = counts.most_common(1)[0][0]  # the odd line out is the one to blame, not the longest
        if len(counts) > 1 or usual not in (bare, bare + 1):
            bad = next(n for n, x in numbered if len(x.split("\t")) != usual) if len(counts) > 1 else numbered[0][0]
            raise ClassifyError(f"{path}:{bad}: expected every line as LABEL<TAB>{shape} or every line as {shape}")
        lines = [x for _, x in numbered]
        fields = [x.split("\t") for x in lines]
        labelled = usual == bare + 1
        gold = [f[0].strip() for f in fields] if labelled else None
        if gold is not None:
            unknown = sorted(set(gold) - set(self.labels))
            if unknown:
                raise ClassifyError(f"{path}: labels {unknown} are not this run's ({', '.join(self.labels)})")
        texts = [f[1:] if labelled else f for f in fields]
        return Examples([t[0] for t in texts], [t[1] for t in texts] if self.pairs else None, gold)
