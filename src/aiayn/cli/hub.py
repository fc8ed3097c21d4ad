"""`aiayn push`: parsing only; staging and upload live in aiayn.publish, hf:// loading in aiayn.hub."""

from __future__ import annotations

import argparse

from aiayn.cli._args import same_named


def _push(a: argparse.Namespace) -> int:
    from aiayn.errors import AiaynError
    from aiayn.publish import push_run

    if a.average_last < 1:
        raise AiaynError("--average-last must be >= 1")
    options = same_named(a, "private", "revision", "weights", "average_last", "ctranslate2", "token", "license")
    info = push_run(a.run_dir, a.repo_id, **options)
    at = f"@{a.revision}" if a.revision else ""
    print(f"pushed {a.run_dir} to {a.repo_id}{at}: commit {info.oid}")
    print(f'load it with Translator.load("hf://{a.repo_id}@{info.oid}") or aiayn translate -c hf://{a.repo_id}{at}')
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("push", help="upload a run's model to the Hugging Face Hub (load it as hf://REPO_ID)")
    p.add_argument("run_dir", metavar="RUN", help="run directory")
    p.add_argument("repo_id", metavar="REPO_ID", help="the Hub repository, user/model (created if missing)")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.add_argument("--revision", metavar="BRANCH", help="push to this branch (created if missing; default: main)")
    p.add_argument(
        "--weights",
        choices=["default", "best", "average", "newest"],
        default="default",
        help="default: what -c RUN loads (the file RUN/weights.json names, e.g. the quickstart's average; "
        "else as best), best (best.safetensors, else the newest checkpoint), newest (the newest step "
        "checkpoint) or average (of the last --average-last step checkpoints)",
    )
    p.add_argument("--average-last", type=int, default=5, metavar="K", help="checkpoints averaged by --weights average")
    p.add_argument("--ctranslate2", action="store_true", help="also upload the run's CTranslate2 export (ctranslate2/)")
    p.add_argument("--license", default="other", help="the model card's license (default: other)")
    p.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the saved login)")
    p.set_defaults(run=_push)
