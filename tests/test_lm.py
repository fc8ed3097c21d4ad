"""The decoder-only language-model task end to end: the text pipeline (characters and BPE, documents and
lines), block batches, training through the task seam with exact resume, `aiayn generate` / `aiayn score`
and the Python API, on real sentencepiece models and real files."""

from __future__ import annotations

import json
import random
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from aiayn.config import Config, ModelConfig
from aiayn.data.errors import DataError
from aiayn.data.text import prepare_text
from aiayn.data.text_batching import BlockIterator, TextCollate, stream_blocks
from aiayn.decode.lm import LanguageModel
from aiayn.decode.sampling import Sampling, generate
from aiayn.model import DecoderOnly
from aiayn.train import train
from aiayn.train.tasks.lm import document_stream
from inprocess import run_aiayn

WORDS = "the a dog cat man woman runs sits on in under blue red green big small street park water".split()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))).capitalize() + "." for _ in range(n)]


@pytest.fixture()
def document(tmp_path) -> Path:
    path = tmp_path / "play.txt"
    lines = []
    for i, s in enumerate(sentences(600, 0)):
        lines.append(f"SPEAKER {i % 3}:" if i % 4 == 0 else s)
        if i % 7 == 0:
            lines.append("")  # blank lines and runs of spaces are part of running text
    path.write_text("\n".join(lines).replace("dog", "dog  ") + "\n")
    return path


def doc_config(document: Path, data: dict[str, object] | None = None, **train: object) -> Config:
    return Config.load(
        None,
        {
            "task.name": "lm",
            "task.block_size": 16,
            "task.batch_size": 4,
            "model.preset": "tiny",
            "model.n_decoder_layers": 2,
            "model.dropout": 0.1,
            "model.max_positions": 16,
            "data.corpus": "text",
            "data.text_train": str(document),
            "data.text_unit": "document",
            "data.tokenizer": "char",
            "data.valid_fraction": 0.1,
            "optim.warmup": 20,
            "optim.lr_scale": 0.3,
            "optim.label_smoothing": 0.0,
            "train.max_steps": 12,
            "train.log_every": 1,
            "train.eval_every": 6,
            "train.save_every": 3,
            "train.eval_bleu": False,
            "train.progress": False,
            "train.threads": 1,
            "train.device": "cpu",
            "train.amp": "none",
            "train.seed": 5,
            **{f"train.{k}": v for k, v in train.items()},
            **{f"data.{k}": v for k, v in (data or {}).items()},
        },
    )


def test_character_documents_round_trip_exactly_and_split_by_characters(home, document):
    prepared = prepare_text(doc_config(document).data)
    text = document.read_text()
    cut = int(len(text) * 0.9)
    tok = prepared.tokenizer
    train_ids = document_stream(prepared.splits["train"])
    valid_ids = document_stream(prepared.splits["valid"])
    assert len(train_ids) == cut and len(valid_ids) == len(text) - cut  # one piece per character
    assert tok.sp.decode([int(i) for i in train_ids]) == text[:cut]  # spaces, runs, newlines kept
    assert tok.sp.decode([int(i) for i in valid_ids]) == text[cut:]
    again = prepare_text(doc_config(document).data)
    assert again.report["cached"] and again.cache_dir == prepared.cache_dir


def test_block_batches_are_seeded_resumable_and_differ_across_ranks():
    stream = np.arange(1000, dtype=np.uint16)
    it = BlockIterator(stream, block_size=8, batch_size=3, seed=1)
    gen = iter(it)
    first = [next(gen).ids for _ in range(5)]
    state = it.state_dict()
    after = [next(gen).ids for _ in range(3)]
    assert all(torch.equal(b[:, 1:], b[:, :-1] + 1) for b in first)  # contiguous windows of 9 tokens
    other = BlockIterator(stream, block_size=8, batch_size=3, seed=1)
    other.load_state_dict(state)
    assert all(torch.equal(a, b.ids) for a, b in zip(after, iter(other)))
    rank1 = BlockIterator(stream, block_size=8, batch_size=3, seed=1, rank=1, world_size=2)
    assert not torch.equal(next(iter(rank1)).ids, first[0])
    with pytest.raises(Exception, match="block_size was 8, now 16"):
        BlockIterator(stream, 16, 3, seed=1).load_state_dict(state)
    # validation predicts every token after the first exactly once: full windows (each window's last
    # token is the next one's first), then the tail that no full window reaches
    for length in (len(stream), 8 * 7 + 1, 8 * 7 + 4, 3):
        part = stream[:length]
        batches = list(stream_blocks(part, 8, 5))
        assert sum(b.tokens for b in batches) == length - 1
        predicted = torch.cat([b.ids[:, 1:].reshape(-1) for b in batches])
        assert torch.equal(predicted, torch.as_tensor(part[1:].astype(np.int64)))


def test_a_validation_text_shorter_than_a_block_is_scored_and_one_without_a_next_token_is_an_error(
    home, document, tmp_path
):
    short = tmp_path / "short.txt"
    short.write_text("A dog.\n")  # 7 characters: 6 predictions, fewer than one block of 16
    result = train(doc_config(document, {"text_valid": str(short)}, max_steps=2, eval_every=2), tmp_path / "short")
    valid = [json.loads(x) for x in (tmp_path / "short/metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["kind"] == "valid"]
    assert result["step"] == 2 and len(valid) == 1 and np.isfinite(valid[0]["loss"])
    for text in ("A", ""):  # one token, none
        short.write_text(text)
        with pytest.raises(DataError, match="fewer than 2 tokens"):
            train(doc_config(document, {"text_valid": str(short)}), tmp_path / "one")


def test_tokens_per_update_counts_a_block_batchs_tokens(home, document, capfd):
    """optim.tokens_per_update is divided by what one micro-batch holds: 4 blocks of 16 tokens here
    (the batches' own max_tokens), not data.max_tokens, so 192 tokens an update are 3 micro-batches."""
    cfg = doc_config(document, max_steps=1, eval_every=1, save_every=1)
    d = cfg.to_dict()
    cfg = Config.from_dict({**d, "optim": {**d["optim"], "tokens_per_update": 192}})
    train(cfg, home / "accumulated")
    out = capfd.readouterr()
    assert "update = 3 x 1 x 64 tokens (<= 192, update_freq 3 from optim.tokens_per_update 192)" in out.out + out.err


def test_lm_training_resumes_exactly_and_learns(home, document):
    full = train(doc_config(document), home / "full")
    half = train(doc_config(document, max_steps=6), home / "half")
    assert half["step"] == 6
    resumed = train(doc_config(document), home / "half", resume=True)
    assert resumed["step"] == full["step"] == 12

    def records(run: Path) -> list[dict]:
        return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]

    assert [(r["kind"], r["step"], r.get("loss")) for r in records(home / "half")] == [
        (r["kind"], r["step"], r.get("loss")) for r in records(home / "full")
    ]  # timings aside
    a, b = (
        load_file(home / "full/checkpoints/step_00000012.safetensors"),
        load_file(home / "half/checkpoints/step_00000012.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)  # bitwise: same blocks, dropout, Adam state
    valid = [r for r in records(home / "full") if r["kind"] == "valid"]
    assert valid[-1]["nll"] < valid[0]["nll"] < np.log(prepare_text(doc_config(document).data).tokenizer.vocab_size)


def test_document_lm_beats_the_character_frequencies(home, document):
    """A character-level document LM learns what frequencies alone cannot: after 80 updates its validation
    nll per character lies well below the unigram model of the training characters, itself below uniform
    chance (on this text: unigram 3.1 nats; the model 1.55 after 80 updates, 3.19 after 8)."""
    cfg = doc_config(document, max_steps=80, eval_every=80, save_every=80, log_every=20)
    summary = train(cfg, home / "run")
    prepared = prepare_text(cfg.data)
    train_ids = document_stream(prepared.splits["train"])
    valid_ids = document_stream(prepared.splits["valid"])[1:]  # every character after the first is predicted
    count = Counter(train_ids.tolist())
    unigram = -float(np.mean([np.log(count[i] / count.total()) for i in valid_ids.tolist()]))
    nll = summary["valid"]["nll"]
    assert nll < unigram - 0.3 < np.log(prepared.tokenizer.vocab_size), (nll, unigram)


def test_sentence_lm_trains_on_lines_with_bos_and_eos(home, tmp_path):
    for name, seed, n in (("train", 1, 400), ("valid", 2, 40)):
        (tmp_path / f"{name}.txt").write_text("\n".join(sentences(n, seed)) + "\n\n")  # a blank line is dropped
    cfg = Config.load(
        None,
        {
            "task.name": "lm",
            "model.preset": "tiny",
            "model.n_decoder_layers": 1,
            "data.corpus": "text",
            "data.text_train": str(tmp_path / "train.txt"),
            "data.text_valid": str(tmp_path / "valid.txt"),
            "data.vocab_size": 320,
            "data.max_tokens": 256,
            "train.max_steps": 30,
            "train.eval_every": 30,
            "train.eval_bleu": False,
            "train.progress": False,
            "train.device": "cpu",
            "train.threads": 1,
            "optim.warmup": 10,
        },
    )
    summary = train(cfg, tmp_path / "run")
    prepared = prepare_text(cfg.data)
    # Validation nll per predicted piece (each piece and EOS), between two bounds computed on the
    # validation lines: the unigram model of the training pieces (what frequencies alone give) and the
    # source's own entropy (each sentence has probability 1/7 * (1/20)^words, whatever model scores it:
    # no model does better on average; one that peeks at the next token would).
    tok = prepared.tokenizer
    count = Counter(i for line in sentences(400, 1) for i in tok.encode(line) + [3])
    valid = sentences(40, 2)
    predicted = [i for line in valid for i in tok.encode(line) + [3]]
    unigram = -sum(np.log(count[i] / count.total()) for i in predicted) / len(predicted)
    source = sum(np.log(7) + len(line.split()) * np.log(len(WORDS)) for line in valid) / len(predicted)
    nll = summary["valid"]["nll"]
    assert 0.95 * source < nll < (source + unigram) / 2, (source, nll, unigram)  # at least halfway there
    assert len(prepared.splits["train"]) == 400
    batch = TextCollate()(prepared.splits["valid"], np.arange(3))
    assert (batch.ids == 3).sum() == 3 and batch.tokens == int((batch.ids != 0).sum())  # one EOS a row
    lm = LanguageModel.load(tmp_path / "run")
    assert not lm.running_text
    scored = lm.score(["A dog runs.", "Zq xjw vk QQ 7"])
    assert scored[0].tokens == len(lm.tokenizer.encode("A dog runs.")) + 1  # text + EOS after BOS
    for text, got in zip(["A dog runs.", "Zq xjw vk QQ 7"], scored):  # the model's own sum, in one pass
        ids = torch.tensor([[lm.tokenizer.bos_id, *lm.tokenizer.encode(text), 3]])
        with torch.no_grad():
            logp = lm.model(ids[:, :-1]).log_softmax(-1)[0]
        want = logp[torch.arange(ids.size(1) - 1), ids[0, 1:]].sum().item()
        assert got.logprob == pytest.approx(want, abs=1e-4) and got.ppl == pytest.approx(np.exp(-want / got.tokens))
    assert scored[0].ppl < scored[1].ppl
    # a continuation keeps the space its first piece starts with ("A dog" + " runs", not "A dogruns")
    greedy = Sampling(temperature=0, max_tokens=8)
    ids = generate(lm.model, torch.tensor([[lm.tokenizer.bos_id, *lm.tokenizer.encode("A dog")]]), greedy)[0]
    assert "A dog" + lm.generate("A dog", greedy) == lm.tokenizer.decode(lm.tokenizer.encode("A dog") + ids)


def test_cropped_generation_equals_recomputing_the_last_window_each_step():
    torch.manual_seed(0)
    model = DecoderOnly(
        ModelConfig(
            vocab_size=30,
            d_model=32,
            n_heads=4,
            d_ff=64,
            n_decoder_layers=2,
            dropout=0.0,
            max_positions=8,
            kind="decoder-only",
        )
    ).eval()
    prompt = torch.tensor([[5, 6, 7]])
    got = generate(model, prompt, Sampling(temperature=0, max_tokens=20))[0]
    seq = prompt[0].tolist()
    with torch.no_grad():
        for _ in range(20):  # nanoGPT: crop to the block size, run the whole window, take the last logits
            logits = model(torch.tensor([seq[-8:]]))[0, -1]
            logits[[0, 2]] = float("-inf")
            nxt = int(logits.argmax())
            if nxt == 3:
                break
            seq.append(nxt)
    assert got == seq[3:] and len(got) > 8  # past the 8 positions the model has


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return run_aiayn(*args, input=stdin, text=True)


def test_generate_and_score_commands(home, document):
    run = home / "run"
    train(doc_config(document), run)
    out1 = run_cli("generate", "-c", str(run), "SPEAKER", "--max-tokens", "40", "--seed", "3", "--top-k", "5")
    assert out1.returncode == 0, out1.stderr
    assert out1.stdout.startswith("SPEAKER")
    assert len(out1.stdout) == len("SPEAKER") + 40 + 1  # 40 characters (no EOS in running text), newline
    lm = LanguageModel.load(run)
    streamed: list[str] = []
    text = lm.generate("SPEAKER", Sampling(max_tokens=40, seed=3, top_k=5), on_text=streamed.append)
    # reproducible under a seed: this process draws what the command drew
    assert "SPEAKER" + text + "\n" == out1.stdout and "".join(streamed) == text
    scored = run_cli("score", "-c", str(run), stdin="the dog runs\nzzzz qqqq\n")
    assert scored.returncode == 0, scored.stderr
    rows = [line.split("\t") for line in scored.stdout.splitlines()[1:]]
    assert len(rows) == 2 and float(rows[0][2]) < float(rows[1][2])  # seen words beat unseen ones
    direct = lm.score(["the dog runs", "zzzz qqqq"])
    for row, d in zip(rows, direct):  # what the API says, and ppl = exp(-logprob / tokens)
        assert float(row[0]) == pytest.approx(d.logprob, abs=1e-3) and int(row[1]) == d.tokens
        assert float(row[2]) == pytest.approx(np.exp(-d.logprob / d.tokens), rel=1e-3)
    assert direct[0].tokens == len("the dog runs") - 1  # running text: every character after the first
    refused = run_cli("translate", "-c", str(run), stdin="x\n")
    assert refused.returncode == 2 and "decoder-only" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("norm,positional", [("pre", "sinusoidal"), ("post", "learned")])
def test_the_ctranslate2_export_of_a_decoder_only_model_gives_its_log_probabilities(tmp_path, norm, positional):
    """A GPT-2-style CTranslate2 decoder holding our weights: the same log-probability for every token."""
    import ctranslate2

    from aiayn.export import save_ctranslate2

    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_decoder_layers=2, dropout=0.0, max_positions=32,
        kind="decoder-only", norm=norm, positional=positional,
    )  # fmt: skip
    model = DecoderOnly(cfg).eval()
    vocab = ["<pad>", "<unk>", "<s>", "</s>"] + [f"p{i}" for i in range(36)]
    save_ctranslate2(model, vocab, tmp_path / "ct2")
    seq = [2] + torch.randint(4, 40, (25,)).tolist()
    with torch.no_grad():
        logp = model(torch.tensor([seq])).log_softmax(-1)[0]
    want = [logp[t, seq[t + 1]].item() for t in range(len(seq) - 1)]
    got = ctranslate2.Generator(str(tmp_path / "ct2")).score_batch([[vocab[i] for i in seq]])[0].log_probs
    assert got == pytest.approx(want, abs=1e-4)


def test_generate_with_ctranslate2_where_it_fits_and_the_pytorch_model_past_the_context(home, document):
    """auto: CTranslate2 on the CPU, greedy output token for token the PyTorch model's; a generation that
    would run past the 16 positions, or a seeded sample, goes to the PyTorch model (which slides its
    window, and repeats a seeded sample); `aiayn generate` says which engine runs, and `aiayn export
    --ctranslate2` takes an lm run."""
    run = home / "run"
    train(doc_config(document), run)
    lm, ref = LanguageModel.load(run), LanguageModel.load(run, engine="torch")
    assert (lm.engine, ref.engine) == ("ctranslate2", "torch") and lm.engine_reason.startswith("CPU, ctranslate2 ")
    assert lm.ct2 is not None and (run / "ct2").is_dir()  # the run's cached export
    calls = []
    tokens = lm.ct2.tokens

    def counted(prefix, s):
        calls.append(len(prefix))
        return tokens(prefix, s)

    lm.ct2.tokens = counted  # type: ignore[method-assign]
    for prompt in ("SPEAKER", "The dog", ""):
        greedy = Sampling(temperature=0, max_tokens=16 - len(lm.prompt_ids(prompt)))  # up to the last position
        assert lm.generate(prompt, greedy) == ref.generate(prompt, greedy), prompt
    assert len(calls) == 3
    past = Sampling(temperature=0, max_tokens=30)
    assert lm.generate("SPEAKER", past) == ref.generate("SPEAKER", past) and len(calls) == 3
    seeded = Sampling(temperature=1.0, top_k=5, max_tokens=8, seed=4)  # repeatable: the PyTorch model's
    assert lm.generate("The", seeded) == ref.generate("The", seeded) and len(calls) == 3
    streamed: list[str] = []
    free = lm.generate("The", Sampling(temperature=1.0, top_k=5, max_tokens=8), on_text=streamed.append)
    assert free == "".join(streamed) and 0 < len(free) <= 8 and len(calls) == 4  # CTranslate2 draws it
    out = run_cli("generate", "-c", str(run), "SPEAKER", "--max-tokens", "8", "--temperature", "0")
    torch_out = run_cli(
        "generate", "-c", str(run), "SPEAKER", "--max-tokens", "8", "--temperature", "0", "--engine", "torch"
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines()[0].startswith("engine: ctranslate2 (CPU, ctranslate2 ")
    assert torch_out.stderr.splitlines()[0] == "engine: torch (--engine torch)" and out.stdout == torch_out.stdout
    exported = run_cli("export", "--ctranslate2", str(home / "lm_ct2"), "-c", str(run))
    assert exported.returncode == 0 and (home / "lm_ct2" / "model.bin").is_file(), exported.stderr
