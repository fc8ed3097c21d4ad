"""Encoder-only (BERT) and decoder-only (GPT) models built from the encoder-decoder's own layers:
no future leak, cached generation equal to the full pass, padding-invariant classification."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.config import ModelConfig
from aiayn.model import DecoderOnly, EncoderOnly
from aiayn.model.layers import EncoderLayer


def config(**kw) -> ModelConfig:
    return ModelConfig(
        vocab_size=60, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, **kw
    )


def test_both_families_are_made_of_the_encoder_decoders_layer_and_tie_their_embeddings():
    gpt, bert = DecoderOnly(config()), EncoderOnly(config(), n_classes=3)
    assert all(isinstance(m, EncoderLayer) for m in (*gpt.layers, *bert.layers))
    assert gpt.generator.weight is gpt.embed.tokens.weight and bert.mlm_out.weight is bert.embed.tokens.weight


@settings(max_examples=25, deadline=None)
@given(t=st.integers(0, 10), window=st.sampled_from([None, 1, 3]), seed=st.integers(0, 1000))
def test_decoder_only_never_sees_the_future(t, window, seed):
    torch.manual_seed(seed)
    model = DecoderOnly(config(attention_window=window)).eval()
    ids = torch.randint(4, 60, (2, 12))
    changed = ids.clone()
    changed[:, t + 1 :] = torch.randint(4, 60, changed[:, t + 1 :].shape)
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-5)


def test_decoder_only_cached_steps_equal_the_full_pass():
    torch.manual_seed(0)
    model = DecoderOnly(config()).eval()
    ids = torch.randint(4, 60, (3, 10))
    with torch.no_grad():
        full = model(ids)
        cache = model.init_cache(batch=3, capacity=4)
        prompt, cache = model.step(ids[:, :4], cache)  # a prompt at once, then one token at a time
        steps = [prompt]
        for t in range(4, 10):
            logits, cache = model.step(ids[:, t : t + 1], cache)
            steps.append(logits)
        rows = torch.tensor([2, 0])
        _, sub = model.step(ids[:, :3], model.init_cache(batch=3))
        sub = sub.reorder(rows)  # beam-style reordering works on a self-only cache too
        last, _ = model.step(ids[rows, 3:4], sub)
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert torch.allclose(last[:, 0], full[rows, 3], atol=1e-5)


def test_decoder_only_step_equals_the_full_pass_at_the_last_position():
    torch.manual_seed(0)
    model = DecoderOnly(config()).eval()
    ids = torch.randint(4, 60, (2, 7))
    full = model(ids)  # (B, T, V)
    _, cache = model.step(ids[:, :-1], model.init_cache(batch=2))
    last, cache = model.step(ids[:, -1:], cache)
    assert cache.length == 7 and not last.requires_grad
    torch.testing.assert_close(last[:, 0], full[:, -1], atol=1e-5, rtol=1e-5)


def test_encoder_only_sees_both_sides_and_classifies_regardless_of_padding():
    torch.manual_seed(0)
    model = EncoderOnly(config(), n_classes=3).eval()
    ids = torch.tensor([[4, 10, 11, 12, 5, 20, 21, 5]])
    seg = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1]])
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], 1)
    with torch.no_grad():
        h = model(ids, seg)
        later = ids.clone()
        later[0, 6] = 30
        assert not torch.allclose(model(later, seg)[0, 1], h[0, 1], atol=1e-4)  # left sees right
        a = model.classify(ids, seg)
        b = model.classify(padded, torch.cat([seg, torch.zeros(1, 5, dtype=torch.long)], 1))
        c = model.classify(ids)  # without segments: another input
    assert a.shape == (1, 3) and torch.allclose(a, b, atol=1e-5) and not torch.allclose(a, c, atol=1e-4)
    where = torch.tensor([2, 6])
    assert model.mlm_logits(h, where).shape == (2, 60)


def test_encoder_only_without_a_head_says_so():
    model = EncoderOnly(config())
    try:
        model.classify(torch.tensor([[4, 5]]))
    except ValueError as e:
        assert "no classification head" in str(e)
    else:
        raise AssertionError("classify without a head must fail")
