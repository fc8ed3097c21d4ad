"""`aiayn translate` and `aiayn evaluate`. Parsing only; the work lives in Translator and evaluate."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO


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


def _add_search_args(p: argparse.ArgumentParser) -> None:
    # Defaults (None) come from the run's config.yaml `decode` section, else DecodeConfig (§6.1).
    p.add_argument("--beam", type=int, help="beam size; 1 = greedy (default: the run's decode.beam, else 4)")
    p.add_argument("--lenpen", type=float, help="GNMT length penalty alpha, 0 disables (default 0.6)")
    p.add_argument("--max-len-a", type=float, help="max output length = a * source length + b (default a=1.0)")
    p.add_argument("--max-len-b", type=int, help="(default b=50)")
    p.add_argument("--max-tokens", type=int, help="batch budget: source tokens x beam (default 8192)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if present; cpu with --int8)")
    p.add_argument("--int8", action="store_true",
                   help="int8 weights (one scale per output row) and int8 matrix products; CPU only")


def _members(a: argparse.Namespace) -> tuple[str | None, list[str]]:
    """-c A [B ...] -> (A, [B, ...]): A's run gives the decode defaults and --split's data."""
    return (a.checkpoint[0], a.checkpoint[1:]) if a.checkpoint else (None, [])


def _decode_defaults(checkpoint: str | None):
    from aiayn.checkpoint import find_in_run
    from aiayn.config import Config, DecodeConfig

    found = find_in_run(checkpoint, "config.yaml") if checkpoint else None
    return Config.load(str(found)).decode if found else DecodeConfig()


def _search_kw(a: argparse.Namespace) -> dict:
    from aiayn.errors import AiaynError

    d = _decode_defaults(_members(a)[0])
    pick = {"beam": d.beam, "lenpen": d.length_penalty, "max_len_a": d.max_len_a, "max_len_b": d.max_len_b,
            "max_tokens": d.max_tokens}
    for name, default in pick.items():
        if getattr(a, name) is None:
            setattr(a, name, default)
    if a.beam < 1 or a.lenpen < 0 or a.max_len_b < 0 or a.max_len_a < 0 or a.max_tokens < 1:
        raise AiaynError("need --beam >= 1, --lenpen >= 0, --max-len-a/b >= 0 and --max-tokens >= 1")
    if getattr(a, "n_best", 1) > a.beam or getattr(a, "n_best", 1) < 1:
        raise AiaynError(f"--n-best must lie in 1..beam ({a.beam})")
    return dict(beam=a.beam, length_penalty=a.lenpen, max_len_a=a.max_len_a, max_len_b=a.max_len_b)


def _translate(a: argparse.Namespace) -> int:
    from aiayn.decode.translator import Translator
    from aiayn.errors import AiaynError

    kw = _search_kw(a)
    if a.input and not os.path.isfile(a.input):
        raise AiaynError(f"input file not found: {a.input}")
    first, more = _members(a)
    assert first is not None  # -c is required here
    t = Translator.load(first, device=a.device, ensemble=more, max_tokens=a.max_tokens, int8=a.int8)
    src = open(a.input, "rb") if a.input else sys.stdin.buffer
    out = open(a.output, "wb") if a.output else sys.stdout.buffer
    bar = None
    if a.input and a.output:  # file to file: long work, show progress (stdout is not the output)
        from tqdm import tqdm

        bar = tqdm(total=_count_lines(a.input), unit="line", desc="translate", file=sys.stderr)
    seen = 0
    try:
        for lines in read_line_batches(src):
            nbest = t.translate_scored(lines, n_best=a.n_best, first_line=seen + 1, **kw)
            if a.n_best == 1:
                text = "".join(h[0][0] + "\n" for h in nbest)
            else:  # Moses n-best style: index ||| hypothesis ||| score
                text = "".join(f"{seen + i} ||| {hyp} ||| {score:.4f}\n"
                               for i, h in enumerate(nbest) for hyp, score in h)
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


def _evaluate(a: argparse.Namespace) -> int:
    import json

    from aiayn.evaluate import evaluate_run

    search = _search_kw(a)  # fills a.max_tokens too
    first, more = _members(a)
    res = evaluate_run(
        first, split=a.split, src=a.src, ref=a.ref, hyp=a.hyp, tokenized=a.tokenized_bleu,
        lang=a.lang, average_last=a.average_last, output=a.output, device=a.device,
        max_tokens=a.max_tokens, ensemble=more, int8=a.int8, **search)
    print(res["bleu_str"])
    print(f"  signature: {res['bleu_signature']}")
    print(res["chrf_str"])
    print(f"  signature: {res['chrf_signature']}")
    if "tokenized_bleu" in res:
        print(f"tokenized BLEU (lowercased, punctuation-normalised, Moses-tokenized; multi-bleu.perl) "
              f"= {res['tokenized_bleu']:.2f}")
    if a.json:
        print(json.dumps({k: v for k, v in res.items() if not k.endswith("_str")}))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate lines (stdin -> stdout, or files) with beam search")
    p.add_argument("-c", "--checkpoint", required=True, nargs="+", metavar="RUN",
                   help="run directory or .safetensors weights file; several: an ensemble (mean of their "
                        "probabilities; one spm.model)")
    p.add_argument("--input", help="source text file (default: stdin, streamed line by line)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument("--n-best", type=int, default=1,
                   help="print the N best hypotheses per line as 'i ||| text ||| score' (default 1)")
    _add_search_args(p)
    p.set_defaults(run=_translate)

    p = sub.add_parser("evaluate", help="translate a test set and score it: sacreBLEU + chrF (+ tokenized BLEU)")
    p.add_argument("-c", "--checkpoint", nargs="+", metavar="RUN",
                   help="run directory or .safetensors weights file; several: an ensemble (the first run's "
                        "data for --split)")
    p.add_argument("--split", help="test | valid | test_2016_flickr | val: the run's own data (config.yaml)")
    p.add_argument("--src", help="source file (with --ref)")
    p.add_argument("--ref", help="reference file")
    p.add_argument("--hyp", help="score this hypothesis file against --ref instead of translating")
    p.add_argument("--tokenized-bleu", action="store_true",
                   help="also report lowercased Moses-tokenized BLEU (published Multi30k/WMT protocol)")
    p.add_argument("--lang", help="target language for --tokenized-bleu (default: the run's data.tgt_lang)")
    p.add_argument("--average-last", type=int, default=0, metavar="K",
                   help="evaluate the average of the last K step checkpoints of the run (of each run)")
    p.add_argument("--output", help="also write the hypotheses to this file")
    p.add_argument("--json", action="store_true", help="also print the scores as one JSON line")
    _add_search_args(p)
    p.set_defaults(run=_evaluate)
