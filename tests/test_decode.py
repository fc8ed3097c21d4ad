"""Greedy and beam search: a scripted fake model for the search logic, a real tiny model for the cache."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aiayn.config import ModelConfig
from aiayn.decode import beam_search, greedy_search
from aiayn.decode.search import max_lengths, stay_in_place
from aiayn.model import Transformer, padding_mask

PAD, UNK, BOS, EOS = 0, 1, 2, 3
A, B, C, D = 4, 5, 6, 7
V = 8


# -- a scripted fake model: fixed next-token probabilities per generated prefix -----------------------


class FakeCache:
    def __init__(self, history: torch.Tensor, sources: int) -> None:
        self.history, self.sources = history, sources  # (rows, t) decoder inputs so far (BOS first)

    def reorder(self, rows: torch.Tensor) -> FakeCache:
        return FakeCache(self.history.index_select(0, rows), self.sources)

    def keep(self, sources: torch.Tensor) -> FakeCache:
        g = self.history.size(0) // self.sources
        rows = (sources[:, None] * g + torch.arange(g)).reshape(-1)
        return FakeCache(self.history.index_select(0, rows), sources.numel())


class FakeModel:
    """`script[prefix] = {token: prob}`; the rest of the mass spreads evenly over A..D and EOS."""

    config = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, max_positions=1024)

    def __init__(self, script: dict[tuple[int, ...], dict[int, float]], default: dict[int, float] | None = None):
        self.script, self.default, self.calls = script, default or {}, 0

    def encode(self, src):
        return src.float()[..., None]

    def init_cache(self, memory, src_mask, capacity=None):
        return FakeCache(torch.empty((memory.size(0), 0), dtype=torch.long), memory.size(0))

    def step(self, ids, cache):
        self.calls += 1
        history = torch.cat([cache.history, ids], dim=1)
        rows = []
        for prefix in history[:, 1:].tolist():
            probs = dict(self.script.get(tuple(prefix), self.default))
            free = [t for t in (A, B, C, D, EOS) if t not in probs]
            rest = max(0.0, 1.0 - sum(probs.values()))
            for t in free:
                probs[t] = rest / len(free)
            row = torch.full((V,), -1e9)
            for t, p in probs.items():
                row[t] = math.log(max(p, 1e-30))
            rows.append(row)
        return torch.stack(rows)[:, None, :], FakeCache(history, cache.sources)


def src_of(*lengths: int) -> torch.Tensor:
    S = max(lengths) + 1
    src = torch.zeros((len(lengths), S), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = A
        src[i, n] = EOS
    return src


# short "A EOS": log .52 + log .9 = -0.759; long "B B B EOS": log .48 + 3 log .99 = -0.764
LP_SCRIPT = {(): {A: 0.52, B: 0.48}, (A,): {EOS: 0.9}, (B,): {B: 0.99}, (B, B): {B: 0.99}, (B, B, B): {EOS: 0.99}}


def test_length_penalty_picks_between_short_and_long():
    src = src_of(3)
    (best,) = beam_search(FakeModel(LP_SCRIPT), src, beam=4, length_penalty=0.0)
    assert best[0][0] == [A]
    assert best[0][1] == pytest.approx(math.log(0.52) + math.log(0.9), abs=1e-5)
    (best,) = beam_search(FakeModel(LP_SCRIPT), src, beam=4, length_penalty=0.6)
    assert best[0][0] == [B, B, B]  # lp(4) = 1.275 outweighs the lower probability
    lp4 = ((5 + 4) / 6) ** 0.6  # |Y| counts EOS
    assert best[0][1] == pytest.approx((math.log(0.48) + 3 * math.log(0.99)) / lp4, abs=1e-5)


def test_n_best_is_sorted_and_distinct():
    (hyps,) = beam_search(FakeModel(LP_SCRIPT), src_of(3), beam=4, length_penalty=0.6, n_best=3)
    assert len(hyps) == 3
    assert [h[0] for h in hyps][:2] == [[B, B, B], [A]]
    scores = [s for _, s in hyps]
    assert scores == sorted(scores, reverse=True)
    assert len({tuple(h) for h, _ in hyps}) == 3


def test_early_stop_fires_when_no_live_beam_can_win():
    # "A EOS" is near certain; every other continuation is so unlikely that even the most
    # favourable length penalty at the maximum length (53 tokens) cannot rescue it.
    script = {(): {A: 0.999}, (A,): {EOS: 0.999}}
    model = FakeModel(script)
    (best,) = beam_search(model, src_of(3), beam=4, length_penalty=0.6, max_len_b=50, patience=math.inf)
    assert best[0][0] == [A]
    assert model.calls == 2  # stopped right after "A EOS" was finished, not at length 54

    # With a mild preference the live beams stay competitive: the search must keep going.
    mild = FakeModel({(): {A: 0.3}, (A,): {EOS: 0.3}})
    beam_search(mild, src_of(3), beam=4, length_penalty=0.6, max_len_b=50, patience=math.inf)
    assert mild.calls > 2


def test_the_early_stop_bound_is_the_length_penalty_one_past_the_longest_output():
    """A live beam may still emit max_len tokens and then EOS: |Y| = max_len + 1 is the largest divisor it
    can reach, and a bound one short stops too early. Here "A EOS" finishes first (log .55 + log .9 =
    -0.703, over lp(2) = 1.097: -0.641); the live "B" (log .45 = -0.799) can still reach -0.799 / lp(4) =
    -0.626 and nearly does, as "B B B EOS" (-0.802 / 1.275 = -0.628). Over lp(3) = 1.188 it looked capped
    at -0.672, below "A EOS", and the search stopped with [A]."""
    script = {(): {A: 0.55, B: 0.45}, (A,): {EOS: 0.9}, (B,): {B: 0.999}, (B, B): {B: 0.999}, (B, B, B): {EOS: 0.999}}
    (best,) = beam_search(
        FakeModel(script), src_of(3), beam=2, length_penalty=0.6, max_len_a=0, max_len_b=3, patience=math.inf
    )
    assert best[0][0] == [B, B, B]
    assert best[0][1] == pytest.approx((math.log(0.45) + 3 * math.log(0.999)) / (9 / 6) ** 0.6, abs=1e-5)


def test_patience_stops_after_beam_times_patience_hypotheses():
    """fairseq's and CTranslate2's stop (patience 1, the default): a sentence ends once `beam` hypotheses
    have finished, even where a live beam could still win; patience inf searches on until none can."""
    # beam 2: "A EOS" finishes at step 2 and "A x EOS" at step 3 (every unscripted prefix ends with EOS at
    # 0.9): two hypotheses. "C C C C EOS", live all along, finishes at step 5 and wins at alpha 1.
    script = {
        (): {A: 0.5, C: 0.45},
        (A,): {EOS: 0.9},
        (C,): {C: 0.99},
        (C, C): {C: 0.99},
        (C, C, C): {C: 0.99},
        (C, C, C, C): {EOS: 0.99},
    }
    quick, exact = FakeModel(script, {EOS: 0.9}), FakeModel(script, {EOS: 0.9})
    (fast,) = beam_search(quick, src_of(3), beam=2, length_penalty=1.0, max_len_b=20, patience=1.0)
    (full,) = beam_search(exact, src_of(3), beam=2, length_penalty=1.0, max_len_b=20, patience=math.inf)
    assert full[0][0] == [C, C, C, C] and fast[0][0] == [A]
    assert quick.calls == 3 < exact.calls
    default = beam_search(FakeModel(script, {EOS: 0.9}), src_of(3), beam=2, length_penalty=1.0, max_len_b=20)
    assert default[0] == fast


def test_max_length_forces_eos_and_batches_shrink():
    # EOS is unlikely everywhere; a strong length penalty (alpha = 1) makes the longest allowed win.
    model = FakeModel({}, default={A: 0.99, EOS: 1e-6})
    src = src_of(1, 4)
    out = beam_search(model, src, beam=2, length_penalty=1.0, max_len_a=1.0, max_len_b=1)
    lens = max_lengths(model, src, 1.0, 1).tolist()  # source length counts EOS: 2 + 1, 5 + 1
    assert lens == [3, 6]
    assert [h[0][0] for h in out] == [[A] * 3, [A] * 6]
    # the forced EOS keeps its own (low) probability in the score
    assert out[1][0][1] == pytest.approx((6 * math.log(0.99) + math.log(1e-6)) / ((5 + 7) / 6), abs=1e-4)
    greedy = greedy_search(model, src, max_len_a=1.0, max_len_b=1)
    assert greedy == [[A] * 3, [A] * 6]
    assert max_lengths(model, src, 0.0, 0).tolist() == [0, 0]
    assert greedy_search(model, src, 0.0, 0) == [[], []]
    assert [h[0][0] for h in beam_search(model, src, 2, 0.6, 0.0, 0)] == [[], []]


def test_first_step_expands_one_beam_only():
    # Were all 4 initial beams expanded, "A EOS" would be finalised four times over.
    (hyps,) = beam_search(FakeModel({(): {A: 0.9}, (A,): {EOS: 0.9}}), src_of(2), beam=4, n_best=4)
    assert len({tuple(h) for h, _ in hyps}) == 4


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        beam_search(FakeModel({}), src_of(2), beam=2, n_best=3)
    with pytest.raises(ValueError):
        beam_search(FakeModel({}), src_of(2), length_penalty=-1)
    with pytest.raises(ValueError, match="patience"):  # ConfigError is a ValueError
        beam_search(FakeModel({}), src_of(2), patience=0.5)


# -- the real model: cache vs. full recomputation, beam 1 vs. greedy, batched vs. one by one ----------


def naive_greedy(model: Transformer, src: torch.Tensor, max_len: int) -> list[int]:
    """One sentence (1, S); the whole decoder re-run on the full prefix at every step, no cache."""
    memory, mask = model.encode(src), padding_mask(src, PAD)
    out: list[int] = []
    while len(out) < max_len:
        logp = model.decode(torch.tensor([[BOS] + out]), memory, mask)[0, -1].float().log_softmax(-1)
        logp[[PAD, BOS]] = float("-inf")
        y = int(logp.argmax())
        if y == EOS:
            break
        out.append(y)
    return out


def naive_beam(
    model: Transformer, src: torch.Tensor, k: int, alpha: float, max_len: int, n_best: int, patience: float = math.inf
):
    """Reference beam search in plain Python, one sentence, full recomputation, no cache; it stops when no
    live beam can win, or once k x patience hypotheses have finished."""
    memory, mask = model.encode(src), padding_mask(src, PAD)
    lp = lambda n: ((5 + n) / 6) ** alpha  # noqa: E731
    live, finished, n_finished = [([], 0.0)], [], 0
    for t in range(1, max_len + 2):
        hist = torch.tensor([[BOS] + h for h, _ in live])
        logp = model.decode(hist, memory.expand(len(live), -1, -1), mask).float().log_softmax(-1)[:, -1]
        logp[:, [PAD, BOS]] = float("-inf")
        if t == max_len + 1:
            logp[:, [i for i in range(logp.size(1)) if i != EOS]] = float("-inf")
        cands = sorted(
            ((s + logp[i, y].item(), h, y) for i, (h, s) in enumerate(live) for y in range(logp.size(1))),
            key=lambda c: -c[0],
        )[: 2 * k]
        new = [(h, s / lp(t)) for r, (s, h, y) in enumerate(cands) if y == EOS and r < k and s > -math.inf]
        n_finished += len(new)
        finished = sorted(finished + new, key=lambda f: -f[1])[:n_best]
        live = [(h + [y], s) for s, h, y in cands if y != EOS][:k]
        if t == max_len + 1 or (len(finished) == n_best and finished[-1][1] >= live[0][1] / lp(max_len + 1)):
            return finished
        if math.isfinite(patience) and n_finished >= math.ceil(k * patience):
            return finished


def tiny_model(seed: int, vocab: int = 24, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig.preset(
        "tiny", vocab_size=vocab, n_encoder_layers=2, n_decoder_layers=2, d_model=32, d_ff=64, max_positions=64, **kw
    )
    return Transformer(cfg).double().eval()  # float64: no near-tie flips between equivalent paths


def random_src(seed: int, n: int, vocab: int = 24, max_len: int = 7) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, max_len + 1, (n,), generator=g)
    src = torch.zeros((n, int(lens.max()) + 1), dtype=torch.long)
    for i, L in enumerate(lens.tolist()):
        src[i, :L] = torch.randint(4, vocab, (L,), generator=g)
        src[i, L] = EOS
    return src


def test_cached_batched_search_equals_naive_uncached_search():
    n_diverse = 0
    for seed in range(2):
        model = tiny_model(seed, **({"d_head": 4, "d_value": 12} if seed else {}))  # Table 3 (B): d_k != d_v
        src = random_src(seed, 6)
        limits = max_lengths(model, src, 1.0, 6).tolist()
        rows = [src[i : i + 1, : int((src[i] != PAD).sum())] for i in range(len(src))]
        assert greedy_search(model, src, max_len_b=6) == [naive_greedy(model, r, m) for r, m in zip(rows, limits)]
        for patience in (math.inf, 1.0, 1.5):  # the exact stop, and after k x patience finished hypotheses
            cached = beam_search(model, src, beam=3, length_penalty=0.6, max_len_b=6, n_best=3, patience=patience)
            for hyps, r, m in zip(cached, rows, limits):
                ref = naive_beam(model, r, 3, 0.6, m, 3, patience)
                assert [h for h, _ in hyps] == [h for h, _ in ref]
                assert [s for _, s in hyps] == pytest.approx([s for _, s in ref], abs=1e-4)
                n_diverse += len({tuple(h[:-1]) for h, _ in hyps}) > 1
        assert len({len(h[0][0]) for h in cached}) > 1  # sentences ended at different steps
    assert n_diverse >= 3  # beams with different histories: a cache not reordered would show


def test_beam_one_equals_greedy():
    for seed in range(3):
        model, src = tiny_model(seed), random_src(seed + 10, 8)
        greedy = greedy_search(model, src, max_len_b=8)
        beam = beam_search(model, src, beam=1, length_penalty=0.0, max_len_b=8)
        assert [b[0][0] for b in beam] == greedy


def test_beam_search_scores_are_the_model_log_probs():
    model, src = tiny_model(3), random_src(4, 3)
    for sent, hyps in zip(src, beam_search(model, src, beam=4, length_penalty=0.6, max_len_b=6, n_best=2)):
        for ids, score in hyps:
            s = sent[None, : int((sent != PAD).sum())]
            tgt = torch.tensor([[BOS] + ids])
            logp = model(s, tgt).float().log_softmax(-1)[0]  # (T, V)
            total = sum(logp[t, y].item() for t, y in enumerate(ids + [EOS]))
            assert score == pytest.approx(total / ((5 + len(ids) + 1) / 6) ** 0.6, abs=1e-4)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 5), beam=st.integers(1, 4), alpha=st.sampled_from([0.0, 0.6, 1.0]))
def test_batched_equals_one_by_one(seed, n, beam, alpha):
    model, src = tiny_model(seed % 3), random_src(seed, n)
    batched = beam_search(model, src, beam=beam, length_penalty=alpha, max_len_b=3, n_best=beam)
    for i in range(n):
        one = src[i : i + 1, : int((src[i] != PAD).sum())]
        (single,) = beam_search(model, one, beam=beam, length_penalty=alpha, max_len_b=3, n_best=beam)
        assert [h for h, _ in batched[i]] == [h for h, _ in single]
        assert [s for _, s in batched[i]] == pytest.approx([s for _, s in single], abs=1e-4)


@pytest.mark.parametrize("kw", [{}, {"positional": "learned"}, {"attention_window": 2}])
def test_continuous_greedy_equals_greedy_alone(kw, monkeypatch):
    """GreedyStream (continuous batching): sources of different lengths join a running batch at
    different steps, taking over the slots of finished ones or growing the batch, rows leave as
    they end; each result is greedy_search of that source alone."""
    from aiayn.decode.continuous import GreedyStream
    from aiayn.model.cache import DecoderCache

    model, src = tiny_model(5, **kw), random_src(6, 40, max_len=9)
    rows = [src[i : i + 1, : int((src[i] != PAD).sum())] for i in range(len(src))]
    limits = [(1.0, 4), (0.5, 2), (1.0, 8)]
    want = [greedy_search(model, r, *limits[i % 3])[0] for i, r in enumerate(rows)]
    calls = {"refill": 0, "rebatched": 0}
    for name in calls:
        method = getattr(DecoderCache, name)

        def counted(self, *a, _method=method, _name=name):
            calls[_name] += 1
            return _method(self, *a)

        monkeypatch.setattr(DecoderCache, name, counted)
    stream, got, i, joined_running, finished = GreedyStream(model), {}, 0, 0, 3
    for n in range(200):
        # Like a server under closed-loop load: as many join as just left, sometimes one more.
        for j in range(i, min(i + finished + (n % 5 == 0), len(rows))):
            joined_running += stream.rows > 0
            stream.add([rows[j][0].tolist()], [j], *limits[j % 3])
            i += 1
        out = stream.step()
        finished = len(out)
        got.update(out)
        if not stream.rows and i == len(rows):
            break
        if n % 4:  # else free slots stay for joining rows to take over (DecoderCache.refill)
            continue
        stream.compact()  # no free slots, columns or sources that no running row reads
        assert stream.cache is None or stream.cache.length == int(stream.done.max())
        assert stream.cache is None or stream.cache.src_mask.size(-1) == stream.source_len
    assert got == dict(enumerate(want)) and stream.rows == 0
    assert joined_running >= 20 and len({len(w) for w in want}) > 3
    assert calls["refill"] >= 10 and calls["rebatched"] >= 10, calls  # both ways of joining


# -- ensembles: the mean of the members' probabilities, through the same searches ------------------------


def test_ensemble_of_copies_decodes_like_the_model():
    import copy

    from aiayn.decode.ensemble import Ensemble

    model, src = tiny_model(5), random_src(6, 6)
    for ens in (Ensemble([model]), Ensemble([model, copy.deepcopy(model)])):
        assert greedy_search(ens, src, max_len_b=6) == greedy_search(model, src, max_len_b=6)
        got = beam_search(ens, src, beam=3, length_penalty=0.6, max_len_b=6, n_best=3)
        ref = beam_search(model, src, beam=3, length_penalty=0.6, max_len_b=6, n_best=3)
        assert [[h for h, _ in x] for x in got] == [[h for h, _ in x] for x in ref]
        assert [s for x in got for _, s in x] == pytest.approx([s for x in ref for _, s in x], abs=1e-5)


def test_ensemble_scores_are_log_mean_probabilities_of_the_members():
    """Cached, batched ensemble beam search: every hypothesis' score equals its teacher-forced
    log of the members' mean probabilities (no cache, one sentence at a time); the search also
    finds hypotheses neither member ranks first on its own."""
    from aiayn.decode.ensemble import Ensemble

    members = [tiny_model(8), tiny_model(9, d_head=4, d_value=12)]  # different shapes may mix
    src = random_src(10, 6)
    ens = Ensemble(members)
    hyps = beam_search(ens, src, beam=3, length_penalty=0.6, max_len_b=6, n_best=2)
    for sent, nbest in zip(src, hyps):
        s = sent[None, : int((sent != PAD).sum())]
        for ids, score in nbest:
            tgt = torch.tensor([[BOS] + ids])
            probs = torch.stack([m(s, tgt).float().softmax(-1)[0] for m in members]).mean(0)  # (T, V)
            total = sum(math.log(probs[t, y].item()) for t, y in enumerate(ids + [EOS]))
            assert score == pytest.approx(total / ((5 + len(ids) + 1) / 6) ** 0.6, abs=1e-4)
    alone = [beam_search(m, src, beam=3, length_penalty=0.6, max_len_b=6) for m in members]
    assert any(h[0][0] not in (a[0][0], b[0][0]) for h, a, b in zip(hyps, *alone))
    greedy = greedy_search(ens, src, max_len_b=6)
    assert [b[0][0] for b in beam_search(ens, src, beam=1, length_penalty=0.0, max_len_b=6)] == greedy


def test_ensemble_rejects_members_with_different_vocabularies():
    from aiayn.decode.ensemble import Ensemble
    from aiayn.errors import AiaynError

    with pytest.raises(AiaynError, match="share one vocabulary"):
        Ensemble([tiny_model(0), tiny_model(1, vocab=30)])


# -- the two-stage top-k and argmax over the vocabulary -------------------------------------------------


@pytest.mark.parametrize("V", [5, 64, 200, 8000, 8003])
def test_two_stage_top_k_and_argmax_equal_torch(V):
    from aiayn.decode.search import argmax, top_k

    g = torch.Generator().manual_seed(V)
    x = torch.randn(37, V, generator=g)
    x[0] = float("-inf")  # a row with no finite score
    x[1, :] = 1.0  # every entry tied: argmax takes the first
    x[2, -1] = 50.0  # the maximum in the rest after the last whole block
    x[3, 0], x[3, V // 2] = 40.0, 40.0  # a tied maximum in two blocks: the first wins
    x[4, : min(V, 64)] = torch.linspace(10, 20, min(V, 64))  # the k best all in one block
    x[:, [PAD, BOS]] = float("-inf")  # as the searches ban them
    assert torch.equal(argmax(x), x.argmax(1))
    for k in (1, 4, 8):
        if k > V:
            continue
        val, idx = top_k(x[5:], k)  # rows without ties among the k best: indices must agree too
        ref_val, ref_idx = x[5:].topk(k, dim=1)
        assert torch.equal(val, ref_val) and torch.equal(idx, ref_idx)
        val, idx = top_k(x, k)  # with ties: the same scores, and each index holds its score
        assert torch.equal(val, x.topk(k, dim=1).values) and torch.equal(x.gather(1, idx), val)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), k=st.integers(1, 6), n=st.integers(1, 4))
def test_stay_in_place_keeps_one_new_beam_in_each_parent_row(data, k, n):
    row = st.lists(st.integers(0, k - 1), min_size=k, max_size=k)
    parent = torch.tensor(data.draw(st.lists(row, min_size=n, max_size=n)))  # (n, k)
    perm = stay_in_place(parent)
    assert torch.equal(perm.sort(1).values, torch.arange(k).expand(n, k))  # a permutation per sentence
    stays = parent.gather(1, perm) == torch.arange(k)  # (n, k) rows whose beam continues the row's own beam
    for i in range(n):
        assert int(stays[i].sum()) == len(set(parent[i].tolist()))  # every parent keeps its row: no copy
        for s in range(k):  # a parent's best (first) new beam is the one that stays
            if stays[i, s]:
                assert int(perm[i, s]) == parent[i].tolist().index(s)


# -- constrained search: trees over exactly the source's words (aiayn.decode.parser.TreeConstraint) ----

OPEN_S, OPEN_NP, CLOSE_S, CLOSE_NP, TAG_NN, TAG_DT, WORD, PIECE = range(4, 12)
TREE_V = 12


class RandomModel(FakeModel):
    """Any next-token scores, fixed per generated prefix (so every search sees one model)."""

    config = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, max_positions=1024, vocab_size=TREE_V)
    V = TREE_V

    def __init__(self, seed: int) -> None:
        super().__init__({})
        self.seed = seed

    def step(self, ids, cache):
        history = torch.cat([cache.history, ids], dim=1)
        rows = []
        for prefix in history[:, 1:].tolist():
            g = torch.Generator().manual_seed(hash((self.seed, *prefix)) % 2**31)
            rows.append(torch.randn(self.V, generator=g) * 3)
        return torch.stack(rows)[:, None, :], FakeCache(history, cache.sources)


def mask(*ids: int, V: int = TREE_V) -> torch.Tensor:
    m = torch.zeros(V, dtype=torch.bool)
    m[list(ids)] = True
    return m


def tree_constraint():
    from aiayn.decode.parser import TreeConstraint

    return TreeConstraint(mask(WORD), mask(TAG_NN, TAG_DT), mask(OPEN_S, OPEN_NP), mask(CLOSE_S, CLOSE_NP), EOS)


def is_tree_over(ids: list[int], n_words: int) -> bool:
    depth, leaves = 0, 0
    for t in ids:
        if t in (OPEN_S, OPEN_NP):
            depth += 1
        elif t in (CLOSE_S, CLOSE_NP):
            depth -= 1
        elif t in (TAG_NN, TAG_DT):
            leaves += 1
        else:
            return False
        if depth < 0:
            return False
    return depth == 0 and leaves == n_words


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    words=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    beam=st.integers(1, 4),
    room=st.integers(0, 40),  # max_len_b: 0 leaves room for the leaves and hardly a bracket
)
@example(seed=73115, words=[5], beam=4, room=40)  # opened brackets until the forced EOS cut the tree
def test_constrained_search_writes_trees_over_exactly_the_words(seed, words, beam, room):
    # each source: `n` words, each a word-start piece, every second one followed by a continuation piece
    srcs = [[t for i in range(n) for t in ([WORD, PIECE] if i % 2 else [WORD])] for n in words]
    S = max(map(len, srcs)) + 1
    src = torch.full((len(srcs), S), PAD, dtype=torch.long)
    for r, ids in enumerate(srcs):
        src[r, : len(ids) + 1] = torch.tensor(ids + [EOS])
    c = tree_constraint()
    model = RandomModel(seed)
    got = [h[0][0] for h in beam_search(model, src, beam=beam, length_penalty=0.3, max_len_b=room, constraint=c)]
    got.append(greedy_search(model, src[:1], max_len_b=room, constraint=c)[0])
    for ids, n in zip(got, [*words, words[0]]):
        assert is_tree_over(ids, n), (ids, n)


WORD2, PIECE2 = 12, 13  # a second word-start piece and a second continuation piece, for `words` leaves
STARTS, BRACKETS = (WORD, WORD2), (OPEN_S, OPEN_NP, CLOSE_S, CLOSE_NP)


class RandomWordsModel(RandomModel):
    config = SimpleNamespace(pad_id=PAD, bos_id=BOS, eos_id=EOS, max_positions=1024, vocab_size=TREE_V + 2)
    V = TREE_V + 2


def copies_the_words(ids: list[int], src: list[int]) -> bool:
    """A tree whose leaves are exactly the source's pieces, in order, and whose brackets fall only
    between words (never between two pieces of one word)."""
    depth, leaves = 0, []
    for i, t in enumerate(ids):
        if t in BRACKETS:
            depth += 1 if t in (OPEN_S, OPEN_NP) else -1
            after = [x for x in ids[i + 1 :] if x not in BRACKETS]
            if depth < 0 or (after and after[0] not in STARTS):
                return False
        else:
            leaves.append(t)
    return depth == 0 and leaves == src


WORDS = st.tuples(st.sampled_from(STARTS), st.lists(st.sampled_from((PIECE, PIECE2)), max_size=2))  # a word's pieces


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    sources=st.lists(st.lists(WORDS, min_size=1, max_size=4), min_size=1, max_size=3),  # sentences of words
    beam=st.integers(1, 4),
    room=st.integers(0, 40),
)
def test_constrained_search_with_words_leaves_copies_each_word_piece_by_piece(seed, sources, beam, room):
    from aiayn.decode.parser import TreeConstraint

    V = TREE_V + 2
    srcs = [[t for start, rest in words for t in (start, *rest)] for words in sources]
    S = max(map(len, srcs)) + 1
    src = torch.full((len(srcs), S), PAD, dtype=torch.long)
    for r, ids in enumerate(srcs):
        src[r, : len(ids) + 1] = torch.tensor(ids + [EOS])
    opens, closes = mask(OPEN_S, OPEN_NP, V=V), mask(CLOSE_S, CLOSE_NP, V=V)
    c = TreeConstraint(mask(*STARTS, V=V), mask(V=V), opens, closes, EOS, copy=True, specials=(PAD, BOS))
    model = RandomWordsModel(seed)
    got = [h[0][0] for h in beam_search(model, src, beam=beam, length_penalty=0.3, max_len_b=room, constraint=c)]
    got.append(greedy_search(model, src[:1], max_len_b=room, constraint=c)[0])
    for ids, s in zip(got, [*srcs, srcs[0]]):
        assert copies_the_words(ids, s), (ids, s)


def test_unconstrained_random_outputs_are_not_trees():  # so the property above can fail
    src = torch.tensor([[WORD, WORD, WORD, EOS]])
    free = [greedy_search(RandomModel(seed), src, max_len_b=40)[0] for seed in range(20)]
    assert sum(is_tree_over(ids, 3) for ids in free) < 5
    src = torch.tensor([[WORD, PIECE, WORD2, EOS]])
    free = [greedy_search(RandomWordsModel(seed), src, max_len_b=40)[0] for seed in range(20)]
    assert sum(copies_the_words(ids, [WORD, PIECE, WORD2]) for ids in free) < 5
