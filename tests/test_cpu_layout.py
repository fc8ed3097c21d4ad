"""Transposed decoder weights for CPU decoding (aiayn.model.cpu_layout): same outputs as nn.Linear."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.decode import beam_search, greedy_search
from aiayn.decode.ensemble import Ensemble
from aiayn.model import DecoderOnly, Transformer
from aiayn.model.cpu_layout import TransposedLinear, is_transposed, transpose_for_cpu


def model_and_src(seed: int = 0, vocab: int = 96, n: int = 12, **over) -> tuple[Transformer, torch.Tensor]:
    torch.manual_seed(seed)
    cfg = ModelConfig.preset("tiny", vocab_size=vocab, max_positions=64, **over)
    model = Transformer(cfg).eval()
    src = torch.randint(4, vocab, (n, 10))
    src[:, -1] = EOS_ID
    src[n // 2 :, 7:] = PAD_ID  # some padded rows
    src[n // 2 :, 6] = EOS_ID
    return model, src


@pytest.mark.parametrize("shape", [(5, 32), (3, 1, 32), (2, 4, 7, 32), (64, 1, 32)])
@pytest.mark.parametrize("bias", [True, False])
def test_transposed_linear_equals_nn_linear_within_rounding(shape, bias):
    torch.manual_seed(0)
    lin = nn.Linear(32, 48, bias=bias)
    t = TransposedLinear(lin)
    x = torch.randn(shape)
    with torch.no_grad():
        # MKL may round the two layouts differently (bitwise equal on the 2-core EPYC at 4, 8 and >= 12 rows)
        torch.testing.assert_close(t(x), lin(x), rtol=1e-5, atol=1e-5)
    assert t(x).shape == (*shape[:-1], 48)
    assert not list(t.parameters())  # inference only: buffers, no gradient


def test_decoder_and_generator_swapped_encoder_and_tied_embedding_kept():
    model, _ = model_and_src()
    emb = model.src_embed.tokens.weight
    before = emb.detach().clone()
    out = transpose_for_cpu(model)
    assert out is model and is_transposed(model)  # in place
    assert not any(type(m) is nn.Linear for m in model.decoder.modules())  # qkv, out, q, kv, w1, w2
    assert isinstance(model.generator, TransposedLinear)
    assert sum(type(m) is nn.Linear for m in model.encoder.modules()) > 0  # the encoder keeps its own
    # the embeddings still share the original matrix, unchanged; the generator has its own transposed copy
    assert model.src_embed.tokens.weight is emb and model.tgt_embed.tokens.weight is emb
    assert torch.equal(emb, before)
    assert torch.equal(model.generator.weight_t, emb.detach().t())
    assert model.generator.weight_t.data_ptr() != emb.data_ptr()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_same_logits_and_translations_as_nn_linear(norm):
    model, src = model_and_src(norm=norm)
    fast = transpose_for_cpu(copy.deepcopy(model))
    tgt = torch.cat([torch.full((src.size(0), 1), BOS_ID), src[:, :6].clamp(min=4)], dim=1)  # (B, 7)
    with torch.no_grad():
        torch.testing.assert_close(fast(src, tgt), model(src, tgt), rtol=1e-5, atol=1e-5)
    # the incremental decoder: greedy and beam search (rows leave the batch as sentences finish, down to 1)
    assert greedy_search(fast, src, 0.0, 20) == greedy_search(model, src, 0.0, 20)
    got, want = beam_search(fast, src, 4, 0.6, 0.0, 20, n_best=2), beam_search(model, src, 4, 0.6, 0.0, 20, n_best=2)
    assert [[ids for ids, _ in n] for n in got] == [[ids for ids, _ in n] for n in want]
    for n, m in zip(got, want):  # scores within rounding
        assert [s for _, s in n] == pytest.approx([s for _, s in m], rel=1e-5, abs=1e-5)


def test_ensemble_members_are_swapped_and_decode_alike():
    m1, src = model_and_src(seed=0)
    m2, _ = model_and_src(seed=1)
    plain = Ensemble([m1, m2])
    fast = transpose_for_cpu(copy.deepcopy(plain))
    assert all(isinstance(m.generator, TransposedLinear) for m in fast.members)  # type: ignore[attr-defined]
    got, want = beam_search(fast, src, 3, 0.6, 0.0, 12), beam_search(plain, src, 3, 0.6, 0.0, 12)
    assert [n[0][0] for n in got] == [n[0][0] for n in want]


def test_other_models_and_a_second_call_are_left_alone():
    torch.manual_seed(0)
    lm = DecoderOnly(ModelConfig.preset("tiny", vocab_size=64, kind="decoder-only", max_positions=32))
    assert transpose_for_cpu(lm) is lm and not is_transposed(lm)
    model, _ = model_and_src()
    transpose_for_cpu(model)
    generator = model.generator
    transpose_for_cpu(model)  # already swapped: nothing to do
    assert model.generator is generator
