"""Raw parallel text -> validated, filtered, joint-BPE-encoded splits cached on disk (paper §5.1).

`prepare(cfg, run_dir)` runs the one preparation pipeline (`aiayn.data.pipeline`) over sentence pairs:
this module is what a pair is to it (`SentencePairs`): its sources (Multi30k mirror/cache/download, WMT14,
user files, or the embedded corpus), its settings, chunks of aligned lines, the joint BPE trained on a
sample of source + target text (shared vocabulary, §5.1; or `data.spm_model` copied in), the training
filters (empty, over-long and extreme-ratio pairs, counted) and the encoder, which appends EOS to every
source sentence. A task whose targets carry markup (bracket symbols) names it, and the BPE keeps it whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece

from aiayn.config import EOS_ID, DataConfig
from aiayn.data import embedded, multi30k, wmt14
from aiayn.data.cache import SPLITS, Reservoir, given_tokenizer, lock_path, spm_model_bytes, train_tokenizer
from aiayn.data.encoded import EncodedSplit, id_dtype
from aiayn.data.errors import DataError
from aiayn.data.io import LineStream, check_counts, decode_blob, read_parallel
from aiayn.data.pipeline import Chunk, ExampleKind, Job, Scan, files_stamp, options, prepare_examples, stamp_key
from aiayn.data.segment import SentenceStarts, learn_sentence_starts
from aiayn.data.tokenizer import Tokenizer, WordCacheEncoder, collapse_whitespace

_FORMAT = 2  # bump when the on-disk layout or the filtering changes
CHUNK_PAIRS = 20_000  # lines per side handed to a worker at once

# a split's text: (source path, target path), in-memory lines (the embedded corpus), or None (no test set)
Source = tuple[Path, Path] | tuple[list[bytes], list[bytes]] | None


@dataclass
class Prepared:
    """What training and evaluation need: the shared tokenizer, encoded splits and the raw text."""

    tokenizer: Tokenizer
    splits: dict[str, EncodedSplit]
    report: dict[str, Any]
    cache_dir: Path
    cfg: DataConfig
    _texts: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict, repr=False)

    def raw(self, split: str) -> tuple[list[str], list[str]]:
        """(source lines, target lines) aligned with `splits[split]` (training drops are excluded).
        Reads and decodes that split's files only (a test set should not cost a pass over WMT's train)."""
        if split not in self.splits:
            raise DataError(f"unknown split {split!r}; have {sorted(self.splits)}")
        if split not in self._texts:
            self._texts[split] = _split_text(_sources(self.cfg, [split])[split])
        src, tgt = self._texts[split]
        idx = self.splits[split].index.tolist()
        return [src[i] for i in idx], [tgt[i] for i in idx]


def prepare(
    cfg: DataConfig,
    run_dir: str | os.PathLike | None = None,
    *,
    workers: int | None = None,
    progress: bool | None = None,
    chunk_pairs: int = CHUNK_PAIRS,
    symbols: Sequence[str] = (),
) -> Prepared:
    """Validate, encode and cache the corpus described by `cfg`; copy spm.model into `run_dir`.

    `workers` encoding processes (default: all cores; 1 encodes in this process); `progress` shows
    bars on stderr (default: when stderr is a terminal); `symbols`: pieces the trained BPE keeps whole
    (sentencepiece's user_defined_symbols; a task's markup, such as a tree's brackets). Safe to
    call from many processes at once: one builds a cache, the others wait for it and load it.
    """
    return prepare_examples(SentencePairs(cfg, tuple(symbols)), run_dir, options(workers, progress, chunk_pairs))


def with_run_tokenizer(cfg: DataConfig, run_dir: str | os.PathLike) -> DataConfig:
    """`cfg` for reading a run's data again: a shared `spm_model` becomes the run's own copy of it
    (written by `prepare(cfg, run_dir)`), since the original may have moved since."""
    own = Path(run_dir) / "spm.model"
    return replace(cfg, spm_model=str(own)) if cfg.spm_model is not None and own.is_file() else cfg


# -- sources ----------------------------------------------------------------------------------------


def _file_pairs(cfg: DataConfig) -> dict[str, tuple[Path, Path] | None]:
    if cfg.corpus == "multi30k":
        d = multi30k.locate(cfg.src_lang, cfg.tgt_lang, cfg.data_dir)
        return {
            s: (d / f"{multi30k.split_name(s)}.{cfg.src_lang}.gz", d / f"{multi30k.split_name(s)}.{cfg.tgt_lang}.gz")
            for s in SPLITS
        }
    if cfg.corpus == "wmt14":  # prepared by `aiayn data get wmt14`; DataError with that command otherwise
        return dict(wmt14.locate(cfg.src_lang, cfg.tgt_lang, cfg.data_dir))
    if cfg.corpus == "files":
        pairs: dict[str, tuple[Path, Path] | None] = {}
        for s in SPLITS:
            src, tgt = getattr(cfg, f"{s}_src"), getattr(cfg, f"{s}_tgt")
            if src is None and tgt is None and s == "test":
                pairs[s] = None  # optional: an empty test split
                continue
            if src is None or tgt is None:
                raise DataError(f"corpus 'files' needs data.{s}_src and data.{s}_tgt")
            _check_lang_hint(Path(src), cfg.src_lang, "source")
            _check_lang_hint(Path(tgt), cfg.tgt_lang, "target")
            pairs[s] = (Path(src), Path(tgt))
        return pairs
    raise DataError(f"unknown corpus {cfg.corpus!r}; choose multi30k, wmt14, files or embedded")


def _check_lang_hint(path: Path, lang: str, role: str) -> None:
    """train.en.gz is English: refuse it as the German side (a swapped or wrong pair)."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    m = re.search(r"\.([a-z]{2})$", name)
    if m and len(lang) == 2 and m.group(1) != lang:
        raise DataError(f"{path} looks like {m.group(1)!r} text but the {role} language is {lang!r}")


def _sources(cfg: DataConfig, splits: Sequence[str] = SPLITS) -> dict[str, Source]:
    if cfg.corpus == "embedded":
        text = embedded.corpus(cfg.src_lang, cfg.tgt_lang, cfg.embedded_size)
        return {s: ([x.encode() for x in text[s][0]], [x.encode() for x in text[s][1]]) for s in splits}
    pairs = {s: p for s, p in _file_pairs(cfg).items() if s in splits}
    for pair in pairs.values():
        for path in pair or ():
            if not path.is_file():
                raise DataError(f"file not found: {path}")
    return dict(pairs)  # dict[str, Source]: a copy typed as the wider value


def _split_text(source: Source) -> tuple[list[str], list[str]]:
    if source is None:
        return [], []
    if isinstance(source[0], Path):
        src, tgt = read_parallel(*source)
    else:
        src, tgt = [x.decode() for x in source[0]], [x.decode() for x in source[1]]
    return [collapse_whitespace(x) for x in src], [collapse_whitespace(x) for x in tgt]


# -- the example kind -------------------------------------------------------------------------------


@dataclass
class SentencePairs(ExampleKind[Prepared]):
    """A sentence pair: aligned lines of two files (or of the embedded corpus) encoded with one joint
    BPE; training pairs with an empty side, over `max_len` pieces or past `max_len_ratio` are dropped
    (counted; never valid/test). `symbols` makes a tree pair: the tree's markup kept whole by the BPE."""

    cfg: DataConfig
    symbols: Sequence[str] = ()
    # the source side's sentence starts (aiayn.data.segment.learn_sentence_starts), learnt with the
    # tokenizer from its sample and kept in the report (None: a given tokenizer, learnt at load, or a tree pair)
    sentence_starts: dict[str, list[str]] | None = field(default=None, init=False)
    streams = 2
    unit = "pairs"
    counters = ("empty", "too_long", "ratio")

    def sources(self) -> dict[str, Any]:
        return dict(_sources(self.cfg))

    def settings(self) -> dict[str, Any]:
        return _settings(self.cfg, self.symbols)

    def source_stamp(self, source: Source) -> Any:
        return files_stamp(source) if source is not None and isinstance(source[0], Path) else None

    def source_bytes(self, source: Source) -> int:
        return sum(p.stat().st_size for p in source) if source is not None and isinstance(source[0], Path) else 0

    def chunks(self, source: Source, n: int) -> Iterator[Chunk]:
        """Chunks of n aligned lines; a line-count mismatch raises DataError with both counts."""
        if source is None:
            return
        if not isinstance(source[0], Path):
            for i in range(0, len(source[0]), n):
                yield Chunk(("train source", "train target"), i, (source[0][i : i + n], source[1][i : i + n]))
            return
        names = (str(source[0]), str(source[1]))
        with LineStream(source[0]) as a, LineStream(source[1]) as b:
            while True:
                s, t = a.take(n), b.take(n)
                if len(s) != len(t):
                    check_counts(source[0], a.count_rest(), source[1], b.count_rest())
                if not s:
                    return
                yield Chunk(names, a.lines_read - len(s), (s, t), pos=a.position + b.position)

    def reservoir(self) -> Reservoir | None:
        return Reservoir(self.cfg.bpe_sample_pairs) if self.cfg.spm_model is None else None

    def sample(self, chunk: Chunk, sample: Reservoir | None, labels: set[str]) -> None:
        if sample is not None:
            sample.add(*chunk.lines)

    def check_scan(self, scan: Scan) -> None:
        if scan.counts["train"] == 0:
            raise DataError("the training split is empty")

    def tokenizer(self, source: Source, sample: Reservoir | None, model_file: Path) -> Tokenizer:
        """Joint BPE on the sampled training pairs with both sides non-empty: source lines, then target."""
        if sample is None:
            return given_tokenizer(self.cfg, model_file)
        src, tgt = [], []
        assert source is not None  # a training split always has a source
        names = (str(source[0]), str(source[1])) if isinstance(source[0], Path) else ("train source", "train target")
        pairs, sample.items = sample.pairs(), []  # the encoding pass runs beside the workers: hold no corpus
        for i, s, t in pairs:
            s_text = collapse_whitespace(decode_blob(names[0], s, i + 1))
            t_text = collapse_whitespace(decode_blob(names[1], t, i + 1))
            if s_text and t_text:
                src.append(s_text)
                tgt.append(t_text)
        del pairs
        if not src:
            raise DataError("every training pair has an empty side")
        if not self.symbols:
            self.sentence_starts = learn_sentence_starts(src).as_json()
        return train_tokenizer(
            src + tgt,
            model_file,
            self.cfg.vocab_size,
            max_sentences=max(2_000_000, 2 * len(src)),
            user_symbols=self.symbols,
        )

    def worthwhile(self, scan: Scan, sources: dict[str, Any], chunk_lines: int) -> bool:
        return scan.counts["train"] > chunk_lines  # one chunk: starting processes costs more

    def encoder(self, model: bytes, labels: list[str]) -> PairEncoder:
        return PairEncoder(model, self.cfg.spm_model is None, self.cfg.max_len, self.cfg.max_len_ratio)

    def arrays(self, dtype: type) -> dict[str, type]:
        return dict(src=dtype, tgt=dtype, index=np.int64, src_lengths=np.int32, tgt_lengths=np.int32)

    def report(self, key: str, tok: Tokenizer, sampled: int | None, labels: list[str]) -> dict[str, Any]:
        return {
            "corpus": self.cfg.corpus,
            "src_lang": self.cfg.src_lang,
            "tgt_lang": self.cfg.tgt_lang,
            "key": key,
            "vocab_size": tok.vocab_size,
            "spm_model": self.cfg.spm_model,
            "splits": {},
            "dropped": dict.fromkeys(self.counters, 0),
            "bpe_sample_pairs": sampled,
            **({"sentence_starts": self.sentence_starts} if self.sentence_starts is not None else {}),
        }

    def split_report(
        self, report: dict[str, Any], counts: dict[str, int], examples: int, ends: dict[str, int]
    ) -> dict[str, Any]:
        for k in self.counters:
            report["dropped"][k] += counts[k]
        return {"lines": counts["lines"], "pairs": examples, "src_tokens": ends["src"], "tgt_tokens": ends["tgt"]}

    def check_report(self, report: dict[str, Any], scan: Scan) -> None:
        if report["splits"]["train"]["pairs"] == 0:
            raise DataError(
                "every training pair has an empty side"
                if report["dropped"]["empty"] == scan.counts["train"]
                else "every training pair was dropped (length / ratio filters)"
            )
        report["dropped"]["total"] = sum(report["dropped"].values())

    def load(self, directory: Path) -> Prepared:
        tok = Tokenizer(directory / "spm.model")
        splits = {s: EncodedSplit.load(directory, s) for s in SPLITS}
        report = json.loads((directory / "report.json").read_text())
        if "sentence_starts" not in report and not self.symbols:
            # a cache built before they were learnt, or with a given tokenizer: from its encoded source side
            report["sentence_starts"] = _encoded_sentence_starts(splits["train"], tok).as_json()
        return Prepared(tokenizer=tok, splits=splits, report=report, cache_dir=directory, cfg=self.cfg)


def _encoded_sentence_starts(split: EncodedSplit, tok: Tokenizer, most: int = 100_000) -> SentenceStarts:
    """learn_sentence_starts on the decoded source side of `split`: every pair, or `most` evenly spread."""
    step = max(1, -(-len(split) // most))
    return learn_sentence_starts(tok.decode(split.pair(i)[0].tolist()) for i in range(0, len(split), step))


def _settings(cfg: DataConfig, symbols: Sequence[str] = ()) -> dict[str, Any]:
    settings: dict[str, Any] = dict(
        format=_FORMAT,
        spm=sentencepiece.__version__,
        corpus=cfg.corpus,
        src=cfg.src_lang,
        tgt=cfg.tgt_lang,
        vocab=cfg.vocab_size,
        max_len=cfg.max_len,
        ratio=cfg.max_len_ratio,
        bpe_sample_pairs=cfg.bpe_sample_pairs,
    )
    if cfg.corpus == "embedded":
        settings["embedded_size"] = cfg.embedded_size
    if cfg.spm_model is not None:  # the model's bytes, not its path, decide the encoding
        del settings["vocab"], settings["bpe_sample_pairs"]
        settings["spm_model"] = hashlib.sha256(spm_model_bytes(cfg)).hexdigest()
    elif symbols:  # absent when empty: the caches of corpora without symbols keep their keys
        settings["symbols"] = list(symbols)
    return settings


def build_lock(cfg: DataConfig) -> Path:
    """The file whose exclusive lock (fcntl.flock) the builder of `cfg`'s cache holds; the other
    processes preparing the same data wait on it."""
    kind = SentencePairs(cfg)
    return lock_path(stamp_key(kind, kind.settings(), kind.sources()))


# -- the encoding worker (a process of its own, or this one) ----------------------------------------


class PairEncoder:
    """Decodes, encodes and (training split) filters one chunk of aligned lines."""

    def __init__(self, model: bytes, trained_here: bool, max_len: int, max_len_ratio: float) -> None:
        self.sp = sentencepiece.SentencePieceProcessor(model_proto=model)
        self.words = WordCacheEncoder(self.sp) if trained_here else None
        self.max_len, self.ratio = max_len, max_len_ratio
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
        keep = np.ones(len(sl), dtype=bool)
        counts = {"empty": 0, "too_long": 0, "ratio": 0}
        if job.train:  # over-long and extreme-ratio pairs leave training only; empty ones first
            empty = s_empty | t_empty
            too_long = ~empty & ((sl > self.max_len) | (tl > self.max_len))
            ratio = ~empty & ~too_long & (np.maximum(sl, tl) > self.ratio * np.minimum(sl, tl))
            keep = ~(empty | too_long | ratio)
            counts = {"empty": int(empty.sum()), "too_long": int(too_long.sum()), "ratio": int(ratio.sum())}
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
            **counts,
        }
