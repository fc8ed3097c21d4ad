"""Batches of text for the encoder-only and decoder-only tasks.

- `TextCollate`: examples of one text (or a sentence pair) padded into a `TextBatch`, in one of two
  layouts: a decoder-only model reads `text EOS` (the loop shifts it behind BOS), an encoder-only model
  reads BERT's `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` with segment ids. Used through
  `BatchIterator(..., collate_fn=TextCollate(...))`, so sentences are batched under the token budget,
  sharded over ranks and resumed as translation pairs are.
- `MaskingCollate`: the encoder layout with BERT's masked-token corruption decided on the host, seeded
  by the batch's examples, so the loss's normaliser (the chosen positions) is known before the forward.
- `BlockIterator`: nanoGPT's language-model batches: `batch_size` windows of `block_size + 1` tokens at
  seeded random places of one token stream; resumable from its count of batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.batching import gather_tokens
from aiayn.data.encoded import EncodedSplit
from aiayn.data.errors import DataError


@dataclass
class TextBatch:
    """Padded examples (pad = 0). `ids` rows: `text EOS` (decoder layout) or `[CLS] a [SEP] (b [SEP])`."""

    ids: torch.Tensor  # (B, T) int64
    segments: torch.Tensor | None  # (B, T) 0 = first text, 1 = second (sentence pairs), else None
    labels: torch.Tensor | None  # (B,) class ids (classification)
    index: torch.Tensor  # (B,) example indices into the split (blocks: start offsets)
    tokens: int  # what the loss is normalised by: predicted tokens (lm), masked positions (mlm), examples

    def __len__(self) -> int:
        return self.ids.size(0)

    def to(self, device: str | torch.device, non_blocking: bool = False) -> TextBatch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return TextBatch(
            self.ids.to(device, non_blocking=non_blocking),
            move(self.segments),
            move(self.labels),
            self.index,
            self.tokens,
        )

    def pin_memory(self) -> TextBatch:
        def pin(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.pin_memory()

        return TextBatch(self.ids.pin_memory(), pin(self.segments), pin(self.labels), self.index, self.tokens)


def _encoder_lengths(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Row lengths of `[CLS] a [SEP] (b [SEP])` from a's length with EOS (which becomes the first [SEP])
    and b's (0 when there is no second text)."""
    return 1 + la + np.where(lb > 0, lb + 1, 0)


class TextCollate:
    """`collate_fn` for text examples. With `cls_id`/`sep_id` the encoder layout, else the decoder's."""

    def __init__(
        self,
        labels: np.ndarray | None = None,
        cls_id: int | None = None,
        sep_id: int | None = None,
        per_example: bool = False,
    ) -> None:
        """`per_example`: `tokens` counts examples (classification), not positions."""
        self.labels, self.cls_id, self.sep_id, self.per_example = labels, cls_id, sep_id, per_example

    def padded_lengths(self, split: EncodedSplit) -> tuple[np.ndarray, np.ndarray]:
        """Each example's row length in the batch (what BatchIterator's token budget bounds), and 0 for
        the unused second side."""
        la = np.asarray(split.src_lengths, dtype=np.int64)  # (N,) text + EOS
        if self.cls_id is None:
            return la, np.zeros_like(la)
        lb = np.asarray(split.tgt_lengths, dtype=np.int64)
        return _encoder_lengths(la, lb), np.zeros_like(la)

    def __call__(self, split: EncodedSplit, ids: np.ndarray) -> TextBatch:
        ids = np.asarray(ids, dtype=np.int64)
        b = len(ids)
        la = np.asarray(split.src_lengths[ids], dtype=np.int64)  # (B,) text + EOS
        lb = np.asarray(split.tgt_lengths[ids], dtype=np.int64)  # (B,) second text (0 when single)
        labels = None if self.labels is None else torch.from_numpy(np.asarray(self.labels[ids], dtype=np.int64))
        r, c, v = gather_tokens(split.src, split.src_offsets[ids], la)
        if self.cls_id is None:  # decoder: text EOS
            out = np.zeros((b, int(la.max())), dtype=np.int64)  # (B, T)
            out[r, c] = v
            return TextBatch(torch.from_numpy(out), None, labels, torch.from_numpy(ids), int(la.sum()))
        assert self.sep_id is not None
        # encoder: [CLS] a [SEP] (b [SEP]); a's EOS becomes the first [SEP]
        total = _encoder_lengths(la, lb)  # (B,)
        out = np.zeros((b, int(total.max())), dtype=np.int64)  # (B, T)
        seg = np.zeros_like(out)
        out[:, 0] = self.cls_id
        out[r, c + 1] = np.where(v == EOS_ID, self.sep_id, v)
        if lb.any():
            r2, c2, v2 = gather_tokens(split.tgt, split.tgt_offsets[ids], lb)
            col = c2 + 1 + la[r2]
            out[r2, col] = v2
            seg[r2, col] = 1
            pair = np.flatnonzero(lb > 0)
            out[pair, total[pair] - 1] = self.sep_id
            seg[pair, total[pair] - 1] = 1
        return TextBatch(
            torch.from_numpy(out),
            torch.from_numpy(seg) if lb.any() else None,
            labels,
            torch.from_numpy(ids),
            b if self.per_example else int(total.sum()),
        )


@dataclass
class MaskedBatch(TextBatch):
    """A `TextBatch` whose `ids` are corrupted for masked-token prediction; `tokens` = len(where)."""

    where: torch.Tensor = dataclasses.field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    #   (n,) flat positions into (B, T) that the loss scores
    targets: torch.Tensor = dataclasses.field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    #   (n,) the original ids there

    def to(self, device: str | torch.device, non_blocking: bool = False) -> MaskedBatch:
        moved = TextBatch.to(self, device, non_blocking)
        return MaskedBatch(
            **vars(moved),
            where=self.where.to(device, non_blocking=non_blocking),
            targets=self.targets.to(device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> MaskedBatch:
        pinned = TextBatch.pin_memory(self)
        return MaskedBatch(**vars(pinned), where=self.where.pin_memory(), targets=self.targets.pin_memory())


class MaskingCollate:
    """BERT's masked-token batches (Devlin et al., 2019, §3.1 "Task #1: Masked LM" and Appendix A.1):
    each ordinary token (never [CLS], [SEP], [MASK], pad, unk, BOS or EOS) is chosen with probability
    `mask_prob`; a chosen token becomes [MASK] with probability `mask_token`, a random ordinary token
    with probability `random_token`, and otherwise stays as it was. At least one position per batch is
    chosen (an all-unchosen batch would have nothing to normalise by).

    The draws come from a generator seeded by (seed, the batch's example indices), not from a running
    stream: a resumed run re-creates the masks of its remaining batches without any saved RNG state,
    validation masks are the same at every validation, and the masks of one example differ from epoch
    to epoch as the shuffled batches it lands in do (BERT's "dynamic" masking, Liu et al., 2019, for free).
    """

    def __init__(
        self,
        vocab_size: int,
        mask_id: int,
        cls_id: int,
        sep_id: int,
        special_ids: Sequence[int] = (),
        seed: int = 0,
        mask_prob: float = 0.15,
        mask_token: float = 0.8,
        random_token: float = 0.1,
    ) -> None:
        self.collate = TextCollate(cls_id=cls_id, sep_id=sep_id)
        self.mask_id, self.seed = int(mask_id), int(seed)
        self.mask_prob, self.mask_token, self.random_token = mask_prob, mask_token, random_token
        self.special = np.unique(
            np.asarray([PAD_ID, UNK_ID, BOS_ID, EOS_ID, mask_id, cls_id, sep_id, *special_ids], dtype=np.int64)
        )
        self.ordinary = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), self.special)  # random replacements
        if len(self.ordinary) == 0:
            raise DataError(f"a vocabulary of {vocab_size} pieces has no ordinary token to mask")

    def padded_lengths(self, split: EncodedSplit) -> tuple[np.ndarray, np.ndarray]:
        return self.collate.padded_lengths(split)

    def __call__(self, split: EncodedSplit, ids: np.ndarray) -> MaskedBatch:
        return self.mask(self.collate(split, ids))

    def mask(self, b: TextBatch) -> MaskedBatch:
        ids = b.ids.numpy().copy()  # (B, T)
        rng = np.random.default_rng([self.seed, *(int(i) for i in b.index)])
        candidate = ~np.isin(ids, self.special)  # (B, T)
        chosen = candidate & (rng.random(ids.shape) < self.mask_prob)  # (B, T)
        if not chosen.any():
            pool: np.ndarray = np.flatnonzero(candidate)  # (k,) flat positions
            if len(pool) == 0:  # nothing but special pieces: score the first text position
                pool = np.asarray([1])
            chosen.flat[rng.choice(pool)] = True
        where = np.flatnonzero(chosen)  # (n,) flat positions, row-major
        targets = ids.flat[where].copy()  # (n,)
        u = rng.random(len(where))  # (n,) which corruption each chosen position gets
        random_ids = rng.choice(self.ordinary, size=len(where))  # (n,)
        corrupted = np.where(
            u < self.mask_token, self.mask_id, np.where(u < self.mask_token + self.random_token, random_ids, targets)
        )
        ids.flat[where] = corrupted
        return MaskedBatch(
            torch.from_numpy(ids),
            b.segments,
            b.labels,
            b.index,
            len(where),
            where=torch.from_numpy(where.astype(np.int64)),
            targets=torch.from_numpy(targets),
        )


class BlockIterator:
    """Language-model batches of `batch_size` windows of `block_size + 1` tokens of one stream (the
    training split's one document), at random places drawn from a generator seeded by (seed, epoch,
    batch, rank): no two ranks draw the same windows, and the state is just the count of batches.

    An epoch is as many batches as make one pass over the stream's tokens over all ranks (windows are
    drawn with replacement, as nanoGPT does, so an epoch sees most tokens, not each exactly once)."""

    def __init__(
        self, stream: np.ndarray, block_size: int, batch_size: int, seed: int = 0, rank: int = 0, world_size: int = 1
    ) -> None:
        if len(stream) < block_size + 2:
            raise DataError(
                f"the text has {len(stream)} tokens, fewer than one block of task.block_size={block_size} + 1"
            )
        self.stream, self.block_size, self.batch_size = stream, int(block_size), int(batch_size)
        self.max_tokens = self.block_size * self.batch_size  # a batch's tokens: its windows' inputs
        self.seed, self.rank, self.world_size = int(seed), rank, world_size
        self.epoch, self.position = 0, 0

    def __len__(self) -> int:
        return max(1, len(self.stream) // (self.block_size * self.batch_size * self.world_size))

    def batch(self, epoch: int, position: int) -> TextBatch:
        rng = np.random.default_rng([self.seed, epoch, position, self.rank])
        starts = rng.integers(0, len(self.stream) - self.block_size, self.batch_size)  # (B,)
        cols = np.arange(self.block_size + 1)
        ids = np.asarray(self.stream[starts[:, None] + cols[None, :]], dtype=np.int64)  # (B, T + 1)
        return TextBatch(
            torch.from_numpy(ids),
            None,
            None,
            torch.from_numpy(starts.astype(np.int64)),
            self.batch_size * self.block_size,
        )

    def __iter__(self) -> Iterator[TextBatch]:
        while self.position < len(self):
            b = self.batch(self.epoch, self.position)
            self.position += 1
            yield b
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "block_size": self.block_size,
            "batch_size": self.batch_size,
            "tokens": len(self.stream),
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("seed", "block_size", "batch_size", "tokens"):
            if state[key] != self.state_dict()[key]:
                raise DataError(f"cannot resume batches: {key} was {state[key]}, now {self.state_dict()[key]}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        if state.get("world_size", self.world_size) != self.world_size:  # another rank count: a fresh epoch
            self.epoch, self.position = self.epoch + 1, 0


def stream_blocks(stream: np.ndarray, block_size: int, batch_size: int) -> Iterator[TextBatch]:
    """Validation: the stream cut into consecutive, non-overlapping windows of block_size + 1 tokens
    (each window's last token is the next one's first), `batch_size` at a time, then the remaining
    tail as one shorter window, so every token after the first is predicted exactly once;
    deterministic."""
    n = (len(stream) - 1) // block_size
    for k in range(0, n, batch_size):
        starts = np.arange(k, min(n, k + batch_size), dtype=np.int64) * block_size
        ids = np.asarray(stream[starts[:, None] + np.arange(block_size + 1)[None, :]], dtype=np.int64)
        yield TextBatch(torch.from_numpy(ids), None, None, torch.from_numpy(starts), len(starts) * block_size)
    tail = len(stream) - 1 - n * block_size  # tokens no full window reached
    if tail > 0:
        ids = np.asarray(stream[n * block_size :], dtype=np.int64)[None, :]  # (1, tail + 1)
        yield TextBatch(torch.from_numpy(ids), None, None, torch.tensor([n * block_size]), tail)
