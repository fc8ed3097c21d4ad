"""MKL-packed weights for CPU inference (aiayn.model.cpu_layout): the outputs of nn.Linear, within rounding."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.decode import beam_search, greedy_search
from aiayn.decode.ensemble import Ensemble
from aiayn.model import DecoderOnly, Transformer
from aiayn.model.cpu_layout import PackedLinear, is_packed, mkl_packing_available, pack_for_cpu, pack_linear


def model_and_src(seed: int = 0, vocab: int = 96, n: int = 12, **over) -> tuple[Transformer, torch.Tensor]:
    torch.manual_seed(seed)
    cfg = ModelConfig.preset("tiny", vocab_size=vocab, max_positions=64, **over)
    model = Transformer(cfg).eval()
    src = torch.randint(4, vocab, (n, 10))
    src[:, -1] = EOS_ID
    src[n // 2 :, 7:] = PAD_ID  # some padded rows
    src[n // 2 :, 6] = EOS_ID
    return model, src


INTEL = Path("/proc/cpuinfo").exists() and "GenuineIntel" in Path("/proc/cpuinfo").read_text()
# CTranslate2 relies on one MKL pack serving every row count on Intel CPUs (elsewhere it uses oneDNN);
# elsewhere pack_linear's own check may refuse the pack, and then the layers keep nn.Linear.
PACKS = mkl_packing_available() and pack_linear(nn.Linear(8, 8)) is not None
needs_mkl = pytest.mark.skipif(not PACKS, reason="no MKL packed GEMM here, or its packs fail the check")


@pytest.mark.skipif(not (INTEL and mkl_packing_available()), reason="an Intel CPU and a torch build with MKL")
def test_packing_works_on_intel_cpus_with_mkl():
    assert PACKS


@needs_mkl
@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 300),
    in_features=st.sampled_from([8, 32, 96, 256]),
    out_features=st.integers(1, 700),
    bias=st.booleans(),
    lead=st.sampled_from([(), (1,), (3,)]),
)
def test_packed_linear_equals_nn_linear_at_any_row_count(rows, in_features, out_features, bias, lead):
    # One pack (made for PACK_ROWS rows) serves every row count: the batch shrinks as sentences finish.
    torch.manual_seed(rows)
    lin = nn.Linear(in_features, out_features, bias=bias)
    layer = pack_linear(lin)
    assert isinstance(layer, PackedLinear)
    x = torch.randn(*lead, rows, in_features)
    with torch.inference_mode():
        got, want = layer(x), lin(x)
    assert got.shape == want.shape == (*lead, rows, out_features)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_mkl
def test_packed_linear_keeps_the_parameters_and_falls_back_where_it_cannot_pack():
    torch.manual_seed(0)
    lin = nn.Linear(16, 24)
    layer = pack_linear(lin)
    assert layer is not None and layer.weight is lin.weight and layer.bias is lin.bias
    assert set(layer.state_dict()) == {"weight", "bias"}  # the pack is not saved
    x = torch.randn(5, 16, requires_grad=True)
    y = layer(x)  # autograd recording: F.linear, so gradients flow
    y.sum().backward()
    assert x.grad is not None and lin.weight.grad is not None
    assert pack_linear(nn.Linear(16, 24).double()) is None


@needs_mkl
def test_decoder_side_swapped_in_place_encoder_and_tied_embedding_kept():
    model, _ = model_and_src()
    emb = model.src_embed.tokens.weight
    keys = set(model.state_dict())
    out = pack_for_cpu(model)
    assert out is model and is_packed(model)  # in place
    assert not any(type(m) is nn.Linear for m in model.decoder.modules())  # qkv, out, q, kv, w1, w2
    assert isinstance(model.generator, PackedLinear)
    assert sum(type(m) is nn.Linear for m in model.encoder.modules()) > 0  # run once per batch: kept
    # the generator still reads the embedding matrix (§3.4), and nothing new is saved
    assert model.generator.weight is emb and model.tgt_embed.tokens.weight is emb
    assert set(model.state_dict()) == keys


@needs_mkl
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_same_logits_and_translations_as_nn_linear(norm):
    model, src = model_and_src(norm=norm)
    fast = pack_for_cpu(copy.deepcopy(model))
    tgt = torch.cat([torch.full((src.size(0), 1), BOS_ID), src[:, :6].clamp(min=4)], dim=1)  # (B, 7)
    with torch.inference_mode():
        torch.testing.assert_close(fast(src, tgt), model(src, tgt), rtol=1e-5, atol=1e-5)
    # the incremental decoder: greedy and beam search (rows leave the batch as sentences finish, down to 1)
    assert greedy_search(fast, src, 0.0, 20) == greedy_search(model, src, 0.0, 20)
    got, want = beam_search(fast, src, 4, 0.6, 0.0, 20, n_best=2), beam_search(model, src, 4, 0.6, 0.0, 20, n_best=2)
    assert [[ids for ids, _ in n] for n in got] == [[ids for ids, _ in n] for n in want]
    for n, m in zip(got, want):  # scores within rounding
        assert [s for _, s in n] == pytest.approx([s for _, s in m], rel=1e-5, abs=1e-5)


@needs_mkl
def test_ensemble_members_and_decoder_only_models_are_packed_and_decode_alike():
    m1, src = model_and_src(seed=0)
    m2, _ = model_and_src(seed=1)
    plain = Ensemble([m1, m2])
    fast = pack_for_cpu(copy.deepcopy(plain))
    assert all(isinstance(m.generator, PackedLinear) for m in fast.members)  # type: ignore[attr-defined]
    got, want = beam_search(fast, src, 3, 0.6, 0.0, 12), beam_search(plain, src, 3, 0.6, 0.0, 12)
    assert [n[0][0] for n in got] == [n[0][0] for n in want]
    torch.manual_seed(0)
    lm = DecoderOnly(ModelConfig.preset("tiny", vocab_size=64, kind="decoder-only", max_positions=32)).eval()
    packed_lm = pack_for_cpu(copy.deepcopy(lm))
    assert not any(type(m) is nn.Linear for m in packed_lm.modules())  # every layer runs once per token
    ids = torch.randint(4, 64, (3, 9))
    with torch.inference_mode():
        torch.testing.assert_close(packed_lm(ids), lm(ids), rtol=1e-5, atol=1e-5)
    generator = packed_lm.generator
    pack_for_cpu(packed_lm)  # already packed: nothing to do
    assert packed_lm.generator is generator


def test_without_mkl_nothing_is_swapped(monkeypatch):
    import aiayn.model.cpu_layout as layout

    monkeypatch.setattr(layout.torch.backends.mkl, "is_available", lambda: False)
    model, _ = model_and_src()
    assert not layout.mkl_packing_available()
    assert pack_for_cpu(model) is model and not is_packed(model)
