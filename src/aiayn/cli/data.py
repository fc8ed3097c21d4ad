"""`aiayn data get multi30k`: download Multi30k into the cache, or verify an offline mirror.
`aiayn data get wmt14 --pair en-de`: download WMT14 and write its train/valid/test files into the cache.
`aiayn data prepare --config C`: validate, train BPE and encode a config's corpus into the cache as its
task does (what `aiayn train` does implicitly), with worker processes and a progress bar.
`aiayn data clean SRC [TGT] --src-lang L1 --tgt-lang L2 -o DIR` (or `--config C`): rule filters, and with
`--score-with` the model-based one, over a corpus; the kept pairs and a report in DIR."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from aiayn.cli._args import collect_overrides


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="get and check corpora")
    dsub = p.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)

    g = dsub.add_parser("get", help="download a corpus into the cache ($AIAYN_HOME) or verify a mirror")
    g.add_argument("corpus", choices=["multi30k", "wmt14"])
    g.add_argument(
        "--data-dir",
        default=None,
        help="multi30k: offline mirror laid out like multi30k/data/task1/raw (default: $AIAYN_DATA_DIR); "
        "wmt14: a directory holding already-downloaded archives",
    )
    g.add_argument("--langs", default="cs,de,en,fr", help="multi30k: comma-separated languages (default: all four)")
    g.add_argument(
        "--pair",
        default="en-de",
        choices=["en-de", "en-fr"],
        help="wmt14: language pair (default: en-de; its files serve both directions)",
    )
    g.add_argument(
        "--base-url", default=None, help="download the same file names from here instead of the dataset's own site"
    )
    g.set_defaults(run=_get)

    p = dsub.add_parser(
        "prepare",
        help="validate, train BPE and encode a config's corpus into the cache, as its task does",
        description="Prepare the data of a training config once, before training (like "
        "fairseq-preprocess): any data field can be overridden as --data.field VALUE. "
        "`aiayn train` then starts from the cache within seconds.",
    )
    p.add_argument("--config", required=True, help="YAML or TOML file, or a packaged recipe's name (aiayn recipes)")
    p.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=_prepare)
    collect_overrides(p)
    _register_clean(dsub)


def _register_clean(dsub: argparse._SubParsersAction) -> None:
    c = dsub.add_parser(
        "clean",
        help="filter a parallel corpus: duplicates, wrong language, untranslated, markup, ... and misaligned pairs",
        description="Stream a corpus through filters (aiayn.data.filters) and write the pairs kept, in input "
        "order, as DIR/NAME.L1 and DIR/NAME.L2, with DIR/report.json: how many pairs each filter removed, "
        "with examples. SRC and TGT are a pair of line-aligned files; SRC alone is a TMX, XLIFF, TSV, CSV or "
        "JSON-lines file. With --config, every training source of that config is cleaned with its own filters "
        "(data.filters, then the source's). --score-with adds the model-based filter (dual conditional "
        "cross-entropy) after the rules.",
    )
    c.add_argument("inputs", nargs="*", metavar="SRC [TGT]", help="the corpus: two line-aligned files, or one file")
    c.add_argument("-o", "--output", required=True, help="directory for the kept pairs and report.json")
    c.add_argument("--src-lang", help="source language code (e.g. de)")
    c.add_argument("--tgt-lang", help="target language code (e.g. en)")
    c.add_argument("--config", help="clean the training sources of this config (with --data.field overrides)")
    c.add_argument(
        "--filters",
        default=None,
        help="the filters as YAML, e.g. '[default, {langid: {margin: 0.3}}]' (default: default, the rule set)",
    )
    c.add_argument("--format", default=None, help="SRC's format when its name does not say: tmx xliff tsv csv jsonl")
    c.add_argument("--columns", default=None, help="TSV/CSV column names or numbers (YAML list), or JSON keys")
    c.add_argument("--name", default=None, help="the output files' name (default: SRC's name without suffixes)")
    c.add_argument(
        "--score-with",
        nargs="+",
        metavar="RUN",
        help="the model-based filter: RUN_F RUN_B (a forward and a backward run), or 'auto' to train both on "
        "the rule-cleaned pairs first",
    )
    c.add_argument("--keep-best", type=float, default=None, help="with --score-with: keep this best share (e.g. 0.9)")
    c.add_argument(
        "--score-method",
        choices=["gain", "dcce"],
        default="gain",
        help="with --score-with: gain (default; how much each run's cross-entropy drops for reading the "
        "other side) or dcce (Junczys-Dowmunt's |H_F - H_B| + (H_F + H_B) / 2)",
    )
    c.add_argument("--max-score", type=float, default=None, help="with --score-with: keep pairs scoring this or less")
    c.add_argument(
        "--scorer-steps", type=int, default=3000, help="with --score-with auto: updates of each scorer (default 3,000)"
    )
    c.add_argument(
        "--scorer-config",
        default="quickstart",
        help="with --score-with auto: the scorers' recipe or config file (default: quickstart)",
    )
    c.add_argument("--device", default=None, help="scoring device (default: CUDA when present, else the CPU)")
    c.add_argument("--write-removed", action="store_true", help="also write DIR/NAME.removed.tsv: line, reason, pair")
    c.add_argument("--workers", type=int, default=None, help="filtering processes (default: all cores)")
    c.add_argument("--no-progress", action="store_true", help="no progress bars")
    c.set_defaults(run=_clean)
    collect_overrides(c)


def _get(a: argparse.Namespace) -> int:
    from aiayn.data import multi30k, wmt14

    if a.corpus == "wmt14":
        wmt14.get(a.pair, data_dir=a.data_dir, base_url=a.base_url, log=lambda m: print(m, file=sys.stderr))
        print(wmt14.summary(a.pair))
        return 0

    langs = [x for x in a.langs.split(",") if x]
    mirror = multi30k.mirror_dir(a.data_dir)
    if mirror is not None:
        multi30k.verify(mirror, langs)
        print(f"multi30k mirror at {mirror}: {len(multi30k.raw_files(langs))} files, checksums ok")
        return 0
    d = multi30k.fetch(langs, base_url=a.base_url, log=lambda m: print(m, file=sys.stderr))
    multi30k.verify(d, langs)
    print(f"multi30k in {d}: {len(multi30k.raw_files(langs))} files, checksums ok")
    return 0


def _prepare(a: argparse.Namespace) -> int:
    """The config's data prepared as its task prepares it when training (the prepare function of the
    task's spec: sentence pairs, lines, labelled lines, tree pairs), so a run finds it in the cache."""
    import json

    from aiayn.config import Config
    from aiayn.data.pipeline import Options
    from aiayn.train import tasks

    cfg = Config.load(a.config, a.overrides)
    spec = tasks.spec_for(cfg)  # the task's own checks, as `aiayn train` makes them
    cfg = tasks.resolved(cfg, spec)
    prep = tasks.prepare_data(spec, cfg, cfg.data, None, Options(workers=a.workers, progress=not a.no_progress))
    r = prep.report
    unit, dropped = ("pairs", f", dropped {json.dumps(r['dropped'])}") if "dropped" in r else ("examples", "")
    splits = ", ".join(f"{s} {len(v):,}" for s, v in prep.splits.items())
    print(
        f"{'cached' if r['cached'] else 'prepared'} {prep.cache_dir} (task {spec.name}): {splits} {unit}, "
        f"vocabulary {r['vocab_size']:,}{dropped}, {r['seconds_total']:.1f} s"
    )
    return 0


def _clean(a: argparse.Namespace) -> int:
    """Rule filters over each source, then (--score-with) the model-based filter; kept pairs and a report."""
    from pathlib import Path

    from aiayn.data.clean import clean_source, summary, write_report
    from aiayn.data.dedup import HashSet
    from aiayn.data.errors import DataError
    from aiayn.data.pipeline import Options
    from aiayn.dual_scores import check_cut

    out = Path(a.output)
    options = Options(workers=a.workers, progress=False if a.no_progress else None)  # None: on a terminal
    jobs, langs = _clean_jobs(a)
    if a.score_with is not None:  # refused now, not after the rules and the scorers' training
        check_cut(a.keep_best, a.max_score)
        if a.score_with == ["auto"] and len(jobs) != 1:
            raise DataError("--score-with auto trains scorers on one corpus: give RUN_F RUN_B for several sources")
    cleaned, filters = [], {}
    seen = (HashSet(), HashSet())  # the copies across sources are duplicates too
    for name, source, fs in jobs:
        c = clean_source(source, name, fs, langs[0], langs[1], out, options, a.write_removed, seen)
        print(summary(c))
        cleaned.append(c)
        filters[name] = fs
    extra: dict = {"src_lang": langs[0], "tgt_lang": langs[1]}
    if a.score_with is not None:
        extra["model"] = _score(a, out, cleaned, langs, options)
    path = write_report(out, cleaned, filters, extra)
    print(f"report: {path}")
    return 0


def _clean_jobs(a: argparse.Namespace) -> tuple[list, tuple[str, str]]:
    """(name, source, filters) of each corpus to clean, and the languages."""
    from pathlib import Path

    from aiayn.data.errors import DataError
    from aiayn.data.filters import parse_filters
    from aiayn.data.formats import format_of
    from aiayn.data.pairs import LinePair
    from aiayn.data.sources import FilePairs, source_filters, source_specs, split_sources, stem

    if a.config:
        from aiayn.config import Config

        if a.inputs or a.filters or a.format or a.columns or a.name:
            raise DataError("--config cleans the config's sources with their filters: give no SRC, --filters, "
                            "--format, --columns or --name with it")  # fmt: skip
        cfg = Config.load(a.config, a.overrides).data
        if cfg.corpus != "sources":
            raise DataError(f"--config: data.corpus is {cfg.corpus!r}; aiayn data clean reads corpus sources")
        specs = [s for s in source_specs(cfg) if s.split == "train"]
        parts = split_sources(cfg, specs, LinePair)["train"]
        assert parts is not None
        return [(s.name, p, source_filters(cfg, s)) for s, p in zip(specs, parts.parts)], (cfg.src_lang, cfg.tgt_lang)
    if a.overrides:
        raise DataError(f"unrecognized arguments: {' '.join(a.overrides)} (--data.field overrides go with --config)")
    if not a.inputs or len(a.inputs) > 2 or not a.src_lang or not a.tgt_lang:
        raise DataError("give SRC [TGT] with --src-lang and --tgt-lang, or --config")
    langs = (a.src_lang, a.tgt_lang)
    _check_code(langs)
    fs = parse_filters(_yaml(a.filters, "--filters") if a.filters else ["default"], *langs, where="--filters")
    first = Path(a.inputs[0])
    name = a.name or stem(first)
    for p in map(Path, a.inputs):
        if not p.is_file():
            raise DataError(f"file not found: {p}")
    if len(a.inputs) == 2:
        return [(name, LinePair(first, Path(a.inputs[1])), fs)], langs
    fmt = a.format or format_of(first)
    if fmt == "lines":
        raise DataError(f"{first} is one file of plain lines: give its target file too, or --format")
    columns = _yaml(a.columns, "--columns") if a.columns else None
    return [(name, FilePairs(first, fmt, *langs, columns), fs)], langs


def _yaml(text: str, flag: str) -> Any:
    """A flag's YAML value; a syntax error is one line naming the flag."""
    import yaml

    from aiayn.data.errors import DataError

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DataError(f"{flag}: not YAML ({str(e).splitlines()[0]}): {text}") from None


def _check_code(langs: tuple[str, str]) -> None:
    """A language code looks like one (de, en, pt-BR): a name such as German is refused in one line."""
    from aiayn.data.errors import DataError

    for flag, lang in zip(("--src-lang", "--tgt-lang"), langs):
        head = lang.replace("_", "-").split("-")[0]
        if not (2 <= len(head) <= 3 and head.isascii() and head.isalpha() and head.islower()):
            raise DataError(f"{flag} {lang!r} is not a language code (ISO 639: de, en, fr, pt-BR ...)")
    if langs[0] == langs[1]:
        raise DataError(f"--src-lang and --tgt-lang are both {langs[0]!r}")


def _score(a: argparse.Namespace, out, cleaned: list, langs: tuple[str, str], options) -> dict:
    """The model-based filter over each rule-cleaned source: scores written, the best kept."""
    from aiayn.data.errors import DataError
    from aiayn.dual_scores import REASON, cut, dual_scores, keep_lines, train_scorers, write_scores

    if a.score_with == ["auto"]:
        if len(cleaned) != 1:
            raise DataError("--score-with auto trains scorers on one corpus: give RUN_F RUN_B for several sources")
        run_f, run_b = train_scorers(cleaned[0].files, langs, out, a.scorer_steps, a.scorer_config, options.bars)
    elif len(a.score_with) == 2:
        run_f, run_b = a.score_with
    else:
        raise DataError("--score-with takes RUN_F RUN_B (forward and backward runs), or auto")
    model: dict = {
        "runs": [str(run_f), str(run_b)],
        "method": a.score_method,
        "keep_best": a.keep_best,
        "max_score": a.max_score,
        "sources": {},
    }
    for c in cleaned:
        scores = dual_scores(str(run_f), str(run_b), c.files[0], c.files[1], a.device, options.bars, a.score_method)
        write_scores(out / f"{c.name}.scores", scores)
        keep, threshold = cut(scores, a.keep_best, a.max_score)
        removed_tsv = out / f"{c.name}.removed.tsv" if a.write_removed else None
        examples = keep_lines(c.files, keep, c.kept_lines, removed_tsv)
        removed = int((~keep).sum())
        c.kept -= removed
        c.removed[REASON] = removed
        c.examples[REASON] = examples
        model["sources"][c.name] = {"threshold": threshold, "removed": removed, "kept": c.kept}
        print(
            f"{c.name}: dual cross-entropy ({a.score_method}) kept {c.kept:,}, "
            f"removed {removed:,} (score above {threshold:.3f})"
        )
    return model
