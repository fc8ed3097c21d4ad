"""The encoding worker of sentence pairs (aiayn.data.pairs): one chunk of aligned lines decoded, encoded
with the joint BPE and, in the training split, filtered (empty pairs, the source's rule filters, the
token limits), each dropped line counted by its reason; and the main process's in-order pass that
takes the duplicates out of a chunk's arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sentencepiece

from aiayn.config import EOS_ID
from aiayn.data.dedup import Deduplicator
from aiayn.data.encoded import id_dtype
from aiayn.data.filters import Chain, Verdicts
from aiayn.data.io import decode_blob
from aiayn.data.pipeline import Job
from aiayn.data.tokenizer import WordCacheEncoder, collapse_whitespace

COUNTERS = ("empty", "too_long", "ratio")  # what a corpus without rule filters counts
TOKEN_LIMITS = ("too_long", "ratio")


class PairEncoder:
    """Decodes, encodes and (training split) filters one chunk of aligned lines: empty pairs, the chunk's
    source's rule filters (`chains`, one a source), then the token limits; each line's reason is its
    code (0: kept; else 1 + its index in `reasons`)."""

    def __init__(
        self,
        trained_here: bool,
        max_len: int,
        max_len_ratio: float,
        chains: tuple[Chain, ...],
        reasons: tuple[str, ...],
        model: bytes,
        labels: list[str],
    ) -> None:
        self.sp = sentencepiece.SentencePieceProcessor(model_proto=model)
        self.words = WordCacheEncoder(self.sp) if trained_here else None
        self.max_len, self.ratio, self.chains, self.reasons = max_len, max_len_ratio, chains, reasons
        self.dtype = id_dtype(self.sp.get_piece_size())

    def encode_lines(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(flat ids, lengths, empty mask) of raw lines, whitespace normalised as `collapse_whitespace` does."""
        if self.words is not None:
            flat, lengths = self.words.encode(lines)
            empty = np.fromiter((not x or x.isspace() for x in lines), dtype=bool, count=len(lines))
            return flat, lengths, empty
        clean = [collapse_whitespace(x) for x in lines]
        ids = self.sp.encode(clean)
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((t for row in ids for t in row), dtype=np.int64, count=int(lengths.sum()))
        empty = np.fromiter((not x for x in clean), dtype=bool, count=len(clean))
        return flat, lengths, empty

    def __call__(self, job: Job) -> dict[str, Any]:
        src_lines = decode_blob(job.names[0], job.blobs[0], job.first + 1).split("\n")
        tgt_lines = decode_blob(job.names[1], job.blobs[1], job.first + 1).split("\n")
        s_flat, sl, s_empty = self.encode_lines(src_lines)
        t_flat, tl, t_empty = self.encode_lines(tgt_lines)
        codes = np.zeros(len(sl), dtype=np.uint8)
        extra: dict[str, Any] = {}
        if job.train:  # filters apply to training only; empty pairs first, the token limits last
            if self.chains:
                v = self.chains[job.part].verdicts(
                    [collapse_whitespace(x) for x in src_lines], [collapse_whitespace(x) for x in tgt_lines]
                )
                codes = v.codes
                if v.exact is not None:  # deduplication follows in the main process (InOrder)
                    extra = {"codes": codes, "exact": v.exact, "near": v.near}
            else:
                codes[s_empty | t_empty] = 1 + self.reasons.index("empty")
            live = codes == 0
            codes[live & ((sl > self.max_len) | (tl > self.max_len))] = 1 + self.reasons.index("too_long")
            live = codes == 0
            codes[live & (np.maximum(sl, tl) > self.ratio * np.minimum(sl, tl))] = 1 + self.reasons.index("ratio")
        keep = codes == 0
        sl_k, tl_k = sl[keep], tl[keep]
        s_kept = s_flat[np.repeat(keep, sl)]
        src = np.insert(s_kept, np.cumsum(sl_k), EOS_ID)  # EOS after every source sentence
        tgt = t_flat[np.repeat(keep, tl)]
        return {
            "src": src.astype(self.dtype),
            "tgt": tgt.astype(self.dtype),
            "src_lengths": (sl_k + 1).astype(np.int32),
            "tgt_lengths": tl_k.astype(np.int32),
            "index": np.flatnonzero(keep),
            **counts_of(codes, self.reasons),
            **extra,
        }


def counts_of(codes: np.ndarray, reasons: Sequence[str]) -> dict[str, int]:
    """How many lines each reason dropped."""
    n = np.bincount(codes, minlength=len(reasons) + 1)
    return {r: int(n[i + 1]) for i, r in enumerate(reasons)}


class InOrder:
    """The main process's pass over each training chunk in corpus order: duplicates (aiayn.data.filters
    .Deduplicator) leave the chunk's arrays, and its counts are those of the final codes."""

    def __init__(self, reasons: tuple[str, ...]) -> None:
        self.dedup, self.reasons = Deduplicator(reasons), reasons

    def __call__(self, r: dict[str, Any]) -> dict[str, Any]:
        if "codes" not in r:  # a chunk of a source without deduplication
            return r
        before = r.pop("codes")
        codes = self.dedup(Verdicts(before, r.pop("exact"), r.pop("near")))
        stay = codes[before == 0] == 0  # (kept,) which of the worker's kept pairs stay
        if not stay.all():
            sl, tl = r["src_lengths"], r["tgt_lengths"]
            r["src"] = r["src"][np.repeat(stay, sl)]
            r["tgt"] = r["tgt"][np.repeat(stay, tl)]
            r["src_lengths"], r["tgt_lengths"], r["index"] = sl[stay], tl[stay], r["index"][stay]
        return {**r, **counts_of(codes, self.reasons)}
