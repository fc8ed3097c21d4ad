"""Text for the encoder-only and decoder-only tasks -> tokenized splits cached on disk.

The same streaming design as the parallel-text pipeline (`prepare.py`), for one side of text:
a scan pass counts and hashes every split and keeps a seeded sample of training lines (and, for
classification, the label set); a tokenizer is trained on the sample (sentencepiece BPE, or one piece
per character); worker processes encode chunks of lines; the ids are appended to memory-mapped arrays in
a temporary directory renamed into place; a cheap stamp (paths, sizes, mtimes, settings) finds the cache
again without reading the text, under the same per-key lock. That machinery is `aiayn.data.cache`, shared
by both pipelines; this module holds one-sided text's own sources, settings, chunks and encoding.

Examples are stored as an `EncodedSplit`: `src` holds each example's text ids plus EOS, `tgt` the
second text of a sentence pair (classification with LABEL<TAB>A<TAB>B lines; else empty), and
`<split>.labels.npy` the class ids. With `text_unit: document` a split is one example: all of its
lines in turn, each followed by a newline piece, so a language model reads running text.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece

from aiayn.config import EOS_ID, DataConfig
from aiayn.data import multi30k, tinyshakespeare
from aiayn.data.cache import (
    SPLITS,
    Reservoir,
    copy_into_run,
    file_stamp,
    find_or_build,
    given_tokenizer,
    map_ordered,
    publish,
    spm_model_bytes,
    train_tokenizer,
    worker_pool,
)
from aiayn.data.download import aiayn_home
from aiayn.data.encoded import EncodedSplit, NpyAppender, id_dtype
from aiayn.data.errors import DataError
from aiayn.data.io import LineStream, decode_blob
from aiayn.data.tokenizer import NEWLINE, Tokenizer, collapse_whitespace

_FORMAT = 1
CHUNK_LINES = 20_000

# a split's text: files read line by line in turn, or a document already in memory, or None (no split)
TextSource = list[Path] | str | None


@dataclass
class PreparedText:
    """The tokenizer, the encoded splits and (classification) the class of every example."""

    tokenizer: Tokenizer
    splits: dict[str, EncodedSplit]
    labels: dict[str, np.ndarray]  # split -> (N,) int64 class ids; empty without labels
    label_names: list[str]
    report: dict[str, Any]
    cache_dir: Path
    cfg: DataConfig


def prepare_text(
    cfg: DataConfig,
    run_dir: str | os.PathLike | None = None,
    *,
    labelled: bool = False,
    specials: Sequence[str] = (),
    workers: int | None = None,
    progress: bool | None = None,
    chunk_lines: int = CHUNK_LINES,
) -> PreparedText:
    """Validate, tokenize and cache the text `cfg` describes; copy spm.model into `run_dir`.

    `labelled`: lines are LABEL<TAB>TEXT[<TAB>TEXT_B] (classification). `specials`: pieces the tokenizer
    must have (ENCODER_SPECIALS for the encoder-only tasks). Safe to call from many processes at once."""
    t0 = time.perf_counter()
    sources = text_sources(cfg)
    settings = _settings(cfg, labelled, specials)
    stamp = _stamp_key(settings, sources)
    progress = sys.stderr.isatty() if progress is None else progress
    final, cached = find_or_build(
        stamp, lambda: _build(cfg, sources, settings, stamp, labelled, specials, workers, progress, chunk_lines)
    )
    out = _load(cfg, final)
    out.report["cached"] = cached
    out.report["seconds_total"] = round(time.perf_counter() - t0, 3)
    if run_dir is not None:
        copy_into_run(final, out.report, run_dir)
    return out


# -- sources ----------------------------------------------------------------------------------------


def text_sources(cfg: DataConfig) -> dict[str, TextSource]:
    """Each split's text: files (line by line, in turn) or an in-memory document (the valid_fraction split)."""
    if cfg.corpus == "tinyshakespeare":
        path = tinyshakespeare.locate(cfg.data_dir)
        return _fraction_split(path, cfg.valid_fraction)
    if cfg.corpus == "multi30k":
        langs = cfg.text_langs or [cfg.tgt_lang]
        d = multi30k.locate_langs(langs, cfg.data_dir)
        return {s: [d / f"{multi30k.split_name(s)}.{lang}.gz" for lang in langs] for s in SPLITS}
    if cfg.corpus != "text":
        raise DataError(
            f"corpus {cfg.corpus!r} is parallel text; the lm, mlm and classify tasks read "
            f"corpus text (data.text_train ...), multi30k (data.text_langs) or tinyshakespeare"
        )
    if cfg.text_train is None:
        raise DataError("corpus 'text' needs data.text_train (a file or a list of files)")
    files: dict[str, list[Path]] = {}
    for s in SPLITS:
        given = getattr(cfg, f"text_{s}")
        files[s] = [Path(p) for p in ([given] if isinstance(given, str) else given or [])]
        for p in files[s]:
            if not p.is_file():
                raise DataError(f"data.text_{s}: file not found: {p}")
    if not files["valid"]:
        if cfg.text_unit != "document" or len(files["train"]) != 1:
            raise DataError("data.text_valid is missing (only a single-file document is split by data.valid_fraction)")
        return {**_fraction_split(files["train"][0], cfg.valid_fraction), "test": files["test"] or None}
    return {s: f or None for s, f in files.items()}


def _fraction_split(path: Path, valid_fraction: float) -> dict[str, TextSource]:
    """The first (1 - valid_fraction) of the characters train, the rest validate (read whole: a document
    split this way is small, like Tiny Shakespeare's 1.1 MB)."""
    text = decode_blob(path, path.read_bytes())
    cut = int(len(text) * (1.0 - valid_fraction))
    return {"train": text[:cut], "valid": text[cut:], "test": None}


def _settings(cfg: DataConfig, labelled: bool, specials: Sequence[str]) -> dict[str, Any]:
    s: dict[str, Any] = dict(
        format=_FORMAT,
        spm=sentencepiece.__version__,
        corpus=cfg.corpus,
        langs=cfg.text_langs,
        unit=cfg.text_unit,
        tokenizer=cfg.tokenizer,
        vocab=cfg.vocab_size,
        labelled=labelled,
        specials=list(specials),
        max_len=cfg.max_len,
        sample=cfg.bpe_sample_pairs,
    )
    if cfg.spm_model is not None:
        del s["vocab"], s["sample"]
        s["spm_model"] = hashlib.sha256(spm_model_bytes(cfg)).hexdigest()
    return s


def _stamp_key(settings: dict[str, Any], sources: dict[str, TextSource]) -> str:
    parts: dict[str, Any] = {}
    for split, src in sources.items():
        if isinstance(src, str):
            parts[split] = hashlib.sha256(src.encode()).hexdigest()
        elif src:
            parts[split] = [file_stamp(p) for p in src]
    blob = json.dumps({"text": settings, "files": parts}, sort_keys=True).encode()
    return "t" + hashlib.sha256(blob).hexdigest()[:15]


def _chunks(source: TextSource, n: int) -> Iterator[tuple[str, int, list[bytes], bool]]:
    """(file name, index of its first line, lines, last chunk of the split) in chunks of n lines."""
    if source is None:
        return
    if isinstance(source, str):
        lines = [x.encode() for x in source.split("\n")]
        for i in range(0, len(lines), n):
            yield "text", i, lines[i : i + n], i + n >= len(lines)
        return
    for k, path in enumerate(source):
        with LineStream(path) as stream:
            first = 0
            chunk = stream.take(n)
            while chunk:
                nxt = stream.take(n)
                yield str(path), first, chunk, not nxt and k == len(source) - 1
                first += len(chunk)
                chunk = nxt


def _fields(name: str, first: int, lines: list[str], labelled: bool) -> tuple[list[str], list[str], list[str]]:
    """(labels, text a, text b) of decoded lines; a line without a label is one DataError naming it. A
    blank line is kept as an empty text (no example, as in unlabelled text) so line numbers stay the file's."""
    if not labelled:
        return [], lines, []
    labels, a, b = [], [], []
    for i, line in enumerate(lines):
        if not line.strip():
            labels.append("")
            a.append("")
            b.append("")
            continue
        f = line.split("\t")
        if len(f) not in (2, 3) or not f[0].strip():
            raise DataError(
                f"{name}:{first + i + 1}: expected LABEL<TAB>TEXT or LABEL<TAB>TEXT_A<TAB>TEXT_B, "
                f"got {len(f)} tab-separated field(s)"
            )
        labels.append(f[0].strip())
        a.append(f[1])
        b.append(f[2] if len(f) == 3 else "")
    return labels, a, b


# -- build ------------------------------------------------------------------------------------------


def _scan(
    sources: dict[str, TextSource], settings: dict[str, Any], sample_size: int, labelled: bool, chunk_lines: int
) -> tuple[str, dict[str, int], Reservoir, list[str]]:
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    sample, counts, labels = Reservoir(sample_size), {}, set[str]()
    for split in ("valid", "test", "train"):
        hs, n = hashlib.sha256(), 0
        for name, first, lines, _ in _chunks(sources[split], chunk_lines):
            hs.update(b"\n".join(lines) + b"\n")
            if split == "train":
                text = decode_blob(name, b"\n".join(lines), first + 1).split("\n")
                lab, a, b = _fields(name, first, text, labelled)
                labels.update(x for x in lab if x)  # a blank line has none
                enc = [x.encode() for x in a + [y for y in b if y]]
                sample.add(enc, enc)
            n += len(lines)
        counts[split] = n
        h.update(f"{split}:{n}:".encode() + hs.digest())
    return h.hexdigest()[:16], counts, sample, sorted(labels)


def _build(
    cfg: DataConfig,
    sources: dict[str, TextSource],
    settings: dict[str, Any],
    stamp: str,
    labelled: bool,
    specials: Sequence[str],
    workers: int | None,
    progress: bool,
    chunk_lines: int,
) -> tuple[Path, bool]:
    t0 = time.perf_counter()
    key, counts, sample, label_names = _scan(sources, settings, cfg.bpe_sample_pairs, labelled, chunk_lines)
    if counts["train"] == 0:
        raise DataError("the training text is empty")
    if labelled and len(label_names) < 2:
        raise DataError(f"classification needs at least 2 labels in the training text, found {label_names}")
    return publish(
        aiayn_home() / "prepared",
        key,
        stamp,
        lambda out: _build_into(
            cfg, sources, sample, label_names, out, key, labelled, specials, workers, progress, chunk_lines, t0
        ),
    )


def _build_into(
    cfg: DataConfig,
    sources: dict[str, TextSource],
    sample: Reservoir,
    label_names: list[str],
    out: Path,
    key: str,
    labelled: bool,
    specials: Sequence[str],
    workers: int | None,
    progress: bool,
    chunk_lines: int,
    t0: float,
) -> None:
    document = cfg.text_unit == "document"
    if cfg.spm_model is not None:
        tok = given_tokenizer(cfg, out / "spm.model")
    else:
        lines = [s.decode() for _, s, _ in sample.pairs()]
        sample.items = []
        symbols = list(specials) + ([NEWLINE] if document else [])
        tok = train_tokenizer(
            lines,
            out / "spm.model",
            cfg.vocab_size,
            max_sentences=max(2_000_000, len(lines)),
            model_type=cfg.tokenizer,
            user_symbols=symbols,
        )
        del lines
    missing = [p for p in list(specials) + ([NEWLINE] if document else []) if tok.piece_id(p) is None]
    if missing:
        raise DataError(f"the tokenizer {cfg.spm_model} lacks the pieces {missing} this task needs")
    init = (
        (out / "spm.model").read_bytes(),
        cfg.tokenizer == "bpe",
        cfg.max_len,
        {n: i for i, n in enumerate(label_names)} if labelled else None,
        document,
    )
    report: dict[str, Any] = {
        "corpus": cfg.corpus,
        "key": key,
        "vocab_size": tok.vocab_size,
        "unit": cfg.text_unit,
        "tokenizer": cfg.tokenizer,
        "spm_model": cfg.spm_model,
        "labels": label_names,
        "splits": {},
    }
    worthwhile = sum(_approx_lines(s) for s in sources.values()) > 2 * chunk_lines
    with worker_pool(workers, worthwhile, _init_worker, init) as (pool, n_workers):
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(desc="aiayn data: encode", unit=" lines", file=sys.stderr, dynamic_ncols=True)
        try:
            for split in SPLITS:
                report["splits"][split] = _encode_split(
                    split, sources[split], out, id_dtype(tok.vocab_size), pool, n_workers, chunk_lines, document, bar
                )
        finally:
            if bar is not None:
                bar.close()
    if report["splits"]["train"]["examples"] == 0:
        raise DataError("every training line is empty")
    report["workers"] = n_workers if pool is not None else 1
    report["seconds"] = round(time.perf_counter() - t0, 3)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")


def _approx_lines(source: TextSource) -> int:
    if source is None:
        return 0
    if isinstance(source, str):
        return source.count("\n")
    return sum(p.stat().st_size for p in source) // 40  # about a caption's bytes a line


def _encode_split(
    split: str,
    source: TextSource,
    out: Path,
    dtype: type,
    pool: ProcessPoolExecutor | None,
    n_workers: int,
    chunk_lines: int,
    document: bool,
    bar: Any,
) -> dict[str, int]:
    names = ("src", "tgt", "index", "src_lengths", "tgt_lengths", "labels")
    dtypes = (dtype, dtype, np.int64, np.int32, np.int32, np.int64)
    w = {k: NpyAppender(out / f"{split}.{k}.npy", dt) for k, dt in zip(names, dtypes)}
    offsets = {side: [np.zeros(1, np.int64)] for side in ("src", "tgt")}
    ends = {"src": 0, "tgt": 0}
    counts = {"lines": 0, "empty": 0, "truncated": 0}
    tasks = (
        (name, first, b"\n".join(lines), last, split == "train")
        for name, first, lines, last in _chunks(source, chunk_lines)
    )
    lines_before = 0
    for r in map_ordered(pool, _encode_chunk, tasks, 2 * n_workers):
        for side in ("src", "tgt"):
            w[side].append(r[side])
            if not document:
                w[f"{side}_lengths"].append(r[f"{side}_lengths"])
                offsets[side].append(np.cumsum(r[f"{side}_lengths"], dtype=np.int64) + ends[side])
            ends[side] += len(r[side])
        if not document:
            w["index"].append(lines_before + r["index"])
            w["labels"].append(r["labels"])
        lines_before += r["lines"]
        for k in counts:
            counts[k] += r[k]
        if bar is not None:
            bar.update(r["lines"])
    if document and lines_before:  # one example: the whole split, then EOS
        w["src"].append(np.asarray([EOS_ID]))
        ends["src"] += 1
        w["src_lengths"].append(np.asarray([ends["src"]]))
        w["tgt_lengths"].append(np.zeros(1))
        w["index"].append(np.zeros(1))
        w["labels"].append(np.full(1, -1))
        offsets["src"].append(np.asarray([ends["src"]]))
        offsets["tgt"].append(np.zeros(1, np.int64))
    for a in w.values():
        a.close()
    for side in ("src", "tgt"):
        np.save(out / f"{split}.{side}_offsets.npy", np.concatenate(offsets[side]))
    return {**counts, "examples": w["index"].length, "tokens": ends["src"] + ends["tgt"]}


# -- the encoding worker ----------------------------------------------------------------------------

_worker: dict[str, Any] = {}


def _init_worker(model: bytes, bpe: bool, max_len: int, label_ids: dict[str, int] | None, document: bool) -> None:
    sp = sentencepiece.SentencePieceProcessor(model_proto=model)
    _worker.update(
        sp=sp,
        bpe=bpe,
        max_len=max_len,
        label_ids=label_ids,
        document=document,
        newline=sp.piece_to_id(NEWLINE),
        dtype=id_dtype(sp.get_piece_size()),
    )


def _ids(texts: list[str]) -> list[list[int]]:
    if _worker["bpe"]:
        texts = [collapse_whitespace(t) for t in texts]  # whitespace runs collapsed, as for parallel text
    return _worker["sp"].encode(texts)


def _encode_chunk(task: tuple[str, int, bytes, bool, bool]) -> dict[str, Any]:
    name, first, blob, last, train = task
    lines = decode_blob(name, blob, first + 1).split("\n")
    dtype, max_len = _worker["dtype"], _worker["max_len"]
    if _worker["document"]:  # running text: every line, then the newline piece (not after the very last)
        ids = _ids(lines)
        nl = _worker["newline"]
        flat = [t for k, row in enumerate(ids) for t in row + ([nl] if not (last and k == len(ids) - 1) else [])]
        return {
            "src": np.asarray(flat, dtype=dtype),
            "tgt": np.zeros(0, dtype),
            "lines": len(lines),
            "empty": 0,
            "truncated": 0,
        }
    labels, a, b = _fields(name, first, lines, _worker["label_ids"] is not None)
    ids_a, ids_b = _ids(a), _ids(b) if b else [[] for _ in a]
    keep = [k for k in range(len(a)) if ids_a[k]]  # an empty line is no example
    out_a, out_b, out_l, truncated = [], [], [], 0
    for k in keep:
        ra, rb = ids_a[k], ids_b[k]
        if len(ra) + len(rb) + 1 > max_len:  # truncate the longer text first (as BERT's pairs do)
            truncated += 1
            while len(ra) + len(rb) + 1 > max_len:
                if len(ra) >= len(rb):
                    ra = ra[:-1]
                else:
                    rb = rb[:-1]
        out_a.append(ra + [EOS_ID])
        out_b.append(rb)
        if labels:
            if labels[k] not in _worker["label_ids"]:
                raise DataError(
                    f"{name}:{first + k + 1}: label {labels[k]!r} does not occur in the training "
                    f"text (labels: {', '.join(_worker['label_ids'])})"
                )
            out_l.append(_worker["label_ids"][labels[k]])
    return {
        "src": np.asarray([t for r in out_a for t in r], dtype=dtype),
        "tgt": np.asarray([t for r in out_b for t in r], dtype=dtype),
        "src_lengths": np.asarray([len(r) for r in out_a], np.int32),
        "tgt_lengths": np.asarray([len(r) for r in out_b], np.int32),
        "index": np.asarray(keep, np.int64),
        "labels": np.asarray(out_l if labels else [-1] * len(keep), np.int64),
        "lines": len(lines),
        "empty": len(a) - len(keep),
        "truncated": truncated,
    }


# -- load -------------------------------------------------------------------------------------------


def _load(cfg: DataConfig, d: Path) -> PreparedText:
    report = json.loads((d / "report.json").read_text())
    splits = {s: EncodedSplit.load(d, s) for s in SPLITS}
    labels = {s: np.load(d / f"{s}.labels.npy", mmap_mode="r") for s in SPLITS} if report["labels"] else {}
    return PreparedText(
        tokenizer=Tokenizer(d / "spm.model"),
        splits=splits,
        labels=labels,
        label_names=list(report["labels"]),
        report=report,
        cache_dir=d,
        cfg=cfg,
    )
