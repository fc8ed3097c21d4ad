"""Greedy and beam search on the incremental decoder cache (paper §6.1).

The paper decodes with beam size 4, length penalty alpha = 0.6 and maximum output length
input length + 50, "terminating early when possible". Both searches are batched: the decoder
batch holds `sources x beams` rows; cross-attention keys/values stay one copy per source
(`Transformer.init_cache`), beams are reordered with `cache.reorder(rows)` and finished
sentences leave the batch with `cache.keep(sources)`.

Conventions used here (documented once):
- Source length = non-pad source tokens (pieces + EOS, as fed to the encoder).
- Max output length = floor(max_len_a * source length + max_len_b) tokens before EOS, capped by
  the model's positions; at that length EOS is forced (keeping its own log-prob in the score).
- Lengths |Y| in the GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha count the EOS token
  (as GNMT's step count and fairseq do): "a b EOS" has |Y| = 3, the empty translation |Y| = 1.
- Returned ids hold neither BOS nor EOS; beam scores are sum(log p) / lp(Y).
- Pad and BOS are never generated.

The model is any `Decodable` (aiayn.decode.decodable): `config.{pad_id,bos_id,eos_id}`, `encode(src)`,
`init_cache(memory, src_mask)` and `step(ids, cache) -> (logits, cache)` with a cache offering
`reorder(rows)` and `keep(sources)`; tests drive the search with a scripted fake model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from aiayn.config import ConfigError, DecodeConfig, ModelConfig
from aiayn.decode.decodable import Decodable
from aiayn.model.masks import padding_mask

Hypotheses = list[list[tuple[list[int], float]]]  # per sentence: n-best (ids, score), best first


class Constraint(Protocol):
    """Which tokens a hypothesis may write next, from a state it carries (e.g. a tree's open brackets
    and words so far, a task's own constraint). States are tensors with one row per decoder
    row; the search reorders and drops their rows with the hypotheses. EOS forced at the maximum length
    stays allowed."""

    def start(self, src: Tensor) -> tuple[Tensor, ...]:
        """(B, S) source ids -> the state of each source's empty hypothesis, tensors of B rows."""
        ...

    def banned(self, state: tuple[Tensor, ...], left: Tensor) -> Tensor:
        """(R,) rows of state, and (R,) tokens each row may still write before its forced EOS (this one
        included) -> (R, V) True where a token may not come next."""
        ...

    def advance(self, state: tuple[Tensor, ...], tokens: Tensor) -> tuple[Tensor, ...]:
        """The state after each row wrote `tokens` (R,)."""
        ...


def _rows(state: tuple[Tensor, ...], rows: Tensor) -> tuple[Tensor, ...]:
    return tuple(x[rows] for x in state)


def max_lengths(
    model: Decodable, src: Tensor, max_len_a: float = DecodeConfig.max_len_a, max_len_b: float = DecodeConfig.max_len_b
) -> Tensor:
    """(B, S) source ids -> (B,) maximum number of output tokens before EOS."""
    cfg = model.config
    src_len = (src != cfg.pad_id).sum(1).double()  # (B,)
    limit = (max_len_a * src_len + max_len_b).floor().clamp(min=0).long()
    # The decoder input at step t sits at position t - 1; the last one (forced EOS) at max_len.
    cap = getattr(cfg, "max_positions", None)
    return limit if cap is None else limit.clamp(max=cap - 1)


CHUNK = 64  # vocabulary entries per block in the two-stage top-k below


def _blocks(x: Tensor) -> tuple[Tensor, Tensor | None]:
    """(R, V) -> (R, n, CHUNK) whole blocks (a view when x is contiguous) and the (R, V % CHUNK) rest."""
    R, V = x.shape
    n = V // CHUNK
    body = x[:, : n * CHUNK].reshape(R, n, CHUNK)
    return body, (x[:, n * CHUNK :] if V % CHUNK else None)


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """`x.topk(k, dim=1)` of (R, V) scores, best first, in two stages: the block maxima (one
    vectorised pass over x), then a top-k over the k best blocks only. torch's CPU top-k over a whole
    vocabulary row costs several times a plain max over it (per-element partial sorting).
    Exact: any of the k best lies in a block whose maximum ranks within the k best block maxima
    (each block that ranks above it holds a larger score). Ties may pick different indices.
    Off the CPU torch's own top-k is used (fast there; the stages would only add kernel launches)."""
    R, V = x.shape
    if x.device.type != "cpu" or V // CHUNK <= 2 * k:  # or too few blocks to skip any
        return x.topk(k, dim=1)
    body, rest = _blocks(x)
    n = body.size(1)
    _, blk = body.amax(-1).topk(k, dim=1)  # (R, k) blocks holding the k best
    cand = body.gather(1, blk[:, :, None].expand(-1, -1, CHUNK)).view(R, k * CHUNK)  # (R, k*CHUNK)
    idx = (blk[:, :, None] * CHUNK + torch.arange(CHUNK, device=x.device)).view(R, k * CHUNK)
    if rest is not None:
        cand = torch.cat([cand, rest], dim=1)
        idx = torch.cat([idx, torch.arange(n * CHUNK, V, device=x.device).expand(R, -1)], dim=1)
    val, j = cand.topk(k, dim=1)  # (R, k)
    return val, idx.gather(1, j)


def argmax(x: Tensor) -> Tensor:
    """`x.argmax(1)` of (R, V) scores, ties to the first index as argmax, in two stages (see top_k):
    the block maxima, then the argmax inside the first block that holds the row maximum (CPU only,
    as top_k)."""
    if x.device.type != "cpu" or x.size(1) < 2 * CHUNK:
        return x.argmax(1)
    body, rest = _blocks(x)
    peak = body.amax(-1)  # (R, n)
    blk = peak.argmax(1)  # (R,) the first block holding the largest block maximum
    inside = body.gather(1, blk[:, None, None].expand(-1, 1, CHUNK)).squeeze(1)  # (R, CHUNK)
    best = blk * CHUNK + inside.argmax(1)  # (R,)
    if rest is not None:  # the rest lies after every block: it wins only when strictly larger
        r_val, r_pos = rest.max(1)
        best = torch.where(r_val > peak.gather(1, blk[:, None]).squeeze(1), body.size(1) * CHUNK + r_pos, best)
    return best


COMPACT = 0.25  # share of finished rows at which a search drops them from its batch (see compact_now)


def compact_now(finished: int, rows: int) -> bool:
    """Whether `finished` of `rows` rows are worth dropping now. Dropping copies every remaining row's
    cache; a finished row left in the batch costs one row of each later step instead. On a CPU the copy
    costs more than a few idle rows, so rows are dropped in bulk."""
    return finished > 0 and finished >= COMPACT * rows


def _start(model: Decodable, src: Tensor, max_len: Tensor):
    cfg = model.config
    memory = model.encode(src)  # (B, S, d_model)
    # Buffers for the longest hypothesis (EOS included): no growing copies on the way.
    return model.init_cache(memory, padding_mask(src, cfg.pad_id), capacity=int(max_len.max()) + 1)


@dataclass
class Sample:
    """Sampling instead of the argmax: from the `topk` likeliest pieces (0: all), at `temperature`, drawn
    with `generator` (seeded once: a stream of draws across calls)."""

    topk: int
    temperature: float
    generator: torch.Generator

    def __call__(self, logits: Tensor) -> Tensor:
        """(n, V) logits (banned ones -inf) -> (n,) sampled ids."""
        logits = logits / self.temperature
        if 0 < self.topk < logits.size(1):
            kth = logits.topk(self.topk, dim=1).values[:, -1:]  # (n, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=1)  # (n, V)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(1)


def greedy_next(logits: Tensor, cfg: ModelConfig, forced: Tensor, sample: Sample | None = None) -> Tensor:
    """Greedy search's choice from one step's (n, 1, V) logits: the best token other than pad and BOS
    (the argmax of the logits is the argmax of the log-probs), or a draw with `sample`; EOS where
    `forced` (n,) is True."""
    logits = logits[:, -1].float()  # (n, V)
    logits[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")  # never generated
    nxt = argmax(logits) if sample is None else sample(logits)  # (n,)
    return torch.where(forced, torch.full_like(nxt, cfg.eos_id), nxt)  # forced end


@torch.inference_mode()
def greedy_search(
    model: Decodable,
    src: Tensor,
    max_len_a: float = DecodeConfig.max_len_a,
    max_len_b: float = DecodeConfig.max_len_b,
    constraint: Constraint | None = None,
    sample: Sample | None = None,
) -> list[list[int]]:
    """Argmax decoding of a (B, S) source batch -> per sentence the output ids (no BOS/EOS); with a
    `constraint`, the best token it allows; with `sample`, a draw from the model's distribution instead."""
    cfg = model.config
    B, dev = src.size(0), src.device
    max_len = max_lengths(model, src, max_len_a, max_len_b)  # (B,)
    cache = _start(model, src, max_len)
    out = torch.full((B, int(max_len.max()) + 1 if B else 1), cfg.eos_id, dtype=torch.long, device=dev)
    alive = torch.arange(B, device=dev)  # original index of each decoder row
    ids = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=dev)
    t = 0
    running = torch.ones(B, dtype=torch.bool, device=dev)  # (n,) rows still decoding
    state = constraint.start(src) if constraint is not None else ()
    while True:
        logits, cache = model.step(ids, cache)  # (n, 1, V)
        if constraint is not None:
            logits = logits.masked_fill(constraint.banned(state, max_len[alive] - t)[:, None], float("-inf"))
        nxt = greedy_next(logits, cfg, max_len[alive] <= t, sample)  # (n,)
        nxt = nxt.masked_fill(~running, cfg.eos_id)  # finished rows ride along until compacted: EOS again
        out[alive, t] = nxt
        t += 1
        running = nxt != cfg.eos_id
        n_run = int(running.sum())
        if n_run == 0:
            break
        if constraint is not None:
            state = constraint.advance(state, nxt)
        if compact_now(running.numel() - n_run, running.numel()):
            keep = running.nonzero().squeeze(1)
            alive, nxt, running, cache = alive[keep], nxt[keep], running[keep], cache.keep(keep)
            state = _rows(state, keep)
        ids = nxt[:, None]  # (n, 1)
    hyps = []
    for row in out.tolist():
        hyps.append(row[: row.index(cfg.eos_id)])
    return hyps


def stay_in_place(parent: Tensor) -> Tensor:
    """(n, k) the parent beam (0..k-1) of each new beam -> (n, k) an order of the new beams, `perm[:, s]`
    going to row s: each parent's first new beam takes the parent's own row, the others fill the rows of
    parents without one, in order. The cache then copies only the rows that change (`reorder`); the
    search itself does not depend on the order of its beams."""
    n, k = parent.shape
    ar = torch.arange(k, device=parent.device)
    first = ~((parent[:, :, None] == parent[:, None, :]) & (ar[None, :] < ar[:, None])).any(2)  # (n, k)
    claimed = ((parent[:, :, None] == ar) & first[:, :, None]).any(1)  # (n, k) rows kept by a first child
    free = torch.argsort(claimed.long() * k + ar, dim=1)  # (n, k) the unclaimed rows first, ascending
    rank = ((~first).cumsum(1) - 1).clamp(min=0)  # (n, k) each other new beam's rank among them
    row = torch.where(first, parent, free.gather(1, rank))  # (n, k) the row each new beam goes to
    return torch.empty_like(row).scatter_(1, row, ar.expand(n, k))  # (n, k) row -> new beam


def _check_beam_settings(beam: int, n_best: int, length_penalty: float, patience: float) -> None:
    if beam < 1 or not 1 <= n_best <= beam:
        raise ConfigError(f"need beam >= 1 and 1 <= n_best <= beam, got beam={beam}, n_best={n_best}")
    if length_penalty < 0:
        raise ConfigError(f"length_penalty must be >= 0 (0 disables), got {length_penalty}")
    if not patience >= 1:  # NaN too
        raise ConfigError(f"patience must be >= 1 (inf: the exact stop), got {patience}")


@dataclass
class _Finished:
    """The n_best finished hypotheses of each sentence, best first: their scores (sum log p / lp, -inf
    where none yet), how many ever finished, and their tokens (EOS included, pad after)."""

    scores: Tensor  # (B, n_best)
    count: Tensor  # (B,)
    tokens: Tensor  # (B, n_best, L)
    pad: int
    eos: int

    @classmethod
    def empty(cls, B: int, n_best: int, L: int, cfg: ModelConfig, dev: torch.device) -> _Finished:
        return cls(
            torch.full((B, n_best), float("-inf"), device=dev),
            torch.zeros(B, dtype=torch.long, device=dev),
            torch.full((B, n_best, L), cfg.pad_id, dtype=torch.long, device=dev),
            cfg.pad_id,
            cfg.eos_id,
        )

    def add(
        self, alive: Tensor, top_s: Tensor, top_beam: Tensor, is_eos: Tensor, tokens: Tensor, t: int, lp_t: Tensor
    ) -> None:
        """Finalise the EOS candidates among the (n, kk) best of each live sentence (`top_s` their sum of
        log p, `top_beam` their parent beams, whose tokens are rows of `tokens`), merged with those
        finished before."""
        new_fin = is_eos & (top_s > float("-inf"))  # (n, kk)
        if not bool(new_fin.any()):
            return
        (n, kk), L = top_s.shape, self.tokens.size(2)
        g = tokens.size(0) // n
        norm = (top_s / lp_t).masked_fill(~new_fin, float("-inf"))  # (n, kk)
        merged_s = torch.cat([self.scores[alive], norm], dim=1)  # (n, n_best + kk)
        best_s, best_j = merged_s.topk(self.scores.size(1), dim=1)  # (n, n_best)
        rows = torch.arange(n, device=top_s.device)[:, None] * g + top_beam  # (n, kk)
        cand_tok = torch.full((n, kk, L), self.pad, dtype=torch.long, device=top_s.device)
        cand_tok[:, :, : t - 1] = tokens[rows.view(-1)].view(n, kk, t - 1)
        cand_tok[:, :, t - 1] = self.eos
        merged_t = torch.cat([self.tokens[alive], cand_tok], dim=1)  # (n, n_best + kk, L)
        self.tokens[alive] = merged_t.gather(1, best_j[:, :, None].expand(-1, -1, L))
        self.scores[alive] = best_s
        self.count[alive] += new_fin.sum(1)

    def hypotheses(self) -> Hypotheses:
        out: Hypotheses = []
        for s_row, t_row in zip(self.scores.tolist(), self.tokens.tolist()):
            out.append([(ids[: ids.index(self.eos)], s) for s, ids in zip(s_row, t_row) if s > float("-inf")])
        return out


def _candidates(
    logits: Tensor,
    scores: Tensor,
    k: int,
    cfg: ModelConfig,
    max_len: Tensor,
    t: int,
    constraint: Constraint | None,
    state: tuple[Tensor, ...],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Score every (beam, token) continuation of the (n, g) live beams, `max_len` (n,) their sentences'
    maximum lengths -> the best 2k of each sentence, best first: sum of log p, parent beam and token,
    each (n, 2k); and (n,) whether the sentence is at its maximum length, where EOS is forced."""
    n, g = scores.shape
    dev = logits.device
    logp = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (n*g, V) float32 whatever the model dtype
    eos_logp = logp[:, cfg.eos_id]  # (n*g,) a forced EOS keeps its own log-prob, allowed or not
    if constraint is not None:
        left = (max_len - (t - 1)).repeat_interleave(g)  # (n*g,) tokens before the forced EOS
        logp = logp.masked_fill(constraint.banned(state, left), float("-inf"))
    logp[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")  # never generated
    # The global top 2k of (n, g*V) lie within each row's own top 2k: take those first, so no
    # (n, g*V) candidate matrix is ever written.
    c = min(2 * k, logp.size(1))
    row_v, row_tok = top_k(logp, c)  # (n*g, c)
    row_s = scores.view(-1, 1) + row_v  # (n*g, c) sum of log p
    # Sentences at their maximum length must end now: their only candidate per beam is EOS,
    # with its own log-prob (done on the (n*g, c) candidates: cheap, and no host sync).
    forced = max_len + 1 == t  # (n,)
    forced_rows = forced.repeat_interleave(g)[:, None]  # (n*g, 1)
    f = forced_rows & (torch.arange(c, device=dev) == 0)  # (n*g, c)
    eos_s = (scores.view(-1) + eos_logp)[:, None]  # (n*g, 1)
    row_s = torch.where(f, eos_s, row_s.masked_fill(forced_rows, float("-inf")))
    row_tok = row_tok.masked_fill(f, cfg.eos_id)

    top_s, top_j = row_s.view(n, g * c).topk(min(2 * k, g * c), dim=1)  # (n, 2k) best first
    return top_s, top_j // c, row_tok.view(n, g * c).gather(1, top_j), forced


def _live_beams(
    top_s: Tensor, top_beam: Tensor, top_tok: Tensor, is_eos: Tensor, kk: int, g: int, tokens: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """The best kk non-EOS candidates of each sentence (2k candidates hold at least k of them) ->
    their (n, kk) sum of log p, (n*kk,) parent rows and (n*kk, t) tokens."""
    n = top_s.size(0)
    live_s, live_j = top_s.masked_fill(is_eos, float("-inf")).topk(kk, dim=1)  # (n, kk)
    parent = top_beam.gather(1, live_j)  # (n, kk)
    if kk == g:  # the beams in rows that spare the cache most copies (their order is free)
        perm = stay_in_place(parent)
        live_s, live_j, parent = live_s.gather(1, perm), live_j.gather(1, perm), parent.gather(1, perm)
    rows = (torch.arange(n, device=top_s.device)[:, None] * g + parent).view(-1)  # (n*kk,)
    tokens = torch.cat([tokens[rows], top_tok.gather(1, live_j).view(-1, 1)], dim=1)  # (n*kk, t)
    return live_s, rows, tokens


@torch.inference_mode()
def beam_search(
    model: Decodable,
    src: Tensor,
    beam: int = DecodeConfig.beam,
    length_penalty: float = DecodeConfig.length_penalty,
    max_len_a: float = DecodeConfig.max_len_a,
    max_len_b: float = DecodeConfig.max_len_b,
    n_best: int = 1,
    patience: float = DecodeConfig.patience,
    constraint: Constraint | None = None,
) -> Hypotheses:
    """Batched beam search (§6.1) -> per sentence the `n_best` best (ids, score), best first.

    Each step scores every (beam, token) continuation, takes the best 2k candidates per sentence,
    finalises the EOS candidates ranked within the top k and keeps the best k non-EOS ones live.
    A sentence stops when its n_best-th finished score is at least the best score any live beam
    could still reach: log-probs only fall and lp only grows with length, so a live beam with
    sum log p = s (<= 0) ends at best at s / lp(max length + 1). That stop is exact: results equal
    running every beam to the maximum length. With a `constraint`, only the tokens it allows compete.
    """
    _check_beam_settings(beam, n_best, length_penalty, patience)
    cfg = model.config
    B, dev, k = src.size(0), src.device, beam
    if B == 0:
        return []
    max_len = max_lengths(model, src, max_len_a, max_len_b)  # (B,)
    cache = _start(model, src, max_len)
    L = int(max_len.max()) + 1  # longest hypothesis, EOS included
    lp = ((5.0 + torch.arange(L + 1, device=dev, dtype=torch.float32)) / 6.0) ** length_penalty  # lp[|Y|]
    bound_lp = lp[max_len + 1]  # (B,) the largest divisor a live beam can still reach
    fin = _Finished.empty(B, n_best, L, cfg, dev)

    alive = torch.arange(B, device=dev)  # original index of each live sentence
    tokens = torch.empty((B, 0), dtype=torch.long, device=dev)  # (n*g, t) generated so far
    scores = torch.zeros((B, 1), device=dev)  # (n, g) sum of log-probs per live beam
    ids = torch.full((B, 1), cfg.bos_id, dtype=torch.long, device=dev)
    state = constraint.start(src) if constraint is not None else ()  # (n*g,) rows each
    for t in range(1, L + 1):  # t = hypothesis length (EOS included) after this step
        n, g = scores.shape  # g = 1 at the first step: all beams of a sentence would be identical
        logits, cache = model.step(ids, cache)  # (n*g, 1, V)
        top_s, top_beam, top_tok, forced = _candidates(logits, scores, k, cfg, max_len[alive], t, constraint, state)
        is_eos = top_tok == cfg.eos_id
        # EOS candidates that rank within the top k finish (they would have taken a beam slot).
        kk = min(k, top_s.size(1))
        fin.add(alive, top_s[:, :kk], top_beam[:, :kk], is_eos[:, :kk], tokens, t, lp[t])
        live_s, rows, tokens = _live_beams(top_s, top_beam, top_tok, is_eos, kk, g, tokens)
        cache = cache.reorder(rows)
        if constraint is not None:
            state = constraint.advance(_rows(state, rows), tokens[:, -1])
        scores, g = live_s, kk

        # Early stop: no live beam can beat the n_best-th finished hypothesis.
        done = forced | (fin.scores[alive, -1] >= live_s.amax(1) / bound_lp[alive]) | (fin.count[alive] >= patience * k)
        n_done = int(done.sum())
        if n_done == n:
            break
        if compact_now(n_done, n):
            keep = (~done).nonzero().squeeze(1)
            alive, scores, cache = alive[keep], scores[keep], cache.keep(keep)
            kept_rows = (keep[:, None] * g + torch.arange(g, device=dev)).view(-1)
            tokens, state = tokens[kept_rows], _rows(state, kept_rows)
        elif n_done:  # finished sentences ride along with -inf scores: nothing of theirs can finish again
            scores = scores.masked_fill(done[:, None], float("-inf"))
        ids = tokens[:, -1:]  # (n*g, 1)
    return fin.hypotheses()
