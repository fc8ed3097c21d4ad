"""Restricted self-attention (paper Table 1): the blocked O(n*r) kernel equals full attention with an
explicit band mask; a model with a window decodes with its cache exactly as without."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.config import ModelConfig
from aiayn.model import Transformer, padding_mask
from aiayn.model.attention import attention, restrict, windowed_attention
from aiayn.model.masks import band_mask


@settings(max_examples=60, deadline=None)
@given(
    B=st.integers(1, 3),
    h=st.integers(1, 2),
    T=st.integers(1, 40),
    d=st.integers(1, 8),
    r=st.integers(1, 12),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
    pad=st.data(),
)
def test_windowed_attention_equals_full_attention_with_a_band_mask(B, h, T, d, r, causal, seed, pad):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, h, T, d, generator=g, dtype=torch.float64) for _ in range(3))
    lengths = [pad.draw(st.integers(1, T)) for _ in range(B)]
    real = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T) right padding
    key_mask = None if causal else real[:, None, None, :]
    fast = windowed_attention(q, k, v, r, causal, key_mask)
    full = attention(q, k, v, restrict(key_mask, T, T, r, q.device, causal))
    rows = torch.ones(B, T, dtype=torch.bool) if causal else real
    assert torch.allclose(
        fast[rows.nonzero(as_tuple=True)[0], :, rows.nonzero(as_tuple=True)[1]],
        full[rows.nonzero(as_tuple=True)[0], :, rows.nonzero(as_tuple=True)[1]],
        atol=1e-10,
    )
    assert torch.isfinite(fast).all()  # pad queries far from any real key get no NaN either


def test_band_mask_is_the_neighbourhood_of_size_r():
    m = band_mask(5, 5, 1)[0, 0].int().tolist()
    assert m == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]
    assert band_mask(2, 5, 1)[0, 0].int().tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]  # last 2 queries


def _model(window: int | None) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=50,
        d_model=32,
        n_heads=4,
        d_ff=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        attention_window=window,
    )
    return Transformer(cfg).eval()


def test_a_windowed_model_equals_its_explicit_band_path_and_differs_from_full_attention():
    model = _model(2)
    src = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 3], [12, 13, 14, 3, 0, 0, 0, 0]])
    tgt = torch.tensor([[2, 20, 21, 22, 23, 24, 25], [2, 26, 27, 28, 0, 0, 0]])
    with torch.no_grad():
        fast = model(src, tgt)  # blocked kernel
        weights = {"encoder": [], "decoder": [], "cross": []}
        explicit = model(src, tgt, attention=weights)  # band mask spelled out, explicit softmax
        full = _model(None)(src, tgt)
    real = tgt != 0
    assert torch.allclose(fast[real], explicit[real], atol=1e-5)
    assert not torch.allclose(fast[real], full[real], atol=1e-3)  # the window changes the model
    enc = weights["encoder"][0]  # (B, h, S, S): nothing outside the band
    assert (enc[0, :, 0, 3:] == 0).all() and (enc[0, :, 7, :5] == 0).all()
    dec = weights["decoder"][0]  # looks back 2 positions only
    assert (dec[0, :, 5, :3] == 0).all() and (dec[0, :, 5, 6:] == 0).all() and (dec[0, :, 5, 3:6] > 0).all()


def test_cached_decoding_with_a_window_equals_the_full_pass():
    model = _model(3)
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0]])
    tgt = torch.randint(4, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    tgt[:, 0] = 2
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory, padding_mask(src, 0))  # (B, T, V)
        cache = model.init_cache(memory, padding_mask(src, 0), capacity=4)  # grows past its capacity
        steps = []
        for t in range(tgt.size(1)):
            logits, cache = model.step(tgt[:, t : t + 1], cache)
            steps.append(logits)
        cache2 = model.init_cache(memory, padding_mask(src, 0))
        first, cache2 = model.step(tgt[:, :5], cache2)  # several positions at once, then one by one
        rest, cache2 = model.step(tgt[:, 5:6], cache2)
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert torch.allclose(torch.cat([first, rest], 1), full[:, :6], atol=1e-5)


def test_windowed_training_step_has_finite_gradients_with_long_padding():
    model = _model(1).train()
    src = torch.tensor([[5, 6, 3] + [0] * 9, [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 3]])
    tgt = torch.tensor([[2, 20] + [0] * 8, [2] + list(range(21, 30))])
    model(src, tgt).logsumexp(-1).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
