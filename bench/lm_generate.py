"""Generation speed of a decoder-only run on each engine, each in a fresh process: what `aiayn generate`
gives a user.

    python bench/lm_generate.py RUN [--prompt "ROMEO:"] [--max-tokens 56] [--repeats 20] [--rounds 3]

Per engine (torch, ctranslate2) and round, one new process loads the run with
`LanguageModel.load(RUN, "cpu", engine=...)` (CTranslate2's export is built before the first round),
generates once to warm up, then `--repeats` greedy continuations of the prompt, timed one by one.
`--max-tokens` defaults to what fits the run's context after the prompt, since past it the ctranslate2
engine hands generation to the PyTorch model (aiayn.decode.lm). Engines alternate from round to round.
Reported per engine, medians over rounds: ms per continuation, generated tokens/s, and whether the
continuations equal the torch engine's (greedy: they should, token for token). `--threads` sets torch's
intra-op threads (CTranslate2's generator runs on one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

ENGINES = ("torch", "ctranslate2")


def _worker(a: argparse.Namespace) -> int:
    import torch

    from aiayn.decode.lm import LanguageModel
    from aiayn.decode.sampling import Sampling

    torch.set_num_threads(a.threads)
    lm = LanguageModel.load(a.run, "cpu", engine=a.worker)
    s = Sampling(temperature=0, max_tokens=a.max_tokens)
    text = lm.generate(a.prompt, s)
    times = []
    for _ in range(a.repeats):
        start = time.perf_counter()
        lm.generate(a.prompt, s)
        times.append(time.perf_counter() - start)
    tokens = len(lm.tokenizer.encode(a.prompt + text)) - len(lm.tokenizer.encode(a.prompt))
    print(json.dumps({"engine": lm.engine, "seconds": statistics.median(times), "tokens": tokens, "text": text}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run")
    p.add_argument("--prompt", default="ROMEO:")
    p.add_argument("--max-tokens", type=int, default=0, help="0: as many as fit the context after the prompt")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return _worker(a)
    from aiayn.checkpoint import model_config
    from aiayn.decode.lm import LanguageModel
    from aiayn.export import cached_export

    lm = LanguageModel.load(a.run, "cpu", engine="torch")
    if not a.max_tokens:
        a.max_tokens = model_config(lm.model).max_positions - len(lm.prompt_ids(a.prompt))
    cached_export(a.run)  # built once, outside the timed rounds
    names = [e for e in a.engines.split(",") if e]
    rows: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(a.rounds):
        for name in names[:: 1 if r % 2 == 0 else -1]:
            cmd = [sys.executable, __file__, a.run, "--worker", name, "--prompt", a.prompt]
            cmd += ["--max-tokens", str(a.max_tokens), "--repeats", str(a.repeats), "--threads", str(a.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
            rows[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    results = []
    reference = rows[names[0]][0]["text"]
    for name in names:
        runs = rows[name]
        sec = statistics.median(x["seconds"] for x in runs)
        row = {
            "engine": name,
            "decoded_by": runs[0]["engine"],
            "max_tokens": a.max_tokens,
            "tokens": runs[0]["tokens"],
            "ms_per_continuation": round(1000 * sec, 2),
            "tokens_per_s": round(runs[0]["tokens"] / sec, 1),
            "same_text_as_" + names[0]: runs[0]["text"] == reference,
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
