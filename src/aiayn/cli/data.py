"""`aiayn data get multi30k`: download Multi30k into the cache, or verify an offline mirror.
`aiayn data get wmt14 --pair en-de`: download WMT14 and write its train/valid/test files into the cache.
`aiayn data prepare --config C`: validate, train BPE and encode a config's corpus into the cache as its
task does (what `aiayn train` does implicitly), with worker processes and a progress bar."""

from __future__ import annotations

import argparse
import sys

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
