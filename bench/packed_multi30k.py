"""Multi30k de->en test (1,000 lines): a run's translations with and without MKL-packed weights.

    AIAYN_DATA_DIR=... python bench/packed_multi30k.py RUN_DIR [--threads 2] [--rounds 2]

Translator.load(RUN, "cpu", engine="torch") (nn.Linear) against Translator.load(RUN, "cpu", packed=True) (the decoder's
weights packed by aiayn.model.cpu_layout), greedy and beam 4 (length penalty 0.6), rounds in
alternating order: how many output lines differ, sacreBLEU of each against the test references, and
the wall and process CPU time of each whole translation.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import time

import sacrebleu
import torch

from aiayn import Translator


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = os.environ["AIAYN_DATA_DIR"]
    lines = gzip.open(os.path.join(data, "test_2016_flickr.de.gz"), "rt", encoding="utf-8").read().splitlines()
    refs = gzip.open(os.path.join(data, "test_2016_flickr.en.gz"), "rt", encoding="utf-8").read().splitlines()
    engines = {
        "plain": Translator.load(args.run, "cpu", engine="torch"),
        "packed": Translator.load(args.run, "cpu", packed=True),
    }
    for beam in (1, 4):
        out: dict[str, list[str]] = {}
        wall: dict[str, list[float]] = {name: [] for name in engines}
        cpu: dict[str, list[float]] = {name: [] for name in engines}
        for r in range(args.rounds):
            for name, t in list(engines.items())[:: 1 if r % 2 == 0 else -1]:
                w, c = time.perf_counter(), time.process_time()
                out[name] = t.translate(lines, beam=beam, length_penalty=0.6)
                wall[name].append(time.perf_counter() - w)
                cpu[name].append(time.process_time() - c)
        diff = sum(a != b for a, b in zip(out["plain"], out["packed"]))
        bleu = {name: sacrebleu.corpus_bleu(o, [refs]).score for name, o in out.items()}
        speed = statistics.median(a / b for a, b in zip(wall["plain"], wall["packed"]))
        cpu_speed = statistics.median(a / b for a, b in zip(cpu["plain"], cpu["packed"]))
        print(
            f"beam {beam}: {len(lines)} lines, {diff} differ; sacreBLEU plain {bleu['plain']:.2f}, packed "
            f"{bleu['packed']:.2f}; plain/packed time {speed:.2f}x (CPU time {cpu_speed:.2f}x), "
            f"packed {statistics.median(wall['packed']):.2f} s per 1,000 lines, {args.threads} thread(s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
