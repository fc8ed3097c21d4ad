"""Scoring translations the ways results are compared (paper §6.1, Table 2). Torch-free, below
decode and train (validation BLEU); `aiayn.evaluate` runs it over a run's data.

- `score`: sacreBLEU on detokenized, cased text (13a tokenization) plus chrF, each with its
  signature: the comparable, reproducible number.
- `scores`, `class_scores`: accuracy, per-class precision / recall / F1 and macro F1 of a classifier.
- `tokenized_bleu`: the published Multi30k / WMT-2014 protocol (multi-bleu.perl): hypotheses
  lowercased, punctuation-normalised and Moses-tokenized, scored against the dataset's own
  tokenized references with no further tokenization. Moses HTML escapes (&apos; &quot; ...) are
  undone on both sides, so escaped and plain tokenized references score alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aiayn.errors import AiaynError

_MOSES_ESCAPES = (
    ("&#124;", "|"),
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&apos;", "'"),
    ("&quot;", '"'),
    ("&#91;", "["),
    ("&#93;", "]"),
    ("&amp;", "&"),
)


def score(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """Corpus sacreBLEU (detokenized, cased) and chrF of `hyps` against one reference each."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise AiaynError(f"{len(hyps)} hypotheses but {len(refs)} references")
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(list(hyps), [list(refs)])
    c = chrf.corpus_score(list(hyps), [list(refs)])
    return {
        "bleu": b.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_str": str(b),
        "chrf": c.score,
        "chrf_signature": str(chrf.get_signature()),
        "chrf_str": str(c),
        "sentences": len(hyps),
    }


def unescape_moses(line: str) -> str:
    for esc, char in _MOSES_ESCAPES:
        line = line.replace(esc, char)
    return line


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    """lowercase -> normalize-punctuation -> tokenizer (the Multi30k tok/*.lc.norm.tok.* pipeline)."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [
        tok.tokenize(norm.normalize(line.lower()), escape=False, aggressive_dash_splits=False, return_str=True).strip()
        for line in lines
    ]


def tokenized_bleu(hyps: Sequence[str], tok_refs: Sequence[str], lang: str) -> float:
    """BLEU of detokenized `hyps` against already lowercased+tokenized references (multi-bleu.perl)."""
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(tok_refs):
        raise AiaynError(f"{len(hyps)} hypotheses but {len(tok_refs)} references")
    refs = [unescape_moses(r.strip()) for r in tok_refs]
    return BLEU(tokenize="none", force=True).corpus_score(moses_tokenize(hyps, lang), [refs]).score


# -- classification ------------------------------------------------------------------------------


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
