"""Whole files through each decoding engine, each in a fresh process: what a user of `aiayn translate` gets.

    python bench/translate.py RUN SRC [REF] [--engines torch,ctranslate2,ct2-direct,...] [--beam 4]
                              [--threads 2] [--replicas 0] [--rounds 3] [--json out.json]

Per engine and round, one new process loads the run (Translator.load(RUN, "cpu", engine=..., int8=...);
CTranslate2's export is built before the first round, so no round pays for it), translates the first
`--warmup` lines, then the whole file once, timed. `ct2-direct` is the peer: CTranslate2 used as its own
documentation shows, in a process that never imports torch or aiayn's decoding: sentencepiece pieces
of each line into `translate_batch` on the run's export, with its own token batching (sorted by length,
`max_batch_size` = the run's decode.max_tokens / beam source tokens), its own beam search (patience 1) and
length penalty, the run's beam, length penalty and max length b. Engines run in alternating order from round to round
(one order forwards, the next backwards) so a drift of the machine does not favour one engine.
Reported per engine, medians over the rounds: decode_s (the timed pass, inside the process; with
`--passes N` > 1 the median of passes 2..N, a warm process, and first_s the first pass), command_s
(the whole process: start, imports, load, warm-up, decode), sentences/s and output pieces/s of
decode_s, and sacreBLEU against REF when given. One JSON object per engine on stdout; --json also
writes them all to a file.

Threads: `--threads N` intra-op threads per engine (torch.set_num_threads, CTranslate2's intra_threads),
`--replicas R` CTranslate2 batches decoded at once (inter_threads, for ctranslate2 and ct2-direct alike).
0 leaves the choice to each engine: `--threads 0 --replicas 0` measures every engine with its own
defaults (Translator.load's layout for ctranslate2: aiayn.decode.engines.ctranslate2_layout; CTranslate2's
own for ct2-direct).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGINES = ("torch", "ctranslate2", "ct2-direct", "torch-int8", "ctranslate2-int8", "ct2-direct-int8")


def _direct(a: argparse.Namespace, int8: bool) -> int:
    """CTranslate2 and sentencepiece alone on the run's export (no torch): the peer's own numbers."""
    import ctranslate2
    import sentencepiece
    import yaml

    from aiayn.config import DecodeConfig

    cfg = Path(a.run) / "config.yaml"
    d = DecodeConfig(**(yaml.safe_load(cfg.read_text()).get("decode") or {}) if cfg.is_file() else {})
    export = Path(a.export)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(export / "spm.model"))
    tr = ctranslate2.Translator(
        str(export),
        device="cpu",
        compute_type="int8" if int8 else "default",
        intra_threads=a.threads,
        inter_threads=max(1, a.replicas),
    )
    lines = Path(a.src).read_text(encoding="utf-8").splitlines()

    def translate(batch: list[str]) -> list[str]:
        res = tr.translate_batch(
            sp.encode(batch, out_type=str),
            beam_size=a.beam,
            length_penalty=d.length_penalty,
            max_decoding_length=int(d.max_len_b) + 256,  # CTranslate2 has no a*src+b: b past the longest input
            max_batch_size=max(1, d.max_tokens // a.beam),
            batch_type="tokens",
        )
        return sp.decode([r.hypotheses[0] for r in res])

    translate(lines[: a.warmup])
    times = []
    for _ in range(a.passes):
        start = time.perf_counter()
        out = translate(lines)
        times.append(time.perf_counter() - start)
    assert "torch" not in sys.modules, "the direct CTranslate2 worker imported torch"
    Path(a.out).write_text("".join(x + "\n" for x in out), encoding="utf-8")
    pieces = sum(len(x) + 1 for x in sp.encode(out))
    print(json.dumps({"decode_s": times, "sentences": len(lines), "pieces": pieces, "engine": "ct2-direct"}))
    return 0


def _worker(a: argparse.Namespace) -> int:
    """One engine, one round: load, warm up, translate the file once; JSON on stdout."""
    if a.worker.startswith("ct2-direct"):
        return _direct(a, a.worker.endswith("int8"))
    import torch

    from aiayn import Translator

    if a.threads:
        torch.set_num_threads(a.threads)
    engine, _, int8 = a.worker.partition("-")
    lines = Path(a.src).read_text(encoding="utf-8").splitlines()
    t = Translator.load(a.run, "cpu", engine=engine, int8=bool(int8), threads=a.threads, replicas=a.replicas)
    t.translate(lines[: a.warmup], beam=a.beam)
    times = []
    for _ in range(a.passes):
        start = time.perf_counter()
        out = t.translate(lines, beam=a.beam)
        times.append(time.perf_counter() - start)
    Path(a.out).write_text("".join(x + "\n" for x in out), encoding="utf-8")
    pieces = sum(len(ids) + 1 for ids in t.tokenizer.encode_batch(out))  # generated pieces + EOS
    print(json.dumps({"decode_s": times, "sentences": len(lines), "pieces": pieces, "engine": t.engine}))
    return 0


def _round(a: argparse.Namespace, name: str, out: Path) -> dict:
    cmd = [sys.executable, __file__, a.run, a.src, "--worker", name, "--out", str(out)]
    cmd += ["--beam", str(a.beam), "--threads", str(a.threads), "--replicas", str(a.replicas)]
    cmd += ["--warmup", str(a.warmup), "--passes", str(a.passes)]
    cmd += ["--export", str(a.exports.get(name, ""))]
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    command_s = time.perf_counter() - start
    if p.returncode != 0:
        raise SystemExit(f"{name} failed:\n{p.stderr[-3000:]}")
    row = json.loads(p.stdout.strip().splitlines()[-1])
    row["first_s"], row["decode_s"] = row["decode_s"][0], statistics.median(row["decode_s"][1:] or row["decode_s"])
    row["command_s"] = command_s
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run")
    p.add_argument("src")
    p.add_argument("ref", nargs="?")
    p.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=2, help="intra-op threads per engine (0: each engine's own)")
    p.add_argument("--replicas", type=int, default=0, help="CTranslate2 replicas (0: each engine's own)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=16, help="lines translated before the timed pass")
    p.add_argument(
        "--passes",
        type=int,
        default=1,
        help="timed passes over the file per process: with more than 1, decode_s is the median of the passes "
        "after the first (a warm process), first_s the first",
    )
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--export", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.passes < 1:
        p.error("--passes must be >= 1")
    if a.worker:
        return _worker(a)
    names = [e for e in a.engines.split(",") if e]
    unknown = [e for e in names if e not in ENGINES]
    if unknown:
        p.error(f"unknown engines {unknown}; choose from {', '.join(ENGINES)}")
    from aiayn.export import cached_export

    a.exports = {}
    for name in names:  # the exports are artifacts of the run: built once, outside the timed rounds
        if name.startswith("ct"):
            a.exports[name] = cached_export(a.run, quantization="int8" if name.endswith("int8") else None)[0]
    rows: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name in names[:: 1 if r % 2 == 0 else -1]:
                rows[name].append(_round(a, name, Path(tmp) / f"{name}.txt"))
        results = []
        for name in names:
            runs = rows[name]
            decode_s = statistics.median(x["decode_s"] for x in runs)
            row = {
                "engine": name,
                "decoded_by": runs[0]["engine"],
                "beam": a.beam,
                "threads": a.threads,
                "replicas": a.replicas,
                "rounds": a.rounds,
                "sentences": runs[0]["sentences"],
                "passes": a.passes,
                "decode_s": round(decode_s, 3),
                "first_s": round(statistics.median(x["first_s"] for x in runs), 3),
                "command_s": round(statistics.median(x["command_s"] for x in runs), 3),
                "sentences_per_s": round(runs[0]["sentences"] / decode_s, 1),
                "pieces_per_s": round(statistics.median(x["pieces"] / x["decode_s"] for x in runs), 1),
            }
            if a.ref:
                import sacrebleu

                hyps = (Path(tmp) / f"{name}.txt").read_text(encoding="utf-8").splitlines()
                refs = Path(a.ref).read_text(encoding="utf-8").splitlines()
                row["bleu"] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
            print(json.dumps(row), flush=True)
            results.append(row)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
