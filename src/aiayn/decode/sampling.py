"""Left-to-right generation from a decoder-only model: greedy, temperature, top-k and top-p (nucleus)
sampling on the incremental cache, reproducible under a seed, streamed token by token; and scoring
(log-likelihood) of given text.

The model needs `config.{pad_id,bos_id,eos_id}`, `model(ids) -> logits` (scoring), and for generation
`model.init_cache(batch, capacity)` and `model.step(ids, cache) -> (logits, cache)` (`aiayn.model.DecoderOnly`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Sampling:
    """How the next token is chosen. temperature 0 is greedy (argmax); top_k 0 and top_p 1 keep all."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_tokens: int = 200
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1 or self.max_tokens < 0:
            raise ValueError("sampling needs temperature >= 0, top_k >= 0, 0 < top_p <= 1 and max_tokens >= 0")


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """(B, V) logits with everything outside the top k and outside the nucleus set to -inf.

    The nucleus is the smallest set of most probable tokens whose probability reaches `top_p`
    (Holtzman et al., 2020); the most probable token always stays."""
    if top_k and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the more probable tokens
        drop = before >= top_p  # already enough mass without this token
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def next_token(logits: Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> Tensor:
    """(B, V) logits of the next position -> (B,) chosen ids."""
    if sampling.temperature == 0:
        return logits.argmax(-1)
    logits = filter_logits(logits.float() / sampling.temperature, sampling.top_k, sampling.top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def generate(
    model,
    prompt: Tensor,
    sampling: Sampling | None = None,
    on_token: Callable[[Tensor], None] | None = None,
    context: int | None = None,
    banned: Sequence[int] = (),
) -> list[list[int]]:
    """Continue each row of a (B, T) prompt (right-padded rows are not supported: give prompts of one
    length or one at a time) until EOS or `max_tokens`; returns the new ids per row (without EOS).
    `on_token((B,) ids)` sees every step as it is made, for streaming.

    The model sees at most `context` tokens (default: its `max_positions`): past that, the oldest are
    dropped and the cache is primed again from the last `context` tokens at each step, as nanoGPT
    crops its input to the block size. PAD, BOS and `banned` ids are never generated."""
    s = sampling or Sampling()
    cfg = model.config
    context = min(context or cfg.max_positions, cfg.max_positions)
    if prompt.size(1) > context:
        prompt = prompt[:, -context:]
    gen = None
    if s.seed is not None:
        gen = torch.Generator(device=prompt.device).manual_seed(s.seed)
    B = prompt.size(0)
    cache = model.init_cache(B, capacity=min(context, prompt.size(1) + s.max_tokens))
    logits, cache = model.step(prompt, cache)  # (B, T, V)
    history = prompt  # (B, L): what a re-primed cache is built from
    out: list[list[int]] = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool, device=prompt.device)
    never = [cfg.pad_id, cfg.bos_id, *banned]
    for _ in range(s.max_tokens):
        step = logits[:, -1].clone()  # (B, V)
        step[:, never] = float("-inf")
        ids = next_token(step, s, gen)  # (B,)
        ids = ids.masked_fill(done, cfg.eos_id)
        if on_token is not None:
            on_token(ids)
        done |= ids == cfg.eos_id
        for i in (~done).nonzero().flatten().tolist():
            out[i].append(int(ids[i]))
        if bool(done.all()):
            break
        history = torch.cat([history, ids[:, None]], dim=1)
        if history.size(1) > context:  # past the window: the last `context` tokens, afresh
            history = history[:, -context:]
            logits, cache = model.step(history, model.init_cache(B, capacity=context))
        else:
            logits, cache = model.step(ids[:, None], cache)
    return out


@torch.inference_mode()
def log_likelihood(model, ids: Tensor) -> Tensor:
    """(B, T) right-padded rows (BOS + text + EOS) -> (B,) sum of log p(token | earlier tokens) over each
    row's real tokens after BOS; perplexity is exp(-ll / (length - 1))."""
    cfg = model.config
    logp = model(ids[:, :-1]).float().log_softmax(-1)  # (B, T-1, V)
    target = ids[:, 1:]  # (B, T-1)
    picked = logp.gather(-1, target[..., None]).squeeze(-1)  # (B, T-1)
    return picked.masked_fill(target == cfg.pad_id, 0.0).sum(-1)
