"""Raw parallel text -> validated, filtered, joint-BPE-encoded splits cached on disk (paper §5.1).

`prepare(cfg, run_dir)` streams the corpus, so memory stays flat in corpus size:
  1. resolve the corpus files (Multi30k mirror/cache/download, user files, or the embedded corpus);
  2. a cheap key from each file's path, size and modification time plus the settings finds a finished
     cache under $AIAYN_HOME/prepared without reading the corpus ($AIAYN_HOME/stamps, written by the build);
  3. otherwise, under a per-key file lock (other processes of this machine wait on it, not in a
     collective): a scan compares the line counts of every split, hashes the text (the content key, so a
     moved copy of a corpus reuses its cache) and keeps a seeded reservoir sample of training pairs;
  4. one sentencepiece BPE is trained on that sample of source + target text (shared vocabulary, §5.1;
     the whole training text when it is smaller than the sample), or `data.spm_model` is copied in;
  5. worker processes decode strictly (UTF-8 errors name file and line), encode chunks of lines, drop
     empty, over-long and extreme-ratio training pairs (counted; never valid/test), and the main process
     appends their ids to the memory-mapped arrays of a temporary directory, renamed into place when
     complete, so nothing half-written is ever taken for a finished cache.
Steps 2, 3 and 5's cache, lock, sample and worker machinery is `aiayn.data.cache`, shared with the
one-sided text of `aiayn.data.text`; this module holds what is parallel text's own: its sources, settings,
chunks of aligned lines, the joint BPE sample, the pair filters and the encoding worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece

from aiayn.config import EOS_ID, DataConfig
from aiayn.data import embedded, multi30k, wmt14
from aiayn.data.cache import (
    SPLITS,
    Reservoir,
    copy_into_run,
    file_stamp,
    find_or_build,
    given_tokenizer,
    lock_path,
    map_ordered,
    publish,
    spm_model_bytes,
    train_tokenizer,
    worker_pool,
)
from aiayn.data.download import aiayn_home
from aiayn.data.encoded import EncodedSplit, NpyAppender, id_dtype
from aiayn.data.errors import DataError
from aiayn.data.io import LineStream, check_counts, decode_blob, read_parallel
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
    t0 = time.perf_counter()
    sources = _sources(cfg)  # missing files and unknown settings fail here, first
    settings = _settings(cfg, symbols)
    stamp = _stamp_key(settings, sources)
    root = aiayn_home() / "prepared"
    progress = sys.stderr.isatty() if progress is None else progress
    final, cached = find_or_build(
        stamp,
        lambda: _build(
            cfg,
            sources,
            settings,
            stamp,
            root,
            t0,
            workers=workers,
            progress=progress,
            chunk_pairs=chunk_pairs,
            symbols=symbols,
        ),
    )
    out = _load(cfg, final)
    out.report["cached"] = cached
    out.report["seconds_total"] = round(time.perf_counter() - t0, 3)
    if run_dir is not None:
        copy_into_run(final, out.report, run_dir)
    return out


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


# -- keys, stamps, lock -----------------------------------------------------------------------------


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


def _stamp_key(settings: dict[str, Any], sources: dict[str, Source]) -> str:
    """Settings plus each file's absolute path, size and modification time: decided without reading."""
    files = {}
    for split, source in sources.items():
        if source is not None and isinstance(source[0], Path):
            files[split] = [file_stamp(p) for p in source]
    blob = json.dumps({"settings": settings, "files": files}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def build_lock(cfg: DataConfig) -> Path:
    """The file whose exclusive lock (fcntl.flock) the builder of `cfg`'s cache holds; the other
    processes preparing the same data wait on it."""
    return lock_path(_stamp_key(_settings(cfg), _sources(cfg)))


# -- reading ----------------------------------------------------------------------------------------


def _chunks(source: Source, n: int) -> Iterator[tuple[int, list[bytes], list[bytes], int]]:
    """(index of the first line, source lines, target lines, bytes of the files read so far) in chunks of
    n aligned lines; a line-count mismatch raises DataError with both counts."""
    if source is None:
        return
    if not isinstance(source[0], Path):
        for i in range(0, len(source[0]), n):
            yield i, source[0][i : i + n], source[1][i : i + n], 0
        return
    with LineStream(source[0]) as a, LineStream(source[1]) as b:
        while True:
            s, t = a.take(n), b.take(n)
            if len(s) != len(t):
                check_counts(source[0], a.count_rest(), source[1], b.count_rest())
            if not s:
                return
            yield a.lines_read - len(s), s, t, a.position + b.position


def _size(source: Source) -> int:
    return sum(p.stat().st_size for p in source) if source is not None and isinstance(source[0], Path) else 0


class _Progress:
    """One bar over the bytes of a pass's files (so its ETA comes from file sizes), showing pairs/s."""

    def __init__(self, enabled: bool, desc: str, sources: dict[str, Source]) -> None:
        self.bar = None
        if enabled:
            from tqdm import tqdm

            total = sum(map(_size, sources.values()))
            self.bar = tqdm(
                total=total or None, desc=desc, unit="B", unit_scale=True, dynamic_ncols=True, file=sys.stderr
            )
        self.pairs, self.t0, self.offset = 0, time.perf_counter(), 0

    def update(self, pairs: int, position: int) -> None:
        """`pairs` more done; `position` bytes read of the current split's files."""
        self.pairs += pairs
        if self.bar is not None:
            self.bar.update(max(0, self.offset + position - self.bar.n))
            self.bar.set_postfix_str(
                f"{self.pairs / max(1e-9, time.perf_counter() - self.t0):,.0f} pairs/s", refresh=False
            )

    def split_done(self, source: Source) -> None:
        self.offset += _size(source)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _scan(
    cfg: DataConfig, sources: dict[str, Source], settings: dict[str, Any], progress: bool, chunk_pairs: int
) -> tuple[str, dict[str, int], Reservoir | None]:
    """Pass 1: line counts of every split (small splits first, so their errors come fast), the content
    key, and the BPE sample of the training pairs."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    sample = Reservoir(cfg.bpe_sample_pairs) if cfg.spm_model is None else None
    counts: dict[str, int] = {}
    bar = _Progress(progress, "aiayn data: scan", sources)
    try:
        for split in ("valid", "test", "train"):
            hs, ht, n = hashlib.sha256(), hashlib.sha256(), 0
            for _, s, t, pos in _chunks(sources[split], chunk_pairs):
                hs.update(b"\n".join(s) + b"\n")
                ht.update(b"\n".join(t) + b"\n")
                if split == "train" and sample is not None:
                    sample.add(s, t)
                n += len(s)
                bar.update(len(s), pos)
            bar.split_done(sources[split])
            counts[split] = n
            h.update(f"{split}:{n}:".encode() + hs.digest() + ht.digest())
    finally:
        bar.close()
    return h.hexdigest()[:16], counts, sample


# -- build ------------------------------------------------------------------------------------------


def _build(
    cfg: DataConfig,
    sources: dict[str, Source],
    settings: dict[str, Any],
    stamp: str,
    root: Path,
    t0: float,
    *,
    workers: int | None,
    progress: bool,
    chunk_pairs: int,
    symbols: Sequence[str] = (),
) -> tuple[Path, bool]:
    """Scan, then (unless the content is cached already) train BPE and encode into a temporary
    directory renamed into place; finally stamp the cheap key. Runs under the key's lock."""
    key, counts, sample = _scan(cfg, sources, settings, progress, chunk_pairs)
    if counts["train"] == 0:
        raise DataError("the training split is empty")
    return publish(
        root,
        key,
        stamp,
        lambda out: _build_into(cfg, sources, counts, sample, out, key, t0, workers, progress, chunk_pairs, symbols),
    )


def _build_into(
    cfg: DataConfig,
    sources: dict[str, Source],
    counts: dict[str, int],
    sample: Reservoir | None,
    out: Path,
    key: str,
    t0: float,
    workers: int | None,
    progress: bool,
    chunk_pairs: int,
    symbols: Sequence[str] = (),
) -> None:
    t1 = time.perf_counter()
    sampled = None
    if sample is None:
        tok = given_tokenizer(cfg, out / "spm.model")
    else:
        sampled = len(sample.items)
        tok = _train_bpe(cfg, sources["train"], sample, out / "spm.model", symbols)  # empties the sample
    t2 = time.perf_counter()

    report: dict[str, Any] = {
        "corpus": cfg.corpus,
        "src_lang": cfg.src_lang,
        "tgt_lang": cfg.tgt_lang,
        "key": key,
        "vocab_size": tok.vocab_size,
        "spm_model": cfg.spm_model,
        "splits": {},
        "dropped": {"empty": 0, "too_long": 0, "ratio": 0},
        "bpe_sample_pairs": sampled,
    }
    init = (out.joinpath("spm.model").read_bytes(), cfg.spm_model is None, cfg.max_len, cfg.max_len_ratio)
    worthwhile = counts["train"] > chunk_pairs  # one chunk: starting processes costs more
    with worker_pool(workers, worthwhile, _init_worker, init) as (pool, n_workers):
        bar = _Progress(progress, "aiayn data: encode", sources)
        try:
            for split in SPLITS:
                report["splits"][split] = _encode_split(
                    split,
                    sources[split],
                    out,
                    id_dtype(tok.vocab_size),
                    report["dropped"],
                    pool,
                    n_workers,
                    chunk_pairs,
                    bar,
                )
        finally:
            bar.close()
    if report["splits"]["train"]["pairs"] == 0:
        raise DataError(
            "every training pair has an empty side"
            if report["dropped"]["empty"] == counts["train"]
            else "every training pair was dropped (length / ratio filters)"
        )
    report["dropped"]["total"] = sum(report["dropped"].values())
    report["workers"] = n_workers if pool is not None else 1
    report["seconds"] = {
        "scan_and_bpe": round(t2 - t0, 3),
        "bpe": round(t2 - t1, 3),
        "encode": round(time.perf_counter() - t2, 3),
        "prepare": round(time.perf_counter() - t0, 3),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")


def _train_bpe(
    cfg: DataConfig, source: Source, sample: Reservoir, model_file: Path, symbols: Sequence[str] = ()
) -> Tokenizer:
    """Joint BPE on the sampled training pairs with both sides non-empty: source lines, then target."""
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
    return train_tokenizer(
        src + tgt, model_file, cfg.vocab_size, max_sentences=max(2_000_000, 2 * len(src)), user_symbols=symbols
    )


def _encode_split(
    split: str,
    source: Source,
    out: Path,
    dtype: type,
    dropped: dict[str, int],
    pool: ProcessPoolExecutor | None,
    n_workers: int,
    chunk_pairs: int,
    bar: _Progress,
) -> dict[str, int]:
    """Encode one split chunk by chunk (in order, at most 2 chunks per worker in flight) and append the
    results to its arrays: flat ids, offsets, lengths and the kept lines' numbers."""
    names = ("src", "tgt", "src_offsets", "tgt_offsets", "index", "src_lengths", "tgt_lengths")
    dtypes = (dtype, dtype, np.int64, np.int64, np.int64, np.int32, np.int32)
    w = {k: NpyAppender(out / f"{split}.{k}.npy", dt) for k, dt in zip(names, dtypes)}
    w["src_offsets"].append(np.zeros(1, np.int64))
    w["tgt_offsets"].append(np.zeros(1, np.int64))
    ends = {"src": 0, "tgt": 0}
    lines = 0
    paths = (str(source[0]), str(source[1])) if source is not None and isinstance(source[0], Path) else ("", "")
    tasks = (
        (split == "train", first, paths, b"\n".join(s), b"\n".join(t), pos)
        for first, s, t, pos in _chunks(source, chunk_pairs)
    )
    for r in map_ordered(pool, _encode_chunk, tasks, 2 * n_workers):
        for side in ("src", "tgt"):
            w[side].append(r[side])
            w[f"{side}_lengths"].append(r[f"{side}_lengths"])
            w[f"{side}_offsets"].append(np.cumsum(r[f"{side}_lengths"], dtype=np.int64) + ends[side])
            ends[side] += len(r[side])
        w["index"].append(r["index"])
        lines += r["lines"]
        for k in ("empty", "too_long", "ratio"):
            dropped[k] += r[k]
        bar.update(r["lines"], r["pos"])
    bar.split_done(source)
    for a in w.values():
        a.close()
    pairs = w["index"].length
    return {"lines": lines, "pairs": pairs, "src_tokens": ends["src"], "tgt_tokens": ends["tgt"]}


# -- the encoding worker (a process of its own, or this one) ----------------------------------------

_worker: dict[str, Any] = {}


def _init_worker(model: bytes, trained_here: bool, max_len: int, max_len_ratio: float) -> None:
    sp = sentencepiece.SentencePieceProcessor(model_proto=model)
    _worker.update(
        sp=sp,
        words=WordCacheEncoder(sp) if trained_here else None,
        max_len=max_len,
        ratio=max_len_ratio,
        dtype=id_dtype(sp.get_piece_size()),
    )


def _encode_lines(lines: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flat ids, lengths, empty mask) of raw lines, whitespace normalised as `collapse_whitespace` does."""
    if _worker["words"] is not None:
        flat, lengths = _worker["words"].encode(lines)
        empty = np.fromiter((not x or x.isspace() for x in lines), dtype=bool, count=len(lines))
        return flat, lengths, empty
    clean = [collapse_whitespace(x) for x in lines]
    ids = _worker["sp"].encode(clean)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter((t for row in ids for t in row), dtype=np.int64, count=int(lengths.sum()))
    empty = np.fromiter((not x for x in clean), dtype=bool, count=len(clean))
    return flat, lengths, empty


def _encode_chunk(task: tuple[bool, int, tuple[str, str], bytes, bytes, int]) -> dict[str, Any]:
    """Decode, encode and (training split) filter one chunk of aligned lines."""
    filtering, first, (src_name, tgt_name), src_blob, tgt_blob, pos = task
    src_lines = decode_blob(src_name or "train source", src_blob, first + 1).split("\n")
    tgt_lines = decode_blob(tgt_name or "train target", tgt_blob, first + 1).split("\n")
    s_flat, sl, s_empty = _encode_lines(src_lines)
    t_flat, tl, t_empty = _encode_lines(tgt_lines)
    keep = np.ones(len(sl), dtype=bool)
    counts = {"empty": 0, "too_long": 0, "ratio": 0}
    if filtering:  # over-long and extreme-ratio pairs leave training only; empty ones first
        empty = s_empty | t_empty
        too_long = ~empty & ((sl > _worker["max_len"]) | (tl > _worker["max_len"]))
        ratio = ~empty & ~too_long & (np.maximum(sl, tl) > _worker["ratio"] * np.minimum(sl, tl))
        keep = ~(empty | too_long | ratio)
        counts = {"empty": int(empty.sum()), "too_long": int(too_long.sum()), "ratio": int(ratio.sum())}
    sl_k, tl_k = sl[keep], tl[keep]
    s_kept = s_flat[np.repeat(keep, sl)]
    src = np.insert(s_kept, np.cumsum(sl_k), EOS_ID)  # EOS after every source sentence
    tgt = t_flat[np.repeat(keep, tl)]
    dtype = _worker["dtype"]
    return {
        "src": src.astype(dtype),
        "tgt": tgt.astype(dtype),
        "src_lengths": (sl_k + 1).astype(np.int32),
        "tgt_lengths": tl_k.astype(np.int32),
        "index": first + np.flatnonzero(keep),
        "lines": len(sl),
        "pos": pos,
        **counts,
    }


# -- load -------------------------------------------------------------------------------------------


def _load(cfg: DataConfig, d: Path) -> Prepared:
    report = json.loads((d / "report.json").read_text())
    return Prepared(
        tokenizer=Tokenizer(d / "spm.model"),
        splits={s: EncodedSplit.load(d, s) for s in SPLITS},
        report=report,
        cache_dir=d,
        cfg=cfg,
    )
