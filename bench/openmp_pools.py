"""Two OpenMP thread pools in torch's runtime slow torch's small ops down (docs/benchmarks.md, issue 26).

    python bench/openmp_pools.py ct2                  # small ops before / after CTranslate2 decodes here
    python bench/openmp_pools.py threads              # a small add on one thread, then with a second pool
    python bench/openmp_pools.py translate RUN        # beam 4 on the thread that loaded RUN vs another
    python bench/openmp_pools.py ct2-alone            # CTranslate2 on 1 and 2 threads, no torch loaded

ct2: times a few small torch ops (2 threads), builds CTranslate2's translator for bench/throughput.py's
small model, times them again, decodes one 64-sentence batch with it, times them again; then shows
where CTranslate2's OpenMP calls land: a translator with intra_threads=1 leaves torch's own thread
count at 1. threads: a 65k-float add in the main thread alone, while a second Python thread that ran
parallel torch ops is alive, and after it ended; then the same add on a worker thread before and
after the main thread ran one parallel op. translate: RUN's 500 first Multi30k test sentences (beam 4,
2 threads) decoded on the thread that loaded the model, on a second thread after the main thread loaded
it, and on a thread that did both, each in a fresh process. ct2-alone: exports the small model, then
times CTranslate2 greedy and beam 4 at 1 and 2 threads in processes that never import torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def per_call_us(f: Callable[[], object], n: int = 200) -> float:
    for _ in range(5):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def ct2() -> None:
    import torch

    sys.path.insert(0, str(HERE))
    from aiayn.config import ModelConfig
    from throughput import VOCAB, build_decode, make_batches

    torch.set_num_threads(2)
    a, w, x = torch.randn(256, 256), torch.randn(8000, 256), torch.randn(256, 8000)
    q, k = torch.randn(2048, 1, 32), torch.randn(2048, 32, 13)
    ln = torch.nn.LayerNorm(256)
    ops = {
        "add 256x256": lambda: a + a,
        "LayerNorm 256x256": lambda: ln(a),
        "bmm 2048x(1x32)@(32x13)": lambda: torch.bmm(q, k),
        "log_softmax 256x8000": lambda: x.log_softmax(-1),
        "mm 256x256 @ 256x8000": lambda: a @ w.t(),
    }

    def probe(label: str) -> None:
        print(f"{label:28s} " + "  ".join(f"{n} {per_call_us(f):.0f} us" for n, f in ops.items()), flush=True)

    c, src = ModelConfig.preset("small", VOCAB), make_batches(1, 1)[0][0]
    with tempfile.TemporaryDirectory() as tmp:
        probe("before")
        run = build_decode("ct2-float32", c, 0, 4, 25, 2, Path(tmp))
        probe("CTranslate2 loaded")
        run(src)
        probe("after one CTranslate2 decode")
        torch.set_num_threads(1)
        torch.set_num_threads(2)
        time.sleep(3)
        probe("set_num_threads, 3 s later")
        before = torch.get_num_threads()
        one = build_decode("ct2-float32", c, 0, 1, 25, 1, Path(tmp))
        one(src[:2])
        print(f"torch threads {before} -> {torch.get_num_threads()} once an intra_threads=1 translator has decoded")


def threads() -> None:
    import threading

    import torch

    torch.set_num_threads(2)
    a = torch.randn(256, 256)
    out: dict[str, float] = {}

    def worker() -> None:
        out["us"] = per_call_us(lambda: a + a)

    for label in ("worker thread, the main thread has run no parallel op", "worker thread after main ran one"):
        if label.endswith("one"):
            torch.randn(512, 512) + 1  # noqa: B018  (a parallel region on the main thread)
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        print(f"{label}: add {out['us']:.0f} us")
    print(f"main thread, its own pool only: add {per_call_us(lambda: a + a):.0f} us")
    hold = threading.Event()

    def second() -> None:
        b = torch.randn(512, 512)
        for _ in range(20):
            b + b  # parallel regions run from this thread: it gets a pool of its own
        hold.wait()

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.5)
    print(f"main thread while a second thread that ran parallel ops is alive: add {per_call_us(lambda: a + a):.0f} us")
    hold.set()
    t.join()
    print(f"main thread after it ended: add {per_call_us(lambda: a + a):.0f} us")


def translate_child(run: str, mode: str) -> None:
    import gzip
    import threading

    import torch

    from aiayn import Translator

    torch.set_num_threads(2)
    data = os.environ["AIAYN_DATA_DIR"]
    lines = gzip.open(os.path.join(data, "test_2016_flickr.de.gz"), "rt", encoding="utf-8").read().splitlines()[:500]
    held: dict[str, object] = {}

    def load() -> None:
        held["t"] = Translator.load(run, "cpu", engine="torch")

    def decode() -> None:
        t = held["t"]
        t.translate(lines[:50], beam=4)  # type: ignore[attr-defined]  # warm-up
        start = time.perf_counter()
        t.translate(lines, beam=4)  # type: ignore[attr-defined]
        held["s"] = time.perf_counter() - start

    if mode == "loading thread":
        load()
        decode()
    else:
        if mode == "second thread":
            load()
        worker = threading.Thread(target=decode if mode == "second thread" else lambda: (load(), decode()))
        worker.start()
        worker.join()
    print(f"{mode}: {held['s']:.2f} s for 500 sentences, beam 4, 2 threads", flush=True)


def ct2_alone_child(model: str, sources: str, threads: int, beam: int) -> None:
    import ctranslate2  # and no torch in this process

    tokens = json.loads(Path(sources).read_text())
    tr = ctranslate2.Translator(model, device="cpu", compute_type="float32", intra_threads=threads, inter_threads=1)

    def run() -> None:
        tr.translate_batch(tokens, beam_size=beam, length_penalty=0.6, max_decoding_length=25, min_decoding_length=25)

    run()
    start = time.perf_counter()
    for _ in range(3):
        run()
    rate = 25 * len(tokens) / ((time.perf_counter() - start) / 3)
    print(f"CTranslate2 alone, beam {beam}, {threads} thread(s): {rate:,.0f} tok/s", flush=True)


def ct2_alone() -> None:
    import torch

    sys.path.insert(0, str(HERE))
    from aiayn.config import EOS_ID, ModelConfig
    from aiayn.export import save_ctranslate2
    from aiayn.model import Transformer
    from throughput import VOCAB, make_batches

    c = ModelConfig.preset("small", VOCAB)
    torch.manual_seed(0)
    vocab = ["<pad>", "<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(4, c.vocab_size)]
    with tempfile.TemporaryDirectory() as tmp:
        save_ctranslate2(Transformer(c), vocab, Path(tmp) / "model", force=True)
        src = make_batches(1, 1)[0][0]
        sources = Path(tmp) / "sources.json"
        sources.write_text(json.dumps([[vocab[i] for i in row if i > EOS_ID] for row in src.tolist()]))
        for beam in (1, 4):
            for n in (1, 2, 1, 2):
                args = ["ct2-alone-child", str(Path(tmp) / "model"), str(sources), str(n), str(beam)]
                subprocess.run([sys.executable, __file__, *args], check=True)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    what = argv[0]
    if what == "ct2":
        ct2()
    elif what == "threads":
        threads()
    elif what == "translate" and len(argv) == 2:
        for mode in ("loading thread", "second thread", "a thread that loads and decodes") * 2:
            subprocess.run([sys.executable, __file__, "translate-child", argv[1], mode], check=True)
    elif what == "translate-child":
        translate_child(argv[1], argv[2])
    elif what == "ct2-alone":
        ct2_alone()
    elif what == "ct2-alone-child":
        ct2_alone_child(argv[1], argv[2], int(argv[3]), int(argv[4]))
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
