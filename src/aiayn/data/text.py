"""Text for the encoder-only and decoder-only tasks -> tokenized splits cached on disk.

`prepare_text(cfg, run_dir)` runs the one preparation pipeline (`aiayn.data.pipeline`) over one side of
text: this module is what a line is to it (`TextLines`): its sources (text files, Multi30k languages,
Tiny Shakespeare), its settings, chunks of lines, a labelled line's fields (LABEL<TAB>TEXT[<TAB>TEXT_B],
the scan collects the label set), the tokenizer (sentencepiece BPE, or one piece per character) and the
encoder, which truncates an example to `max_len` pieces.

Examples are stored as an `EncodedSplit`: `src` holds each example's text ids plus EOS, `tgt` the
second text of a sentence pair (classification with LABEL<TAB>A<TAB>B lines; else empty), and
`<split>.labels.npy` the class ids. With `text_unit: document` a split is one example: all of its
lines in turn, each followed by a newline piece, so a language model reads running text.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece

from aiayn.config import EOS_ID, DataConfig
from aiayn.data import multi30k, tinyshakespeare
from aiayn.data.cache import SPLITS, Reservoir, given_tokenizer, spm_model_bytes, train_tokenizer
from aiayn.data.encoded import EncodedSplit, id_dtype
from aiayn.data.errors import DataError
from aiayn.data.io import LineStream, decode_blob
from aiayn.data.pipeline import (
    Chunk,
    Encoded,
    ExampleKind,
    Job,
    Options,
    Scan,
    Source,
    files_stamp,
    prepare_examples,
    refuse_empty_training,
)
from aiayn.data.tokenizer import NEWLINE, Tokenizer, collapse_whitespace

_FORMAT = 1


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
    options: Options | None = None,
) -> PreparedText:
    """Validate, tokenize and cache the text `cfg` describes; copy spm.model into `run_dir`.

    `labelled`: lines are LABEL<TAB>TEXT[<TAB>TEXT_B] (classification). `specials`: pieces the tokenizer
    must have (ENCODER_SPECIALS for the encoder-only tasks). `options`: worker processes, progress bars,
    chunk size (aiayn.data.pipeline.Options). Safe to call from many processes at once."""
    return prepare_examples(text_lines(cfg, labelled, tuple(specials)), run_dir, options or Options())


# -- sources ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextFiles:
    """A split's text as files read line by line, in turn."""

    paths: list[Path]

    def stamp(self) -> Any:
        return files_stamp(self.paths)

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.paths)

    def chunks(self, n: int) -> Iterator[Chunk]:
        """Chunks of n lines of one file, the split's last one marked."""
        before = 0  # bytes of the split's earlier files
        for k, path in enumerate(self.paths):
            with LineStream(path) as stream:
                first = 0
                chunk = stream.take(n)
                while chunk:
                    nxt = stream.take(n)
                    last = not nxt and k == len(self.paths) - 1
                    yield Chunk((str(path),), first, (chunk,), last, before + stream.position)
                    first += len(chunk)
                    chunk = nxt
            before += path.stat().st_size


@dataclass(frozen=True)
class MemoryText:
    """A split's text already in memory: a document cut by data.valid_fraction."""

    text: str

    def stamp(self) -> Any:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def size(self) -> int:
        return 0

    def chunks(self, n: int) -> Iterator[Chunk]:
        lines = [x.encode() for x in self.text.split("\n")]
        for i in range(0, len(lines), n):
            yield Chunk(("text",), i, (lines[i : i + n],), i + n >= len(lines))


def text_sources(cfg: DataConfig) -> dict[str, Source | None]:
    """Each split's text: files (line by line, in turn) or an in-memory document (the valid_fraction split)."""
    if cfg.corpus == "tinyshakespeare":
        path = tinyshakespeare.locate(cfg.data_dir)
        return _fraction_split(path, cfg.valid_fraction)
    if cfg.corpus == "multi30k":
        langs = cfg.text_langs or [cfg.tgt_lang]
        d = multi30k.locate_langs(langs, cfg.data_dir)
        return {s: TextFiles([d / f"{multi30k.split_name(s)}.{lang}.gz" for lang in langs]) for s in SPLITS}
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
        test = TextFiles(files["test"]) if files["test"] else None
        return {**_fraction_split(files["train"][0], cfg.valid_fraction), "test": test}
    return {s: TextFiles(f) if f else None for s, f in files.items()}


def _fraction_split(path: Path, valid_fraction: float) -> dict[str, Source | None]:
    """The first (1 - valid_fraction) of the characters train, the rest validate (read whole: a document
    split this way is small, like Tiny Shakespeare's 1.1 MB)."""
    text = decode_blob(path, path.read_bytes())
    cut = int(len(text) * (1.0 - valid_fraction))
    return {"train": MemoryText(text[:cut]), "valid": MemoryText(text[cut:]), "test": None}


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


# -- the example kind -------------------------------------------------------------------------------


def text_lines(cfg: DataConfig, labelled: bool = False, specials: tuple[str, ...] = ()) -> ExampleKind[PreparedText]:
    """A line (`labelled`: a labelled line, LABEL<TAB>TEXT[<TAB>TEXT_B]), or with data.text_unit
    document a split's lines as one example of running text; `specials`: pieces the tokenizer must have."""
    document = cfg.text_unit == "document"
    sources = text_sources(cfg)  # missing files and wrong settings fail here, first
    return ExampleKind(
        settings=_settings(cfg, labelled, specials),
        sources=sources,
        tokenizer=partial(_tokenizer, cfg, labelled, list(specials) + ([NEWLINE] if document else [])),
        encoder=partial(LineEncoder, cfg.tokenizer == "bpe", cfg.max_len, labelled, document),
        arrays=dict(src=None, tgt=None, index=np.int64, src_lengths=np.int32, tgt_lengths=np.int32, labels=np.int64),
        report={
            "corpus": cfg.corpus,
            "unit": cfg.text_unit,
            "tokenizer": cfg.tokenizer,
            "spm_model": cfg.spm_model,
        },
        finish=_finish,
        load=partial(_load, cfg),
        counters=("empty", "truncated"),
        sample_size=cfg.bpe_sample_pairs,  # the scan reads the labels even with a given tokenizer
        sample=partial(_sample, labelled),
        tail=_document_end if document else None,
        parallel=partial(_worth_workers, sources),
        stamp_field="text",
        stamp_prefix="t",
    )


def _sample(labelled: bool, chunk: Chunk, sample: Reservoir, labels: set[str]) -> None:
    """One training chunk's texts into the tokenizer sample, its labels into the label set."""
    name = chunk.names[0]
    text = decode_blob(name, b"\n".join(chunk.lines[0]), chunk.first + 1).split("\n")
    lab, a, b = _fields(name, chunk.first, text, labelled)
    labels.update(x for x in lab if x)  # a blank line has none
    enc = [x.encode() for x in a + [y for y in b if y]]
    sample.add(enc, enc)


def _tokenizer(
    cfg: DataConfig, labelled: bool, symbols: list[str], scan: Scan, model_file: Path
) -> tuple[Tokenizer, dict[str, Any]]:
    """Sentencepiece (BPE or one piece per character) trained on the sampled texts, or `data.spm_model`;
    either must have the task's special pieces. The report gets the training split's labels."""
    refuse_empty_training(scan, "the training text is empty")
    if labelled and len(scan.labels) < 2:
        raise DataError(f"classification needs at least 2 labels in the training text, found {scan.labels}")
    sample = scan.sample
    assert sample is not None
    if cfg.spm_model is not None:
        sample.items = []
        tok = given_tokenizer(cfg, model_file)
    else:
        lines = [s.decode() for _, s, _ in sample.pairs()]
        sample.items = []
        tok = train_tokenizer(
            lines,
            model_file,
            cfg.vocab_size,
            max_sentences=max(2_000_000, len(lines)),
            model_type=cfg.tokenizer,
            user_symbols=symbols,
        )
    missing = [p for p in symbols if tok.piece_id(p) is None]
    if missing:
        raise DataError(f"the tokenizer {cfg.spm_model} lacks the pieces {missing} this task needs")
    return tok, {"labels": scan.labels}


def _worth_workers(sources: dict[str, Source | None], scan: Scan, chunk_lines: int) -> bool:
    """Worker processes pay for their start past about two chunks of lines in all (files: a caption's
    40 bytes a line)."""
    return sum(_approx_lines(s) for s in sources.values()) > 2 * chunk_lines


def _approx_lines(source: Source | None) -> int:
    if isinstance(source, MemoryText):
        return source.text.count("\n")
    return 0 if source is None else source.size() // 40


def _document_end(ends: dict[str, int], lines: int) -> dict[str, Any] | None:
    """Running text's one example: the whole split, then EOS (appended after its last chunk)."""
    if not lines:
        return None
    return {
        "src": np.asarray([EOS_ID]),
        "tgt": np.zeros(0),
        "src_lengths": np.asarray([ends["src"] + 1]),
        "tgt_lengths": np.zeros(1),
        "index": np.zeros(1),
        "labels": np.full(1, -1),
    }


def _finish(report: dict[str, Any], encoded: dict[str, Encoded]) -> None:
    for split, e in encoded.items():
        report["splits"][split] = {**e.counts, "examples": e.examples, "tokens": e.ends["src"] + e.ends["tgt"]}
    if encoded["train"].examples == 0:
        raise DataError("every training line is empty")


def _load(cfg: DataConfig, directory: Path) -> PreparedText:
    report = json.loads((directory / "report.json").read_text())
    splits = {s: EncodedSplit.load(directory, s) for s in SPLITS}
    labels = {s: np.load(directory / f"{s}.labels.npy", mmap_mode="r") for s in SPLITS} if report["labels"] else {}
    return PreparedText(
        tokenizer=Tokenizer(directory / "spm.model"),
        splits=splits,
        labels=labels,
        label_names=list(report["labels"]),
        report=report,
        cache_dir=directory,
        cfg=cfg,
    )


# -- the encoding worker ----------------------------------------------------------------------------


class LineEncoder:
    """Decodes and encodes one chunk of lines: examples truncated to `max_len` pieces with EOS (the
    longer text of a pair first, as BERT's pairs), or running text with a newline piece between lines."""

    def __init__(
        self, bpe: bool, max_len: int, labelled: bool, document: bool, model: bytes, labels: list[str]
    ) -> None:
        self.sp = sentencepiece.SentencePieceProcessor(model_proto=model)
        label_ids = {n: i for i, n in enumerate(labels)} if labelled else None
        self.bpe, self.max_len, self.label_ids, self.document = bpe, max_len, label_ids, document
        self.newline = self.sp.piece_to_id(NEWLINE)
        self.dtype = id_dtype(self.sp.get_piece_size())

    def ids(self, texts: list[str]) -> list[list[int]]:
        if self.bpe:
            texts = [collapse_whitespace(t) for t in texts]  # whitespace runs collapsed, as for parallel text
        return self.sp.encode(texts)

    def __call__(self, job: Job) -> dict[str, Any]:
        name, first = job.names[0], job.first
        lines = decode_blob(name, job.blobs[0], first + 1).split("\n")
        if self.document:  # running text: every line, then the newline piece (not after the very last)
            ids, nl = self.ids(lines), self.newline
            flat = [
                t for k, row in enumerate(ids) for t in row + ([nl] if not (job.last and k == len(ids) - 1) else [])
            ]
            return {
                "src": np.asarray(flat, dtype=self.dtype),
                "tgt": np.zeros(0, self.dtype),
                "empty": 0,
                "truncated": 0,
            }
        labels, a, b = _fields(name, first, lines, self.label_ids is not None)
        ids_a, ids_b = self.ids(a), self.ids(b) if b else [[] for _ in a]
        keep = [k for k in range(len(a)) if ids_a[k]]  # an empty line is no example
        out_a, out_b, out_l, truncated = [], [], [], 0
        for k in keep:
            ra, rb = ids_a[k], ids_b[k]
            if len(ra) + len(rb) + 1 > self.max_len:  # truncate the longer text first (as BERT's pairs do)
                truncated += 1
                while len(ra) + len(rb) + 1 > self.max_len:
                    if len(ra) >= len(rb):
                        ra = ra[:-1]
                    else:
                        rb = rb[:-1]
            out_a.append(ra + [EOS_ID])
            out_b.append(rb)
            if labels:
                out_l.append(self.label_id(labels[k], name, first + k + 1))
        return {
            "src": np.asarray([t for r in out_a for t in r], dtype=self.dtype),
            "tgt": np.asarray([t for r in out_b for t in r], dtype=self.dtype),
            "src_lengths": np.asarray([len(r) for r in out_a], np.int32),
            "tgt_lengths": np.asarray([len(r) for r in out_b], np.int32),
            "index": np.asarray(keep, np.int64),
            "labels": np.asarray(out_l if labels else [-1] * len(keep), np.int64),
            "empty": len(a) - len(keep),
            "truncated": truncated,
        }

    def label_id(self, label: str, name: str, line: int) -> int:
        assert self.label_ids is not None
        if label not in self.label_ids:
            raise DataError(
                f"{name}:{line}: label {label!r} does not occur in the training "
                f"text (labels: {', '.join(self.label_ids)})"
            )
        return self.label_ids[label]
