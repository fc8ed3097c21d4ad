"""Text in, text out for decoder-only runs: generate continuations and score lines.

    from aiayn.decode.lm import LanguageModel
    lm = LanguageModel.load("runs/shakespeare_char")          # run dir or weights file
    print(lm.generate("ROMEO:", Sampling(temperature=0.8, top_k=40, max_tokens=300, seed=1)))
    for s in lm.score(["A dog runs on the beach."]): print(s.logprob, s.ppl)

A run trained on sentences (task.block_size null) reads BOS + text and ends its text with EOS; a run
trained on running text (data.text_unit document) has neither: a prompt is just continued, and an
empty prompt starts after a newline, as nanoGPT's sampling does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from aiayn.checkpoint import find_in_run, find_tokenizer, load_model, model_config, resolve_weights, weights_config
from aiayn.config import Config
from aiayn.data.text import NEWLINE  # the document tokenizer's newline piece
from aiayn.data.tokenizer import Tokenizer
from aiayn.decode.sampling import Sampling, generate, log_likelihood
from aiayn.devices import resolve_device
from aiayn.errors import AiaynError


@dataclass
class Scored:
    """One line's log-likelihood (nats) over its `tokens` predicted tokens, and its perplexity."""

    logprob: float
    tokens: int

    @property
    def ppl(self) -> float:
        return math.exp(-self.logprob / max(1, self.tokens))


class LanguageModel:
    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Tokenizer,
        running_text: bool = False,
        device: str | torch.device | None = None,
    ) -> None:
        config = model_config(model)
        if config.kind != "decoder-only":
            raise AiaynError(f"generation needs a decoder-only model (task lm), not {config.kind}")
        self.context = config.max_positions
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer, self.running_text = tokenizer, running_text
        self.newline = tokenizer.piece_id(NEWLINE) if running_text else None

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | torch.device | None = None) -> LanguageModel:
        """From a run directory (best.safetensors, else the newest checkpoint) or a weights file."""
        weights = resolve_weights(path)
        kind = weights_config(weights).kind
        if kind != "decoder-only":
            raise AiaynError(
                f"{weights} holds a {kind} model; `aiayn generate` and `aiayn score` need a decoder-only run (task lm)"
            )
        found = find_in_run(weights, "config.yaml")
        running = found is not None and Config.load(str(found)).data.text_unit == "document"
        return cls(load_model(weights, "cpu"), Tokenizer(find_tokenizer(weights)), running, device)

    def _prefix(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text) if text else []
        if self.running_text:
            return ids or [self.newline if self.newline is not None else self.tokenizer.eos_id]
        return [self.tokenizer.bos_id, *ids]

    def generate(
        self, prompt: str = "", sampling: Sampling | None = None, on_text: Callable[[str], None] | None = None
    ) -> str:
        """The continuation of `prompt` (without the prompt). `on_text` receives it piece by piece as
        it is generated (each call: the new characters), for streaming."""
        s = sampling or Sampling()
        prefix = self._prefix(prompt)
        ids = torch.tensor([prefix], device=self.device)  # (1, T)
        base = self.tokenizer.decode(prefix)
        made: list[int] = []
        shown = ""

        def continuation(new: list[int]) -> str:
            # decoded after the prompt's pieces, so that a piece's leading space ("▁dog") is kept
            full = self.tokenizer.decode(prefix + new)
            return full[len(base) :] if full.startswith(base) else self.tokenizer.decode(new)

        def stream(step: torch.Tensor) -> None:
            nonlocal shown
            if on_text is None or int(step[0]) == self.tokenizer.eos_id:
                return
            made.append(int(step[0]))
            text = continuation(made)
            if len(text) > len(shown) and text.startswith(shown):  # BPE may reshape the tail: show what is settled
                on_text(text[len(shown) :])
                shown = text

        out = generate(self.model, ids, s, on_token=stream)[0]
        text = continuation(out)
        if on_text is not None and len(text) > len(shown) and text.startswith(shown):
            on_text(text[len(shown) :])
        return text

    @torch.inference_mode()
    def score(self, lines: Sequence[str], batch_size: int = 64) -> list[Scored]:
        """Log-likelihood of each line under the model: of text + EOS after BOS for a sentence model, of
        every token after the first for a running-text model (the line cut to the model's context)."""
        out: list[Scored] = []
        limit = self.context
        for i in range(0, len(lines), batch_size):
            rows = []
            for line in lines[i : i + batch_size]:
                ids = self.tokenizer.encode(line)
                rows.append(ids if self.running_text else [self.tokenizer.bos_id, *ids, self.tokenizer.eos_id])
            rows = [r[: limit + 1] for r in rows]
            width = max(2, max(map(len, rows)))
            batch = torch.zeros(len(rows), width, dtype=torch.long)  # (B, T), right-padded
            for k, r in enumerate(rows):
                batch[k, : len(r)] = torch.tensor(r, dtype=torch.long)
            sums = log_likelihood(self.model, batch.to(self.device))  # (B,): pad targets count nothing
            out += [Scored(float(v), max(0, len(r) - 1)) for v, r in zip(sums.tolist(), rows)]
        return out
