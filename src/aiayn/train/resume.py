"""What a run saves so that it can resume, and the resume: one checkpoint manager gathers the state of
every stateful part of a run (model weights, optimizer, scheduler, loss scaler, data position, RNG,
train state), writes it, finds the newest usable checkpoint on resume and restores every part from it.
The weights' file format and the run directory's layout are aiayn.checkpoint's; the training state is
a torch.save of tensors and plain containers only, loaded with `weights_only=True`, so nothing
arbitrary is ever unpickled:

    RUN/checkpoints/step_XXXXXXXX.safetensors   model weights (aiayn.checkpoint.save_weights)
    RUN/checkpoints/step_XXXXXXXX.state.pt      optimizer, scheduler, RNG, data position, counters

The weights are written first and the state last, each atomically; a step counts as checkpointed
only when both files exist and load, so a kill at any moment leaves the previous one intact.

Weights enter a model through one function, `aiayn.checkpoint.load_weights` (resume, fine-tuning
with `init_from`, inference).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aiayn import distributed
from aiayn.checkpoint import (
    CheckpointError,
    checkpoint_paths,
    find_tokenizer,
    list_checkpoints,
    load_weights,
    model_config,
    read_metadata,
    resolve_weights,
    save_weights,
    weights_config,
)
from aiayn.distributed import DistInfo
from aiayn.fileio import atomic_write
from aiayn.train.metrics import MetricsWriter
from aiayn.train.runtime import TrainingError
from aiayn.train.state import TrainState

STATE_VERSION = 2  # of the training-state file; 2 added "early_stop" (best step, patience counter)


# -- files: pruning, RNG streams, the state file ---------------------------------------------------


def prune(run_dir: str | Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` step checkpoints (best.safetensors is separate)."""
    ckpts = list_checkpoints(run_dir)
    for _, weights, state in ckpts[: max(len(ckpts) - keep_last, 0)]:
        state.unlink(missing_ok=True)  # state first: a half-deleted pair is then never "complete"
        weights.unlink(missing_ok=True)


# -- RNG --------------------------------------------------------------------------------------------


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """Host RNGs, plus the CUDA generator of `device` (this rank's GPU) when training on one. Only
    that one: saving every visible GPU's state made a resume with fewer visible GPUs fail."""
    np_state = np.random.get_state()
    assert isinstance(np_state, tuple)  # the legacy form (the default)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "key": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": _plain(random.getstate()),
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], device: torch.device | None = None) -> None:
    """Inverse of `capture_rng`. The CUDA state goes to `device` only."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    cuda = state.get("cuda")
    if cuda is None or device is None or device.type != "cuda":
        return  # saved on CPU, or resumed on CPU: no GPU stream to continue
    torch.cuda.set_rng_state(cuda, device)


def _plain(obj: Any) -> Any:
    """Tuples -> lists recursively (weights_only unpickling accepts both; lists keep it obvious)."""
    if isinstance(obj, (tuple, list)):
        return [_plain(o) for o in obj]
    return obj


# -- state files ------------------------------------------------------------------------------------


def save_state(path: str | Path, state: dict[str, Any]) -> Path:
    return atomic_write(path, lambda tmp: torch.save(state, tmp))


def load_state(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"training state not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, bad pickle, disallowed global: all mean "unusable file"
        raise CheckpointError(
            f"corrupted or truncated training state {path}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    if not isinstance(state, dict) or "step" not in state:
        raise CheckpointError(f"{path} is not an aiayn training state")
    return state


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr, flush=True)


# -- the manager -----------------------------------------------------------------------------------


class RNGState:
    """Every rank's RNG streams (torch, numpy, python, its own GPU) as one part: dropout continues per
    rank. Gathering is collective under DDP."""

    def __init__(self, device: torch.device, dist: DistInfo, seed: int) -> None:
        self.device, self.dist, self.seed = device, dist, seed

    def state_dict(self, own: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        mine = own or capture_rng(self.device)
        if not self.dist.enabled:
            return [mine]
        gathered: list[Any] = [None] * self.dist.world_size
        torch.distributed.all_gather_object(gathered, mine)
        return gathered

    def load_state_dict(self, rngs: list[dict[str, Any]], step: int) -> None:
        rank = self.dist.rank
        restore_rng(rngs[rank] if rank < len(rngs) else rngs[0], self.device)
        if rank >= len(rngs):  # a rank the saved run did not have: its own dropout stream, not rank 0's copy
            torch.manual_seed(self.seed * 1_000_003 + step * 1009 + rank)


class CheckpointManager:
    def __init__(
        self,
        run_dir: Path,
        states: dict[str, Any],
        dist: DistInfo,
        device: torch.device,
        keep_last: int,
        tokens_per_update: int | None = None,
    ) -> None:
        """`states`: every Stateful part of the run by name (torchtitan's shape), each with state_dict and
        load_state_dict. "model" is written to the weights file, "train_state" as the state file's top-level
        fields, "rng" gathered from every rank; each other part (optimizer, scheduler, scaler, data) under
        its name, in the dict's order ({} for a part that is None, such as the scaler without fp16)."""
        self.run_dir = run_dir
        self.model: torch.nn.Module = states["model"]
        self.state: TrainState = states["train_state"]
        self.rng: RNGState = states["rng"]
        self.parts = {k: v for k, v in states.items() if k not in ("model", "train_state", "rng")}
        self.dist, self.device, self.keep_last = dist, device, keep_last
        self.tokens_per_update = tokens_per_update
        self.last_saved: Path | None = None
        self.last_saved_step = -1
        # A stop mid-update (preemption) saves the data position and RNG state from before the update,
        # so the checkpoint is exactly the last completed update.
        self.rollback: tuple[dict[str, Any], dict[str, Any]] | None = None

    def state_dict(self) -> dict[str, Any]:
        """Collective under DDP (the RNG states are gathered): every rank calls it."""
        data, rng = self.rollback or (self.parts["data"].state_dict(), None)
        state = {"version": STATE_VERSION, **self.state.state_dict(), "rng": self.rng.state_dict(rng)}
        for name, part in self.parts.items():
            state[name] = {} if part is None else part.state_dict()
        state["data"] = data
        return state

    def save(self) -> None:
        step = self.state.step
        if step == self.last_saved_step:
            return
        state = self.state_dict()
        if self.dist.is_main:
            weights, state_path = checkpoint_paths(self.run_dir, step)
            save_weights(self.model, weights, step=step)
            save_state(state_path, state)
            prune(self.run_dir, self.keep_last)
            self.last_saved = weights
        self.last_saved_step = step

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise TrainingError(
                f"the training state is version {state.get('version')}, this aiayn reads version {STATE_VERSION}: "
                f"resume it with the aiayn that wrote it, or start from its weights with --init-from"
            )
        for name, part in self.parts.items():
            if part is not None and state.get(name):
                part.load_state_dict(state[name])  # data on another world size: resharded, same global position
        self.rng.load_state_dict(state["rng"], int(state["step"]))
        self.state.load_state_dict(state)
        saved_world = int(state["data"].get("world_size", self.dist.world_size))
        if saved_world != self.dist.world_size and self.dist.is_main:
            same = (
                "the global batch is kept (optim.tokens_per_update)"
                if self.tokens_per_update
                else f"the global batch changes {self.dist.world_size}/{saved_world}x (optim.tokens_per_update "
                f"would keep it)"
            )
            warn(
                f"resuming on {self.dist.world_size} rank(s) a run saved on {saved_world}: the rest of epoch "
                f"{self.parts['data'].epoch} is re-planned from the same global position (each example still "
                f"once per epoch); {same}; the losses are not those of an uninterrupted run"
            )

    def load_latest(self, metrics: MetricsWriter) -> None:
        """Newest usable checkpoint; damaged ones are named and skipped in favour of older ones.

        Rank 0 lists the checkpoints and every rank tries the same step, in the same order: ranks that
        each picked their own newest (a file system that lags on one node) would resume at different
        steps and hang in their first collective. A step counts only if it loaded on every rank."""
        steps: list[int] = [s for s, _, _ in reversed(list_checkpoints(self.run_dir))] if self.dist.is_main else []
        if self.dist.enabled:
            box: list[Any] = [steps]
            torch.distributed.broadcast_object_list(box, src=0)
            steps = box[0]
        if not steps:
            warn(f"no checkpoint in {self.run_dir}/checkpoints yet: starting from step 0")
            metrics.truncate(0)
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
                load_weights(self.model, weights, self.device)
                self.load_state_dict(state)
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
                raise TrainingError(
                    f"resuming from step {step} failed on rank(s) "
                    f"{[r for r, c in enumerate(codes) if c == 2]}; see their error"
                )
            if any(codes):
                if not damaged:
                    errors.append(f"step {step}: unusable on rank(s) {[r for r, c in enumerate(codes) if c]}")
                continue
            if errors and self.dist.is_main:
                warn(f"resuming from the older checkpoint {weights}")
            self.last_saved, self.last_saved_step = weights, step
            metrics.truncate(step)
            return
        raise TrainingError(
            "no usable checkpoint to resume from"
            + (" on every rank" if self.dist.enabled else "")
            + ":\n  "
            + "\n  ".join(errors)
        )


# -- fine-tuning ------------------------------------------------------------------------------------

_REGULARISATION = ("dropout", "attention_dropout")  # may differ between pre-training and fine-tuning
_HEADS = ("pooler.", "classifier.")  # a classifier's head, new on a pre-trained (mlm) encoder


def init_source(path: str | Path) -> tuple[Path, Path]:
    """`--init-from RUN_OR_WEIGHTS` -> (weights file, its sentencepiece model): a run directory's default
    weights (aiayn.checkpoint.which_weights), or a weights file with spm.model in its run directory."""
    try:
        weights = resolve_weights(path)
        read_metadata(weights)
        return weights, find_tokenizer(weights)
    except CheckpointError as e:
        raise TrainingError(f"--init-from {path}: {e}") from None


def load_initial_weights(model: torch.nn.Module, weights: Path, device: torch.device) -> None:
    """Fine-tuning starts from these weights; the architecture must be the same (dropout may differ)."""
    theirs, ours = weights_config(weights).to_dict(), model_config(model).to_dict()
    new_head = theirs.get("n_classes") is None and ours.get("n_classes") is not None
    skip = _REGULARISATION + (("n_classes",) if new_head else ())
    diff = [
        f"{k} {theirs.get(k)} vs {ours.get(k)}"
        for k in sorted(set(theirs) | set(ours))
        if k not in skip and theirs.get(k) != ours.get(k)
    ]
    if diff:
        vocab = (
            " (another vocabulary: keep data.spm_model at the run's spm.model)" if "vocab_size" in "".join(diff) else ""
        )
        raise TrainingError(f"--init-from {weights}: its model differs from this config's: {', '.join(diff)}{vocab}")
    try:
        load_weights(model, weights, device, new_heads=_HEADS if new_head else ())
    except CheckpointError as e:
        raise TrainingError(f"--init-from {weights}: {e}") from None
