"""`aiayn translate` and `aiayn evaluate`. Parsing only; the work lives in Translator and evaluate."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from aiayn.cli._args import same_named
from aiayn.config import DecodeConfig


def read_line_batches(f: BinaryIO, chunk: int = 1 << 16) -> Iterator[list[str]]:
    """Complete lines as they arrive: each os.read returns what the pipe holds now (up to `chunk`
    bytes), so a line typed into a pipe is translated at once while a file is read in big batches.
    Bytes are decoded leniently (invalid UTF-8 -> U+FFFD); line endings are removed."""
    fd, rest = f.fileno(), b""
    while True:
        data = os.read(fd, chunk)
        if not data:
            break
        *lines, rest = (rest + data).split(b"\n")
        if lines:
            yield [ln.rstrip(b"\r").decode("utf-8", "replace") for ln in lines]
    if rest:
        yield [rest.rstrip(b"\r").decode("utf-8", "replace")]


def _count_lines(path: str) -> int:
    """Lines as read_line_batches yields them: newlines, plus a last line without one."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


def add_search_args(p: argparse.ArgumentParser) -> None:
    # Every setting left out (None) comes from the run's config.yaml `decode` section, else DecodeConfig
    # (§6.1); `decode_config` resolves them into one DecodeConfig.
    d, run = DecodeConfig(), "default: the run's decode"
    for flag, kind, what in (
        ("--beam", int, f"beam size; 1 = greedy ({run}.beam, else {d.beam})"),
        ("--lenpen", float, f"GNMT length penalty alpha, 0 disables ({run}.length_penalty, else {d.length_penalty})"),
        ("--max-len-a", float, f"max output length = a * source length + b ({run}.max_len_a/b, else a={d.max_len_a})"),
        ("--max-len-b", int, f"(default b={d.max_len_b})"),
        (
            "--patience",
            float,
            "beam search ends a sentence once beam x patience hypotheses have finished; inf: only when no live "
            f"beam can still win (exact; torch engine) ({run}.patience, else {d.patience:g})",
        ),
        ("--max-tokens", int, f"batch budget: source tokens x beam ({run}.max_tokens, else {d.max_tokens})"),
        (
            "--sampling-topk",
            int,
            "sample each translation instead of searching: 0 = from the whole distribution, K = from the K "
            f"likeliest pieces; 1 = search ({run}.sampling_topk, else {d.sampling_topk})",
        ),
        ("--sampling-temperature", float, f"the sampling's temperature (else {d.sampling_temperature:g})"),
        ("--seed", int, f"the sampling's seed (else {d.sampling_seed})"),
    ):
        p.add_argument(flag, type=kind, help=what)
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if present; cpu with --int8)")
    add_engine_arg(p)
    p.add_argument(
        "--int8",
        action="store_true",
        help="int8 weights (one scale per output row) and int8 matrix products; CPU only (CTranslate2: "
        "compute_type int8)",
    )


def add_engine_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "torch", "ctranslate2"],
        help="what decodes: auto (default) = CTranslate2 on the CPU when installed and the model allows "
        "(one model, full attention), else PyTorch; the choice and its reason go to stderr",
    )


def engine_line(engine: str, reason: str, layout: str = "") -> str:
    """The one stderr line that says which engine decodes, why, and (CTranslate2) on how many replicas."""
    how = f"; {layout}" if layout else ""
    if engine == "ctranslate2" and reason != "asked for":
        return f"engine: ctranslate2 ({reason}{how}; --engine torch for PyTorch)"
    return f"engine: {engine} ({'--engine ' + engine if reason == 'asked for' else reason}{how})"


def say_engine(t: Any) -> None:
    """Two stderr lines: which weights decode (`weights: FILE (step N; why that file)`: a run directory's
    default, aiayn.checkpoint.which_weights), then which engine (`engine_line`)."""
    print(f"weights: {t.weights}", file=sys.stderr, flush=True)
    layout = ""
    replicas = getattr(t.searcher, "replicas", None)
    if t.engine == "ctranslate2" and replicas is not None:
        threads = getattr(t.searcher, "threads", 0)
        each = f"{threads} thread{'s' if threads != 1 else ''}" if threads else "CTranslate2's threads"
        layout = f"{replicas} replica{'s' if replicas != 1 else ''} x {each}"
    print(engine_line(t.engine, t.engine_reason, layout), file=sys.stderr, flush=True)


def _members(a: argparse.Namespace) -> tuple[str | None, list[str]]:
    """-c A [B ...] -> (A, [B, ...]): A's run gives the decode defaults and --split's data."""
    return (a.checkpoint[0], a.checkpoint[1:]) if a.checkpoint else (None, [])


def _decode_defaults(checkpoint: str | None) -> DecodeConfig:
    """The `decode` section of the run's config.yaml (a run directory or a weights file in one), else
    DecodeConfig()."""
    if checkpoint is None:
        return DecodeConfig()
    from aiayn.decode.translator import run_decode_config

    return run_decode_config(checkpoint)


def decode_config(a: argparse.Namespace) -> DecodeConfig:
    """The one decoding configuration of this command: the first run's `decode` section, each flag given
    on the command line replacing its field; checked."""
    from aiayn.errors import AiaynError

    flags = {
        "beam": a.beam,
        "length_penalty": a.lenpen,
        "max_len_a": a.max_len_a,
        "max_len_b": a.max_len_b,
        "max_tokens": a.max_tokens,
        "patience": a.patience,
        "sampling_topk": a.sampling_topk,
        "sampling_temperature": a.sampling_temperature,
        "sampling_seed": a.seed,
    }
    d = dataclasses.replace(_decode_defaults(_members(a)[0]), **{k: v for k, v in flags.items() if v is not None})
    if d.beam < 1 or d.length_penalty < 0 or d.max_len_b < 0 or d.max_len_a < 0 or d.max_tokens < 1:
        raise AiaynError("need --beam >= 1, --lenpen >= 0, --max-len-a/b >= 0 and --max-tokens >= 1")
    if not d.patience >= 1:  # NaN too
        raise AiaynError(f"--patience must be >= 1 (inf: the exact stop), not {d.patience:g}")
    if d.sampling_topk < 0 or not d.sampling_temperature > 0:
        raise AiaynError("need --sampling-topk >= 0 (1: no sampling) and --sampling-temperature > 0")
    if getattr(a, "n_best", 1) > d.beam or getattr(a, "n_best", 1) < 1:
        raise AiaynError(f"--n-best must lie in 1..beam ({d.beam})")
    return d


def resolve_members(a: argparse.Namespace) -> None:
    """-c's hf://user/model paths -> their local directories (aiayn.hub.resolve_run), once, before any
    run file is read."""
    if a.checkpoint:  # without one (evaluate --hyp) nothing loads torch
        from aiayn.hub import resolve_run

        a.checkpoint = [str(resolve_run(c)) for c in a.checkpoint]


def _translate(a: argparse.Namespace) -> int:
    from aiayn.decode.translator import Translator
    from aiayn.errors import AiaynError

    resolve_members(a)
    decode = decode_config(a)
    if a.input and not os.path.isfile(a.input):
        raise AiaynError(f"input file not found: {a.input}")
    first, more = _members(a)
    assert first is not None  # -c is required here
    if a.threads < 0 or a.replicas < 0:
        raise AiaynError("--threads and --replicas must be >= 0 (0: chosen for you)")
    t = Translator.load(
        first,
        device=a.device,
        ensemble=more,
        int8=a.int8,
        decode=decode,
        engine=a.engine,
        threads=a.threads,
        replicas=a.replicas,
    )
    if t.engine == "torch" and a.threads:
        import torch

        torch.set_num_threads(a.threads)
    say_engine(t)
    if a.format is None:  # from the input's name: a Word document or a page is never read line by line
        from aiayn.documents.formats import format_of

        a.format = format_of(a.input or "") or "text"
    if a.document or a.format != "text":
        return _translate_document(a, t)
    src = open(a.input, "rb") if a.input else sys.stdin.buffer
    out = open(a.output, "wb") if a.output else sys.stdout.buffer
    bar = None
    if a.input and a.output:  # file to file: long work, show progress (stdout is not the output)
        from tqdm import tqdm

        bar = tqdm(total=_count_lines(a.input), unit="line", desc="translate", file=sys.stderr)
    seen = 0
    try:
        for lines in read_line_batches(src):
            nbest = t.translate_scored(lines, n_best=a.n_best, first_line=seen + 1)  # t.decode's search
            if a.n_best == 1:
                text = "".join(h[0][0] + "\n" for h in nbest)
            else:  # Moses n-best style: index ||| hypothesis ||| score
                text = "".join(
                    f"{seen + i} ||| {hyp} ||| {score:.4f}\n" for i, h in enumerate(nbest) for hyp, score in h
                )
            seen += len(lines)
            out.write(text.encode("utf-8"))
            out.flush()
            if bar is not None:
                bar.update(len(lines))
    finally:
        if bar is not None:
            bar.close()
        if a.input:
            src.close()
        if a.output:
            out.close()
    return 0


def run_languages(checkpoint: str) -> tuple[str, str]:
    """The run's data.src_lang and data.tgt_lang (its config.yaml), else DataConfig's defaults."""
    from aiayn.checkpoint import find_in_run
    from aiayn.config import Config, DataConfig

    found = find_in_run(checkpoint, "config.yaml")
    data = Config.load(str(found)).data if found else DataConfig()
    return data.src_lang, data.tgt_lang


def _translate_document(a: argparse.Namespace, t: Any) -> int:
    """--document / --format html / docx / pptx: the whole input is one document; every sentence of it is
    decoded in one call and the translation keeps the input's layout (aiayn.documents)."""
    from aiayn.data.sentence_starts import SentenceStarts, run_sentence_starts
    from aiayn.documents.flow import translate_now
    from aiayn.documents.formats import OFFICE, document
    from aiayn.documents.html import HtmlError
    from aiayn.documents.office import OfficeError
    from aiayn.errors import AiaynError

    if a.n_best != 1:
        raise AiaynError("--n-best works line by line: not with --document or --format html / docx / pptx")
    run = _members(a)[0] or ""
    run_source, target = run_languages(run)
    lang = a.source_lang or run_source
    starts = run_sentence_starts(run, lang) if run and a.run_on_cuts else SentenceStarts()
    where = a.input or "standard input"
    if a.input:
        with open(a.input, "rb") as f:
            data = f.read()
    else:
        data = sys.stdin.buffer.read()
    source: str | bytes = data
    if a.format not in OFFICE:
        try:  # a byte-order mark is not text; anything not UTF-8 is an error, not silently replaced
            source = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise AiaynError(f"{where} is not UTF-8 text (byte {e.start}: {data[e.start : e.start + 1]!r})") from None
    try:  # a page or file that cannot be read whole is refused, not translated in part
        doc = document(source, a.format, lang, target, starts)
        out = translate_now([doc], lambda sentences: t.translate(sentences), t.align)[0]
    except (HtmlError, OfficeError) as e:
        raise AiaynError(f"{where}: {e}") from None
    return _write_output(a, out if isinstance(out, bytes) else out.encode("utf-8"))


def _write_output(a: argparse.Namespace, out: bytes) -> int:
    """`out` to --output (whole or not at all), else to standard output."""
    if a.output:
        from pathlib import Path

        from aiayn.fileio import atomic_write

        atomic_write(a.output, lambda tmp: Path(tmp).write_bytes(out))
    else:
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
    return 0


def _evaluate(a: argparse.Namespace) -> int:
    """`aiayn evaluate`: the run's task scores it, through its TaskSpec's `evaluate` (translation's own is
    `evaluate` below)."""
    from aiayn.errors import AiaynError

    resolve_members(a)
    first = _members(a)[0]
    if first is None:  # --hyp scored against --ref: sacreBLEU only, torch never loads
        return evaluate(a)
    from aiayn.train.tasks import run_spec

    spec = run_spec(first)
    if spec.evaluate is None:
        raise AiaynError(f"task {spec.name} has no `aiayn evaluate`; `aiayn predict -c RUN` runs its model on lines")
    return int(spec.evaluate(a))


def evaluate(a: argparse.Namespace) -> int:
    """A translation run (or an ensemble) on its split or --src/--ref, or --hyp scored: BLEU, chrF."""
    import json

    from aiayn.evaluate import evaluate_run

    decode = decode_config(a)
    first, more = _members(a)
    res = evaluate_run(
        first,
        tokenized=a.tokenized_bleu,
        ensemble=more,
        decode=decode,
        on_load=say_engine,
        **same_named(a, "split", "src", "ref", "hyp", "lang", "average_last", "output", "device", "int8", "engine"),
    )
    print(res["bleu_str"])
    print(f"  signature: {res['bleu_signature']}")
    print(res["chrf_str"])
    print(f"  signature: {res['chrf_signature']}")
    if "tokenized_bleu" in res:
        print(
            f"tokenized BLEU (lowercased, punctuation-normalised, Moses-tokenized; multi-bleu.perl) "
            f"= {res['tokenized_bleu']:.2f}"
        )
    if a.json:
        print(json.dumps({k: v for k, v in res.items() if not k.endswith("_str")}))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    _add_translate(sub)
    _add_evaluate(sub)


def _add_translate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate lines (stdin -> stdout, or files) with beam search")
    p.add_argument(
        "-c",
        "--checkpoint",
        required=True,
        nargs="+",
        metavar="RUN",
        help="run directory (its default weights: RUN/weights.json's, else best.safetensors, else the newest "
        "checkpoint; stderr's first line names them), .safetensors weights file or hf://user/model[@REVISION] "
        "(the Hugging Face Hub); several: an ensemble (mean of their probabilities; one spm.model)",
    )
    p.add_argument("--input", help="source text file (default: stdin, streamed line by line)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument(
        "--n-best",
        type=int,
        default=1,
        help="print the N best hypotheses per line as 'i ||| text ||| score' (default 1)",
    )
    _add_document_args(p)
    add_search_args(p)
    add_thread_args(p)
    p.set_defaults(run=_translate)


def _add_document_args(p: argparse.ArgumentParser) -> None:
    """Input that is not one sentence a line: a document, an HTML page."""
    p.add_argument(
        "--document",
        action="store_true",
        help="the input is one document (paragraphs, blank lines): cut into sentences, all decoded in one "
        "batch, written back with the same layout (default: one line = one sentence). A line break always "
        "ends a sentence, so text wrapped inside a sentence is cut at its line ends",
    )
    p.add_argument(
        "--format",
        choices=["text", "html", "docx", "pptx"],
        default=None,
        help="html: the input is an HTML page or fragment; its text is translated with its inline markup "
        "carried over, script/style/code/pre and attributes other than alt/title untouched; docx, pptx: a "
        "Word document or a PowerPoint deck, each paragraph translated with its formatting carried over (all "
        "imply --document). Default: from the --input name (.html, .htm, .docx, .pptx), else text",
    )
    p.add_argument(
        "--source-lang",
        help="language of the input for sentence splitting with --document (default: the run's data.src_lang)",
    )
    p.add_argument(
        "--no-run-on-cuts",
        dest="run_on_cuts",
        action="store_false",
        help="--document / --format: cut sentences at punctuation and line breaks only (default: also where a "
        "sentence without a final stop runs into one that starts with a word the run learnt to start sentences)",
    )


def add_thread_args(p: argparse.ArgumentParser) -> None:
    """How many CPU threads decode, and in how many CTranslate2 replicas."""
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="intra-op threads: torch's, or each CTranslate2 replica's (default 0: on the CPU, one per "
        "replica for CTranslate2, torch's own choice for torch)",
    )
    p.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="CTranslate2: batches decoded at once (default 0: one per CPU core when --threads is 0)",
    )


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score a run with its task's measure (translation: sacreBLEU + chrF, + tokenized BLEU, of a test set; "
        "another task: its own measure)",
    )
    p.add_argument(
        "-c",
        "--checkpoint",
        nargs="+",
        metavar="RUN",
        help="run directory or .safetensors weights file; several: an ensemble (the first run's data for --split)",
    )
    p.add_argument("--split", help="test | valid | test_2016_flickr | val: the run's own data (config.yaml)")
    p.add_argument("--src", help="source file (with --ref)")
    p.add_argument("--ref", help="reference file")
    p.add_argument("--hyp", help="score this hypothesis file against --ref instead of translating")
    p.add_argument(
        "--tokenized-bleu",
        action="store_true",
        help="also report lowercased Moses-tokenized BLEU (published Multi30k/WMT protocol)",
    )
    p.add_argument("--lang", help="target language for --tokenized-bleu (default: the run's data.tgt_lang)")
    p.add_argument(
        "--average-last",
        type=int,
        default=0,
        metavar="K",
        help="evaluate the average of the last K step checkpoints of the run (of each run)",
    )
    p.add_argument("--output", help="also write the hypotheses to this file")
    p.add_argument("--json", action="store_true", help="also print the scores as one JSON line")
    add_search_args(p)
    p.set_defaults(run=_evaluate)
