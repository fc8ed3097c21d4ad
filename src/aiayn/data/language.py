"""Language identification: py3langid (langid.py's model: 97 languages, 140 labels with their script
variants, shipped inside the package: nothing to download), batched for the `langid` filter of parallel
text (aiayn.data.filters); `aiayn serve`'s /detect and `source: "auto"` ask it through
aiayn.documents.language.

    language_probabilities(["Ein Hund rennt.", "A dog runs."], "de")   # (best, its p, p of "de") per text

Probabilities are the model's, normalised (0..1). The identifier loads once per process (about 0.3 s)
on first use.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

_lock = threading.Lock()
_identifier: Any = None


def identifier() -> Any:
    """py3langid's identifier (normalised probabilities), loaded once per process."""
    global _identifier
    with _lock:  # the server detects on its event loop and tests from threads: load once
        if _identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _identifier


def known_languages() -> frozenset[str]:
    """The languages the identifier knows (ISO 639-1 codes)."""
    return frozenset(identifier().nb_classes)


LINE_CHARS = 2000  # what the identifier reads of a line: its answer is settled long before, and memory stays flat


def language_probabilities(texts: Sequence[str], lang: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each text (its first LINE_CHARS characters): its most likely language, that language's
    probability and `lang`'s (a filter's view: whether a line is in the language it should be, and by
    what margin it is not)."""
    texts = [t[:LINE_CHARS] for t in texts]
    model = identifier()
    with _lock:
        if not _batched:
            _batched.append(BatchedIdentifier(model))
    probs = _batched[0].probabilities(texts)  # (N, C)
    best = probs.argmax(axis=1) if len(texts) else np.zeros(0, dtype=np.int64)
    classes = np.asarray(_batched[0].classes, dtype=object)
    own = _batched[0].classes.index(lang) if lang in _batched[0].classes else None
    p_lang = probs[:, own] if own is not None else np.zeros(len(texts))
    return classes[best], probs[np.arange(len(texts)), best], p_lang


_batched: list[BatchedIdentifier] = []


class BatchedIdentifier:
    """py3langid's naive Bayes over byte n-grams, for many texts at once: the same model and the same
    probabilities as its `rank` (tests/test_filters.py holds them equal), several times faster. Its
    automaton walks every text of a batch a byte position at a time in numpy, where py3langid walks
    one text a byte at a time in Python, and each text's scores are one float32 product of its n-gram
    counts with the rows of the model they select."""

    def __init__(self, identifier: Any, batch: int = 1024) -> None:
        nm = identifier.tk_nextmove
        self.next = np.frombuffer(nm, dtype=np.dtype(nm.typecode)) if hasattr(nm, "typecode") else np.asarray(nm)
        self.rowbase = np.asarray(identifier.tk_row, dtype=np.int64) << 8
        self.output = np.asarray(identifier.tk_output, dtype=np.int64)
        table = np.asarray(identifier.nb_ptc, dtype=np.float32)  # (features, classes)
        self.table = np.vstack([table, np.zeros((1, table.shape[1]), dtype=np.float32)])  # and a row of zeros
        self.prior = np.asarray(identifier.nb_pc, dtype=np.float32)  # (classes,)
        self.classes: list[str] = list(identifier.nb_classes)
        self.aliases: list[tuple[int, int]] = list(identifier._alias_pairs)
        self.batch = batch

    @staticmethod
    def encode(text: str) -> bytes:
        """The bytes py3langid reads of a text: lower-cased when all upper case, NFC, UTF-8."""
        if text.isupper():
            text = text.lower()
        return unicodedata.normalize("NFC", text).encode("utf8", errors="surrogatepass")

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """(N, classes) normalised probabilities, as py3langid's identifier with norm_probs gives them."""
        out = np.zeros((len(texts), len(self.classes)), dtype=np.float32)
        for a in range(0, len(texts), self.batch):
            out[a : a + self.batch] = self._probabilities([self.encode(t) for t in texts[a : a + self.batch]])
        return out

    def _probabilities(self, data: list[bytes]) -> np.ndarray:
        n, f = len(data), self.table.shape[0] - 1
        lengths = np.fromiter(map(len, data), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # longest first: the texts still walking are a prefix
        width = int(lengths.max()) if n else 0
        grid = np.zeros((n, width), dtype=np.int64)  # (N, L) bytes, longest first
        for row, k in enumerate(order.tolist()):
            grid[row, : lengths[k]] = np.frombuffer(data[k], dtype=np.uint8)
        ends = lengths[order]
        state = np.zeros(n, dtype=np.int64)
        rows, feats = [], []
        for pos in range(width):
            live = int(np.searchsorted(-ends, -pos, side="left"))  # texts longer than pos
            s = self.next[self.rowbase[state[:live]] + grid[:live, pos]]
            state[:live] = s
            hit = self.output[s]
            at = np.flatnonzero(hit >= 0)
            rows.append(at)
            feats.append(hit[at])
        scores = np.zeros((n, len(self.classes)), dtype=np.float32)
        rows, feats = rows or [np.zeros(0, np.int64)], feats or [np.zeros(0, np.int64)]  # all texts empty
        key, count = np.unique(np.concatenate(rows) * f + np.concatenate(feats), return_counts=True)
        row, feat = key // f, key % f  # each text's distinct n-grams, texts in turn
        per = np.bincount(row, minlength=n)  # (N,) n-grams a text has
        col = np.arange(len(key)) - np.repeat(np.cumsum(per) - per, per)
        idx = np.full((n, int(per.max(initial=0))), f, dtype=np.int64)  # (N, K): row f of `table` is zeros
        weight = np.zeros(idx.shape, dtype=np.float32)  # (N, K)
        idx[row, col], weight[row, col] = feat, np.log1p(count.astype(np.float32))
        for a in range(0, n, 64):  # texts of like length together: little padding in K
            k = int(per[a : a + 64].max(initial=0))
            gathered = self.table[idx[a : a + 64, :k]]  # (64, k, C)
            scores[a : a + 64] = np.matmul(weight[a : a + 64, None, :k], gathered)[:, 0, :]
        scores[per > 0] += self.prior  # a text with no n-gram at all keeps zeros: a uniform guess
        back = np.empty(n, dtype=np.int64)
        back[order] = np.arange(n)
        scores = scores[back]  # (N, C) in the texts' order
        scores *= (1.0 / np.sqrt(np.maximum(lengths, 1)))[:, None].astype(np.float32)
        np.exp(scores - scores.max(axis=1, keepdims=True), out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        for i, j in self.aliases:  # a label under two names (a script's alias) is one label
            scores[:, i] += scores[:, j]
            scores[:, j] = 0.0
        return scores
