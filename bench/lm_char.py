"""Character-level language modelling on Tiny Shakespeare: aiayn's decoder-only model against nanoGPT's
own train.py, side by side on this machine (issue 24).

    python bench/lm_char.py --nanogpt PATH/TO/nanoGPT            # the shape of nanoGPT's CPU recipe
    python bench/lm_char.py --nanogpt PATH --aiayn-only --config tinyshakespeare_char \
        --set optim.lr_scale=1 --set train.max_steps=3000      # another recipe of ours, same yardstick

nanoGPT runs as its README's CPU recipe: `train.py config/train_shakespeare_char.py --device=cpu
--compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4
--n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0`, in a temporary copy of its checkout,
after its own data/shakespeare_char/prepare.py on the same input.txt. aiayn runs `aiayn train` with
the packaged tinyshakespeare_char recipe (same shape: 4 layers, 4 heads, d_model 128, context 64, 12 blocks
a batch, 2,000 updates, dropout 0).

Both are timed as whole processes (wall seconds, start to exit; data preparation excluded for nanoGPT,
included for aiayn, whose cache is warm after the first repeat) and the runs alternate. Both final
models are then scored the same way: mean cross-entropy (nats per character) over the whole validation
text (the last 10 % of the characters) cut into consecutive windows of 64 characters, each character
predicted from the earlier ones of its window; nanoGPT's own figure (20 random batches) is reported too.
Results go to bench/results/lm_char.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

NANOGPT_ARGS = [
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--max_iters=2000",
    "--lr_decay_iters=2000",
    "--dropout=0.0",
    "--always_save_checkpoint=True",
]
BLOCK = 64


def run_timed(cmd: list[str], cwd: Path | None, env: dict[str, str], log: Path) -> float:
    t = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t
    if code:
        sys.exit(f"{' '.join(cmd)} failed ({code}); see {log}")
    return wall


@torch.no_grad()
def windows_loss(logits_of, ids: np.ndarray, batch: int = 64) -> float:
    """Mean cross-entropy over consecutive windows of BLOCK + 1 ids (the last id of one is the first of the next)."""
    n = (len(ids) - 1) // BLOCK
    total, count = 0.0, 0
    for k in range(0, n, batch):
        starts = np.arange(k, min(n, k + batch)) * BLOCK
        w = torch.from_numpy(np.stack([ids[s : s + BLOCK + 1] for s in starts]).astype(np.int64))
        logits = logits_of(w[:, :-1].contiguous())  # (B, T, V)
        total += F.cross_entropy(logits.flatten(0, 1).float(), w[:, 1:].reshape(-1), reduction="sum").item()
        count += w[:, 1:].numel()
    return total / count


def nanogpt_run(src: Path, input_txt: Path, work: Path, env: dict[str, str]) -> dict:
    repo = work / "nanoGPT"
    if not repo.exists():
        shutil.copytree(src, repo, ignore=shutil.ignore_patterns(".git", "out*"))
        shutil.copy(input_txt, repo / "data/shakespeare_char/input.txt")
        subprocess.run(
            [sys.executable, "data/shakespeare_char/prepare.py"], cwd=repo, env=env, check=True, capture_output=True
        )
    out = work / "out-nanogpt"
    shutil.rmtree(out, ignore_errors=True)
    log = work / "nanogpt.log"
    wall = run_timed(
        [sys.executable, "train.py", "config/train_shakespeare_char.py", *NANOGPT_ARGS, f"--out_dir={out}"],
        repo,
        env,
        log,
    )
    own = [float(v) for v in re.findall(r"step 2000: train loss [\d.]+, val loss ([\d.]+)", log.read_text())]
    sys.path.insert(0, str(repo))
    from model import GPT, GPTConfig  # nanoGPT's own model.py

    ckpt = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False)
    model = GPT(GPTConfig(**ckpt["model_args"]))
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
    model.eval()
    meta = pickle.loads((repo / "data/shakespeare_char/meta.pkl").read_bytes())
    text = input_txt.read_text()
    val = np.array([meta["stoi"][c] for c in text[int(len(text) * 0.9) :]], dtype=np.int64)
    full = windows_loss(lambda x: model(x, x)[0], val)  # targets given: logits at every position
    return {
        "wall_s": round(wall, 1),
        "val_loss_full": round(full, 4),
        "val_loss_own_estimate": own[-1] if own else None,
        "iters": ckpt["iter_num"],
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def aiayn_run(config: str, sets: list[str], work: Path, env: dict[str, str], threads: int) -> dict:
    run = work / "run-aiayn"
    shutil.rmtree(run, ignore_errors=True)
    overrides = [x for s in sets for x in ("--" + s.split("=", 1)[0], s.split("=", 1)[1])]
    cmd = [
        sys.executable,
        "-m",
        "aiayn",
        "train",
        "--config",
        config,
        "--run-dir",
        str(run),
        "--train.progress",
        "false",
        "--train.threads",
        str(threads),
        *overrides,
    ]
    wall = run_timed(cmd, None, env, work / "aiayn.log")
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in recs if r["kind"] == "valid"]
    from aiayn.checkpoint import load_model
    from aiayn.data.text import prepare_text
    from aiayn.train.tasks.lm import document_stream

    cfg_path = run / "config.yaml"
    from aiayn.config import Config

    prepared = prepare_text(Config.load(str(cfg_path)).data)
    model = load_model(sorted((run / "checkpoints").glob("step_*.safetensors"))[-1])
    full = windows_loss(lambda x: model(x), np.asarray(document_stream(prepared.splits["valid"]), dtype=np.int64))
    return {
        "wall_s": round(wall, 1),
        "val_loss_full": round(full, 4),
        "val_loss_own": valid[-1]["nll"],
        "steps": valid[-1]["step"],
        "parameters": sum(p.numel() for p in model.parameters()),
        "sample": subprocess.run(
            [
                sys.executable,
                "-m",
                "aiayn",
                "generate",
                "-c",
                str(run),
                "ROMEO:",
                "--max-tokens",
                "300",
                "--seed",
                "1",
                "--temperature",
                "0.8",
            ],
            capture_output=True,
            text=True,
            env=env,
        ).stdout,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nanogpt", help="a checkout of github.com/karpathy/nanoGPT")
    p.add_argument(
        "--input",
        default=os.environ.get("AIAYN_TINYSHAKESPEARE", "input.txt"),
        help="Tiny Shakespeare's input.txt (a file or its directory)",
    )
    p.add_argument("--config", default="tinyshakespeare_char")
    p.add_argument("--set", action="append", default=[], help="aiayn override SECTION.FIELD=VALUE (repeatable)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--aiayn-only", action="store_true")
    p.add_argument("--label", default="same shape")
    p.add_argument("--out", default="bench/results/lm_char.json")
    a = p.parse_args()
    input_txt = Path(a.input)
    input_txt = input_txt / "input.txt" if input_txt.is_dir() else input_txt
    os.environ["AIAYN_TINYSHAKESPEARE"] = str(input_txt)  # for the scoring in this process too
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(a.repeats):
            order = ["aiayn"] if a.aiayn_only else (["nanogpt", "aiayn"] if r % 2 == 0 else ["aiayn", "nanogpt"])
            row: dict = {}
            for engine in order:
                if engine == "nanogpt":
                    if not a.nanogpt:
                        sys.exit("--nanogpt PATH is needed (or --aiayn-only)")
                    row["nanogpt"] = nanogpt_run(Path(a.nanogpt), input_txt, work, env)
                else:
                    row["aiayn"] = aiayn_run(a.config, a.set, work, env, a.threads)
                print(engine, {k: v for k, v in row[engine].items() if k != "sample"}, flush=True)
            if "nanogpt" in row:
                row["wall_ratio_aiayn_over_nanogpt"] = round(row["aiayn"]["wall_s"] / row["nanogpt"]["wall_s"], 3)
            rows.append(row)
    print(rows[-1]["aiayn"]["sample"])
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "label": a.label,
        "machine": platform.processor() or platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
        "threads": a.threads,
        "torch": torch.__version__,
        "config": a.config,
        "overrides": a.set,
        "rows": rows,
    }
    out = Path(a.out)
    old = json.loads(out.read_text()) if out.is_file() else []
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(old + [result], indent=1) + "\n")
    if any("nanogpt" in r for r in rows):
        ratios = [r["wall_ratio_aiayn_over_nanogpt"] for r in rows if "wall_ratio_aiayn_over_nanogpt" in r]
        print(
            f"wall time aiayn / nanoGPT: {', '.join(map(str, ratios))} (median "
            f"{sorted(ratios)[len(ratios) // 2]}); val loss (full) aiayn "
            f"{rows[-1]['aiayn']['val_loss_full']} vs nanoGPT {rows[-1]['nanogpt']['val_loss_full']}"
        )


if __name__ == "__main__":
    main()
