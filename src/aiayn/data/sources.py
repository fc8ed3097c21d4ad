"""A run's parallel text from several sources (`data.corpus: sources`), each with its format, its filters
and its weight:

    data:
      corpus: sources
      src_lang: de
      tgt_lang: en
      filters: [default]                      # for every source's training pairs
      sources:
        - {path: memory.tmx, weight: 3}       # a translation memory, seen three times an epoch
        - {src: crawl.de.gz, tgt: crawl.en.gz, weight: 0.5, filters: [{langid: {margin: 0.3}}]}
        - {path: glossary.tsv, columns: [German, English]}
        - opus:Tatoeba
        - {src: dev.de, tgt: dev.en, split: valid}

A source is a pair of line-aligned files (`src`, `tgt`), one file of another format (`path`: TMX,
XLIFF, TSV, CSV, JSON lines; `format` when its name does not say), or an OPUS corpus (`opus`). Its
`filters` come after `data.filters`; `split` (train, valid or test) says what it is for; `weight`
multiplies how often its pairs are drawn in an epoch (2: each twice; 0.25: a quarter of them, others
each epoch), so its share of every update is weight x pairs over the sum of all of them. Filters and
formats are part of the prepared cache; weights are not (they act when batches are drawn).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiayn.config import DataConfig
from aiayn.data import opus
from aiayn.data.cache import SPLITS
from aiayn.data.errors import DataError
from aiayn.data.filters import Filter, parse_filters
from aiayn.data.formats import FORMATS, format_of, read_pairs
from aiayn.data.pipeline import Chunk, Source, files_stamp

_KEYS = {"name", "path", "src", "tgt", "opus", "format", "columns", "weight", "filters", "split"}


@dataclass(frozen=True)
class SourceSpec:
    """One entry of `data.sources`, checked."""

    name: str
    split: str
    format: str
    paths: tuple[Path, ...]  # (source, target) for `lines`; one file otherwise; () for OPUS until located
    columns: Any = None
    weight: float = 1.0
    filters: Any = None
    opus: str | None = None

    def describe(self) -> dict[str, Any]:
        """What of the spec decides the prepared text (the weight does not)."""
        return {
            "name": self.name,
            "split": self.split,
            "format": self.format,
            "columns": self.columns,
            "filters": self.filters,
            "opus": self.opus,
        }


def source_specs(cfg: DataConfig) -> list[SourceSpec]:
    """`data.sources`, each entry checked (one DataError line for what is wrong, naming the entry)."""
    if not cfg.sources:
        raise DataError("corpus 'sources' needs data.sources: a list of files, formats or opus:NAME")
    specs = [_spec(i, entry) for i, entry in enumerate(cfg.sources)]
    names = [s.name for s in specs]
    again = sorted({n for n in names if names.count(n) > 1})
    if again:
        raise DataError(f"data.sources: the name {again[0]!r} is given twice; give each source its own `name`")
    if not any(s.split == "train" for s in specs):
        raise DataError("data.sources has no training source (every source says split: valid or test)")
    return specs


def _spec(i: int, entry: Any) -> SourceSpec:
    where = f"data.sources[{i}]"
    if isinstance(entry, str):
        entry = {"opus": entry[len("opus:") :]} if entry.startswith("opus:") else {"path": entry}
    if not isinstance(entry, dict):
        raise DataError(f"{where}: expected a mapping (path / src, tgt / opus, ...) or a string, got {entry!r}")
    unknown = set(entry) - _KEYS
    if unknown:
        raise DataError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}")
    kinds = [k for k in ("path", "src", "opus") if entry.get(k)]
    if len(kinds) != 1 or (entry.get("src") is None) != (entry.get("tgt") is None):
        raise DataError(f"{where}: give exactly one of `path`, `src` with `tgt`, or `opus`")
    split = str(entry.get("split", "train"))
    if split not in SPLITS:
        raise DataError(f"{where}: split must be train, valid or test, not {split!r}")
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
        raise DataError(f"{where}: weight must be a number above 0, not {weight!r}")
    if split != "train" and ("weight" in entry or "filters" in entry):
        raise DataError(f"{where}: a {split} source is read as it is: weight and filters are for training sources")
    paths: tuple[Path, ...]
    if entry.get("opus"):
        name = str(entry["opus"]).removeprefix("opus:")
        fmt, paths = "lines", ()
        default_name = name.partition("@")[0]
    elif entry.get("src"):
        paths = (Path(entry["src"]), Path(entry["tgt"]))
        fmt, default_name = "lines", stem(paths[0])
    else:
        paths = (Path(entry["path"]),)
        fmt, default_name = str(entry.get("format") or format_of(paths[0])), stem(paths[0])
        if fmt == "lines":
            raise DataError(f"{where}: {paths[0]} is one file of plain lines; give `src` and `tgt`, or its `format`")
    if fmt not in FORMATS:
        raise DataError(f"{where}: unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    for p in paths:
        if not p.is_file():
            raise DataError(f"{where}: file not found: {p}")
    return SourceSpec(
        name=str(entry.get("name") or default_name),
        split=split,
        format=fmt,
        paths=paths,
        columns=entry.get("columns"),
        weight=float(weight),
        filters=entry.get("filters"),
        opus=str(entry["opus"]).removeprefix("opus:") if entry.get("opus") else None,
    )


def stem(path: Path) -> str:
    """A source's default name: its file name without suffixes (crawl.de.gz -> crawl)."""
    return path.name.split(".")[0] or path.name


def source_filters(cfg: DataConfig, spec: SourceSpec) -> list[Filter]:
    """A training source's filters: `data.filters`, then its own (a name given again takes its settings)."""
    both = _as_list(cfg.filters) + _as_list(spec.filters)
    return parse_filters(both, cfg.src_lang, cfg.tgt_lang, where=f"filters of source {spec.name!r}")


def _as_list(x: Any) -> list[Any]:
    return [] if x is None else list(x) if isinstance(x, list) else [x]


def source_mix(cfg: DataConfig, report: dict[str, Any]) -> list[tuple[int, float]] | None:
    """(pairs kept, weight) of each training source in order, for the batches (aiayn.data.batching's
    `mix`); None when every weight is 1: an epoch is every pair once."""
    if cfg.corpus != "sources" or not cfg.sources:
        return None
    w = [s.weight for s in source_specs(cfg) if s.split == "train"]
    if all(x == 1.0 for x in w):
        return None
    return [(int(s["pairs"]), x) for s, x in zip(report["sources"], w)]


# -- what the pipeline reads ------------------------------------------------------------------------


@dataclass(frozen=True)
class FilePairs:
    """One file of TMX, XLIFF, TSV, CSV or JSON lines, read as aligned lines of each side."""

    path: Path
    format: str
    src_lang: str
    tgt_lang: str
    columns: Any = None

    @property
    def names(self) -> tuple[str, str]:
        return f"{self.path} ({self.src_lang})", f"{self.path} ({self.tgt_lang})"

    def stamp(self) -> Any:
        return files_stamp([self.path])

    def size(self) -> int:
        return self.path.stat().st_size

    def chunks(self, n: int) -> Iterator[Chunk]:
        position = [0]
        src: list[bytes] = []
        tgt: list[bytes] = []
        numbers: list[int] = []
        first = 0
        for line, s, t in read_pairs(self.path, self.format, self.src_lang, self.tgt_lang, self.columns, position):
            src.append(s.encode())
            tgt.append(t.encode())
            numbers.append(line)
            if len(src) == n:
                yield Chunk(self.names, first, (src, tgt), pos=position[0], numbers=tuple(numbers))
                first, src, tgt, numbers = first + n, [], [], []
        if src:
            yield Chunk(self.names, first, (src, tgt), pos=position[0], numbers=tuple(numbers))


@dataclass(frozen=True)
class Parts:
    """A split of several sources, read in turn; each chunk says which (`part`)."""

    parts: tuple[Source, ...]
    names: tuple[str, str] = ("train source", "train target")

    def stamp(self) -> Any:
        return [p.stamp() for p in self.parts]

    def size(self) -> int:
        return sum(p.size() for p in self.parts)

    def chunks(self, n: int) -> Iterator[Chunk]:
        before = 0
        for k, part in enumerate(self.parts):
            for c in part.chunks(n):
                yield c._replace(part=k, pos=before + c.pos)
            before += part.size()


def split_sources(cfg: DataConfig, specs: list[SourceSpec], make_pair: Any) -> dict[str, Parts | None]:
    """Each split's sources as one `Parts` (None: no source for it); `make_pair(src, tgt)` is the pair
    of line-aligned files (aiayn.data.pairs.LinePair). An OPUS corpus is downloaded here when missing."""
    out: dict[str, Parts | None] = {}
    for split in SPLITS:
        parts: list[Source] = []
        for spec in (s for s in specs if s.split == split):
            if spec.opus is not None:
                parts.append(make_pair(*opus.locate(spec.opus, cfg.src_lang, cfg.tgt_lang)))
            elif spec.format == "lines":
                parts.append(make_pair(*spec.paths))
            else:
                parts.append(FilePairs(spec.paths[0], spec.format, cfg.src_lang, cfg.tgt_lang, spec.columns))
        out[split] = Parts(tuple(parts)) if parts else None
    return out
