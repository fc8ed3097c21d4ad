"""`aiayn backtranslate`: target-language text -> synthetic training pairs with a reverse run; `aiayn distill`:
a teacher's translations of its training source -> a small, fast student. Parsing only; the work lives in
aiayn.synthetic and aiayn.distill."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    from aiayn.cli.translate import add_search_args, add_thread_args

    p = sub.add_parser(
        "backtranslate",
        help="turn text in the target language into training pairs, translated by a reverse run",
        description="Translate a monolingual file of the forward model's target language with a reverse run "
        "(or an ensemble) into synthetic source text, and write both sides as DIR/NAME.<lang>, line-aligned: "
        "a source a run mixes in with a weight (data.corpus sources). Streams, shows progress with its ETA, "
        "and resumes where it stopped. Takes aiayn translate's search flags; --sampling-topk samples each "
        "translation (Edunov et al. 2018), --tag marks the synthetic sources (Caswell et al. 2019).",
    )
    p.add_argument("-c", "--checkpoint", required=True, nargs="+", metavar="RUN", help="the reverse run(s)")
    p.add_argument("--input", required=True, help="the monolingual text, one sentence a line (plain or gzipped)")
    p.add_argument("-o", "--output", required=True, help="directory for NAME.<src> and NAME.<tgt>")
    p.add_argument("--name", default=None, help="the files' name (default: the input's name without suffixes)")
    p.add_argument("--tag", default=None, help="start every synthetic source line with this word, e.g. '<BT>'")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_search_args(p)
    add_thread_args(p)
    p.set_defaults(run=_backtranslate)


def _backtranslate(a: argparse.Namespace) -> int:
    from pathlib import Path

    from aiayn.checkpoint import find_in_run
    from aiayn.cli.translate import decode_config, resolve_members, say_engine
    from aiayn.config import Config
    from aiayn.data.sources import stem
    from aiayn.decode.translator import Translator
    from aiayn.errors import AiaynError
    from aiayn.synthetic import translate_into_pair, write_summary

    resolve_members(a)
    decode = decode_config(a)
    run, more = a.checkpoint[0], a.checkpoint[1:]
    config = find_in_run(run, "config.yaml")
    if config is None:
        raise AiaynError(f"{run}: no config.yaml to say its languages; give a run directory")
    data = Config.load(str(config)).data
    mono_lang, synthetic_lang = data.src_lang, data.tgt_lang  # the reverse run reads the monolingual side
    text = Path(a.input)
    name = a.name or stem(text)
    out = Path(a.output)
    t = Translator.load(
        run, device=a.device, ensemble=more, int8=a.int8, decode=decode, engine=a.engine,
        threads=a.threads, replicas=a.replicas,
    )  # fmt: skip
    say_engine(t)
    done = translate_into_pair(
        t, text, out / f"{name}.{synthetic_lang}", out / f"{name}.{mono_lang}", tag=a.tag,
        progress=not a.no_progress and sys.stderr.isatty(),
    )  # fmt: skip
    summary = {
        "input": str(text),
        "runs": a.checkpoint,
        "files": {synthetic_lang: str(out / f"{name}.{synthetic_lang}"), mono_lang: str(out / f"{name}.{mono_lang}")},
        "tag": a.tag,
        "decode": {k: getattr(decode, k) for k in ("beam", "length_penalty", "sampling_topk", "sampling_temperature")},
        **done,
    }
    write_summary(out / f"{name}.json", summary)
    resumed = f" (resumed after line {done['resumed_after']:,})" if done["resumed_after"] else ""
    files = summary["files"]
    print(f"{done['lines']:,} lines: {files[synthetic_lang]} (synthetic) and {files[mono_lang]}{resumed}")
    return 0


def register_distill(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "distill",
        help="a small, fast student trained on a teacher's translations, exported int8 for LibreTranslate",
        description="Sequence-level distillation (Kim & Rush 2016) in one resumable command: the teacher "
        "(a run, an ensemble, or a run whose default weights are an average) translates its own training "
        "source; a student preset made to decode fast trains on those translations with the teacher's "
        "tokenizer, validated on the original pairs; the student is exported as an int8 CTranslate2 model "
        "and an Argos Translate package. Every stage is kept in DIR and skipped when done; killed, the same "
        "command continues.",
    )
    p.add_argument("-c", "--checkpoint", required=True, nargs="+", metavar="RUN", help="the teacher run(s)")
    p.add_argument("-o", "--output", required=True, help="directory for every stage")
    p.add_argument(
        "--student",
        default="deep-shallow",
        help="the student's model preset: deep-shallow (6 encoder layers, 1 decoder layer, d_model 128), "
        "narrow (d_model 64, 4+2 layers), or any of aiayn model --help's (default: deep-shallow)",
    )
    p.add_argument("--steps", type=int, default=20_000, help="the student's updates (default 20,000)")
    p.add_argument("--beam", type=int, default=None, help="the teacher's beam (default: its run's decode.beam)")
    p.add_argument(
        "--keep-best",
        type=float,
        default=None,
        help="keep this share of the pairs, those the teacher translates closest to their original target "
        "(sentence chrF); default: all",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=_distill)
    from aiayn.cli._args import collect_overrides

    collect_overrides(p)  # --train.field / --optim.field ... for the student


def _distill(a: argparse.Namespace) -> int:
    from pathlib import Path

    from aiayn.cli.translate import resolve_members
    from aiayn.config import parse_overrides
    from aiayn.distill import distill

    resolve_members(a)
    records = distill(
        a.checkpoint,
        Path(a.output),
        preset=a.student,
        steps=a.steps,
        beam=a.beam,
        keep_best=a.keep_best,
        overrides=parse_overrides(a.overrides),
        progress=not a.no_progress and sys.stderr.isatty(),
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )
    print(f"student: {records['train']['run']}; {records['export']['argos']}")
    return 0
