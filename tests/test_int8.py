"""Int8 decoding (aiayn.model.int8): weights per output row, tied embeddings intact, output near float32."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, ModelConfig
from aiayn.decode import beam_search, greedy_search
from aiayn.decode.ensemble import Ensemble
from aiayn.errors import AiaynError
from aiayn.model import Transformer
from aiayn.model.int8 import is_int8, quantize_int8


def model_and_src(seed: int = 0, vocab: int = 64, n: int = 16) -> tuple[Transformer, torch.Tensor]:
    torch.manual_seed(seed)
    cfg = ModelConfig.preset("tiny", vocab_size=vocab, d_model=64, d_ff=128, max_positions=64)
    model = Transformer(cfg).eval()
    src = torch.randint(4, vocab, (n, 9))
    src[:, -1] = EOS_ID
    src[n // 2 :, 6:] = PAD_ID  # some padded rows
    src[n // 2 :, 5] = EOS_ID
    return model, src


def test_every_linear_is_int8_and_the_original_is_untouched():
    model, _ = model_and_src()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize_int8(model)
    assert is_int8(q) and not is_int8(model)
    assert not any(type(m) is nn.Linear for m in q.modules())  # qkv, q, kv, out, w1, w2, generator
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_tied_embedding_stays_float_and_shared():
    model, _ = model_and_src()
    q = quantize_int8(model)
    emb = q.src_embed.tokens.weight
    assert emb.dtype == torch.float32 and torch.equal(emb, model.src_embed.tokens.weight)
    assert q.tgt_embed.tokens.weight is emb  # source and target lookups still share one matrix
    # the generator's int8 rows dequantize to the embedding matrix, one scale per row (vocabulary entry)
    w = q.generator.weight()  # (V, d_model) quantized, per_channel over dim 0
    assert w.qscheme() == torch.per_channel_affine and w.q_per_channel_axis() == 0
    scale = w.q_per_channel_scales().float()  # (V,) one step size per row, from that row's own range
    # symmetric: zero point 0 and the row's largest |weight| at the end of the int8 range (row 0: the pad row, 0)
    assert (w.q_per_channel_zero_points() == 0).all()
    assert torch.allclose(scale[1:], emb.detach().abs().amax(1)[1:] / 127.5, rtol=1e-5)
    assert ((w.dequantize() - emb).abs() <= scale[:, None] / 2 + 1e-6).all()  # rounding: half a step


def test_int8_logits_and_translations_stay_close_to_float32():
    model, src = model_and_src()
    q = quantize_int8(model)
    tgt = torch.cat([torch.full((src.size(0), 1), BOS_ID), src[:, :6].clamp(min=4)], dim=1)  # (B, 7)
    with torch.no_grad():
        lp32 = model(src, tgt).log_softmax(-1)  # (B, T, V)
        lp8 = q(src, tgt).log_softmax(-1)
    # per-row scales keep the probabilities close: far closer than to another model's
    err = (lp8.exp() - lp32.exp()).abs().sum(-1).mean()  # mean total-variation x 2
    other = Transformer(model.config).eval()
    with torch.no_grad():
        far = (other(src, tgt).softmax(-1) - lp32.exp()).abs().sum(-1).mean()
    assert err < 0.05 and err < far / 10
    assert (lp8.argmax(-1) == lp32.argmax(-1)).float().mean() > 0.9
    # the searches run on it and mostly agree with float32 (random weights have near ties)
    g32, g8 = greedy_search(model, src, max_len_b=6), greedy_search(q, src, max_len_b=6)
    same = sum(a == b for a, b in zip(g32, g8))
    assert same >= len(src) * 3 // 4, (g32, g8)
    b32, b8 = beam_search(model, src, beam=4, max_len_b=6), beam_search(q, src, beam=4, max_len_b=6)
    assert sum(a[0][0] == b[0][0] for a, b in zip(b32, b8)) >= len(src) // 2
    assert [a[0][1] for a in b32] == pytest.approx([b[0][1] for b in b8], abs=0.3)


def test_ensemble_quantizes_every_member():
    model, src = model_and_src()
    q = quantize_int8(Ensemble([model, model]))
    assert all(is_int8(m) for m in q.members)
    assert greedy_search(q, src, max_len_b=6) == greedy_search(quantize_int8(model), src, max_len_b=6)


def test_rejects_a_model_off_the_cpu():
    model, _ = model_and_src()
    with pytest.raises(AiaynError, match="CPU"):
        quantize_int8(model.to("meta"))
