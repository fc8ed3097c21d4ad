"""Translation's loss and validation (§5): label-smoothed cross-entropy over the target's tokens; the
validation loss and greedy BLEU; and its predictor. The record that names them: aiayn.train.tasks.translate."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from aiayn.config import Config
from aiayn.data.batching import BatchIterator
from aiayn.data.encoded import EncodedSplit
from aiayn.data.pairs import Prepared
from aiayn.decode import Translator
from aiayn.scoring import score
from aiayn.train.loss import label_smoothed_nll
from aiayn.train.tasks.spec import Predict, TaskBase
from aiayn.train.tasks.translate import eval_bleu


class TranslationTask(TaskBase[Prepared]):
    """Paper §5: label-smoothed cross-entropy over the target's non-pad tokens; validation loss, nll,
    perplexity and (task.eval_bleu) greedy BLEU on the first `eval_max_sentences` sentences."""

    def __init__(self, cfg: Config, *rest: Any) -> None:  # TaskBase's arguments
        super().__init__(cfg, *rest)
        self.compiled, self.eval_max_sentences = cfg.train.compile, cfg.train.eval_max_sentences
        self.eval_bleu = eval_bleu(cfg)

    def tokens(self, batch: Any) -> int:
        return batch.tgt_tokens

    def scored(self, tgt_out: Tensor) -> Tensor:
        """(B, T) bool on the host: the target positions the loss covers (every non-pad one)."""
        return tgt_out != self.model_config.pad_id

    def _forward(self, model: torch.nn.Module, b: Any) -> tuple[Tensor, Tensor]:
        """Logits (n, V) and gold ids (n,) at the batch's n scored target positions only."""
        keep = self.scored(b.tgt_out).view(-1).nonzero().squeeze(1)  # (n,) on the host: no CUDA sync
        b, keep = b.to(self.device, non_blocking=True), keep.to(self.device, non_blocking=True)
        if self.compiled:
            # Token-budget batches vary in B, S, T and n from batch to batch. Marked dynamic, the first call
            # compiles one graph for all of them; unmarked, torch compiles a static graph, recompiles on the
            # first new shape, and again for each further dimension it finds varying.
            for t in (b.src, b.tgt_in):
                torch._dynamo.maybe_mark_dynamic(t, 0)
                torch._dynamo.maybe_mark_dynamic(t, 1)
            torch._dynamo.maybe_mark_dynamic(keep, 0)
        with self.autocast():
            logits = model(b.src, b.tgt_in, keep=keep)  # (n, V)
        return logits, b.tgt_out.view(-1).index_select(0, keep)  # (n, V), (n,)

    def loss(self, model: torch.nn.Module, batch: Any) -> tuple[Tensor, Tensor]:
        logits, target = self._forward(model, batch)
        loss, nll, _ = label_smoothed_nll(logits, target, self.label_smoothing, self.model_config.pad_id)
        return loss, nll

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        return {**self.valid_loss(model), "bleu": self._greedy_bleu(model) if self.eval_bleu else None}

    @torch.no_grad()
    def valid_loss(self, model: torch.nn.Module, split: EncodedSplit | None = None) -> dict[str, float | None]:
        """Loss, nll and perplexity per target token over `split` (default: the whole validation split)."""
        loss = nll = tokens = 0.0
        for b in BatchIterator(
            self.prepared.splits["valid"] if split is None else split, self.max_tokens, shuffle=False
        ):
            logits, target = self._forward(model, b)
            ls, n, k = label_smoothed_nll(logits, target, self.label_smoothing, self.model_config.pad_id)
            loss, nll, tokens = loss + ls.item(), nll + n.item(), tokens + k.item()
        return {"loss": loss / tokens, "nll": nll / tokens, "ppl": math.exp(min(nll / tokens, 50.0))}

    def _greedy_bleu(self, model: torch.nn.Module) -> float:
        src, ref = self.prepared.raw("valid")
        n = self.eval_max_sentences or len(src)
        with self.autocast():
            hyps = Translator(model, self.prepared.tokenizer, device=self.device).translate(list(src[:n]), beam=1)
        return float(score(hyps, list(ref[:n]))["bleu"])


def translations(run: str, device: str | None) -> Predict:
    """Each line translated with the run's search (`aiayn translate` has every option)."""
    return Translator.load(run, device).translate
