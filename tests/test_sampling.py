"""Generation from a decoder-only model: top-k / top-p on fixed logits, reproducible sampling under a
seed, greedy equal to step-by-step argmax of the full pass, streaming, log-likelihood."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn.config import ModelConfig
from aiayn.decode.sampling import Sampling, filter_logits, generate, log_likelihood, next_token
from aiayn.model import DecoderOnly


def test_top_k_and_top_p_keep_exactly_the_right_tokens():
    probs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]])
    logits = probs.log()
    kept = lambda x: torch.isfinite(x)[0].tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, True, False, False, False]
    assert kept(filter_logits(logits, top_p=0.5)) == [True, False, False, False, False]  # 0.5 reached by the first
    assert kept(filter_logits(logits, top_p=0.6)) == [True, True, False, False, False]
    assert kept(filter_logits(logits, top_p=0.86)) == [True, True, True, True, False]
    assert kept(filter_logits(logits, top_p=0.01)) == [True, False, False, False, False]  # the best always stays
    shuffled = logits[:, [3, 0, 4, 2, 1]]  # positions do not matter, probabilities do
    assert kept(filter_logits(shuffled, top_p=0.6)) == [False, True, False, False, True]
    assert kept(filter_logits(logits, top_k=3, top_p=0.6)) == [True, True, False, False, False]


def test_sampling_follows_the_filtered_distribution_and_the_seed():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(20000, -1)
    g = torch.Generator().manual_seed(0)
    ids = next_token(logits, Sampling(temperature=1.0, top_k=2), g)
    assert set(ids.tolist()) == {0, 1}
    assert ids.eq(0).float().mean().item() == pytest.approx(1 / (1 + math.exp(-1)), abs=0.015)
    hot = next_token(logits, Sampling(temperature=0.25, top_k=2), torch.Generator().manual_seed(0))
    assert hot.eq(0).float().mean() > ids.eq(0).float().mean()  # lower temperature: sharper
    assert next_token(logits[:3], Sampling(temperature=0)).tolist() == [0, 0, 0]
    with pytest.raises(ValueError):
        Sampling(top_p=0)


def _model() -> DecoderOnly:
    torch.manual_seed(0)
    return DecoderOnly(
        ModelConfig(vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1, n_decoder_layers=2, dropout=0.0)
    ).eval()


def test_greedy_generation_is_the_argmax_of_the_full_pass_and_streams_every_step():
    model = _model()
    prompt = torch.tensor([[2, 7, 8, 9]])
    seen: list[int] = []
    out = generate(model, prompt, Sampling(temperature=0, max_tokens=12), on_token=lambda t: seen.append(int(t[0])))
    seq = prompt
    for _ in out[0]:  # re-derive each token with the uncached model
        nxt = model(seq)[0, -1]
        nxt[[0, 2]] = float("-inf")
        seq = torch.cat([seq, nxt.argmax().view(1, 1)], 1)
    assert out[0] == seq[0, 4:].tolist() and seen[: len(out[0])] == out[0]
    assert 2 not in out[0] and 0 not in out[0]  # BOS and pad never generated


def test_sampling_is_reproducible_under_a_seed_and_stops_at_eos_or_the_limit():
    model = _model()
    prompt = torch.tensor([[2, 5, 6], [2, 11, 12]])
    cfg = Sampling(temperature=1.3, top_k=20, top_p=0.95, max_tokens=30, seed=7)
    a, b = generate(model, prompt, cfg), generate(model, prompt, cfg)
    c = generate(model, prompt, Sampling(temperature=1.3, top_k=20, top_p=0.95, max_tokens=30, seed=8))
    assert a == b and a != c
    assert all(len(row) <= 30 and 3 not in row for row in a)
    with torch.no_grad():
        model.generator.bias = torch.nn.Parameter(torch.zeros(40))
        model.generator.bias[3] = 100.0  # EOS certain: nothing generated
    assert generate(model, prompt, cfg) == [[], []]


def test_log_likelihood_sums_the_real_tokens_only():
    model = _model()
    ids = torch.tensor([[2, 5, 6, 7, 3], [2, 9, 3, 0, 0]])
    ll = log_likelihood(model, ids)
    with torch.no_grad():
        logp = model(ids[1:, :2]).log_softmax(-1)[0]  # the short row alone, no padding
    assert ll[1].item() == pytest.approx((logp[0, 9] + logp[1, 3]).item(), abs=1e-5)
    with torch.no_grad():
        logp = model(ids[:1, :4]).log_softmax(-1)[0]  # the full row: every token after BOS, EOS included
    assert ll[0].item() == pytest.approx(sum(logp[t, ids[0, t + 1]].item() for t in range(4)), abs=1e-5)
