"""Raw parallel text -> validated, filtered, joint-BPE-encoded splits cached on disk (paper §5.1).

`prepare(cfg, run_dir)` runs the one preparation pipeline (`aiayn.data.pipeline`) over sentence pairs:
this module says what a pair is to it (`sentence_pairs`, an `ExampleKind`): its sources (Multi30k
mirror/cache/download, WMT14, user files, or the embedded corpus), its settings, the joint BPE trained
on a sample of source + target text (shared vocabulary, §5.1; or `data.spm_model` copied in), the
training filters (empty, over-long and extreme-ratio pairs, counted) and the encoder, which appends EOS
to every source sentence. A task whose targets carry markup (bracket symbols) names it, and the BPE
keeps it whole.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece

from aiayn.config import DataConfig
from aiayn.data import embedded, multi30k, wmt14
from aiayn.data.cache import SPLITS, given_tokenizer, spm_model_bytes, train_tokenizer
from aiayn.data.encoded import EncodedSplit
from aiayn.data.errors import DataError
from aiayn.data.filters import Chain, Filter, parse_filters, reasons_of
from aiayn.data.io import LineStream, check_counts, decode_blob
from aiayn.data.pair_encoder import COUNTERS, TOKEN_LIMITS, InOrder, PairEncoder
from aiayn.data.pipeline import (
    Chunk,
    Encoded,
    ExampleKind,
    Options,
    Scan,
    Source,
    chunks_of,
    files_stamp,
    prepare_examples,
    refuse_empty_training,
)
from aiayn.data.sentence_starts import SentenceStarts, learn_sentence_starts
from aiayn.data.sources import source_filters, source_specs, split_sources
from aiayn.data.tokenizer import Tokenizer, collapse_whitespace

_FORMAT = 2  # bump when the on-disk layout or the filtering changes


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
    options: Options | None = None,
    symbols: Sequence[str] = (),
) -> Prepared:
    """Validate, encode and cache the corpus described by `cfg`; copy spm.model into `run_dir`.

    `options`: worker processes, progress bars, chunk size (aiayn.data.pipeline.Options; default: all
    cores, bars when stderr is a terminal); `symbols`:
    pieces the trained BPE keeps whole (sentencepiece's user_defined_symbols; a task's markup, such as
    a tree's brackets). Safe to call from many processes at once: one builds a cache, the others wait
    for it and load it.
    """
    return prepare_examples(sentence_pairs(cfg, symbols), run_dir, options or Options())


def with_run_tokenizer(cfg: DataConfig, run_dir: str | os.PathLike) -> DataConfig:
    """`cfg` for reading a run's data again: a shared `spm_model` becomes the run's own copy of it
    (written by `prepare(cfg, run_dir)`), since the original may have moved since."""
    own = Path(run_dir) / "spm.model"
    return replace(cfg, spm_model=str(own)) if cfg.spm_model is not None and own.is_file() else cfg


# -- sources ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinePair:
    """A split's text as two line-aligned files, plain or gzipped."""

    src: Path
    tgt: Path

    @property
    def names(self) -> tuple[str, str]:
        return str(self.src), str(self.tgt)

    def stamp(self) -> Any:
        return files_stamp((self.src, self.tgt))

    def size(self) -> int:
        return self.src.stat().st_size + self.tgt.stat().st_size

    def chunks(self, n: int) -> Iterator[Chunk]:
        """Chunks of n aligned lines; a line-count mismatch raises DataError with both counts."""
        with LineStream(self.src) as a, LineStream(self.tgt) as b:
            while True:
                s, t = a.take(n), b.take(n)
                if len(s) != len(t):
                    check_counts(self.src, a.count_rest(), self.tgt, b.count_rest())
                if not s:
                    return
                yield Chunk(self.names, a.lines_read - len(s), (s, t), pos=a.position + b.position)


@dataclass(frozen=True)
class MemoryPairs:
    """A split's text already in memory (the embedded corpus), as UTF-8 lines."""

    src: list[bytes]
    tgt: list[bytes]
    names: tuple[str, str] = ("train source", "train target")

    def stamp(self) -> Any:
        return None  # the settings that made the text decide it

    def size(self) -> int:
        return 0

    def chunks(self, n: int) -> Iterator[Chunk]:
        for i in range(0, len(self.src), n):
            yield Chunk(self.names, i, (self.src[i : i + n], self.tgt[i : i + n]))


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
    name = path.name.removesuffix(".gz")
    stem, dot, hint = name.rpartition(".")
    if stem and dot and len(hint) == 2 and hint.isascii() and hint.islower() and len(lang) == 2 and hint != lang:
        raise DataError(f"{path} looks like {hint!r} text but the {role} language is {lang!r}")


def _sources(cfg: DataConfig, splits: Sequence[str] = SPLITS) -> dict[str, Source | None]:
    """Each split's text; a missing file fails here, before anything is read."""
    if cfg.corpus == "sources":
        given = split_sources(cfg, source_specs(cfg), LinePair)
        files = {s: _given_pair(cfg, s) for s in SPLITS if given[s] is None}
        if given["valid"] is None and files["valid"] is None:
            raise DataError(
                "data.sources has no validation pairs: add a source with split: valid, or data.valid_src/_tgt"
            )
        return {s: given[s] if given[s] is not None else files[s] for s in splits}
    if cfg.corpus == "embedded":
        text = embedded.corpus(cfg.src_lang, cfg.tgt_lang, cfg.embedded_size)
        return {s: MemoryPairs([x.encode() for x in text[s][0]], [x.encode() for x in text[s][1]]) for s in splits}
    pairs = {s: p for s, p in _file_pairs(cfg).items() if s in splits}
    for pair in pairs.values():
        for path in pair or ():
            if not path.is_file():
                raise DataError(f"file not found: {path}")
    return {s: None if p is None else LinePair(*p) for s, p in pairs.items()}


def split_chunks(cfg: DataConfig, split: str, n: int = 20_000) -> Iterator[tuple[list[str], list[str]]]:
    """A split's (source lines, target lines) as read, in chunks of n, decoded (nothing filtered): what a
    teacher translates for distillation, streamed whatever the corpus's size."""
    for c in chunks_of(_sources(cfg, [split])[split], n):
        yield tuple(  # type: ignore[misc]
            decode_blob(name, b"\n".join(lines), c.first + 1).split("\n") if lines else []
            for name, lines in zip(c.names, c.lines)
        )


def _given_pair(cfg: DataConfig, split: str) -> LinePair | None:
    """data.<split>_src / _tgt as a pair of files, when given."""
    src, tgt = getattr(cfg, f"{split}_src"), getattr(cfg, f"{split}_tgt")
    if src is None and tgt is None:
        return None
    if src is None or tgt is None:
        raise DataError(f"data.{split}_src and data.{split}_tgt go together")
    for path in (Path(src), Path(tgt)):
        if not path.is_file():
            raise DataError(f"file not found: {path}")
    return LinePair(Path(src), Path(tgt))


def _split_text(source: Source | None) -> tuple[list[str], list[str]]:
    """A split's lines, decoded and whitespace-collapsed as the encoder sees them."""
    src: list[str] = []
    tgt: list[str] = []
    for c in chunks_of(source, 1 << 16):
        src += decode_blob(c.names[0], b"\n".join(c.lines[0]), c.first + 1).split("\n") if c.lines[0] else []
        tgt += decode_blob(c.names[1], b"\n".join(c.lines[1]), c.first + 1).split("\n") if c.lines[1] else []
    return [collapse_whitespace(x) for x in src], [collapse_whitespace(x) for x in tgt]


# -- the example kind -------------------------------------------------------------------------------


def sentence_pairs(cfg: DataConfig, symbols: Sequence[str] = ()) -> ExampleKind[Prepared]:
    """A sentence pair: aligned lines of two files, of one file of another format or of several sources
    (or of the embedded corpus) encoded with one joint BPE. Training pairs are filtered: the rule filters
    of data.filters and each source's (aiayn.data.filters), then over `max_len` pieces or past
    `max_len_ratio`; each dropped pair is counted by its reason, valid/test pairs are never dropped.
    `symbols` makes a tree pair: the tree's markup kept whole by the BPE."""
    symbols = tuple(symbols)
    sources = _sources(cfg)  # missing files and unknown settings fail here, first
    train = sources["train"]
    assert train is not None  # a training split always has a source
    lists = _filter_lists(cfg)
    reasons = reasons_of(lists, after=TOKEN_LIMITS) if any(lists) else COUNTERS
    chains = tuple(Chain(tuple(f), reasons) for f in lists)
    settings = _settings(cfg, symbols)
    if any(lists):
        settings["filters"] = [[f.describe() for f in fs] for fs in lists]
    if cfg.corpus == "sources":
        settings["sources"] = [spec.describe() for spec in source_specs(cfg)]
    names = [spec.name for spec in source_specs(cfg) if spec.split == "train"] if cfg.corpus == "sources" else []
    return ExampleKind(
        settings=settings,
        sources=dict(sources),
        tokenizer=partial(_tokenizer, cfg, symbols, getattr(train, "names", ("train source", "train target"))),
        encoder=partial(PairEncoder, cfg.spm_model is None, cfg.max_len, cfg.max_len_ratio, chains, reasons),
        arrays=dict(src=None, tgt=None, index=np.int64, src_lengths=np.int32, tgt_lengths=np.int32),
        report={"corpus": cfg.corpus, "src_lang": cfg.src_lang, "tgt_lang": cfg.tgt_lang, "spm_model": cfg.spm_model},
        finish=partial(_finish, reasons, names),
        load=partial(_load, cfg, symbols),
        counters=reasons,
        sample_size=cfg.bpe_sample_pairs if cfg.spm_model is None else None,
        in_order=partial(InOrder, reasons) if any(c.dedup for c in chains) else None,
        streams=2,
        unit="pairs",
    )


def _filter_lists(cfg: DataConfig) -> list[list[Filter]]:
    """The rule filters of each part of the training split (one part but for corpus sources)."""
    if cfg.corpus == "sources":
        return [source_filters(cfg, spec) for spec in source_specs(cfg) if spec.split == "train"]
    return [parse_filters(cfg.filters, cfg.src_lang, cfg.tgt_lang, where="data.filters")] if cfg.filters else []


def _tokenizer(
    cfg: DataConfig, symbols: tuple[str, ...], names: tuple[str, str], scan: Scan, model_file: Path
) -> tuple[Tokenizer, dict[str, Any]]:
    """Joint BPE on the sampled training pairs with both sides non-empty: source lines, then target; the
    source side's sentence starts (aiayn.data.sentence_starts.learn_sentence_starts) learnt from the same sample
    and kept in the report (a given tokenizer learns them at load; a tree pair has none)."""
    refuse_empty_training(scan)
    sample = scan.sample
    if sample is None:
        return given_tokenizer(cfg, model_file), {"bpe_sample_pairs": None}
    src, tgt = [], []
    pairs, sample.items = sample.pairs(), []  # the encoding pass runs beside the workers: hold no corpus
    sampled = len(pairs)
    for i, s, t in pairs:
        s_text = collapse_whitespace(decode_blob(names[0], s, i + 1))
        t_text = collapse_whitespace(decode_blob(names[1], t, i + 1))
        if s_text and t_text:
            src.append(s_text)
            tgt.append(t_text)
    del pairs
    if not src:
        raise DataError("every training pair has an empty side")
    fields: dict[str, Any] = {"bpe_sample_pairs": sampled}
    if not symbols:
        fields["sentence_starts"] = learn_sentence_starts(src).as_json()
    tok = train_tokenizer(
        src + tgt, model_file, cfg.vocab_size, max_sentences=max(2_000_000, 2 * len(src)), user_symbols=symbols
    )
    return tok, fields


def _finish(reasons: tuple[str, ...], names: list[str], report: dict[str, Any], encoded: dict[str, Encoded]) -> None:
    """Each split's line (lines read, pairs kept, ids each side), the dropped pairs by reason, their total,
    and each training source's own (corpus sources). A build that kept no training pair is refused, and
    so is a source its filters emptied, naming the reasons."""
    train = encoded["train"]
    report["dropped"] = {k: train.counts[k] for k in reasons}
    for split, e in encoded.items():
        report["splits"][split] = {
            "lines": e.counts["lines"],
            "pairs": e.examples,
            "src_tokens": e.ends["src"],
            "tgt_tokens": e.ends["tgt"],
        }
    if names:
        report["sources"] = [
            {
                "name": name,
                "lines": part.get("lines", 0),
                "pairs": part.get("examples", 0),
                "dropped": {k: part[k] for k in reasons if part.get(k)},
            }
            for name, part in zip(names, train.parts + [{}] * (len(names) - len(train.parts)))
        ]
        for source in report["sources"]:
            if source["pairs"] == 0:
                took = sorted(source["dropped"].items(), key=lambda kv: -kv[1])
                why = ", ".join(f"{k} {v:,}" for k, v in took) or "it has no lines"
                raise DataError(f"source {source['name']!r} has no pairs left after cleaning: {why}")
    if train.examples == 0:
        took = sorted(((k, v) for k, v in report["dropped"].items() if v), key=lambda kv: -kv[1])
        raise DataError(
            "every training pair has an empty side"
            if train.counts["empty"] == train.counts["lines"]
            else f"every training pair was dropped ({', '.join(f'{k} {v:,}' for k, v in took)})"
        )
    report["dropped"]["total"] = sum(report["dropped"].values())


def _load(cfg: DataConfig, symbols: tuple[str, ...], directory: Path) -> Prepared:
    tok = Tokenizer(directory / "spm.model")
    splits = {s: EncodedSplit.load(directory, s) for s in SPLITS}
    report = json.loads((directory / "report.json").read_text())
    if "sentence_starts" not in report and not symbols:
        # a cache built before they were learnt, or with a given tokenizer: from its encoded source side
        report["sentence_starts"] = _encoded_sentence_starts(splits["train"], tok).as_json()
    return Prepared(tokenizer=tok, splits=splits, report=report, cache_dir=directory, cfg=cfg)


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
