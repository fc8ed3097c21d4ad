"""`aiayn generate` and `aiayn score` for decoder-only runs. Parsing only; the work is in decode.lm."""

from __future__ import annotations

import argparse
import sys

from aiayn.cli.translate import add_engine_arg, engine_line


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="continue a prompt with a decoder-only (task lm) model",
        description="Sample a continuation token by token on the model's cache and stream it to "
        "stdout. --temperature 0 is greedy.",
    )
    p.add_argument("-c", "--checkpoint", required=True, help="run directory or weights file")
    p.add_argument("prompt", nargs="?", default="", help="text to continue (default: none)")
    p.add_argument("--max-tokens", type=int, default=200, help="tokens to generate at most (default 200)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1.0)")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most probable tokens (0 = all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus: the smallest set with this mass (1 = all)")
    p.add_argument("--seed", type=int, default=None, help="make the sample reproducible")
    p.add_argument("-n", "--num-samples", type=int, default=1, help="independent samples (seeds seed, seed+1, ...)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if present)")
    add_engine_arg(p)

    def run(a: argparse.Namespace) -> int:
        from aiayn.decode.lm import LanguageModel
        from aiayn.decode.sampling import Sampling

        lm = LanguageModel.load(a.checkpoint, a.device, engine=a.engine)
        print(engine_line(lm.engine, lm.engine_reason), file=sys.stderr, flush=True)

        def show(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()

        try:
            for k in range(a.num_samples):
                seed = None if a.seed is None else a.seed + k
                s = Sampling(
                    temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, max_tokens=a.max_tokens, seed=seed
                )
                if a.num_samples > 1:
                    print(f"--- sample {k + 1}" + ("" if seed is None else f" (seed {seed})"), flush=True)
                sys.stdout.write(a.prompt)
                lm.generate(a.prompt, s, on_text=show)
                sys.stdout.write("\n")
                sys.stdout.flush()
        except ValueError as e:  # bad sampling settings
            from aiayn.errors import AiaynError

            raise AiaynError(str(e)) from None
        return 0

    p.set_defaults(run=run)

    p = sub.add_parser("score", help="log-likelihood and perplexity of each line under a decoder-only model")
    p.add_argument("-c", "--checkpoint", required=True, help="run directory or weights file")
    p.add_argument("--input", "-i", default="-", help="text file, one line per example (default: stdin)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default=None)

    def run_score(a: argparse.Namespace) -> int:
        import math

        from aiayn.data.io import read_lines
        from aiayn.decode.lm import LanguageModel

        lm = LanguageModel.load(a.checkpoint, a.device, engine="torch")  # scoring is the PyTorch model's
        lines = sys.stdin.read().splitlines() if a.input == "-" else read_lines(a.input)
        scored = lm.score(lines, a.batch_size)
        print("logprob\ttokens\tppl")
        for s in scored:
            print(f"{s.logprob:.4f}\t{s.tokens}\t{s.ppl:.3f}")
        total, n = sum(s.logprob for s in scored), sum(s.tokens for s in scored)
        print(
            f"{len(scored)} lines, {n} tokens: {-total / max(1, n):.4f} nats/token, perplexity "
            f"{math.exp(-total / max(1, n)):.3f}",
            file=sys.stderr,
        )
        return 0

    p.set_defaults(run=run_score)
