"""Token-budget, length-bucketed, rank-sharded, resumable batches (paper §5.1).

"Sentence pairs were batched together by approximate sequence length. Each training batch contained a
set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens."
Here `max_tokens` bounds the *padded* source (B x S) and the *padded* target (B x T, T = pieces + 1)
separately, so no batch ever exceeds the budget on either side. `gather_tokens` finds where the tokens
of the chosen examples go in a padded batch (the text tasks' collates use it too).
"""

from __future__ import annotations

import queue
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID
from aiayn.data.encoded import EncodedSplit
from aiayn.data.errors import DataError


@dataclass
class Batch:
    """One padded batch. tgt_in = BOS + target, tgt_out = target + EOS; pad = 0 everywhere."""

    src: torch.Tensor  # (B, S) int64, source pieces + EOS
    tgt_in: torch.Tensor  # (B, T) int64
    tgt_out: torch.Tensor  # (B, T) int64
    ids: torch.Tensor  # (B,) int64, example indices into the EncodedSplit
    src_tokens: int  # non-pad source tokens
    tgt_tokens: int  # non-pad target tokens (= non-pad entries of tgt_out)

    def __len__(self) -> int:
        return self.src.size(0)

    def to(self, device: str | torch.device, non_blocking: bool = False) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=non_blocking),
            self.tgt_in.to(device, non_blocking=non_blocking),
            self.tgt_out.to(device, non_blocking=non_blocking),
            self.ids,
            self.src_tokens,
            self.tgt_tokens,
        )

    def pin_memory(self) -> Batch:
        """A copy in page-locked host memory, so `to(cuda, non_blocking=True)` really is asynchronous
        (from ordinary memory it is a synchronous copy). Needs CUDA."""
        return Batch(
            self.src.pin_memory(),
            self.tgt_in.pin_memory(),
            self.tgt_out.pin_memory(),
            self.ids,
            self.src_tokens,
            self.tgt_tokens,
        )


def collate(split: EncodedSplit, ids: np.ndarray) -> Batch:
    """Gather examples `ids` into padded tensors, vectorised (no per-row Python loop)."""
    ids = np.asarray(ids, dtype=np.int64)
    b = len(ids)
    rows = np.arange(b)
    sl, tl = split.src_lengths[ids], split.tgt_lengths[ids]  # (B,)
    s_len, t_len = int(sl.max()), int(tl.max()) + 1

    src = np.zeros((b, s_len), dtype=np.int64)  # (B, S); PAD_ID == 0
    r, c, v = gather_tokens(split.src, split.src_offsets[ids], sl)
    src[r, c] = v

    tgt_in = np.zeros((b, t_len), dtype=np.int64)  # (B, T)
    tgt_out = np.zeros((b, t_len), dtype=np.int64)  # (B, T)
    r, c, v = gather_tokens(split.tgt, split.tgt_offsets[ids], tl)
    tgt_in[:, 0] = BOS_ID
    tgt_in[r, c + 1] = v
    tgt_out[r, c] = v
    tgt_out[rows, tl] = EOS_ID
    assert PAD_ID == 0
    return Batch(
        torch.from_numpy(src),
        torch.from_numpy(tgt_in),
        torch.from_numpy(tgt_out),
        torch.from_numpy(ids),
        int(sl.sum()),
        int(tl.sum()) + b,
    )


def gather_tokens(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    """Row, column and value of every token of the selected sentences: sentence i's tokens
    flat[starts[i] : starts[i] + lengths[i]] go to row i, columns 0 .. lengths[i] - 1, of a padded batch."""
    total = int(lengths.sum())
    rows = np.repeat(np.arange(len(lengths)), lengths)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    cols = np.arange(total) - first
    vals = flat[np.repeat(starts, lengths) + cols]
    return rows, cols, vals


def _greedy_cuts(sl: np.ndarray, tl: np.ndarray, cap: int) -> np.ndarray:
    """Start index of each batch when examples sorted by source length are cut greedily: a batch grows
    while (its size) x (its longest source) and (its size) x (its longest target) stay within `cap`.

    Jumps batch by batch instead of stepping example by example: a batch starting at source length s0
    holds at most cap // s0 examples (sources only get longer), so each batch looks at that window only.
    """
    n, starts, start = len(sl), [], 0
    while start < n:
        starts.append(start)
        w = min(n - start, cap // max(1, int(sl[start])) + 1)
        count = np.arange(1, w + 1, dtype=np.int64)
        too_big = (count * np.maximum.accumulate(sl[start : start + w].astype(np.int64)) > cap) | (
            count * np.maximum.accumulate(tl[start : start + w].astype(np.int64)) > cap
        )
        too_big[0] = False  # one example always fits (checked against the longest in __init__)
        first = int(np.argmax(too_big)) if too_big.any() else w
        start += first
    return np.asarray(starts, dtype=np.int64)


class _Prefetcher:
    """Collates `plan` in order on a background thread, at most `depth` batches ahead of the consumer.

    It holds no position: the iterator counts a batch when it is handed out, so a state_dict never
    includes what was only collated ahead. An error in the thread is raised in the consumer at the batch
    it concerns; `close()` stops the thread (it is a daemon too, so a forgotten one never holds up exit)."""

    def __init__(
        self,
        split: EncodedSplit,
        plan: list[np.ndarray],
        depth: int,
        pin: bool,
        collate_fn: Callable[[EncodedSplit, np.ndarray], Any] | None = None,
    ) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self.collate_fn = collate_fn
        self.thread = threading.Thread(target=self._work, args=(split, plan, pin), name="aiayn-prefetch", daemon=True)
        self.thread.start()

    def _work(self, split: EncodedSplit, plan: list[np.ndarray], pin: bool) -> None:
        try:
            for ids in plan:
                b = (self.collate_fn or collate)(split, ids)
                if not self._put((True, b.pin_memory() if pin else b)):
                    return
        except BaseException as e:  # handed to the consumer, raised there
            self._put((False, e))

    def _put(self, item: tuple[bool, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def get(self) -> Batch:
        while True:
            try:
                ok, value = self._queue.get(timeout=0.05)  # a timeout keeps Ctrl-C (KeyboardInterrupt) responsive
                break
            except queue.Empty:
                if not self.thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the batch prefetch thread ended early") from None
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._stop.set()
        # An iterator abandoned until exit is closed while the interpreter finalizes (its generator is
        # collected with the module's globals). By then daemon threads are frozen for good: on 3.11 the
        # interpreter deleted their states, which released what join() waits on, but 3.13's join() waits
        # for the thread to reach its own end, which a frozen thread never does, so it hung the exit.
        # There is nothing left to wait for then: the process ends and takes the thread with it.
        if not sys.is_finalizing():
            self.thread.join()


class BatchIterator:
    """Iterate token-budget batches of one split; stateful so training can resume mid-epoch.

    Per epoch: shuffle examples with a generator seeded by (seed, epoch), stable-sort them by
    (source length, target length) so ties are broken randomly, cut greedily into batches under the
    budget, split the largest batches until the count divides `world_size`, shuffle the batch order
    with the same generator, and give rank r the batches r, r + W, r + 2W, ... Every rank computes the
    same global plan, so shards are disjoint, cover the split, and have equal batch counts.

    Iterating yields the current epoch's batches from the current position; when the epoch is
    exhausted the iterator moves to the next epoch (position 0). `set_epoch(e)` with a different
    epoch starts e from position 0; with the current epoch it is a no-op (so resume + set_epoch works).

    Resharding: a state saved on another world size resumes from the same global position. The plan
    depends on the world size (the batch splits, then the batch order), so "the same position" is the
    set of examples consumed: the first `position x old world size` global batches of the old plan.
    The rest of that epoch is planned afresh, for the new world size, from the examples not yet seen,
    and the following epochs are the new world size's ordinary plans. Every example is still seen
    once per epoch. The state records the chain of (world size, global batches consumed) that made the
    current epoch's plan, so a later resume (same size: exactly, bitwise; another: resharded again)
    rebuilds it.

    `prefetch` > 0 collates up to that many batches ahead on a background thread while the caller
    trains on the current one (`pin_memory`: in page-locked memory, for asynchronous copies to a GPU).
    Batches, order and state are the same as without: the position counts batches handed out only.
    Closing the generator (or exhausting it) stops the thread.

    `mix` draws the epoch from several sources of the split, stored one after another: (pairs, weight)
    each, in order (aiayn.data.sources: a weight multiplies how often a source's pairs are drawn). A
    source takes round(weight x pairs) draws an epoch, walking a seeded permutation of its pairs that is
    drawn afresh each time it is used up: weight 3 sees every pair three times an epoch, weight 0.25 a
    different quarter each epoch, every pair once in four. The epoch is then batched like any; resharding
    counts positions in the epoch's draw.

    `collate_fn(split, ids)` makes the batch (None: the translation pairs' `collate`, looked up when
    used; the text tasks bring their own layout, `text_batching.TextCollate`). A collate whose layout
    is not (source, target + 1) says so with `padded_lengths(split) -> (side_a, side_b)`, each example's
    length on the two padded sides the budget bounds (e.g. `[CLS] a [SEP] b [SEP]` on one side).
    """

    def __init__(
        self,
        split: EncodedSplit,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        prefetch: int = 0,
        pin_memory: bool = False,
        collate_fn: Callable[[EncodedSplit, np.ndarray], Any] | None = None,
        mix: list[tuple[int, float]] | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world_size {world_size}")
        if len(split) == 0:
            raise DataError("cannot batch an empty split (no examples)")
        padded_lengths = getattr(collate_fn, "padded_lengths", None)
        self._padded: tuple[np.ndarray, np.ndarray] | None = padded_lengths(split) if padded_lengths else None
        if self._padded is None:
            longest = max(int(split.src_lengths.max()), int(split.tgt_lengths.max()) + 1)
        else:
            longest = max(int(self._padded[0].max()), int(self._padded[1].max()))
        if longest > max_tokens:
            raise DataError(
                f"max_tokens={max_tokens} is smaller than the longest example ({longest} tokens); "
                f"raise max_tokens or lower data.max_len"
            )
        if len(split) < world_size:
            raise DataError(f"{len(split)} examples cannot be sharded over {world_size} ranks")
        self.split, self.max_tokens, self.seed, self.shuffle = split, int(max_tokens), int(seed), bool(shuffle)
        self.rank, self.world_size = rank, world_size
        self.prefetch, self.pin_memory = int(prefetch), bool(pin_memory)
        self.collate_fn = collate_fn
        if mix is not None and sum(n for n, _ in mix) != len(split):
            raise DataError(f"the sources' pairs {[n for n, _ in mix]} do not add up to the split's {len(split)}")
        self.mix = None if mix is None else [(int(n), float(w)) for n, w in mix]
        self.epoch, self.position = 0, 0
        self._reshards: list[tuple[int, int]] = []  # this epoch's (world size, global batches consumed) before now
        self._plan_epoch: int | None = None
        self._plan: list[np.ndarray] = []

    # -- plan -------------------------------------------------------------------------------------
    def _global_batches(
        self, epoch: int, world_size: int | None = None, subset: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """The epoch's plan for `world_size` ranks (default: this iterator's), over all examples or
        over `subset` (what a resharded epoch has left)."""
        world_size = self.world_size if world_size is None else world_size
        draw = self._draw(epoch)  # None: every example once, in its own order
        if subset is None:
            n = len(self.split) if draw is None else len(draw)
            rng = np.random.default_rng([self.seed, epoch])
            order = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)  # 4 bytes an example at WMT scale
        else:
            n = len(subset)
            if n == 0:
                return []
            rng = np.random.default_rng([self.seed, epoch, n])  # n falls along a chain: each step its own stream
            order = subset.copy()
        if self.shuffle:
            rng.shuffle(order)  # the same permutation as rng.permutation(n)
        ids = order if draw is None else draw[order]  # positions in the draw -> examples
        if self._padded is None:
            sl = np.asarray(self.split.src_lengths)[ids]
            tl = np.asarray(self.split.tgt_lengths)[ids] + 1  # padded target = pieces + 1
        else:
            sl, tl = self._padded[0][ids], self._padded[1][ids]
        del ids
        key = np.argsort(sl.astype(np.int64) * (int(tl.max()) + 1) + tl, kind="stable")  # by (src, tgt) length;
        order, sl, tl = order[key], sl[key], tl[key]  # ties keep the shuffled order
        del key
        starts = _greedy_cuts(sl, tl, self.max_tokens)
        ends = np.append(starts[1:], n)
        batches = [order[a:b] for a, b in zip(starts.tolist(), ends.tolist())]

        n_cut = len(batches)
        while len(batches) % world_size:  # equal batch counts per rank: split the largest batch
            j = max(range(len(batches)), key=lambda k: len(batches[k]))
            big = batches[j]
            if len(big) < 2:
                raise DataError(
                    f"cannot give {world_size} ranks equal batch counts: {n} examples make "
                    f"{n_cut} batches under max_tokens={self.max_tokens}"
                )
            batches[j : j + 1] = [big[: len(big) // 2], big[len(big) // 2 :]]

        if self.shuffle:
            batches = [batches[k] for k in rng.permutation(len(batches))]
        return batches

    def _draw(self, epoch: int) -> np.ndarray | None:
        """The examples of an epoch with `mix`, in source order (repeats allowed); None without."""
        if self.mix is None:
            return None
        return weighted_draw([n for n, _ in self.mix], [w for _, w in self.mix], self.seed, epoch)

    def _batches(self) -> list[np.ndarray]:
        if self._plan_epoch != self.epoch:
            plan = self._epoch_plan()[self.rank :: self.world_size]
            draw = self._draw(self.epoch)
            self._plan = plan if draw is None else [draw[b] for b in plan]
            self._plan_epoch = self.epoch
        return self._plan

    def _epoch_plan(self) -> list[np.ndarray]:
        """The current epoch's global plan: the ordinary one, or after resharding the plan of what the
        earlier world sizes left of it."""
        if not self._reshards:
            return self._global_batches(self.epoch)
        draw = self._draw(self.epoch)
        seen = np.zeros(len(self.split) if draw is None else len(draw), dtype=bool)  # positions of the draw
        left: np.ndarray | None = None
        for world, consumed in self._reshards:
            plan = self._global_batches(self.epoch, world, left)
            for ids in plan[:consumed]:
                seen[ids] = True
            left = np.flatnonzero(~seen)
        try:
            return self._global_batches(self.epoch, self.world_size, left)
        except DataError:  # a handful of examples at the very end of the epoch: too few for equal shards
            n_left = len(seen) if left is None else len(left)
            warnings.warn(
                f"after resharding, the {n_left} example(s) left of epoch {self.epoch} cannot be "
                f"split over {self.world_size} ranks; they are skipped in this epoch",
                stacklevel=2,
            )
            return []

    # -- public -----------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position, self._reshards = int(epoch), 0, []

    def __len__(self) -> int:
        """Batches per epoch on this rank (for the current epoch; ties make it vary slightly)."""
        return len(self._batches())

    def __iter__(self) -> Iterator[Any]:
        plan = self._batches()
        if self.prefetch > 0:
            ahead = _Prefetcher(self.split, plan[self.position :], self.prefetch, self.pin_memory, self.collate_fn)
            try:
                while self.position < len(plan):
                    b = ahead.get()
                    self.position += 1  # counted when handed out, not when collated ahead
                    yield b
            finally:  # exhausted, closed (the caller stopped early) or an error: no thread outlives it
                ahead.close()
        else:
            while self.position < len(plan):
                ids = plan[self.position]
                self.position += 1  # counted before yield: a state_dict taken now resumes after this batch
                yield (self.collate_fn or collate)(self.split, ids)
        self.epoch, self.position, self._reshards = self.epoch + 1, 0, []

    @property
    def padding_fraction(self) -> float:
        """Share of pad positions in this rank's batches of the current epoch (source and target)."""
        padded = real = 0
        for ids in self._batches():
            sl, tl = self.split.src_lengths[ids], self.split.tgt_lengths[ids] + 1
            padded += len(ids) * (int(sl.max()) + int(tl.max()))
            real += int(sl.sum()) + int(tl.sum())
        return 1.0 - real / padded

    def state_dict(self) -> dict[str, Any]:
        """`position` counts this rank's batches; every rank is at the same one, so the global position
        is position x world_size batches of the current epoch's plan."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "max_tokens": self.max_tokens,
            "world_size": self.world_size,
            "rank": self.rank,
            "num_examples": len(self.split),
            "reshards": [list(r) for r in self._reshards],
            **({"mix": [list(m) for m in self.mix]} if self.mix is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore epoch and position; the settings that shape the plan must match. A state from another
        world size continues from the same global position (see the class docstring)."""
        for key in ("seed", "shuffle", "max_tokens", "num_examples", "mix"):
            mine = self.state_dict().get(key)
            if state.get(key) != mine and (key in state or key == "mix"):
                hint = (
                    " (the training data changed size; a run continues on new text only of the same size)"
                    if key == "num_examples"
                    else " (the sources' weights changed: a run resumes with the weights it started with)"
                    if key == "mix"
                    else ""
                )
                raise DataError(f"cannot resume batches: {key} was {state[key]}, now {mine}{hint}")
        epoch, position = int(state["epoch"]), int(state["position"])
        reshards = [(int(w), int(c)) for w, c in state.get("reshards", [])]
        world = int(state.get("world_size", self.world_size))
        if world != self.world_size:
            if position:
                reshards.append((world, position * world))
            position = 0  # of the new plan of what is left
        self.epoch, self.position, self._reshards = epoch, position, reshards
        self._plan_epoch = None


def weighted_draw(sizes: list[int], weights: list[float], seed: int, epoch: int) -> np.ndarray:
    """One epoch's examples of sources stored one after another, `sizes[s]` each: round(weight x size)
    draws from source s, walking its pairs in a permutation seeded by (seed, s, lap) and drawn afresh
    for each lap through them, so that the draws of all epochs together see every pair equally often."""
    out, start = [], 0
    for s, (n, w) in enumerate(zip(sizes, weights)):
        q = int(round(w * n))
        if n and q:
            pos = np.arange(epoch * q, (epoch + 1) * q, dtype=np.int64)  # this epoch's draws of all so far
            laps = pos // n
            ids = np.empty(q, dtype=np.int64)
            for lap in np.unique(laps).tolist():
                here = laps == lap
                ids[here] = np.random.default_rng([seed, s, lap]).permutation(n)[pos[here] - lap * n]
            out.append(start + ids)
        start += n
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
