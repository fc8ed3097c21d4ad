"""Raw parallel text -> validated, filtered, joint-BPE-encoded splits cached on disk (paper §5.1).

`prepare(cfg, run_dir)`:
  1. resolve the corpus (Multi30k mirror/cache/download, user files, or the embedded corpus);
  2. read every file and compare source/target line counts of every split before anything else;
  3. hash inputs + settings; a cache hit under $AIAYN_HOME/prepared/<hash> is loaded as is;
  4. otherwise decode strictly (UTF-8 errors name file and line), drop empty training pairs, train one
     sentencepiece BPE on source + target training text (shared vocabulary, §5.1), encode all splits,
     drop over-long / extreme-ratio training pairs (never valid/test), save arrays + report atomically.
     With `data.spm_model` that model is copied in instead of training one (a vocabulary shared with
     earlier runs).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece

from aiayn.config import DataConfig
from aiayn.data import embedded, multi30k, wmt14
from aiayn.data.encoded import EncodedSplit
from aiayn.data.errors import DataError
from aiayn.data.io import check_counts, decode_lines, read_bytes_lines
from aiayn.data.tokenizer import Tokenizer

SPLITS = ("train", "valid", "test")
_FORMAT = 1  # bump when the on-disk layout or the filtering changes


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
            self._texts.update(_decode_all(_read_all(self.cfg, [split])))
        src, tgt = self._texts[split]
        idx = self.splits[split].index.tolist()
        return [src[i] for i in idx], [tgt[i] for i in idx]


def prepare(cfg: DataConfig, run_dir: str | os.PathLike | None = None) -> Prepared:
    """Validate, encode and cache the corpus described by `cfg`; copy spm.model into `run_dir`."""
    t0 = time.perf_counter()
    raw = _read_all(cfg)  # errors for missing files / line-count mismatches happen here, first
    key = _key(cfg, raw)
    root = multi30k.aiayn_home() / "prepared"
    final = root / key
    if not (final / "report.json").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        try:
            _build(cfg, raw, tmp, key, t0)
            try:
                os.rename(tmp, final)
            except OSError:  # another process finished the same key first: use theirs
                if not (final / "report.json").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        cached = False
    else:
        cached = True
    out = _load(cfg, final)
    out.report["cached"] = cached
    out.report["seconds_total"] = round(time.perf_counter() - t0, 3)
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        _copy_atomic(final / "spm.model", run_dir / "spm.model")
        (run_dir / "data_report.json").write_text(json.dumps(out.report, indent=1) + "\n")
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
        return {s: (d / f"{multi30k.split_name(s)}.{cfg.src_lang}.gz", d / f"{multi30k.split_name(s)}.{cfg.tgt_lang}.gz")
                for s in SPLITS}
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


def _read_all(cfg: DataConfig, splits: list[str] | None = None) -> dict[str, Any]:
    """Raw bytes lines of every split, or of `splits` only (the embedded corpus is generated whole),
    with line counts checked."""
    if cfg.corpus == "embedded":
        return {"embedded": embedded.corpus(cfg.src_lang, cfg.tgt_lang, cfg.embedded_size)}
    pairs = {s: p for s, p in _file_pairs(cfg).items() if splits is None or s in splits}
    data = {s: None if p is None else (p, read_bytes_lines(p[0]), read_bytes_lines(p[1])) for s, p in pairs.items()}
    for s, d in data.items():
        if d is not None:
            (sp, tp), sb, tb = d
            check_counts(sp, len(sb), tp, len(tb))
    return {"files": data}


def _decode_all(raw: dict[str, Any]) -> dict[str, tuple[list[str], list[str]]]:
    if "embedded" in raw:
        return raw["embedded"]
    out = {}
    for s, d in raw["files"].items():
        if d is None:
            out[s] = ([], [])
            continue
        (sp, tp), sb, tb = d
        out[s] = ([_clean(x) for x in decode_lines(sp, sb)], [_clean(x) for x in decode_lines(tp, tb)])
    return out


def _clean(line: str) -> str:
    """Collapse whitespace runs (sentencepiece does too), so decode(encode(x)) == x for raw text."""
    return " ".join(line.split())


def _key(cfg: DataConfig, raw: dict[str, Any]) -> str:
    h = hashlib.sha256()
    settings = dict(format=_FORMAT, spm=sentencepiece.__version__, corpus=cfg.corpus, src=cfg.src_lang,
                    tgt=cfg.tgt_lang, vocab=cfg.vocab_size, max_len=cfg.max_len, ratio=cfg.max_len_ratio)
    if "embedded" in raw:
        settings["embedded_size"] = cfg.embedded_size
    if cfg.spm_model is not None:  # the model's bytes, not its path, decide the encoding
        del settings["vocab"]
        settings["spm_model"] = hashlib.sha256(_spm_model_bytes(cfg)).hexdigest()
    h.update(json.dumps(settings, sort_keys=True).encode())
    for s, d in raw.get("files", {}).items():
        h.update(s.encode())
        if d is not None:
            for lines in d[1:]:
                h.update(len(lines).to_bytes(8, "little"))
                h.update(b"\n".join(lines))
    return h.hexdigest()[:16]


def _spm_model_bytes(cfg: DataConfig) -> bytes:
    path = Path(cfg.spm_model)
    if path.is_dir():  # a run directory: its spm.model
        path = path / "spm.model"
    if not path.is_file():
        raise DataError(f"data.spm_model: {path} not found")
    return path.read_bytes()


# -- build / load -----------------------------------------------------------------------------------

def _build(cfg: DataConfig, raw: dict[str, Any], out: Path, key: str, t0: float) -> None:
    texts = _decode_all(raw)
    train_src, train_tgt = texts["train"]
    if not train_src:
        raise DataError("the training split is empty")
    nonempty = [i for i, (s, t) in enumerate(zip(train_src, train_tgt)) if s and t]
    if not nonempty:
        raise DataError("every training pair has an empty side")

    t1 = time.perf_counter()
    if cfg.spm_model is not None:
        (out / "spm.model").write_bytes(_spm_model_bytes(cfg))
        tok = Tokenizer(out / "spm.model")  # refuses a model with other special ids
    else:
        spm_text = [train_src[i] for i in nonempty] + [train_tgt[i] for i in nonempty]
        try:
            tok = Tokenizer.train(spm_text, out / "spm.model", vocab_size=cfg.vocab_size)
        except RuntimeError as e:  # e.g. vocab_size below the 256 byte pieces + characters of the corpus
            raise DataError(f"sentencepiece training failed (vocab_size={cfg.vocab_size}): "
                            f"{str(e).splitlines()[0]}") from None
    t2 = time.perf_counter()

    report: dict[str, Any] = {"corpus": cfg.corpus, "src_lang": cfg.src_lang, "tgt_lang": cfg.tgt_lang,
                              "key": key, "vocab_size": tok.vocab_size, "spm_model": cfg.spm_model, "splits": {},
                              "dropped": {"empty": len(train_src) - len(nonempty), "too_long": 0, "ratio": 0}}
    for split in SPLITS:
        src, tgt = texts[split]
        keep = nonempty if split == "train" else list(range(len(src)))
        src_ids = tok.encode_batch([src[i] for i in keep])
        tgt_ids = tok.encode_batch([tgt[i] for i in keep])
        if split == "train":  # over-long and extreme-ratio pairs leave training only
            sl = np.fromiter(map(len, src_ids), np.int64, len(keep))
            tl = np.fromiter(map(len, tgt_ids), np.int64, len(keep))
            too_long = (sl > cfg.max_len) | (tl > cfg.max_len)
            ratio = ~too_long & (np.maximum(sl, tl) > cfg.max_len_ratio * np.minimum(sl, tl))
            report["dropped"]["too_long"] = int(too_long.sum())
            report["dropped"]["ratio"] = int(ratio.sum())
            ok = np.flatnonzero(~(too_long | ratio)).tolist()
            keep = [keep[j] for j in ok]
            src_ids = [src_ids[j] for j in ok]
            tgt_ids = [tgt_ids[j] for j in ok]
            if not keep:
                raise DataError("every training pair was dropped (length / ratio filters)")
        enc = EncodedSplit.from_ids(src_ids, tgt_ids, vocab_size=tok.vocab_size, index=keep)
        enc.save(out, split)
        report["splits"][split] = {"lines": len(src), "pairs": len(enc),
                                   "src_tokens": int(enc.src_lengths.sum()), "tgt_tokens": int(enc.tgt_lengths.sum())}
    report["dropped"]["total"] = sum(report["dropped"].values())
    report["seconds"] = {"bpe": round(t2 - t1, 3), "encode": round(time.perf_counter() - t2, 3),
                         "prepare": round(time.perf_counter() - t0, 3)}
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")


def _load(cfg: DataConfig, d: Path) -> Prepared:
    report = json.loads((d / "report.json").read_text())
    return Prepared(tokenizer=Tokenizer(d / "spm.model"), splits={s: EncodedSplit.load(d, s) for s in SPLITS},
                    report=report, cache_dir=d, cfg=cfg)


def _copy_atomic(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
