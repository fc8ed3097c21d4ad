"""Filling in masked words with an encoder-only run (`task: mlm`), as Hugging Face's `fill-mask` pipeline
does: a text holds the marker `[MASK]` (BERT's, the piece the run's tokenizer was trained with) once or
more, and each marker gets the model's top-k pieces with their probabilities.

    fm = FillMask.load("runs/mlm")
    fm.fill(["A dog [MASK] on the beach."], top_k=3)   # per text, per [MASK]: Candidates, best first
    echo 'A dog [MASK] on the beach.' | aiayn predict -c runs/mlm   # one JSON line a text

The model reads `[CLS] text [SEP]`, the layout it was trained on. Training replaced a whole piece, its
leading space ("▁runs") included, by [MASK]; so a space before a marker goes into the mask, as RoBERTa's
`<mask>` takes the space before it (lstrip), and "dog [MASK]" reads as two pieces, not three. Candidates
are the pieces masking could choose in training: never pad, unk, BOS, EOS, [MASK], [CLS] or [SEP].
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from aiayn.checkpoint import find_in_run, find_tokenizer, load_model, model_config, resolve_weights, weights_config
from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Config
from aiayn.data.tokenizer import ENCODER_SPECIALS, Tokenizer, collapse_whitespace
from aiayn.devices import resolve_device
from aiayn.errors import AiaynError

MASK = ENCODER_SPECIALS[0]  # the marker a text writes where a word is to be filled in


class FillMaskError(AiaynError, ValueError):
    """A run that cannot fill in masks, or a text without a [MASK] (or too long for the model)."""


@dataclass
class Candidate:
    """One piece for one [MASK]: Hugging Face's fill-mask record (`dataclasses.asdict` is its JSON)."""

    score: float  # its probability at this [MASK]
    token: int  # its id
    token_str: str  # its text, without the leading space
    sequence: str  # the text with this [MASK] filled by it (any other [MASK] left as it is)


class FillMask:
    """An encoder-only model with its masked-token head and tokenizer, ready to fill in [MASK]s."""

    def __init__(
        self, model: torch.nn.Module, tokenizer: Tokenizer, max_len: int, device: str | torch.device = "cpu"
    ) -> None:
        self.model, self.tokenizer, self.max_len, self.device = model, tokenizer, max_len, torch.device(device)
        mask, cls_, sep = (tokenizer.piece_id(p) for p in ENCODER_SPECIALS)
        if mask is None or cls_ is None or sep is None:
            raise FillMaskError(f"the tokenizer {tokenizer.path} lacks the pieces {list(ENCODER_SPECIALS)}")
        self.mask_id, self.cls_id, self.sep_id = mask, cls_, sep
        self.space_id = tokenizer.piece_id("▁")  # sentencepiece's lone word start, which [MASK] absorbs
        self.special = [PAD_ID, UNK_ID, BOS_ID, EOS_ID, mask, cls_, sep]

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | torch.device | None = None) -> FillMask:
        """From a run directory (its default weights, aiayn.checkpoint.which_weights) or a weights file."""
        weights = resolve_weights(path)
        kind = weights_config(weights).kind
        if kind != "encoder-only":
            raise FillMaskError(f"{weights} holds a {kind} model; filling in [MASK] needs an encoder-only run (mlm)")
        dev = resolve_device(device)
        model = load_model(weights, dev)
        # as training truncated (aiayn.data.text): the text within data.max_len pieces, and
        # [CLS] text [SEP] within the model's positions
        max_len = model_config(model).max_positions - 2
        found = find_in_run(weights, "config.yaml")
        if found is not None:
            max_len = min(max_len, Config.load(str(found)).data.max_len)
        return cls(model, Tokenizer(find_tokenizer(weights)), max_len, dev)

    def encode(self, text: str) -> list[int]:
        """The pieces of `text` with each space before a [MASK] taken into it; at least one [MASK]."""
        ids = self.tokenizer.encode(collapse_whitespace(text))
        ids = [i for k, i in enumerate(ids) if not (i == self.space_id and ids[k + 1 : k + 2] == [self.mask_id])]
        if self.mask_id not in ids:
            raise FillMaskError(f"no {MASK} in {text[:80]!r}: write {MASK} where a word is to be filled in")
        if len(ids) > self.max_len:
            raise FillMaskError(f"{text[:80]!r} is {len(ids)} pieces, longer than this model's {self.max_len}")
        return ids

    @torch.no_grad()
    def fill(self, texts: list[str], top_k: int = 5) -> list[list[list[Candidate]]]:
        """For each text, for each of its [MASK]s in order, the `top_k` likeliest pieces, best first."""
        rows = [[self.cls_id, *self.encode(t), self.sep_id] for t in texts]
        if not rows:
            return []
        ids = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)  # (B, T)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row)
        where = torch.nonzero(ids.flatten() == self.mask_id).squeeze(1)  # (n,) flat positions, row-major
        logits = self.model(ids.to(self.device), where=where.to(self.device)).float()  # (n, V)
        logits[:, self.special] = float("-inf")
        probs, best = torch.softmax(logits, -1).topk(min(top_k, logits.size(-1) - len(self.special)))  # (n, k)
        probs, best = probs.cpu(), best.cpu()  # one copy, not one per candidate
        found: list[list[list[Candidate]]] = [[] for _ in texts]
        for j, flat in enumerate(where.tolist()):
            r = flat // ids.size(1)
            nth = len(found[r])  # which [MASK] of text r this is
            found[r].append([self._candidate(texts[r], nth, int(i), float(p)) for p, i in zip(probs[j], best[j])])
        return found

    def _candidate(self, text: str, nth: int, piece: int, score: float) -> Candidate:
        word = self.tokenizer.decode([piece])
        parts = collapse_whitespace(text).split(MASK)
        before, after = MASK.join(parts[: nth + 1]), MASK.join(parts[nth + 1 :])
        # what the model read: a piece that starts a word brings its space; one that does not joins
        # the text before (the space the marker took is gone)
        starts_word = self.tokenizer.sp.id_to_piece(piece).startswith("▁")
        before = before.rstrip() + (" " if starts_word and before.strip() else "")
        return Candidate(score, piece, word, before + word + after)
