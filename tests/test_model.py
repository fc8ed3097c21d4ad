"""Model properties that must fail loudly if they break (issue 2)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.config import ModelConfig
from aiayn.model import Transformer, causal_mask, cross_mask, decoder_mask, padding_mask
from aiayn.model.attention import attention
from aiayn.model.embedding import sinusoidal_table

PAD = 0


def tiny(**kw) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=kw.pop("vocab_size", 50), **kw)
    return Transformer(cfg).eval()


def analytic_params(c: ModelConfig) -> int:
    d, f, hd, hv = c.d_model, c.d_ff, c.n_heads * c.head_dim, c.n_heads * c.value_dim
    attn = 2 * (d * hd + hd) + (d * hv + hv) + hv * d + d  # W^Q, W^K, W^V with biases; W^O with bias
    ffn = d * f + f + f * d + d
    ln = 2 * d
    emb = c.vocab_size * d * (1 if c.tie_embeddings else 3)
    pos = 2 * c.max_positions * d if c.positional == "learned" else 0
    final = 2 * ln if c.norm == "pre" else 0
    return (
        emb + pos + c.n_encoder_layers * (attn + ffn + 2 * ln) + c.n_decoder_layers * (2 * attn + ffn + 3 * ln) + final
    )


@pytest.mark.parametrize("name, paper", [("base", 65e6), ("big", 213e6)])
def test_parameter_count_matches_paper_table3(name, paper):
    cfg = ModelConfig.preset(name, vocab_size=37000)
    n = analytic_params(cfg)
    assert abs(n - paper) / paper < 0.05, f"{name}: {n:,} vs paper {paper:,.0f}"
    if name == "base":  # building big costs ~1 GB; the formula is checked against a real model on base
        assert Transformer(cfg).num_parameters() == n


@pytest.mark.parametrize(
    "kw",
    [
        dict(tie_embeddings=False),
        dict(positional="learned", max_positions=64),
        dict(norm="pre"),
        dict(d_head=8),
        dict(d_head=4, d_value=24),
    ],
)
def test_parameter_count_formula_variants(kw):
    model = tiny(**kw)
    assert model.num_parameters() == analytic_params(model.config)


def test_tying_shares_one_tensor_and_scales_by_sqrt_d():
    model = tiny()
    w = model.generator.weight
    assert model.src_embed.tokens.weight is w and model.tgt_embed.tokens.weight is w
    assert model.src_embed.scale == pytest.approx(math.sqrt(model.config.d_model))
    untied = tiny(tie_embeddings=False)
    assert untied.generator.weight is not untied.src_embed.tokens.weight
    assert untied.src_embed.tokens.weight is not untied.tgt_embed.tokens.weight


def test_sinusoidal_encoding_equals_formula():
    d, P = 16, 50
    pe = sinusoidal_table(P, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_embedding_adds_scaled_tokens_and_positions():
    model = tiny()
    ids = torch.tensor([[5, 6, 7]])
    expected = model.src_embed.tokens(ids) * math.sqrt(64) + sinusoidal_table(3, 64)
    torch.testing.assert_close(model.src_embed(ids), expected)


def test_learned_positions_reject_overlong_input():
    model = tiny(positional="learned", max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        model.encode(torch.full((1, 9), 5))
    assert model.encode(torch.full((1, 8), 5)).shape == (1, 8, 64)


def paper_positions(n: int, d: int) -> torch.Tensor:
    """§3.5 written out position by position, independent of sinusoidal_table."""
    return torch.tensor(
        [[(math.sin if j % 2 == 0 else math.cos)(p / 10000 ** ((j - j % 2) / d)) for j in range(d)] for p in range(n)]
    )


def test_sinusoidal_positions_extrapolate_past_table():
    # Past max_positions the sinusoids go on by the paper's formula (no wrap-around, no repeat of the
    # table, no clamping to the last row), in one pass and in cached decoding's offsets alike.
    model = tiny(max_positions=8)
    ids = torch.randint(4, 50, (2, 20), generator=torch.Generator().manual_seed(0))
    want = model.src_embed.tokens(ids) * math.sqrt(64) + paper_positions(20, 64)
    torch.testing.assert_close(model.src_embed(ids), want, rtol=1e-5, atol=1e-5)
    fresh = tiny(max_positions=8)  # offset past the table, the table never extended before
    torch.testing.assert_close(fresh.tgt_embed(ids[:, 15:], offset=15), want[:, 15:], rtol=1e-5, atol=1e-5)
    rows = tiny(max_positions=8)  # per-row offsets (continuous batching)
    got = rows.tgt_embed(ids[:, 12:13], offset=torch.tensor([12, 3]))
    torch.testing.assert_close(got[0, 0], want[0, 12], rtol=1e-5, atol=1e-5)
    pos3 = rows.tgt_embed.tokens(ids[1:, 12:13]) * 8 + paper_positions(4, 64)[3]
    torch.testing.assert_close(got[1:], pos3, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(model.encode(ids)).all()


def test_initialisation():
    model = Transformer(ModelConfig.preset("small", vocab_size=1000))
    emb = model.src_embed.tokens.weight
    assert emb[PAD].abs().sum() == 0
    assert emb[4:].std().item() == pytest.approx(256**-0.5, rel=0.05)
    w = model.encoder[0].self_attn.qkv.weight  # (3d, d): each block Xavier(d, d): U(+-sqrt(6/(2d)))
    bound = math.sqrt(6 / (2 * 256))
    assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound
    assert model.encoder[0].ffn.w1.bias.abs().sum() == 0


# -- masks --------------------------------------------------------------------------------------


def test_mask_shapes_and_values():
    src = torch.tensor([[5, 6, 0], [7, 0, 0]])
    tgt = torch.tensor([[2, 5, 6, 0], [2, 7, 0, 0]])
    pm = padding_mask(src, PAD)
    assert pm.shape == (2, 1, 1, 3) and pm.dtype == torch.bool
    assert pm[1, 0, 0].tolist() == [True, False, False]
    dm = decoder_mask(tgt, PAD)
    assert dm.shape == (2, 1, 4, 4)
    assert dm[0, 0].tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, True, True, False],
    ]
    cm = cross_mask(src, 4, PAD)
    assert cm.shape == (2, 1, 4, 3) and cm[1, 0, 3].tolist() == [True, False, False]
    assert causal_mask(2, offset=3)[0, 0].tolist() == [[True, True, True, True, False], [True] * 5]


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=5))
def test_decoder_mask_property(lengths):
    T = max(lengths)
    tgt = torch.tensor([[7] * n + [PAD] * (T - n) for n in lengths])
    m = decoder_mask(tgt, PAD)
    for b, n in enumerate(lengths):
        for q in range(T):
            for k in range(T):
                assert m[b, 0, q, k].item() == (k <= q and k < n)
        assert m[b, 0].any(dim=-1).all()  # no all-masked row (no NaN softmax)


# -- attention equals the explicit formula ------------------------------------------------------


def reference_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("kind", ["padding", "decoder", "cross", "one_query"])
def test_attention_matches_reference(kind):
    torch.manual_seed(1)
    B, h, d = 3, 2, 8
    src = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0], [5, 0, 0, 0]])
    tgt = torch.tensor([[2, 5, 6], [2, 5, 0], [2, 0, 0]])
    if kind == "padding":
        mask, T, S = padding_mask(src, PAD), 4, 4
    elif kind == "decoder":
        mask, T, S = decoder_mask(tgt, PAD), 3, 3
    elif kind == "cross":
        mask, T, S = cross_mask(src, 3, PAD), 3, 4
    else:  # incremental decoding: one query per row (the CPU matmul path)
        mask, T, S = padding_mask(src, PAD), 1, 4
    q, k, v = torch.randn(B, h, T, d), torch.randn(B, h, S, d), torch.randn(B, h, S, d)
    want = reference_attention(q, k, v, mask.expand(B, h, T, S))
    torch.testing.assert_close(attention(q, k, v, mask), want)
    weights = []
    torch.testing.assert_close(attention(q, k, v, mask, weights=weights), want)
    assert weights[0].shape == (B, h, T, S)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(B, h, T))
    assert (weights[0][~mask.expand(B, h, T, S)] == 0).all()


def test_grouped_cross_attention_equals_copied_memory():
    model = tiny()
    layer = model.decoder[0].cross_attn
    memory = torch.randn(2, 5, 64)
    src = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    x = torch.randn(2 * 3, 1, 64)  # 3 rows per source
    grouped = layer(x, layer.project(memory), padding_mask(src, PAD))
    rep = memory.repeat_interleave(3, 0)
    copied = layer(x, layer.project(rep), padding_mask(src.repeat_interleave(3, 0), PAD))
    torch.testing.assert_close(grouped, copied)


# -- no leaks -------------------------------------------------------------------------------------


def test_future_target_tokens_do_not_leak():
    model = tiny()
    src = torch.randint(4, 50, (2, 7))
    tgt = torch.randint(4, 50, (2, 9))
    base = model(src, tgt)
    for t in range(8):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(4, 50, changed[:, t + 1 :].shape)
        out = model(src, changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


def test_tokens_under_source_padding_change_nothing():
    model = tiny()
    src = torch.tensor([[5, 6, 7, 3, PAD, PAD]])
    tgt = torch.tensor([[2, 9, 10, 11]])
    base = model(src, tgt)
    assert base.shape == (1, 4, 50)
    # Whatever stands under source padding (here: huge noise in the encoder output) is never read.
    memory = model.encode(src)
    noisy = memory.clone()
    noisy[:, 4:] = torch.randn_like(noisy[:, 4:]) * 100
    out = model.decode(tgt, noisy, padding_mask(src, PAD))
    torch.testing.assert_close(out, base, atol=1e-5, rtol=1e-5)


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_sentence_alone_equals_sentence_padded_in_batch(data):
    model = tiny(norm=data.draw(st.sampled_from(["post", "pre"])))
    n_src = data.draw(st.integers(1, 8))
    n_tgt = data.draw(st.integers(1, 8))
    ids = st.integers(4, 49)
    src = data.draw(st.lists(ids, min_size=n_src, max_size=n_src))
    tgt = [2] + data.draw(st.lists(ids, min_size=n_tgt - 1, max_size=n_tgt - 1))
    other_s, other_t = data.draw(st.integers(n_src, 12)), data.draw(st.integers(n_tgt, 12))
    alone = model(torch.tensor([src]), torch.tensor([tgt]))
    batch_src = torch.tensor([src + [PAD] * (other_s - n_src), [7] * other_s])
    batch_tgt = torch.tensor([tgt + [PAD] * (other_t - n_tgt), [2] + [8] * (other_t - 1)])
    padded = model(batch_src, batch_tgt)[:1, :n_tgt]
    torch.testing.assert_close(padded, alone, atol=1e-4, rtol=1e-4)


# -- incremental decoding -------------------------------------------------------------------------


@settings(max_examples=10, deadline=None)
@given(
    T=st.integers(1, 10),
    positional=st.sampled_from(["sinusoidal", "learned"]),
    norm=st.sampled_from(["post", "pre"]),
    dims=st.sampled_from([{}, {"d_head": 8, "d_value": 24}]),
)
def test_cached_step_by_step_equals_full_decoder(T, positional, norm, dims):
    model = tiny(positional=positional, norm=norm, max_positions=32, **dims)
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, PAD, PAD]])
    tgt = torch.randint(4, 50, (2, T))
    tgt[:, 0] = 2
    memory = model.encode(src)
    mask = padding_mask(src, PAD)
    full = model.decode(tgt, memory, mask)
    cache = model.init_cache(memory, mask, capacity=3)  # small: the buffers must grow on the way
    steps = []
    for t in range(T):
        logits, cache = model.step(tgt[:, t : t + 1], cache)
        steps.append(logits)
    assert cache.length == T
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    # A multi-token chunk after a cached prefix also matches (causal triangle with offset).
    if T >= 3:
        cache = model.init_cache(memory, mask)
        a, cache = model.step(tgt[:, :1], cache)
        b, cache = model.step(tgt[:, 1:], cache)
        torch.testing.assert_close(torch.cat([a, b], 1), full, atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_cache_reorder_and_keep_follow_the_rows():
    model = tiny()
    src = torch.tensor([[5, 6, 3], [7, 3, PAD]])
    memory, mask = model.encode(src), padding_mask(src, PAD)
    G = 2  # two rows per source, as a beam of 2
    rows_tgt = torch.tensor([[2, 11, 12], [2, 13, 14], [2, 15, 16], [2, 17, 18]])
    cache = model.init_cache(memory, mask, capacity=2)  # the buffers grow, then reorder into spares
    for t in range(2):
        _, cache = model.step(rows_tgt[:, t : t + 1], cache)
    # Swap the rows inside source 0's group, keep source 1's rows.
    swapped = rows_tgt[[1, 0, 2, 3]]
    want = model.decode(swapped, memory.repeat_interleave(G, 0), mask.repeat_interleave(G, 0))[:, 2:3]
    reordered = cache.reorder(torch.tensor([1, 0, 2, 3]))
    kept = reordered.keep(torch.tensor([1]))  # then drop source 0
    assert kept.sources == 1 and kept.rows == G
    last1, _ = model.step(swapped[2:, 2:3], kept)
    torch.testing.assert_close(last1, want[2:], atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="already extended or reordered"):
        cache.reorder(torch.tensor([1, 0, 2, 3]))  # `cache` was spent by the first reorder
    # Beam search's first step: one row per source expands to G rows.
    start = model.init_cache(memory, mask)
    _, start = model.step(torch.tensor([[2], [2]]), start)
    grown = start.reorder(torch.tensor([0, 0, 1, 1]))
    out, _ = model.step(rows_tgt[:, 1:2], grown)
    want2 = model.decode(rows_tgt[:, :2], memory.repeat_interleave(G, 0), mask.repeat_interleave(G, 0))[:, 1:2]
    torch.testing.assert_close(out, want2, atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_cache_reorder_that_keeps_most_rows_copies_the_others_in_place():
    model = tiny()
    src = torch.tensor([[5, 6, 3], [7, 3, PAD]])
    memory, mask = model.encode(src), padding_mask(src, PAD)
    rows_tgt = torch.tensor([[2, 11, 12], [2, 13, 14], [2, 15, 16], [2, 17, 18]])
    cache = model.init_cache(memory, mask)
    for t in range(2):
        _, cache = model.step(rows_tgt[:, t : t + 1], cache)
    buffers = [b.data_ptr() for b in cache.self_k]
    order = torch.tensor([0, 0, 2, 3])  # row 1 continues row 0's history; rows 0, 2, 3 stay
    moved = cache.reorder(order)
    assert [b.data_ptr() for b in moved.self_k] == buffers  # in place: one row copied
    want = model.decode(rows_tgt[order], memory.repeat_interleave(2, 0), mask.repeat_interleave(2, 0))[:, 2:3]
    got, _ = model.step(rows_tgt[order][:, 2:3], moved)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="already extended or reordered"):
        cache.reorder(order)  # the buffers changed under the old value


def test_spent_cache_values_raise_instead_of_reading_overwritten_keys():
    model = tiny()
    src = torch.tensor([[5, 6, 3]])
    memory, mask = model.encode(src), padding_mask(src, PAD)
    c0 = model.init_cache(memory, mask)
    _, c1 = model.step(torch.tensor([[2]]), c0)
    _, c2 = model.step(torch.tensor([[7]]), c1)
    with pytest.raises(RuntimeError, match="already extended"):
        model.step(torch.tensor([[8]]), c1)  # c1 was extended into c2
    r = c2.reorder(torch.tensor([0]))
    with pytest.raises(RuntimeError, match="already extended or reordered"):
        c2.reorder(torch.tensor([0]))
    logits, _ = model.step(torch.tensor([[9]]), r)  # the returned value works
    full = model.decode(torch.tensor([[2, 7, 9]]), memory, mask)
    torch.testing.assert_close(logits, full[:, 2:], atol=1e-5, rtol=1e-5)


@settings(max_examples=10, deadline=None)
@given(lengths=st.lists(st.integers(1, 7), min_size=2, max_size=4), norm=st.sampled_from(["post", "pre"]))
def test_causal_kernel_equals_explicit_padding_mask_in_values_and_gradients(lengths, norm):
    """The teacher-forced decoder uses the causal kernel without key padding (causal=True); with
    right padding a padded batch must give each sentence's own logits and the same gradients."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=50, dropout=0.0, norm=norm))
    T = max(lengths)
    gen = torch.Generator().manual_seed(sum(lengths))
    src = torch.randint(4, 50, (len(lengths), 5), generator=gen)
    tgt = torch.zeros(len(lengths), T, dtype=torch.long)
    out = torch.zeros_like(tgt)
    for b, n in enumerate(lengths):
        tgt[b, :n] = torch.randint(4, 50, (n,), generator=gen)
        tgt[b, 0] = 2
        out[b, :n] = torch.randint(4, 50, (n,), generator=gen)
    batch_loss = F.cross_entropy(model(src, tgt).flatten(0, 1), out.flatten(), ignore_index=0, reduction="sum")
    batch_grads = torch.autograd.grad(batch_loss, list(model.parameters()))
    alone_loss = sum(
        F.cross_entropy(model(src[b : b + 1], tgt[b : b + 1, :n])[0], out[b, :n], reduction="sum")
        for b, n in enumerate(lengths)
    )
    alone_grads = torch.autograd.grad(alone_loss, list(model.parameters()))
    torch.testing.assert_close(batch_loss, alone_loss, atol=1e-4, rtol=1e-5)
    for g1, g2 in zip(batch_grads, alone_grads):
        torch.testing.assert_close(g1, g2, atol=1e-5, rtol=1e-4)


def test_keep_projects_only_the_chosen_positions_in_values_and_gradients():
    model = tiny()
    src = torch.tensor([[5, 6, 7, 3], [8, 3, PAD, PAD]])
    tgt_in = torch.tensor([[2, 9, 10, 11], [2, 12, PAD, PAD]])
    keep = (tgt_in.view(-1) != PAD).nonzero().squeeze(1)  # the trainer's choice: non-pad positions
    full = model(src, tgt_in)  # (B, T, V)
    part = model(src, tgt_in, keep=keep)  # (n, V)
    assert part.shape == (6, model.config.vocab_size)
    torch.testing.assert_close(part, full.flatten(0, 1)[keep])
    w = torch.randn_like(part)
    g_part = torch.autograd.grad((part * w).sum(), model.generator.weight)[0]
    g_full = torch.autograd.grad((model(src, tgt_in).flatten(0, 1)[keep] * w).sum(), model.generator.weight)[0]
    torch.testing.assert_close(g_part, g_full)
    with pytest.raises(TypeError):  # cached decoding has no teacher-forced positions to skip: step takes no keep
        model.step(tgt_in[:, :1], model.init_cache(model.encode(src), padding_mask(src, PAD)), keep=keep)  # type: ignore[call-arg]


# -- attention weights for plots --------------------------------------------------------------------


def test_attention_weights_shapes_and_logits_unchanged():
    model = tiny()
    # the second row is padded on both sides: the explicit path must mask what SDPA masks
    src, tgt = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]]), torch.tensor([[2, 8, 9], [2, 6, 0]])
    w = model.attention_weights(src, tgt)
    assert [x.shape for x in w["encoder"]] == [(2, 4, 4, 4)] * 2
    assert [x.shape for x in w["decoder"]] == [(2, 4, 3, 3)] * 2
    assert [x.shape for x in w["cross"]] == [(2, 4, 3, 4)] * 2
    assert torch.triu(w["decoder"][0][0, 0], diagonal=1).abs().sum() == 0
    assert w["cross"][0][1, :, :, 2:].abs().sum() == 0  # no weight on padded source positions
    for x in w["encoder"] + w["decoder"] + w["cross"]:
        torch.testing.assert_close(x.sum(-1), torch.ones(x.shape[:-1]))
    # The explicit-softmax path (plots) computes the same logits as the fused SDPA path (training).
    recorded: dict = {"encoder": [], "decoder": [], "cross": []}
    with torch.no_grad():
        explicit, plain = model(src, tgt, attention=recorded), model(src, tgt)
    assert [len(v) for v in recorded.values()] == [2, 2, 2]
    real = tgt != 0  # at padded target positions the two masks differ by design (see Transformer.decode)
    torch.testing.assert_close(explicit[real], plain[real], rtol=1e-5, atol=1e-5)


# -- it learns ------------------------------------------------------------------------------------


def test_tiny_model_learns_to_reverse():
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=20, dropout=0.0)
    model = Transformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    src = torch.randint(4, 20, (32, 8))
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((32, 1), 2), tgt], 1)
    tgt_out = torch.cat([tgt, torch.full((32, 1), 3)], 1)
    for step in range(300):  # noqa: B007 (the message reads it after the loop)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.05:
            break
    assert loss.item() < 0.05, f"loss {loss.item():.3f} after {step + 1} steps"


# -- the causal flag and the step seam --------------------------------------------------------------


def test_causal_flag_equals_an_explicit_causal_mask():
    """causal=True (SDPA's is_causal kernel, or its triangle ANDed into a mask) gives what the explicit
    causal mask gives, on the fused path and on the explicit-weights path for plots."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4) for _ in range(3))  # (B, h, T, d_k)
    pad = (torch.arange(6)[None, :] < torch.tensor([6, 4])[:, None])[:, None, None, :]  # (B, 1, 1, T)
    tri = causal_mask(6)  # (1, 1, T, T)
    for mask, explicit in ((None, tri), (pad, pad & tri)):
        want = attention(q, k, v, explicit)
        torch.testing.assert_close(attention(q, k, v, mask, causal=True), want)
        weights: list[torch.Tensor] = []
        torch.testing.assert_close(attention(q, k, v, mask, weights=weights, causal=True), want)
        assert bool((weights[0].masked_select(~explicit.expand_as(weights[0])) == 0).all())


def test_step_equals_decode_at_the_last_position():
    model = tiny()
    src = torch.tensor([[5, 6, 7, 3], [8, 3, PAD, PAD]])
    tgt = torch.tensor([[2, 9, 10, 11, 12], [2, 13, 14, 15, 16]])
    memory, mask = model.encode(src), padding_mask(src, PAD)
    full = model.decode(tgt, memory, mask)  # (B, T, V) teacher forcing
    cache = model.init_cache(memory, mask)
    _, cache = model.step(tgt[:, :-1], cache)  # a prefix at once, then the last position
    last, cache = model.step(tgt[:, -1:], cache)
    assert last.shape == (2, 1, model.config.vocab_size) and cache.length == tgt.size(1)
    assert not last.requires_grad  # inference only, even with autograd on
    torch.testing.assert_close(last[:, 0], full[:, -1], atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_padded_key_reads_change_no_logit_and_never_read_uninitialised_memory(monkeypatch):
    """On the CPU one query per row reads at least MIN_KEYS keys (masked past the real ones) and short
    sources are padded to MIN_KEYS at init_cache: the logits equal those of exact-length reads, through a
    reorder into spare buffers, a keep and rows that joined later (continuous batching's start mask)."""
    import aiayn.model.attention as attention_module
    from aiayn.model.cache import FINITE

    model = tiny()
    src = torch.tensor([[5, 6, 7, 3], [8, 3, PAD, PAD], [9, 10, 3, PAD]])
    memory, mask = model.encode(src), padding_mask(src, PAD)
    tgt = torch.randint(4, 50, (6, 6))  # two rows per source, as a beam of 2

    def run() -> list[torch.Tensor]:
        cache = model.init_cache(memory, mask, capacity=2)
        rows, out = torch.arange(6), []
        for t in range(6):
            logits, cache = model.step(tgt[rows, t : t + 1], cache)
            out.append(logits)
            if t == 2:  # every row swaps with its sibling: the copy into spare buffers
                swap = torch.tensor([1, 0, 3, 2, 5, 4])
                cache, rows = cache.reorder(swap), rows[swap]
                for buf in cache.self_v:  # values read past length: finite, never uninitialised memory
                    assert torch.isfinite(buf[:, :, :FINITE]).all()
                for buf in cache.self_k:  # keys there may hold anything: their scores are masked
                    assert buf is not None
                    buf[:, :, cache.length : FINITE] = float("nan")
            if t == 3:
                cache, rows = cache.keep(torch.tensor([0, 2])), rows[[0, 1, 4, 5]]
        return out

    padded = run()
    assert model.init_cache(memory, mask).src_mask.size(-1) == attention_module.MIN_KEYS
    monkeypatch.setattr(attention_module, "MIN_KEYS", 0)
    monkeypatch.setattr("aiayn.model.transformer.MIN_KEYS", 0)
    assert model.init_cache(memory, mask).src_mask.size(-1) == src.size(1)
    for exact, got in zip(run(), padded, strict=True):
        torch.testing.assert_close(got, exact, atol=1e-5, rtol=1e-5)
