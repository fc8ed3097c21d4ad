"""Classifying text with an encoder-only run (`task: classify`): predictions, and when the input has gold
labels, accuracy, per-class precision / recall / F1, macro F1 and a confusion-matrix picture.

    clf = Classifier.load("runs/langid")
    ids = clf.predict(["A dog runs.", "Ein Hund rennt."])       # class ids; clf.labels names them
    aiayn classify -c runs/langid --input test.tsv --output preds.tsv --confusion cm.png

Input lines are the training TSV's: LABEL<TAB>TEXT (or LABEL<TAB>A<TAB>B for a run trained on sentence
pairs), or the same without the label. The run's RUN/labels.json (written when training starts) names
the classes in id order and says whether the run reads pairs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aiayn.checkpoint import find_in_run, find_tokenizer, load_model, model_config, resolve_weights
from aiayn.data.batching import BatchIterator
from aiayn.data.encoded import EncodedSplit
from aiayn.data.io import read_lines
from aiayn.data.tokenizer import Tokenizer
from aiayn.errors import AiaynError
from aiayn.train.tasks.classify import class_scores, classify_logits, confusion_matrix, encoder_collate
from aiayn.viz import _figure, _save, _text


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


def scores(gold: list[str], predicted: list[str], labels: list[str]) -> dict[str, Any]:
    """Accuracy, per-class precision / recall / F1 / support, macro F1 and the confusion matrix."""
    index = {name: i for i, name in enumerate(labels)}
    m = confusion_matrix([index[g] for g in gold], [index[p] for p in predicted], len(labels))
    return {**class_scores(m), "labels": list(labels), "confusion": m.tolist(), "n": len(gold)}


def format_scores(s: dict[str, Any]) -> str:
    width = max(8, *(len(x) for x in s["labels"]))
    rows = [
        f"accuracy {s['accuracy']:.4f} ({s['n']} examples)",
        "",
        f"{'label':<{width}}  precision  recall     f1  support",
    ]
    for name, p, r, f, n in zip(s["labels"], s["precision"], s["recall"], s["f1"], s["support"]):
        rows.append(f"{name:<{width}}  {p:9.4f}  {r:6.4f}  {f:.4f}  {n:7d}")
    rows += ["", f"macro F1 {s['macro_f1']:.4f}"]
    return "\n".join(rows)


def plot_confusion(s: dict[str, Any], out: str | os.PathLike, dpi: int = 100) -> Path:
    """A confusion-matrix heat map (rows gold, columns predicted; each cell's count written in it)."""
    m = np.asarray(s["confusion"])
    names = [_text(x) for x in s["labels"]]
    size = 2.0 + 0.45 * len(names)
    fig = _figure(size + 1.0, size, dpi)
    ax = fig.add_subplot(1, 1, 1)
    rows = m.sum(1, keepdims=True)
    share = np.divide(m, rows, out=np.zeros(m.shape), where=rows > 0)  # colour: share of the gold row
    image = ax.imshow(share, vmin=0.0, vmax=1.0, cmap="Blues")
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(
                j,
                i,
                str(m[i, j]),
                ha="center",
                va="center",
                fontsize=8,
                color="white" if share[i, j] > 0.5 else "black",
            )
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(f"accuracy {s['accuracy']:.3f}, macro F1 {s['macro_f1']:.3f}", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=7)
    fig.subplots_adjust(left=0.25, bottom=0.25, right=0.88, top=0.9)
    return _save(fig, out)
