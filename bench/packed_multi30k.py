"""Multi30k de->en test (1,000 lines): a run's translations with and without transposed decoder weights.

    AIAYN_DATA_DIR=... python bench/transposed_multi30k.py RUN_DIR

Translator.load(RUN, "cpu") against Translator.load(RUN, "cpu", transposed=True) (aiayn.model.cpu_layout),
greedy and beam 4 (length penalty 0.6), 1 thread, two rounds in alternating order: how many output lines
differ and the process CPU time of each whole translation.
"""

from __future__ import annotations

import gzip
import os
import sys
import time

import torch

from aiayn import Translator


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    run = sys.argv[1]
    torch.set_num_threads(1)
    path = os.path.join(os.environ["AIAYN_DATA_DIR"], "test_2016_flickr.de.gz")
    lines = gzip.open(path, "rt", encoding="utf-8").read().splitlines()
    plain = Translator.load(run, "cpu")
    fast = Translator.load(run, "cpu", transposed=True)
    for beam in (1, 4):
        out: dict[str, list[str]] = {}
        cpu: dict[str, list[float]] = {"plain": [], "transposed": []}
        for r in range(2):
            pair = [("plain", plain), ("transposed", fast)]
            for name, t in pair if r == 0 else pair[::-1]:
                c = time.process_time()
                out[name] = t.translate(lines, beam=beam, length_penalty=0.6)
                cpu[name].append(time.process_time() - c)
        diff = sum(a != b for a, b in zip(out["plain"], out["transposed"]))
        ratios = [round(a / b, 3) for a, b in zip(cpu["plain"], cpu["transposed"])]
        print(f"beam {beam}: {len(lines)} lines, {diff} differ; plain/transposed CPU time per round {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
