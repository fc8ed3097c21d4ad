"""`aiayn data clean --score-with`: the model-based filter, from a forward and a backward run's conditional
cross-entropies (Junczys-Dowmunt, 2018, first in the WMT18 corpus-filtering task). The forward run scores
each pair by H_F = -log p(y|x) per target token, the backward run by H_B = -log p(x|y) per source token.
No rule sees a fluent sentence paired with the translation of another one; these scores do. Two ways to
combine them (`method`, lower is better):

    gain   (H_F(y|x) - H_F(y|nothing)) + (H_B(x|y) - H_B(x|nothing))      the default
    dcce   |H_F - H_B| + (H_F + H_B) / 2                                    the paper's

`gain` asks how much reading the other side helps each model predict a sentence: for an aligned pair a
lot, for a misaligned one almost nothing, whatever the sentence's own difficulty (rare words make a good
pair's H_F high too, which `dcce` counts against it). On the noisy Multi30k benchmark, with scorers trained
on the noisy data itself, `gain` removes more of the misaligned pairs for fewer of the clean ones
(docs/data.md). The runs can be trained on the data being cleaned (`train_scorers`, minutes on a CPU):
most of a noisy corpus is still aligned, and what a model trained on it cannot predict from the source
is what is not.

The kept pairs are the best `keep_best` share, or those scoring `max_score` or less; every score is
written (`<name>.scores`, one a pair of the rule-cleaned input, in its order), so a user can choose
another cut without scoring again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from aiayn.config import Config
from aiayn.data.errors import DataError
from aiayn.data.io import LineStream, decode_lines
from aiayn.decode.forced import ForcedScorer
from aiayn.errors import AiaynError
from aiayn.fileio import atomic_write, replacing

REASON = "dual_xent"  # the removed pairs' reason in the report
CHUNK = 20_000  # pairs scored at once: the text of one chunk is all this holds of the corpus
VALID_PAIRS = 500  # the scorers' validation pairs, from the start of the data they train on


METHODS = ("gain", "dcce")


def dual_scores(
    run_f: str,
    run_b: str,
    src_file: Path,
    tgt_file: Path,
    device: str | None = None,
    progress: bool = False,
    method: str = "gain",
) -> np.ndarray:
    """(N,) float32 scores of the line-aligned pairs of two files, lower is better (module docstring)."""
    if method not in METHODS:
        raise DataError(f"the scores' method is one of {', '.join(METHODS)}, not {method!r}")
    forward, backward = ForcedScorer(run_f, device), ForcedScorer(run_b, device)
    out: list[np.ndarray] = []
    bar = _bar(progress, src_file)
    with LineStream(src_file) as a, LineStream(tgt_file) as b:
        while True:
            s, t = decode_lines(src_file, a.take(CHUNK)), decode_lines(tgt_file, b.take(CHUNK))
            if len(s) != len(t):
                raise DataError(f"line counts differ: {src_file} and {tgt_file}")
            if not s:
                break
            h_f, h_b = forward.cross_entropy(s, t), backward.cross_entropy(t, s)
            if method == "dcce":
                out.append(np.abs(h_f - h_b) + 0.5 * (h_f + h_b))
            else:  # what reading the other side is worth: each model without it predicts the sentence alone
                blank = [""] * len(s)
                out.append(h_f - forward.cross_entropy(blank, t) + h_b - backward.cross_entropy(blank, s))
            if bar is not None:
                bar.update(len(s))
    if bar is not None:
        bar.close()
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def check_cut(keep_best: float | None, max_score: float | None) -> None:
    """One of the two, and a share that is one (checked before any work)."""
    if (keep_best is None) == (max_score is None):
        raise DataError("give one of --keep-best (a share of the pairs) or --max-score (a score)")
    if keep_best is not None:
        check_share(keep_best)


def check_share(share: float) -> None:
    if not 0.0 < share <= 1.0:
        raise DataError(f"--keep-best is a share of the pairs in (0, 1], not {share}")


def cut(scores: np.ndarray, keep_best: float | None = None, max_score: float | None = None) -> tuple[np.ndarray, float]:
    """(which pairs to keep, the score threshold): the best `keep_best` share (ties at the threshold
    kept), or every pair scoring `max_score` or less."""
    check_cut(keep_best, max_score)
    if max_score is None:
        assert keep_best is not None
        k = max(1, int(round(keep_best * len(scores))))
        max_score = float(np.partition(scores, k - 1)[k - 1]) if len(scores) else 0.0
    return scores <= max_score, float(max_score)


def keep_lines(
    files: tuple[Path, Path], keep: np.ndarray, lines: np.ndarray, removed: Path | None = None
) -> list[dict[str, Any]]:
    """Rewrite both files with the kept lines only (streamed; each replaced when complete); a few of the
    removed pairs as examples, each with its line number in the input (`lines`: the input's line of each
    line of the files). With `removed`, every removed pair is added to that removed.tsv."""
    examples: list[dict[str, Any]] = []
    rm = open(removed, "a", encoding="utf-8") if removed is not None else None
    try:
        with replacing(*files) as parts, LineStream(files[0]) as a, LineStream(files[1]) as b:
            with open(parts[0], "wb") as x, open(parts[1], "wb") as y:
                at = 0
                while src := a.take(CHUNK):
                    tgt, mask = b.take(CHUNK), keep[at : at + len(src)]
                    if len(src) != len(tgt) or len(mask) != len(src):
                        raise DataError(f"{files[0]}: its lines and its {len(keep)} scores do not match")
                    for i, (s, t, k) in enumerate(zip(src, tgt, mask.tolist())):
                        if k:
                            x.write(s + b"\n")
                            y.write(t + b"\n")
                            continue
                        line, src_text, tgt_text = int(lines[at + i]), s.decode(), t.decode()
                        if len(examples) < 5:
                            examples.append({"line": line, "src": src_text, "tgt": tgt_text})
                        if rm is not None:  # one tab-separated row
                            rm.write(
                                f"{line}\t{REASON}\t{src_text.replace(chr(9), ' ')}\t{tgt_text.replace(chr(9), ' ')}\n"
                            )
                    at += len(src)
            if at != len(keep):
                raise DataError(f"{files[0]} has {at} lines, its scores {len(keep)}")
    finally:
        if rm is not None:
            rm.close()
    return examples


def write_scores(path: Path, scores: np.ndarray) -> None:
    text = "".join(f"{x:.4f}\n" for x in scores.tolist())
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def train_scorers(
    files: tuple[Path, Path],
    langs: tuple[str, str],
    out_dir: Path,
    steps: int,
    recipe: str = "quickstart",
    progress: bool = False,
) -> tuple[Path, Path]:
    """A forward and a backward run (`recipe`, a config file or a packaged recipe; `steps` updates each,
    one shared BPE) trained on every pair of `files`, the first VALID_PAIRS of which also validate. The
    recipe's schedule is kept: only a warmup longer than the run, which would never reach the peak
    learning rate, becomes its first quarter, to the same peak. The runs score the pairs they learnt
    from, and that is what separates them: a run learns the aligned pairs far better than the misaligned
    ones it cannot predict from the other side. Runs trained on half of the pairs, each scoring the half
    it never saw, did worse on the noisy benchmark (docs/data.md). Each run resumes when interrupted; a
    finished one is reused. The scores are only as good as the scorers: a run that has not learnt to
    read its source yet scores like a language model (check with aiayn translate)."""
    from aiayn.train import train

    data = out_dir / "scorers" / "data"
    split = {
        (part, side): data / f"{part}.{lang}"
        for part in ("valid", "train")
        for side, lang in zip(("src", "tgt"), langs)
    }
    n = 0
    with replacing(*split.values()) as parts, LineStream(files[0]) as a, LineStream(files[1]) as b:
        handles = dict(zip(split, (open(p, "wb") for p in parts)))
        try:
            while lines := (a.take(CHUNK), b.take(CHUNK)):
                if not lines[0]:
                    break
                for k, (s_line, t_line) in enumerate(zip(*lines)):  # all train, the first VALID_PAIRS validate
                    for part in ("valid", "train") if n + k < VALID_PAIRS else ("train",):
                        handles[(part, "src")].write(s_line + b"\n")
                        handles[(part, "tgt")].write(t_line + b"\n")
                n += len(lines[0])
        finally:
            for h in handles.values():
                h.close()
        if n < 2 * VALID_PAIRS:
            raise DataError(f"training scorers needs at least {2 * VALID_PAIRS} pairs; {files[0]} has {n}")
    runs: list[Path] = []
    for direction, (s, t) in (("forward", ("src", "tgt")), ("backward", ("tgt", "src"))):
        run = out_dir / "scorers" / direction
        overrides: dict[str, Any] = {
            "data.corpus": "files",
            "data.src_lang": langs[0] if s == "src" else langs[1],
            "data.tgt_lang": langs[1] if s == "src" else langs[0],
            "data.train_src": str(split[("train", s)]),
            "data.train_tgt": str(split[("train", t)]),
            "data.valid_src": str(split[("valid", s)]),
            "data.valid_tgt": str(split[("valid", t)]),
            "train.max_steps": steps,
            "train.max_minutes": None,  # the updates asked for, however long they take (a recipe may cap the time)
            "train.eval_every": 0,
            "train.save_every": steps,
            "task.eval_bleu": False,
            "train.progress": progress,
        }
        if runs:  # one BPE for both directions: their scores are per piece of the same pieces
            overrides["data.spm_model"] = str(runs[0] / "spm.model")
        cfg = Config.load(recipe, overrides)
        if cfg.optim.warmup >= steps:  # a run shorter than its warmup warms up in its first quarter instead
            warmup = max(1, steps // 4)
            scale = cfg.optim.lr_scale * (warmup / cfg.optim.warmup) ** 0.5  # §5.3: the peak is warmup^-0.5
            cfg = Config.load(recipe, {**overrides, "optim.warmup": warmup, "optim.lr_scale": scale})
        if not _finished(run, steps) and train(cfg, run, resume=(run / "checkpoints").is_dir()).get("interrupted"):
            raise AiaynError(f"{run}: the scorer's training was interrupted; the same command continues it")
        runs.append(run)
    return runs[0], runs[1]


def _finished(run: Path, steps: int) -> bool:
    """A run trained to its last update (or stopped early), with its best weights."""
    from aiayn.checkpoint import list_checkpoints
    from aiayn.train.metrics import stopped_early

    found = list_checkpoints(run)
    done = bool(found) and found[-1][0] >= steps or stopped_early(run)
    return done and (run / "best.safetensors").is_file()


def _bar(progress: bool, src_file: Path) -> Any:
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(desc=f"aiayn data clean: scoring {src_file.name}", unit=" pairs", dynamic_ncols=True, file=sys.stderr)
