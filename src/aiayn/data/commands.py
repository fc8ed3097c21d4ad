"""`aiayn data get multi30k`: download Multi30k into the cache, or verify an offline mirror."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="get and check corpora")
    dsub = p.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)

    g = dsub.add_parser("get", help="download a corpus into the cache ($AIAYN_HOME) or verify a mirror")
    g.add_argument("corpus", choices=["multi30k"])
    g.add_argument("--data-dir", default=None,
                   help="offline mirror laid out like multi30k/data/task1/raw (default: $AIAYN_DATA_DIR)")
    g.add_argument("--langs", default="cs,de,en,fr", help="comma-separated languages (default: all four)")
    g.add_argument("--base-url", default=None, help="download from here instead of the dataset repository")
    g.set_defaults(run=_get)


def _get(a: argparse.Namespace) -> int:
    from aiayn.data import multi30k

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
