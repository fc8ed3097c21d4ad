"""The training loop (paper §5): token-budget batches, Adam + the §5.3 schedule, label smoothing,
gradient accumulation, AMP, DDP, evaluation, early stopping, checkpoints and exact resume.

    from aiayn.config import Config
    from aiayn.train import train
    summary = train(Config.load("multi30k_de_en"), "runs/de_en")

The parts: `tasks` (batch -> loss, validation measures), `step` (one update, skip policy),
`validate` (best weights, patience), `resume` (saves and restores `Trainer.states`, every Stateful
part by name), `train_state`, `metrics` (metrics.jsonl), `rundir`, `runtime` (device, AMP, global
batch), `optim`.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import sys
import threading
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from aiayn import distributed
from aiayn.config import Config
from aiayn.data.pairs import with_run_tokenizer
from aiayn.data.pipeline import Options
from aiayn.devices import resolve_device
from aiayn.model import build_model
from aiayn.train import rundir, tasks
from aiayn.train.batches import Batches
from aiayn.train.metrics import MetricsWriter
from aiayn.train.optim import ConfiguredAdam, build_optimizer
from aiayn.train.progress import Progress
from aiayn.train.resume import CheckpointManager, RNGState, capture_rng, init_source, load_initial_weights, warn
from aiayn.train.runtime import (
    TrainingError,
    allow_tf32,
    autocast_factory,
    derive_update_freq,
    global_batch_warning,
    resolve_amp,
    set_deterministic,
)
from aiayn.train.schedule import noam_lr
from aiayn.train.state import TrainState
from aiayn.train.step import Flags, StepResult, TrainStep, skipped_update
from aiayn.train.validate import Validator


class Trainer:
    def __init__(
        self, config: Config, run_dir: str | Path, resume: bool = False, init_from: str | Path | None = None
    ) -> None:
        self.cfg, self.run_dir, self.resume, self.init_from = config, Path(run_dir), resume, init_from
        c = config.train
        if c.deterministic:
            set_deterministic()  # before any CUDA work
        self.dist = distributed.init(resolve_device(c.device), c.dist_timeout_s)
        self.device = distributed.local_device(resolve_device(c.device), self.dist)
        self.main = self.dist.is_main
        allow_tf32(self.device, c.deterministic)
        self.amp = resolve_amp(c.amp, self.device)
        if c.threads:
            torch.set_num_threads(c.threads)
        self.metrics = MetricsWriter(self.run_dir, self.main, c.tensorboard)
        self.spec = tasks.spec_for(config)  # the task's own checks, before any data work
        self.cfg = config = tasks.resolved(config, self.spec)  # config.yaml keeps all of the task's settings
        metric = tasks.patience_metric(config, self.spec)
        self.state = TrainState(metric=metric, higher=tasks.higher_is_better(self.spec, metric))
        self.flags = Flags()
        self.progress = Progress(c, self.state, self.metrics, self.main)

    # -- setup ------------------------------------------------------------------------------------
    def setup(self) -> None:
        """The data, the model and the run's Stateful parts, then the resume. Every rank takes these steps
        in this order: their collectives pair up."""
        weights = self._fine_tuning_weights()
        self._prepare_data()
        n_params = self._build_model(weights)
        self._build_parts()
        self.ckpt = CheckpointManager(
            self.run_dir,
            self.states,
            self.dist,
            self.device,
            keep_last=self.cfg.train.keep_last,
            tokens_per_update=self.cfg.optim.tokens_per_update,
        )
        self._build_step()  # its stop vote: collective, before the resume's
        if self.resume:
            self.ckpt.load_latest(self.metrics)
        else:
            self.metrics.truncate(0)
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_step.train_model = DDP(
                self.train_step.train_model, device_ids=ids, find_unused_parameters=self.spec.find_unused_parameters
            )
        self.validator = Validator(
            task=self.task,
            model=self.model,
            state=self.state,
            metrics=self.metrics,
            run_dir=self.run_dir,
            dist=self.dist,
            device=self.device,
            patience=self.cfg.train.patience,
            say=self.progress.say,
        )
        if self.main:
            self._banner(n_params, weights)

    def _fine_tuning_weights(self) -> Path | None:
        """--init-from on a new run: the weights it starts from; the vocabulary stays the weights'."""
        if self.init_from is None or self.resume:
            return None
        weights, spm = init_source(self.init_from)
        self.cfg = dataclasses.replace(self.cfg, data=dataclasses.replace(self.cfg.data, spm_model=str(spm)))
        return weights

    def _prepare_data(self) -> None:
        """The run directory checked, the data prepared (or found in the cache), the same on every rank."""
        cfg, run_dir = self.cfg, self.run_dir
        if self.main:
            rundir.check_new_or_resumed(run_dir, self.resume)
        distributed.barrier()
        data = with_run_tokenizer(cfg.data, run_dir) if self.resume else cfg.data  # config.yaml keeps the original
        self.prepared = rundir.prepare_keeping_tokenizer(
            data, run_dir, self.main, self.resume, lambda d, r: tasks.prepare_data(self.spec, cfg, d, r, Options())
        )
        rundir.check_ranks_agree_on_data(self.prepared)
        vocab = self.prepared.tokenizer.vocab_size
        if "vocab_size" in cfg.model and int(cfg.model["vocab_size"]) != vocab:
            raise TrainingError(
                f"config model.vocab_size={cfg.model['vocab_size']} but the tokenizer has {vocab} "
                f"pieces; the data settings changed since this run started"
            )

    def _build_model(self, weights: Path | None) -> int:
        """The model, initialised alike on every rank (or from `weights`); returns its parameter count."""
        cfg, c = self.cfg, self.cfg.train
        torch.manual_seed(c.seed)
        np.random.seed(c.seed)
        random.seed(c.seed)
        vocab = self.prepared.tokenizer.vocab_size
        fields = self.spec.model_fields(self.prepared) if self.spec.model_fields else {}  # classify: its classes
        self.model_config = cfg.model_config(vocab, kind=self.spec.model_kind, **fields)
        self.model = build_model(self.model_config).to(self.device)  # identical init on every rank
        if weights is not None:
            load_initial_weights(self.model, weights, self.device)
        torch.manual_seed(c.seed + self.dist.rank)  # dropout differs across ranks, as it should
        n_params = sum(p.numel() for p in self.model.parameters())
        if self.main:
            rundir.check_run_dir(self.run_dir, need_bytes=2 * 16 * n_params)  # weights + Adam moments, twice over
            rundir.save_resolved_config(cfg, self.model_config, self.run_dir)
        return n_params

    def _build_parts(self) -> None:
        """The optimizer, schedule, loss scaler, data and task. Every Stateful part of the run goes into
        one dict, `self.states`, that checkpoints save and a resume restores (torchtitan's shape); its
        names are those of the state file."""
        cfg, c, o = self.cfg, self.cfg.train, self.cfg.optim
        self.iterator = self.spec.train_batches(cfg, self.prepared, self.dist, self.device)
        if getattr(self.iterator, "max_tokens", None) is None:  # every rank raises alike: none waits in a collective
            raise TypeError(
                f"task {self.spec.name}'s train_batches gave a {type(self.iterator).__name__} without max_tokens "
                "(the tokens of one micro-batch at most: see aiayn.train.tasks.spec.TrainBatches)"
            )
        self.update_freq = o.update_freq
        if o.tokens_per_update is not None:  # derived per launch: a resume on another world size keeps the batch
            self.update_freq = derive_update_freq(o.tokens_per_update, self.iterator.max_tokens, self.dist.world_size)
        self.optimizer, self.scheduler, self.scaler = build_optimizer(
            self.model, o, self.model_config.d_model, self.device, self.amp, c.max_steps
        )
        self.batches = Batches(self.iterator, c.max_epochs)
        self.task = self.spec.build(
            cfg, self.model_config, self.prepared, self.device, autocast_factory(self.amp, self.device)
        )
        self.states: dict[str, Any] = {
            "model": self.model,  # the weights file; the others share the state file
            "train_state": self.state,
            "rng": RNGState(self.device, self.dist, c.seed),
            "optimizer": ConfiguredAdam(self.optimizer),
            "scheduler": self.scheduler,
            "scaler": self.scaler,  # None without fp16
            "data": self.iterator,
        }

    def _build_step(self) -> None:
        """One optimizer update; it trains the compiled model, when train.compile, and updates `self.model`."""
        train_model: torch.nn.Module = self.model
        if self.cfg.train.compile:
            train_model = cast(torch.nn.Module, torch.compile(self.model))  # checkpoints save self.model: no _orig_mod.
        self.train_step = TrainStep(
            task=self.task,
            model=self.model,
            train_model=train_model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            dist=self.dist,
            device=self.device,
            clip_norm=self.cfg.optim.clip_norm,
        )

    def _banner(self, n_params: int, weights: Path | None) -> None:
        cfg, o, world = self.cfg, self.cfg.optim, self.dist.world_size
        micro = self.iterator.max_tokens
        eff = micro * self.update_freq * world
        derived = (
            f", update_freq {self.update_freq} from optim.tokens_per_update {o.tokens_per_update:,}"
            if o.tokens_per_update is not None
            else ""
        )
        start = (f" | resumed at step {self.state.step}" if self.state.step else "") + (
            f" | fine-tuning {weights}" if weights else ""
        )
        print(
            f"aiayn train: {self.run_dir} | {cfg.task.name} | {n_params:,} parameters | "
            f"{len(self.prepared.splits['train']):,} training examples, {len(self.iterator)} batches/epoch/rank | "
            f"update = {self.update_freq} x {world} x {micro} tokens (<= {eff:,}{derived}) | "
            f"device {self.device}, amp {self.amp}{start}",
            flush=True,
        )
        off = (
            global_batch_warning(o.tokens_per_update, micro, self.update_freq, world)
            if o.tokens_per_update is not None
            else None
        )
        if off:
            warn(off)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.setup()
        c, s = self.cfg.train, self.state
        if self._already_done():
            return self._summary(interrupted=False, ran=False)
        if self.resume and self.main:  # weights.json named weights of the run before this training
            rundir.drop_default_weights(self.run_dir)
        self.progress.start()
        handlers = self._catch_signals()
        lr = self.optimizer.param_groups[0]["lr"]
        stopped_early = False
        try:
            while s.step < c.max_steps and not self.flags.stop and not self.flags.out_of_time:
                # where this update starts, for a stop in its middle (cheap: no device sync, a few kB)
                rollback = (self.iterator.state_dict(), capture_rng(self.device)) if self.update_freq > 1 else None
                micro = self.batches.take(self.update_freq)
                if not micro:
                    break
                result = self.train_step(micro, self.flags, self.progress.over_budget)
                if result is None:  # stopped between micro-batches: save the last completed update
                    self.ckpt.rollback = rollback
                    break
                lr = result.lr
                if not self._count(result):
                    continue
                if s.step % c.log_every == 0:
                    self.progress.log(lr, self.iterator.epoch)
                if c.eval_every and s.step % c.eval_every == 0 and self._validate():
                    stopped_early = True
                    break
                if s.step % c.save_every == 0:
                    self._save()
            interrupted = self.flags.stop and s.step < c.max_steps and not stopped_early
            if not interrupted:
                if s.window["steps"]:
                    self.progress.log(lr, self.iterator.epoch)
                if s.last_eval_step != s.step:
                    self._validate()
            self._save()
        finally:
            self.batches.close()
            for sig, h in handlers.items():
                signal.signal(sig, h)
            self.progress.close()
            self.metrics.close()
        if interrupted and self.main:
            print(
                f"interrupted at step {s.step}; checkpoint saved to {self.ckpt.last_saved}\n"
                f"resume with: aiayn train --resume {self.run_dir}",
                file=sys.stderr,
                flush=True,
            )
        cooldown = self.cfg.optim.cooldown
        if cooldown and not interrupted and s.step < c.max_steps and self.main:
            why = (
                "early stopping"
                if stopped_early
                else "the time budget"
                if self.flags.out_of_time
                else "train.max_epochs"
            )
            print(
                f"{why} ended the run at step {s.step}, {c.max_steps - s.step} updates before the end of "
                f"optim.cooldown={cooldown} (lr {lr:.2e}); to end on the cooldown, lower train.max_steps",
                file=sys.stderr,
                flush=True,
            )
        return self._summary(interrupted, stopped_early)

    def _count(self, result: StepResult) -> bool:
        """Account for one update; False when it was skipped (raises after train.nan_limit in a row)."""
        s = self.state
        if not result.ok:
            fields, msg, error = skipped_update(result, s, self.scaler, self.cfg.train.nan_limit, self.ckpt.last_saved)
            self.metrics.write("skip", s.step + 1, **fields)
            self.progress.say(msg, err=True)
            if error is not None:
                raise error
            return False
        s.step += 1
        s.nan_consecutive = 0
        w = s.window
        w["loss"], w["nll"], w["tokens"], w["steps"] = (
            w["loss"] + result.loss,
            w["nll"] + result.nll,
            w["tokens"] + result.tokens,
            w["steps"] + 1,
        )
        self.progress.updated()
        return True

    def _already_done(self) -> bool:
        """Resuming a finished run (steps, time budget or patience spent): nothing to do, nothing to append."""
        c, s = self.cfg.train, self.state
        done = None
        if s.step >= c.max_steps:
            done = (
                f"already finished at step {s.step} (train.max_steps={c.max_steps}); "
                f"raise it with --train.max_steps to train on"
            )
        elif c.max_minutes is not None and s.elapsed >= 60 * c.max_minutes:
            done = (
                f"already used its time budget at step {s.step} ({s.elapsed / 60:.1f} min, "
                f"train.max_minutes={c.max_minutes:g}); raise it with --train.max_minutes to train on"
            )
        elif self.validator.exhausted():
            done = (
                f"already stopped early at step {s.step} (no better valid {s.metric} in {c.patience} "
                f"validations); raise --train.patience to train on"
            )
        if done and self.main:
            print(f"{self.run_dir} {done}", file=sys.stderr, flush=True)
        return done is not None

    # -- signals, saving -------------------------------------------------------------------------
    def _catch_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.flags.stop = True
        signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.default_int_handler)
        self.progress.say(
            "stopping after this micro-batch, saving the last completed update (press Ctrl-C again to "
            "abort without saving)",
            err=True,
        )

    def _validate(self) -> bool:
        paused_at = self.progress.paused()
        try:
            stop = self.validator()
        except Exception:
            # A validation that fails (say, on a half-trained model's output) loses no update: the step
            # is saved first. The step counts as validated, so a resumed run trains on without redoing it.
            # With several processes nothing is saved: the other ranks wait for rank 0 in the validator.
            if not self.dist.enabled:
                self._save()
                self.progress.say(
                    f"validation failed at step {self.state.step}; checkpoint saved to {self.ckpt.last_saved}\n"
                    f"resume with: aiayn train --resume {self.run_dir} (step {self.state.step} is not validated "
                    f"again: aiayn evaluate scores its weights)",
                    err=True,
                )
            raise
        self.progress.resume_window(paused_at)
        return stop

    def _save(self) -> None:
        self.progress.stamp()
        paused_at = self.progress.paused()  # writing a checkpoint is not training: kept out of tokens/s
        self.ckpt.save()
        self.progress.resume_window(paused_at)

    def _summary(self, interrupted: bool, stopped_early: bool = False, ran: bool = True) -> dict[str, Any]:
        last = self.ckpt.last_saved if ran else None
        return {
            "run_dir": str(self.run_dir),
            "step": self.state.step,
            "interrupted": interrupted,
            "stopped_early": stopped_early,
            "train": self.progress.last_train,
            "valid": self.validator.last,
            "best": self.state.best,
            "checkpoint": str(last) if last else None,
            "nan_skipped": self.state.nan_total,
        }


def train(
    config: Config, run_dir: str | Path, resume: bool = False, init_from: str | Path | None = None
) -> dict[str, Any]:
    """Train (or with `resume=True` continue) a run; returns a summary of the last metrics. `init_from`
    (a run directory or weights file) fine-tunes: its weights and tokenizer, a fresh optimizer, step 0."""
    trainer = Trainer(config, run_dir, resume, init_from)
    try:
        return trainer.run()
    finally:
        distributed.teardown()


__all__ = ["train", "Trainer", "TrainingError", "Batches", "noam_lr", "derive_update_freq"]
