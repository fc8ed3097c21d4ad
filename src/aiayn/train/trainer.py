"""The training loop (paper §5): token-budget batches, Adam + the §5.3 schedule, label smoothing,
gradient accumulation, AMP, DDP, evaluation, checkpoints and exact resume.

    from aiayn.config import Config
    from aiayn.train import train
    summary = train(Config.load("configs/multi30k_de_en.yaml"), "runs/de_en")

One update = `optim.update_freq` micro-batches on each of `world_size` ranks (or as many as
`optim.tokens_per_update` asks for: `derive_update_freq`); the loss is
normalised by the number of target tokens of that whole global batch, so N ranks with 1/N of
the batch each compute the same update as one process (up to float rounding).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from safetensors.torch import load_model as _st_load_model
from torch import Tensor

from aiayn import distributed
from aiayn.checkpoint import CheckpointError, atomic_write, read_metadata, save_weights
from aiayn.config import Config
from aiayn.errors import AiaynError
from aiayn.model import Transformer
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.schedule import noam_lr, noam_scheduler
from aiayn.train.state import (capture_rng, checkpoint_paths, list_checkpoints, load_state, prune,
                               restore_rng, save_state, warn)

# data settings that name files: written absolute into the run's config.yaml
_DATA_PATHS = ("data_dir", "spm_model", "train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt")

STATE_VERSION = 1


class TrainingError(AiaynError, RuntimeError):
    """Training cannot start or continue; the message says why and what to do."""


class _EpochLimit(Exception):
    pass


# -- small pieces -----------------------------------------------------------------------------------

def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainingError(f"train.device={name!r} but CUDA is not available")
    return device


def set_deterministic() -> None:
    """train.deterministic: only deterministic kernels, so a GPU run continues bitwise after a resume
    as a CPU run does anyway. cuBLAS reads its workspace setting when its first handle is made."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def resolve_amp(amp: str, device: torch.device) -> str:
    """`auto`: bf16 where the GPU computes in bf16 (compute capability >= 8, or ROCm); fp16 with loss
    scaling on older GPUs, where torch only emulates bf16 (slower than fp32) and its plain
    `is_bf16_supported()` still says yes; none on CPU."""
    if amp == "auto":
        if device.type != "cuda":
            return "none"
        return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
    return amp  # fp16 on CPU works too (autocast + GradScaler("cpu")), slowly: it is how the tests reach that path


def derive_update_freq(tokens_per_update: int, max_tokens: int, world_size: int) -> int:
    """Micro-batches per rank per update whose global batch (max_tokens x update_freq x world_size)
    comes nearest to `tokens_per_update`: the learning-rate schedule is tuned for a batch size, so the
    batch should not grow with the GPU count."""
    return max(1, round(tokens_per_update / (max_tokens * world_size)))


def global_batch_warning(tokens_per_update: int, max_tokens: int, update_freq: int, world_size: int) -> str | None:
    """One line when the effective batch misses the target by more than 1.5x either way (too many
    ranks for the target, or a max_tokens that does not divide it), else None."""
    eff = max_tokens * update_freq * world_size
    if eff > 1.5 * tokens_per_update or 1.5 * eff < tokens_per_update:
        return (f"the global batch is {max_tokens:,} x {update_freq} x {world_size} = {eff:,} tokens, "
                f"{eff / tokens_per_update:.2g}x optim.tokens_per_update={tokens_per_update:,}; "
                f"{'lower data.max_tokens or use fewer ranks' if eff > tokens_per_update else 'raise data.max_tokens'}"
                f" to come nearer")
    return None


def check_run_dir(run_dir: Path, need_bytes: int = 0) -> None:
    """Fail before training, not at the first checkpoint, if the run directory is unusable."""
    try:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        probe = atomic_write(run_dir / ".write_test", lambda tmp: Path(tmp).write_bytes(b"ok"))
        probe.unlink()
    except OSError as e:
        raise TrainingError(f"run directory {run_dir} is not writable: {e.strerror or e}") from None
    free = shutil.disk_usage(run_dir).free
    if free < need_bytes:
        raise TrainingError(f"run directory {run_dir} has {free / 2**20:.0f} MiB free; checkpoints need about "
                            f"{need_bytes / 2**20:.0f} MiB")


class Metrics:
    """RUN/metrics.jsonl, one JSON object per line; only rank 0 writes."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.path, self.enabled = path, enabled

    def truncate(self, step: int) -> None:
        """Drop records after `step` (written before a crash, replayed by the resumed run)."""
        if not self.enabled:
            return
        keep = []
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:  # a line cut by kill -9
                    continue
                if rec.get("step", 0) <= step:
                    keep.append(line)
        text = "".join(line + "\n" for line in keep)
        atomic_write(self.path, lambda tmp: Path(tmp).write_text(text))

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


class Batches:
    """Endless batches across epochs; the BatchIterator itself holds the resumable position."""

    def __init__(self, iterator: Any, max_epochs: int | None) -> None:
        self.it, self.max_epochs = iterator, max_epochs
        self._gen: Iterator | None = None

    def next(self) -> Any:
        for _ in range(2):
            if self.max_epochs and self.it.epoch >= self.max_epochs:
                raise _EpochLimit
            if self._gen is None:
                self._gen = iter(self.it)  # starts at the iterator's current (possibly restored) position
            try:
                return next(self._gen)
            except StopIteration:  # the iterator has moved itself to the next epoch
                self._gen = None
        raise TrainingError("the training split produced an empty epoch")


def _sum_stats(values: list[float | Tensor], device: torch.device) -> list[float]:
    """Sum numbers over ranks in one all-reduce, on the training device (NCCL reduces CUDA tensors
    only) and with one host sync for all of them."""
    t = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device).detach() for v in values])
    return distributed.all_reduce_sum(t).tolist()


# -- the trainer ------------------------------------------------------------------------------------

class Trainer:
    def __init__(self, config: Config, run_dir: str | Path, resume: bool = False) -> None:
        self.cfg, self.run_dir, self.resume = config, Path(run_dir), resume
        c = config.train
        if c.deterministic:
            set_deterministic()  # before any CUDA work
        device = resolve_device(c.device)
        self.dist = distributed.init(device, c.dist_timeout_s)
        self.device = distributed.local_device(device, self.dist)
        self.main = self.dist.is_main
        self.amp = resolve_amp(c.amp, self.device)
        if c.threads:
            torch.set_num_threads(c.threads)
        self.metrics = Metrics(self.run_dir / "metrics.jsonl", self.main)
        self.step, self.nan_total, self.nan_consecutive, self.elapsed = 0, 0, 0, 0.0
        self.best: float | None = None
        self.last_saved: Path | None = None
        self.last_saved_step = -1
        self.last_valid: dict[str, Any] | None = None  # rank 0 only
        self.last_eval_step = -1  # every rank (decides collective calls)
        self.last_train: dict[str, Any] | None = None
        self._stop_requested = False
        # A stop mid-update (preemption) saves the data position and RNG state from before the update,
        # so the checkpoint is exactly the last completed update.
        self._rollback: tuple[dict[str, Any], dict[str, Any]] | None = None
        self._out_of_time = False  # train.max_minutes reached: finish normally
        self._window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "steps": 0}
        self._window_seconds = 0.0

    # -- setup ------------------------------------------------------------------------------------
    def setup(self) -> None:
        from aiayn.data.batching import BatchIterator
        from aiayn.data.prepare import prepare, with_run_tokenizer

        cfg, run_dir = self.cfg, self.run_dir
        if self.main:
            check_run_dir(run_dir)
            if not self.resume and list_checkpoints(run_dir):
                raise TrainingError(f"{run_dir} already holds checkpoints; continue it with "
                                    f"`aiayn train --resume {run_dir}` or choose a new run directory")
        distributed.barrier()

        spm = run_dir / "spm.model"
        data = with_run_tokenizer(cfg.data, run_dir) if self.resume else cfg.data  # config.yaml keeps the original
        # Every rank prepares, outside any collective: one process per cache builds it under a file lock
        # while the others wait on the lock (a cold WMT cache takes longer than a collective's timeout).
        before = spm.read_bytes() if self.main and self.resume and spm.is_file() else None
        self.prepared = prepare(data, run_dir if self.main else None)  # rank 0 copies spm.model to run_dir
        if before is not None and spm.read_bytes() != before:
            atomic_write(spm, lambda tmp: Path(tmp).write_bytes(before))  # keep the run's own tokenizer
            raise TrainingError(f"the prepared data's tokenizer differs from {spm} (data settings changed or "
                                f"the data cache was rebuilt); resume with the original data settings")
        self._check_ranks_agree_on_data()
        self.tokenizer = self.prepared.tokenizer
        vocab = self.tokenizer.vocab_size
        if "vocab_size" in cfg.model and int(cfg.model["vocab_size"]) != vocab:
            raise TrainingError(f"config model.vocab_size={cfg.model['vocab_size']} but the tokenizer has {vocab} "
                                f"pieces; the data settings changed since this run started")

        seed = cfg.train.seed
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        self.model_config = cfg.model_config(vocab)
        self.model = Transformer(self.model_config).to(self.device)  # identical init on every rank
        torch.manual_seed(seed + self.dist.rank)  # dropout differs across ranks, as it should

        n_params = self.model.num_parameters()
        if self.main:
            check_run_dir(run_dir, need_bytes=2 * 16 * n_params)  # weights + Adam moments, twice over
            resolved = cfg.to_dict()
            resolved["model"] = {"preset": cfg.model["preset"], **self.model_config.to_dict()}
            for k in _DATA_PATHS:  # the run is read again from other directories (evaluate --split, --resume)
                if resolved["data"].get(k):
                    resolved["data"][k] = os.path.abspath(resolved["data"][k])
            Config.from_dict(resolved).save(run_dir / "config.yaml")

        o = cfg.optim
        self.update_freq = o.update_freq
        if o.tokens_per_update is not None:  # derived per launch: a resume on another world size keeps the batch
            self.update_freq = derive_update_freq(o.tokens_per_update, cfg.data.max_tokens, self.dist.world_size)
        # fused: one kernel for all parameters instead of a Python loop over tensors (CPU and CUDA)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=o.betas, eps=o.eps,
                                          weight_decay=o.weight_decay, fused=self.device.type in ("cpu", "cuda"))
        self.scheduler = noam_scheduler(self.optimizer, self.model_config.d_model, o.warmup, o.lr_scale)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.amp == "fp16" else None

        self.iterator = BatchIterator(self.prepared.splits["train"], cfg.data.max_tokens, seed=seed, shuffle=True,
                                      rank=self.dist.rank, world_size=self.dist.world_size)
        self.batches = Batches(self.iterator, cfg.train.max_epochs)
        self.vote = distributed.StopVote(self.dist)  # collective (a gloo group beside NCCL): every rank, here

        if self.resume:
            self._load_latest()
        else:
            self.metrics.truncate(0)

        self.train_model: torch.nn.Module = self.model
        if cfg.train.compile:
            self.train_model = torch.compile(self.model)  # checkpoints always save self.model (no _orig_mod.)
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DDP(self.train_model, device_ids=ids)

        if self.main:
            eff = cfg.data.max_tokens * self.update_freq * self.dist.world_size
            derived = (f", update_freq {self.update_freq} from optim.tokens_per_update {o.tokens_per_update:,}"
                       if o.tokens_per_update is not None else "")
            print(f"aiayn train: {run_dir} | {n_params:,} parameters | {len(self.prepared.splits['train']):,} "
                  f"training pairs, {len(self.iterator)} batches/epoch/rank | update = {self.update_freq} x "
                  f"{self.dist.world_size} x {cfg.data.max_tokens} tokens (<= {eff:,}{derived}) | device "
                  f"{self.device}, amp {self.amp}" + (f" | resumed at step {self.step}" if self.step else ""),
                  flush=True)
            off = (global_batch_warning(o.tokens_per_update, cfg.data.max_tokens, self.update_freq,
                                        self.dist.world_size) if o.tokens_per_update is not None else None)
            if off:
                warn(off)

    def _check_ranks_agree_on_data(self) -> None:
        """Node-local caches must hold the same ids: every rank compares its cache key and tokenizer."""
        mine = (self.prepared.report["key"], hashlib.sha256(self.prepared.tokenizer.path.read_bytes()).hexdigest())
        seen = distributed.all_gather_object(mine)
        if any(other != seen[0] for other in seen):
            detail = "; ".join(f"rank {r}: cache {k}, spm.model sha256 {h[:12]}" for r, (k, h) in enumerate(seen))
            raise TrainingError(f"ranks prepared different data ({detail}); give every node the same corpus and "
                                f"data settings, or one shared AIAYN_HOME")

    # -- checkpoints ------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        data, rngs = self._rollback or (self.iterator.state_dict(), capture_rng(self.device))
        if self.dist.enabled:  # every rank's RNG, so dropout streams continue per rank
            gathered: list[Any] = [None] * self.dist.world_size
            torch.distributed.all_gather_object(gathered, rngs)
            rngs = gathered
        else:
            rngs = [rngs]
        return {
            "version": STATE_VERSION,
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else {},
            "rng": rngs,
            "data": data,
            "counters": {"nan_total": self.nan_total, "nan_consecutive": self.nan_consecutive,
                         "elapsed": self.elapsed + (time.perf_counter() - self._t0)},
            "window": {**self._window, "seconds": time.perf_counter() - self._t_window},
            "best": self.best,
        }

    def save(self) -> None:
        if self.step == self.last_saved_step:
            return
        state = self._state()  # collective under DDP: every rank takes part
        if self.main:
            weights, state_path = checkpoint_paths(self.run_dir, self.step)
            save_weights(self.model, weights, step=self.step)
            save_state(state_path, state)
            prune(self.run_dir, self.cfg.train.keep_last)
            self.last_saved = weights
        self.last_saved_step = self.step

    def _load_latest(self) -> None:
        """Newest usable checkpoint; damaged ones are named and skipped in favour of older ones.

        Rank 0 lists the checkpoints and every rank tries the same step, in the same order: ranks that
        each picked their own newest (a file system that lags on one node) would resume at different
        steps and hang in their first collective. A step counts only if it loaded on every rank."""
        steps: list[int] = [step for step, _, _ in reversed(list_checkpoints(self.run_dir))] if self.main else []
        if self.dist.enabled:
            box: list[Any] = [steps]
            torch.distributed.broadcast_object_list(box, src=0)
            steps = box[0]
        if not steps:
            warn(f"no checkpoint in {self.run_dir}/checkpoints yet: starting from step 0")
            self.metrics.truncate(0)
            return
        who = f"rank {self.dist.rank}: " if self.dist.enabled else ""
        errors = []
        for step in steps:
            weights, state_path = checkpoint_paths(self.run_dir, step)
            failure: BaseException | None = None
            damaged = False
            try:
                read_metadata(weights)
                state = load_state(state_path)
                try:
                    _st_load_model(self.model, str(weights), strict=True, device=str(self.device))
                except Exception as e:
                    raise CheckpointError(f"cannot load weights from {weights}: {e}") from None
                self._restore(state)
            except CheckpointError as e:  # damaged or missing here: all ranks try an older one
                damaged = True
                errors.append(f"{who}{e}")
                warn(f"{who}{e}; trying an older checkpoint")
            except Exception as e:  # anything else (settings that no longer fit) stops every rank
                failure = e
            # One all-reduce: each rank's verdict on this step (0 loaded, 1 damaged, 2 other error).
            verdict = torch.zeros(self.dist.world_size, device=self.device)
            verdict[self.dist.rank] = 2.0 if failure is not None else float(damaged)
            codes = [int(c) for c in distributed.all_reduce_sum(verdict).tolist()]
            if 2 in codes:
                if failure is not None:
                    raise failure
                raise TrainingError(f"resuming from step {step} failed on rank(s) "
                                    f"{[r for r, c in enumerate(codes) if c == 2]}; see their error")
            if any(codes):
                if not damaged:
                    errors.append(f"step {step}: unusable on rank(s) {[r for r, c in enumerate(codes) if c]}")
                continue
            if errors and self.main:
                warn(f"resuming from the older checkpoint {weights}")
            self.last_saved, self.last_saved_step = weights, step
            self.metrics.truncate(step)
            return
        raise TrainingError("no usable checkpoint to resume from" + (" on every rank" if self.dist.enabled else "")
                            + ":\n  " + "\n  ".join(errors))

    def _restore(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        # The schedule's scale, betas and eps come from the current config (allows changing lr on resume).
        o, base = self.cfg.optim, self.cfg.optim.lr_scale * self.model_config.d_model**-0.5
        self.scheduler.base_lrs = [base for _ in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["initial_lr"], g["betas"], g["eps"] = base, o.betas, o.eps
            g["lr"] = base * self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.iterator.load_state_dict(state["data"])  # on another world size: resharded, same global position
        rngs, rank = state["rng"], self.dist.rank
        restore_rng(rngs[rank] if rank < len(rngs) else rngs[0], self.device)
        if rank >= len(rngs):  # a rank the saved run did not have: its own dropout stream, not rank 0's copy
            torch.manual_seed(self.cfg.train.seed * 1_000_003 + int(state["step"]) * 1009 + rank)
        saved_world = int(state["data"].get("world_size", self.dist.world_size))
        if saved_world != self.dist.world_size and self.main:
            same = ("the global batch is kept (optim.tokens_per_update)" if self.cfg.optim.tokens_per_update
                    else f"the global batch changes {self.dist.world_size}/{saved_world}x (optim.tokens_per_update "
                         f"would keep it)")
            warn(f"resuming on {self.dist.world_size} rank(s) a run saved on {saved_world}: the rest of epoch "
                 f"{self.iterator.epoch} is re-planned from the same global position (each example still once "
                 f"per epoch); {same}; the losses are not those of an uninterrupted run")
        self.step = int(state["step"])
        c = state["counters"]
        self.nan_total, self.nan_consecutive, self.elapsed = int(c["nan_total"]), int(c["nan_consecutive"]), float(c["elapsed"])
        self._window = dict(state["window"])
        self._window_seconds = float(self._window.pop("seconds", 0.0))  # the window's time before the stop
        self.best = state["best"]

    # -- evaluation -------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict[str, Any]:
        from aiayn.data.batching import BatchIterator

        cfg, model = self.cfg, self.model
        rng = torch.get_rng_state()  # evaluation must not shift the training RNG stream
        model.eval()
        loss = nll = tokens = 0.0
        for b in BatchIterator(self.prepared.splits["valid"], cfg.data.max_tokens, shuffle=False):
            logits, target = self._forward(model, b)
            l, n, k = label_smoothed_nll(logits, target, cfg.optim.label_smoothing, self.model_config.pad_id)
            loss, nll, tokens = loss + l.item(), nll + n.item(), tokens + k.item()
        rec: dict[str, Any] = {"kind": "valid", "step": self.step, "loss": loss / tokens, "nll": nll / tokens,
                               "ppl": math.exp(min(nll / tokens, 50.0)), "bleu": None}
        if cfg.train.eval_bleu:
            rec["bleu"] = self._greedy_bleu()
        model.train()
        torch.set_rng_state(rng)
        return rec

    def _greedy_bleu(self) -> float | None:
        try:
            from aiayn.decode import Translator
            from aiayn.evaluate import score
        except ImportError as e:  # decoding layer not installed yet: loss-only validation
            warn(f"validation BLEU skipped ({e})")
            return None
        src, ref = self.prepared.raw("valid")
        n = self.cfg.train.eval_max_sentences or len(src)
        with self._autocast():
            hyps = Translator(self.model, self.tokenizer, device=self.device).translate(list(src[:n]), beam=1)
        return float(score(hyps, list(ref[:n]))["bleu"])

    def evaluate(self) -> None:
        """Rank 0 evaluates the unwrapped model; the others wait."""
        self.last_eval_step = self.step
        if self.main:
            t = time.perf_counter()
            rec = self.validate()
            self.metrics.write(rec)
            self.last_valid = rec
            bleu = "" if rec["bleu"] is None else f" | bleu {rec['bleu']:.2f}"
            self._print(f"valid step {self.step} | loss {rec['loss']:.3f} | nll {rec['nll']:.3f} | "
                        f"ppl {rec['ppl']:.2f}{bleu} ({time.perf_counter() - t:.1f}s)")
            merit = rec["bleu"] if rec["bleu"] is not None else -rec["nll"]
            if self.best is None or merit > self.best:
                self.best = merit
                save_weights(self.model, self.run_dir / "best.safetensors", step=self.step,
                             extra={"valid": json.dumps(rec)})
        distributed.barrier()
        self._t_window = time.perf_counter()  # keep evaluation time out of tokens/s

    # -- one update -------------------------------------------------------------------------------
    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp == "none":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16 if self.amp == "bf16" else torch.float16)

    def _forward(self, model: torch.nn.Module, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (n, V) and gold ids (n,) at the batch's n non-pad target positions only."""
        keep = (b.tgt_out.view(-1) != self.model_config.pad_id).nonzero().squeeze(1)  # on the host: no CUDA sync
        b, keep = b.to(self.device, non_blocking=True), keep.to(self.device, non_blocking=True)
        if self.cfg.train.compile:
            # Token-budget batches vary in B, S, T and n from batch to batch. Marked dynamic, the first call
            # compiles one graph for all of them; unmarked, torch compiles a static graph, recompiles on the
            # first new shape, and again for each further dimension it finds varying.
            for t in (b.src, b.tgt_in):
                torch._dynamo.maybe_mark_dynamic(t, 0)
                torch._dynamo.maybe_mark_dynamic(t, 1)
            torch._dynamo.maybe_mark_dynamic(keep, 0)
        with self._autocast():
            logits = model(b.src, b.tgt_in, keep=keep)  # (n, V)
        return logits, b.tgt_out.view(-1).index_select(0, keep)

    def update(self, micro: list[Any]) -> tuple[bool, float, float, float, float] | None:
        """Forward/backward over the micro-batches, then one optimizer step unless non-finite.
        Returns (ok, loss sum, nll sum, target tokens, lr) with sums over the global batch, or None when
        a stop request (SIGTERM, Ctrl-C) ended the update between micro-batches, its gradients dropped."""
        o, pad = self.cfg.optim, self.model_config.pad_id
        local_tokens = float(sum(b.tgt_tokens for b in micro))
        # The normaliser is needed before backward: one all-reduce (and host sync) under DDP, none alone.
        global_tokens = _sum_stats([local_tokens], self.device)[0] if self.dist.enabled else local_tokens
        scale = self.dist.world_size / global_tokens  # DDP averages gradients over ranks
        loss_sum = nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)  # summed on device: no sync per micro-batch
        # A preempted job has seconds (torchrun, SLURM: SIGKILL ~30 s after SIGTERM), not the rest of a
        # long update: between micro-batches every rank checks, together, whether one was asked to stop.
        if len(micro) > 1:
            self.vote.start(self._stop_requested)
        for i, b in enumerate(micro):
            if i:
                if self.vote.stop(self._stop_requested):
                    self._stop_requested = True
                    self.optimizer.zero_grad(set_to_none=True)  # no optimizer, scaler or schedule step taken
                    return None
                if i < len(micro) - 1:
                    self.vote.start(self._stop_requested)
            sync = i == len(micro) - 1 or not self.dist.enabled
            ctx = contextlib.nullcontext() if sync else self.train_model.no_sync()
            with ctx:
                logits, target = self._forward(self.train_model, b)  # (n, V), (n,)
                loss, nll, _ = label_smoothed_nll(logits, target, o.label_smoothing, pad)
                obj = loss * scale
                (self.scaler.scale(obj) if self.scaler else obj).backward()
            loss_sum = loss_sum + loss.detach()
            nll_sum = nll_sum + nll.detach()
        lr = self.optimizer.param_groups[0]["lr"]
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), o.clip_norm if o.clip_norm > 0 else math.inf)
        # One host sync for everything else: loss sums, the stop requests and time budget (decided by all
        # ranks together, at the same update) and the gradient norm, which DDP made equal on every rank,
        # so its sum over ranks is finite exactly when it is.
        budget = self.cfg.train.max_minutes
        late = budget is not None and self.elapsed + time.perf_counter() - self._t0 > 60 * budget  # across resumes
        loss_sum, nll_sum, stop, late, gnorm_sum = _sum_stats(
            [loss_sum, nll_sum, float(self._stop_requested), float(late), gnorm], self.device)
        if stop:
            self._stop_requested = True
        if late:
            self._out_of_time = True

        finite_loss = math.isfinite(loss_sum)
        ok = finite_loss and math.isfinite(gnorm_sum)
        if ok and self.scaler:  # gradients known finite; with fused Adam the scaler's step adds no sync
            self.scaler.step(self.optimizer)
        elif ok:
            self.optimizer.step()
        if self.scaler:
            self.scaler.update()  # after an overflow (inf found by unscale_) this halves the scale
        self.optimizer.zero_grad(set_to_none=True)
        if ok:
            self.scheduler.step()
        else:
            # fp16 overflow (finite loss, the scaler skipped the step and halved its scale) counts like
            # any other skipped update: a few while the scale calibrates are harmless, but gradients
            # that stay non-finite would otherwise halve the scale towards 0 forever.
            self._non_finite(loss_sum, gnorm_sum / self.dist.world_size,
                             overflow=self.scaler is not None and finite_loss)
        return ok, loss_sum, nll_sum, global_tokens, lr

    def _non_finite(self, loss_sum: float, gnorm: float, overflow: bool = False) -> None:
        """Count a skipped update; `train.nan_limit` consecutive ones stop training."""
        self.nan_total += 1
        self.nan_consecutive += 1
        what = "loss" if not math.isfinite(loss_sum) else "gradient norm"
        rec: dict[str, Any] = {"kind": "skip", "step": self.step + 1, "reason": f"non-finite {what}",
                               "consecutive": self.nan_consecutive, "total": self.nan_total}
        if overflow:
            scale = self.scaler.get_scale()  # already halved by scaler.update()
            what = f"fp16 gradient overflow (loss scale now {scale:g})"
            rec.update(reason="fp16 gradient overflow", scale=scale)
        self.metrics.write(rec)
        self._print(f"step {self.step + 1}: {what if overflow else 'non-finite ' + what}, update skipped "
                    f"({self.nan_consecutive} in a row, {self.nan_total} in total)", err=True)
        limit = self.cfg.train.nan_limit
        if self.nan_consecutive >= limit:
            last = self.last_saved or "none (no checkpoint was written yet)"
            if overflow:
                raise TrainingError(f"fp16 gradients overflowed in {limit} consecutive updates (after step "
                                    f"{self.step}; loss scale down to {scale:g}); training stopped. Last good "
                                    f"checkpoint: {last}. Try a lower optim.lr_scale, optim.clip_norm, a higher "
                                    f"train.nan_limit, or train.amp=bf16 / none instead of fp16")
            raise TrainingError(f"{what} was NaN/inf for {limit} consecutive updates (after step {self.step}); "
                                f"training stopped. Last good checkpoint: {last}. Try a lower optim.lr_scale, "
                                f"optim.clip_norm, or train.amp=bf16 instead of fp16")

    # -- loop -------------------------------------------------------------------------------------
    def _print(self, msg: str, err: bool = False) -> None:
        if self.main:
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stderr if err else sys.stdout)

    def _log(self, lr: float) -> None:
        w = self._window
        now = time.perf_counter()
        loss, nll = w["loss"] / max(w["tokens"], 1), w["nll"] / max(w["tokens"], 1)
        rec = {"kind": "train", "step": self.step, "loss": loss, "nll": nll, "ppl": math.exp(min(nll, 50.0)),
               "lr": lr, "tokens_per_s": w["tokens"] / max(now - self._t_window, 1e-9),
               "elapsed": self.elapsed + now - self._t0, "epoch": self.iterator.epoch}
        self.metrics.write(rec)
        self.last_train = rec
        self._window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "steps": 0}
        self._t_window = now
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{rec['tokens_per_s']:.0f}",
                                 refresh=False)
        elif self.main:
            print(f"step {self.step} | loss {loss:.3f} | nll {nll:.3f} | lr {lr:.2e} | "
                  f"{rec['tokens_per_s']:.0f} tok/s", flush=True)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_requested = True
        signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.default_int_handler)
        self._print("stopping after this micro-batch, saving the last completed update (press Ctrl-C again to "
                    "abort without saving)", err=True)

    def run(self) -> dict[str, Any]:
        from tqdm import tqdm

        self.setup()
        c = self.cfg.train
        # Resuming a finished run (steps or time budget spent): nothing to do, nothing to append.
        done = None
        if self.step >= c.max_steps:
            done = f"already finished at step {self.step} (train.max_steps={c.max_steps}); " \
                   f"raise it with --train.max_steps to train on"
        elif c.max_minutes is not None and self.elapsed >= 60 * c.max_minutes:
            done = f"already used its time budget at step {self.step} ({self.elapsed / 60:.1f} min, " \
                   f"train.max_minutes={c.max_minutes:g}); raise it with --train.max_minutes to train on"
        if done:
            if self.main:
                print(f"{self.run_dir} {done}", file=sys.stderr, flush=True)
            return {"run_dir": str(self.run_dir), "step": self.step, "interrupted": False, "train": None,
                    "valid": None, "best": self.best, "checkpoint": None, "nan_skipped": self.nan_total}
        self._t0 = time.perf_counter()
        self._t_window = self._t0 - self._window_seconds  # a resumed window keeps its pre-stop time
        # A time budget (train.max_minutes) makes max_steps a mere cap: then the bar counts steps and the
        # description says the budget, instead of an ETA towards a step count that will not be reached.
        timed = c.max_minutes is not None
        self.bar = (tqdm(total=None if timed else c.max_steps, initial=self.step, unit="step", file=sys.stderr,
                         dynamic_ncols=True, mininterval=1.0,
                         desc=f"train ({c.max_minutes:g} min)" if timed else "train")
                    if self.main and c.progress else None)
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                handlers[s] = signal.signal(s, self._on_signal)
        lr = self.optimizer.param_groups[0]["lr"]
        try:
            while self.step < c.max_steps and not self._stop_requested and not self._out_of_time:
                # where this update starts, for a stop in its middle (cheap: no device sync, a few kB)
                rollback = (self.iterator.state_dict(), capture_rng(self.device)) if self.update_freq > 1 else None
                micro = []
                try:
                    for _ in range(self.update_freq):
                        micro.append(self.batches.next())
                except _EpochLimit:
                    if not micro:
                        break
                result = self.update(micro)
                if result is None:  # stopped between micro-batches: save the last completed update
                    self._rollback = rollback
                    break
                ok, loss, nll, tokens, lr = result
                if not ok:
                    continue
                self.step += 1
                self.nan_consecutive = 0
                w = self._window
                w["loss"], w["nll"], w["tokens"], w["steps"] = w["loss"] + loss, w["nll"] + nll, w["tokens"] + tokens, w["steps"] + 1
                if self.bar is not None:
                    self.bar.update(1)
                if self.step % c.log_every == 0:
                    self._log(lr)
                if c.eval_every and self.step % c.eval_every == 0:
                    self.evaluate()
                if self.step % c.save_every == 0:
                    self.save()
            interrupted = self._stop_requested and self.step < c.max_steps
            if not interrupted:
                if self._window["steps"]:
                    self._log(lr)
                if self.last_eval_step != self.step:
                    self.evaluate()
            self.save()
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
            if self.bar is not None:
                self.bar.close()
        if interrupted and self.main:
            print(f"interrupted at step {self.step}; checkpoint saved to {self.last_saved}\n"
                  f"resume with: aiayn train --resume {self.run_dir}", file=sys.stderr, flush=True)
        return {"run_dir": str(self.run_dir), "step": self.step, "interrupted": interrupted,
                "train": self.last_train, "valid": self.last_valid, "best": self.best,
                "checkpoint": str(self.last_saved) if self.last_saved else None, "nan_skipped": self.nan_total}


def train(config: Config, run_dir: str | Path, resume: bool = False) -> dict[str, Any]:
    """Train (or with `resume=True` continue) a run; returns a summary of the last metrics."""
    trainer = Trainer(config, run_dir, resume)
    try:
        return trainer.run()
    finally:
        distributed.teardown()


__all__ = ["train", "Trainer", "TrainingError", "noam_lr", "derive_update_freq"]
