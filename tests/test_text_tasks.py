"""The encoder-only tasks end to end: BERT's masking (proportions, specials, seeding), the pooled classifier
under padding, `mlm` and `classify` training with exact resume, fine-tuning a classifier from an mlm run
(`--init-from`), and `aiayn classify` scored against hand counts; real sentencepiece models, real
made-up caption pairs (a few hundred lines, on every machine; Multi30k's own on top where the mirror is)
and real training runs of a few steps."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from aiayn.cli import main as cli
from aiayn.config import Config, ConfigError, ModelConfig
from aiayn.data.encoded import EncodedSplit
from aiayn.data.errors import DataError
from aiayn.data.io import read_lines
from aiayn.data.text_batching import MaskingCollate, TextCollate
from aiayn.data.tokenizer import Tokenizer
from aiayn.decode.classifier import Classifier
from aiayn.decode.fill_mask import FillMask
from aiayn.model import EncoderOnly
from aiayn.train import train
from aiayn.train.tasks import spec_for
from conftest import multi30k_mirror
from synthetic_text import captions

MASK, CLS, SEP = 4, 5, 6  # where sentencepiece puts the user symbols [MASK] [CLS] [SEP]: right after eos


def random_split(rows: int, vocab: int, seed: int, pairs: bool = False) -> EncodedSplit:
    rng = np.random.default_rng(seed)
    a = [rng.integers(7, vocab, rng.integers(1, 30)).tolist() for _ in range(rows)]
    b = [rng.integers(7, vocab, rng.integers(1, 20)).tolist() if pairs else [] for _ in range(rows)]
    return EncodedSplit.from_ids(a, b, vocab)


# -- masking ----------------------------------------------------------------------------------------


# derandomized: shares checked at 4 sigma on examples drawn afresh each run fail now and then by
# chance alone; the same examples every run keep the check without the flake
@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31), pairs=st.booleans(), probs=st.sampled_from([(0.15, 0.8, 0.1), (0.3, 0.5, 0.25)]))
def test_masking_follows_berts_proportions_never_picks_specials_and_is_seeded(seed, pairs, probs):
    vocab, p_choose, p_mask, p_random = 500, *probs
    split = random_split(600, vocab, seed % 1000, pairs)
    collate = MaskingCollate(
        vocab, MASK, CLS, SEP, seed=seed, mask_prob=p_choose, mask_token=p_mask, random_token=p_random
    )
    rows = np.arange(len(split))
    b = collate(split, rows)
    plain = TextCollate(cls_id=CLS, sep_id=SEP)(split, rows).ids  # (B, T) uncorrupted
    ordinary = (plain >= 7).view(-1)  # text tokens; [CLS], [SEP] and pad are not
    where = b.where
    assert b.tokens == len(where) and torch.equal(b.targets, plain.view(-1)[where])
    assert bool(ordinary[where].all())  # specials and pad are never chosen
    assert torch.equal(b.ids.view(-1)[~ordinary], plain.view(-1)[~ordinary])  # ... nor changed
    unchosen = torch.ones_like(ordinary)
    unchosen[where] = False
    assert torch.equal(b.ids.view(-1)[unchosen], plain.view(-1)[unchosen])
    n = int(ordinary.sum())  # ~9k (singles) to ~15k (pairs): 4 sigma of the shares below is < 0.02
    assert abs(len(where) / n - p_choose) < 4 * np.sqrt(p_choose * (1 - p_choose) / n)
    now = b.ids.view(-1)[where]
    masked, kept = (now == MASK), (now == b.targets)
    randomised = ~masked & ~kept
    k = len(where)
    for share, p in ((masked, p_mask), (kept, 1 - p_mask - p_random), (randomised, p_random)):
        # a random token equal to the original counts as kept: a 1/vocab shift, far inside 4 sigma
        assert abs(float(share.float().mean()) - p) < 4 * np.sqrt(p * (1 - p) / k) + 1 / vocab
    assert bool((now[randomised] >= 7).all())  # random replacements are ordinary tokens
    again = collate(split, rows)
    assert torch.equal(again.ids, b.ids) and torch.equal(again.where, where)  # the same seed, the same masks
    other = MaskingCollate(vocab, MASK, CLS, SEP, seed=seed + 1, mask_prob=p_choose)(split, rows)
    assert not torch.equal(other.where, where)
    shuffled = collate(split, rows[::-1].copy())  # other examples in the batch (here: order) -> other masks
    assert not torch.equal(shuffled.where, where)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), pairs=st.booleans(), budget=st.integers(60, 600), masked=st.booleans())
def test_encoder_batches_stay_within_the_token_budget(seed, pairs, budget, masked):
    """data.max_tokens bounds the padded encoder rows, [CLS] a [SEP] b [SEP], not a's and b's lengths
    apart (a pair's row is up to twice as long as either)."""
    from aiayn.data.batching import BatchIterator

    split = random_split(300, 500, seed % 1000, pairs)
    collate = MaskingCollate(500, MASK, CLS, SEP, seed=seed) if masked else TextCollate(cls_id=CLS, sep_id=SEP)
    batches = list(BatchIterator(split, budget, seed=seed, collate_fn=collate))
    assert all(b.ids.numel() <= budget for b in batches)
    assert sorted(int(i) for b in batches for i in b.index) == list(range(len(split)))  # each example once
    full = sum(b.ids.numel() for b in batches) / (len(batches) * budget)
    assert full > 0.5  # the budget is used, not just respected: rows are sorted by their full length


def test_every_batch_has_a_chosen_position():
    split = random_split(3, 50, 0)
    for seed in range(20):
        b = MaskingCollate(50, MASK, CLS, SEP, seed=seed, mask_prob=0.001)(split, np.arange(3))
        assert b.tokens >= 1 and int(b.ids.view(-1)[b.where[0]]) != CLS


# -- the classifier ---------------------------------------------------------------------------------


def test_pooled_classification_is_the_same_alone_and_padded_in_a_batch_of_pairs():
    torch.manual_seed(0)
    model = EncoderOnly(
        ModelConfig(
            vocab_size=60,
            d_model=32,
            n_heads=4,
            d_ff=64,
            n_encoder_layers=2,
            dropout=0.0,
            kind="encoder-only",
            n_classes=3,
        )
    ).eval()
    split = random_split(6, 60, 1, pairs=True)
    collate = TextCollate(cls_id=CLS, sep_id=SEP, per_example=True)
    batch = collate(split, np.arange(6))
    assert batch.tokens == 6 and batch.segments is not None and bool((batch.ids == 0).any())  # padded
    with torch.no_grad():
        together = model.classify(batch.ids, batch.segments)
        alone = torch.cat(
            [model.classify(b.ids, b.segments) for b in (collate(split, np.array([i])) for i in range(6))]
        )
    assert torch.allclose(together, alone, atol=1e-5)


def test_class_scores_match_hand_counts():
    from aiayn.scoring import scores

    gold = ["a", "a", "a", "b", "b", "c"]
    pred = ["a", "a", "b", "b", "c", "c"]
    s = scores(gold, pred, ["a", "b", "c", "d"])
    assert s["confusion"] == [[2, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    assert s["accuracy"] == pytest.approx(4 / 6)
    assert s["precision"] == pytest.approx([1.0, 0.5, 0.5, 0.0])
    assert s["recall"] == pytest.approx([2 / 3, 0.5, 1.0, 0.0])
    assert s["f1"] == pytest.approx([0.8, 0.5, 2 / 3, 0.0])
    assert s["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3 + 0.0) / 4) and s["support"] == [3, 2, 1, 0]


# -- training on real text --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    old = os.environ.get("AIAYN_HOME")
    path = tmp_path_factory.mktemp("aiayn_home")
    os.environ["AIAYN_HOME"] = str(path)
    yield path
    if old is None:
        os.environ.pop("AIAYN_HOME", None)
    else:
        os.environ["AIAYN_HOME"] = old


def write_corpus(d: Path, splits: dict[str, tuple[list[str], list[str]]]) -> Path:
    """lines for mlm, and pair-detection TSVs (an aligned pair is `yes`, a pair with another caption
    `no`) for classify."""
    for split, (en, de) in splits.items():
        n = len(en)
        (d / f"{split}.txt").write_text("\n".join(en + de) + "\n")
        rows = [f"yes\t{en[i]}\t{de[i]}" if i % 2 else f"no\t{en[i]}\t{de[(i + 7) % n]}" for i in range(n)]
        (d / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return d


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """300 training and 60 validation caption pairs made by `captions` (no mirror needed)."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), {"train": captions(300, 0), "valid": captions(60, 1)})


@pytest.fixture()
def multi30k_corpus(tmp_path) -> Path:
    """Multi30k's first 300 training and 60 validation captions, English and German (needs_mirror)."""
    mirror = multi30k_mirror()
    splits = {
        split: tuple(read_lines(mirror / f"{stem}.{lang}.gz")[:n] for lang in ("en", "de"))
        for split, stem, n in (("train", "train", 300), ("valid", "val", 60))
    }
    return write_corpus(tmp_path, splits)  # type: ignore[arg-type]


def config(task: str, corpus: Path, **over: object) -> Config:
    ext = "tsv" if task == "classify" else "txt"
    return Config.load(
        None,
        {
            "task.name": task,
            "model.preset": "tiny",
            "model.max_positions": 128,
            "model.positional": "learned",
            "data.corpus": "text",
            "data.text_train": str(corpus / f"train.{ext}"),
            "data.text_valid": str(corpus / f"valid.{ext}"),
            "data.vocab_size": 400,
            "data.max_tokens": 512,
            "data.max_len": 100,
            "optim.warmup": 20,
            "optim.lr_scale": 0.5,
            "optim.label_smoothing": 0.1,
            "train.max_steps": 8,
            "train.log_every": 1,
            "train.eval_every": 4,
            "train.save_every": 2,
            "train.eval_bleu": False,
            "train.progress": False,
            "train.threads": 1,
            "train.device": "cpu",
            "train.amp": "none",
            "train.seed": 3,
            **over,
        },
    )


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run / f"checkpoints/step_{step:08d}.safetensors")


def same_losses(a: Path, b: Path) -> bool:
    keys = ("kind", "step", "loss", "nll", "accuracy", "macro_f1")
    return [tuple(r.get(k) for k in keys) for r in records(a)] == [tuple(r.get(k) for k in keys) for r in records(b)]


@pytest.fixture(scope="module")
def mlm_run(home, corpus, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("mlm") / "run"
    train(config("mlm", corpus), run)
    return run


@pytest.mark.parametrize("task", ["mlm", "classify"])
def test_training_resumes_exactly(task, home, corpus, mlm_run, tmp_path, capsys):
    full = mlm_run if task == "mlm" else tmp_path / "full"
    if task == "classify":
        train(config(task, corpus, **{"train.patience_metric": "accuracy"}), full)
    half = tmp_path / "half"
    assert train(config(task, corpus, **{"train.max_steps": 4, "train.patience_metric": "accuracy"}), half)["step"] == 4
    assert cli(["train", "--resume", str(half), "--train.max_steps", "8"]) == 0
    assert not (half / "command.txt").exists()  # made by train() directly: no command to keep
    a, b = weights(full, 8), weights(half, 8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bitwise: masks, dropout, Adam
    assert same_losses(full, half)
    valid = [r for r in records(full) if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [4, 8]
    if task == "mlm":
        train_recs = [r for r in records(full) if r["kind"] == "train"]
        assert train_recs[-1]["nll"] < train_recs[0]["nll"] and 0 <= valid[-1]["accuracy"] <= 1
        assert valid[-1]["ppl"] < valid[0]["ppl"]  # validation improves from step 4 to step 8
        assert valid[-1]["ppl"] == pytest.approx(np.exp(valid[-1]["nll"]))
    else:
        assert {"accuracy", "macro_f1", "f1_no", "f1_yes"} <= set(valid[-1])
        assert json.loads((full / "labels.json").read_text()) == {"labels": ["no", "yes"], "pairs": True}


def test_mlm_predicts_masked_tokens_better_than_their_frequencies(home, corpus, tmp_path):
    """After 300 updates the masked-token nll on validation lies below the unigram model of the training
    tokens (what frequencies alone give), itself below uniform chance over the vocabulary. On these
    captions: unigram 4.28 nats; the model 3.43 after 300 updates, 4.05 after 100. (At the peak learning
    rate of the other tests here, lr_scale 0.5, it stays near the unigram level for 600 updates.)"""
    from aiayn.data.text import prepare_text
    from aiayn.data.tokenizer import ENCODER_SPECIALS

    over = {"train.max_steps": 300, "train.eval_every": 300, "train.save_every": 300, "optim.lr_scale": 0.1}
    cfg = config("mlm", corpus, **over)
    summary = train(cfg, tmp_path / "run")
    prepared = prepare_text(cfg.data, specials=ENCODER_SPECIALS)  # the run's own cache
    special = {prepared.tokenizer.piece_id(p) for p in ENCODER_SPECIALS} | {0, 1, 2, 3}

    def ordinary(split: str) -> list[int]:  # every token masking may choose
        s = prepared.splits[split]
        return [i for k in range(len(s)) for i in s.pair(k)[0].tolist() if i not in special]

    count, valid_ids = Counter(ordinary("train")), ordinary("valid")
    unigram = -float(np.mean([np.log(max(count[i], 1) / count.total()) for i in valid_ids]))
    nll = summary["valid"]["nll"]
    assert nll < unigram - 0.3 < np.log(prepared.tokenizer.vocab_size), (nll, unigram)


def test_classifier_fine_tunes_from_an_mlm_run_and_a_foreign_vocabulary_is_one_error_line(
    home, corpus, mlm_run, tmp_path, capsys
):
    over = [
        "--task.name",
        "classify",
        "--data.text_train",
        str(corpus / "train.tsv"),
        "--data.text_valid",
        str(corpus / "valid.tsv"),
        "--train.max_steps",
        "2",
        "--train.save_every",
        "1",
    ]
    assert cli(["train", "--init-from", str(mlm_run), "--run-dir", str(tmp_path / "ft"), *over]) == 0
    assert "fine-tuning" in capsys.readouterr().out
    # the run keeps the command that made it (the model card of `aiayn push` quotes it)
    command = (tmp_path / "ft/command.txt").read_text(encoding="utf-8").strip()
    assert command.startswith(f"aiayn train --init-from {mlm_run} --run-dir {tmp_path / 'ft'}")
    from aiayn.publish import training_command

    assert training_command(tmp_path / "ft") == command
    assert (tmp_path / "ft/spm.model").read_bytes() == (mlm_run / "spm.model").read_bytes()
    assert (
        cli(
            [
                "train",
                "--config",
                str(mlm_run / "config.yaml"),
                "--run-dir",
                str(tmp_path / "scratch"),
                *over,
                "--train.seed",
                "4",
            ]
        )
        == 0
    )  # another initialisation
    mlm = load_file(mlm_run / "best.safetensors")
    ft, scratch = weights(tmp_path / "ft", 1), weights(tmp_path / "scratch", 1)
    assert {k for k in ft if k not in mlm} == {
        "pooler.weight",
        "pooler.bias",
        "classifier.1.weight",
        "classifier.1.bias",
    }
    for name in ("embed.tokens.weight", "layers.0.self_attn.qkv.weight", "layers.1.ffn.w2.weight"):
        moved, fresh = (ft[name] - mlm[name]).norm(), (scratch[name] - mlm[name]).norm()
        assert moved < 0.05 * fresh, (name, moved, fresh)  # one update away from the pre-trained encoder

    capsys.readouterr()
    foreign = tmp_path / "foreign"
    shutil.copytree(mlm_run, foreign)
    lines = read_lines(corpus / "train.txt")
    for symbols, vocab, expected in ((("[MASK]", "[CLS]", "[SEP]"), 500, "vocab_size"), ((), 400, "lacks the pieces")):
        Tokenizer.train(lines, foreign / "spm.model", vocab_size=vocab, user_symbols=symbols)
        assert cli(["train", "--init-from", str(foreign), "--run-dir", str(tmp_path / expected[:5]), *over]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: ") and expected in err, err


@pytest.mark.parametrize("task", ["mlm", "classify"])
def test_an_empty_validation_split_is_one_data_error_before_training(task, home, corpus, tmp_path):
    empty = tmp_path / ("valid.tsv" if task == "classify" else "valid.txt")
    empty.write_text("\n   \n\n")
    with pytest.raises(DataError, match="validation split has no examples"):
        train(config(task, corpus, **{"data.text_valid": str(empty)}), tmp_path / "run")
    assert not list(tmp_path.glob("run/checkpoints/*"))


@pytest.mark.parametrize("task", ["mlm", "classify"])
def test_learned_positions_must_hold_an_encoder_row(task):
    over = {"task.name": task, "model.preset": "tiny", "model.max_positions": 100}
    # [CLS] a [SEP] b [SEP]: a, its EOS and b fill data.max_len, the row two more
    with pytest.raises(ConfigError, match=r"can hold 102 tokens .* model.max_positions=100"):
        spec_for(Config.load(None, {**over, "model.positional": "learned", "data.max_len": 100}))
    spec_for(Config.load(None, {**over, "model.positional": "learned", "data.max_len": 98}))
    spec_for(Config.load(None, {**over, "model.positional": "sinusoidal", "data.max_len": 100}))  # a table extends


def test_classify_command_scores_agree_with_hand_counts_and_with_validation(home, corpus, tmp_path, capsys):
    run = tmp_path / "run"
    train(config("classify", corpus, **{"train.max_steps": 30, "train.eval_every": 30, "train.save_every": 30}), run)
    last = [r for r in records(run) if r["kind"] == "valid"][-1]
    capsys.readouterr()
    out, png = tmp_path / "preds.tsv", tmp_path / "cm.png"
    assert (
        cli(
            [
                "classify",
                "-c",
                str(run / "checkpoints/step_00000030.safetensors"),
                "--input",
                str(corpus / "valid.tsv"),
                "--output",
                str(out),
                "--confusion",
                str(png),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    gold = [x.split("\t") for x in (corpus / "valid.tsv").read_text().splitlines()]
    pred = [x.split("\t") for x in out.read_text().splitlines()]
    assert [p[1:] for p in pred] == [g[1:] for g in gold]  # the texts, in input order
    hits = {(g[0], p[0]): 0 for g in gold for p in pred}
    for g, p in zip(gold, pred):
        hits[g[0], p[0]] += 1
    correct = hits.get(("no", "no"), 0) + hits.get(("yes", "yes"), 0)
    assert f"accuracy {correct / len(gold):.4f} ({len(gold)} examples)" in printed
    assert correct / len(gold) == pytest.approx(last["accuracy"])  # the same encoding as training's validation
    yes_p = hits.get(("yes", "yes"), 0) / max(1, sum(v for (g, p), v in hits.items() if p == "yes"))
    yes_r = hits.get(("yes", "yes"), 0) / sum(v for (g, p), v in hits.items() if g == "yes")
    yes_f = 2 * yes_p * yes_r / (yes_p + yes_r) if yes_p + yes_r else 0.0
    assert yes_f == pytest.approx(last["f1_yes"])
    row = next(x for x in printed.splitlines() if x.startswith("yes "))
    assert [float(v) for v in row.split()[1:4]] == pytest.approx([yes_p, yes_r, yes_f], abs=1e-4)
    assert f"macro F1 {last['macro_f1']:.4f}" in printed
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # without labels: predictions on stdout; a line of another shape is named
    bare = tmp_path / "bare.tsv"
    bare.write_text("\n".join("\t".join(g[1:]) for g in gold[:3]) + "\n")
    assert cli(["classify", "-c", str(run), "--input", str(bare)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    bare.write_text("A dog.\tEin Hund.\nonly one text\n")
    assert cli(["classify", "-c", str(run), "--input", str(bare)]) == 2
    assert f"{bare}:2: expected every line" in capsys.readouterr().err
    # the line named is the file's own line number (blank lines count), and the odd one out is blamed
    # even when it has more fields than the rest
    bare.write_text("\nA dog.\tEin Hund.\n\nA cat.\tEine Katze.\nyes\tA man.\tEin Mann.\nA b.\tC d.\n")
    assert cli(["classify", "-c", str(run), "--input", str(bare)]) == 2
    assert f"{bare}:5: expected every line" in capsys.readouterr().err
    # the Python API batches a pair's whole row ([CLS] a [SEP] b [SEP]) within its token budget
    clf = Classifier.load(run)
    a, b = [g[1] for g in gold[:6]], [g[2] for g in gold[:6]]
    assert np.allclose(clf.probabilities(a, b, max_tokens=1), clf.probabilities(a, b), atol=1e-6)


@pytest.mark.parametrize("task", ["mlm", "classify"])
def test_two_gloo_processes_match_one_process_with_the_same_global_batch(task, home, corpus, tmp_path):
    """2 gloo ranks (started as srun starts them: tests/ranks.py) x 1 micro-batch == 1 process x 2
    micro-batches (dropout off): the heads run inside the model's forward, so DDP averages their gradients
    too (a head called beside the DDP wrapper would leave the ranks' classifiers apart, and the mlm head
    unused by classify would stall DDP without find_unused_parameters)."""
    from aiayn.distributed import DistInfo
    from aiayn.train.tasks import prepare_data
    from ranks import run_ranks

    def batches_per_epoch(budget: int) -> int:
        cfg = config(task, corpus, **{"data.max_tokens": budget})
        spec = spec_for(cfg)
        return len(spec.train_batches(cfg, prepare_data(spec, cfg, cfg.data, None), DistInfo(), torch.device("cpu")))

    # a budget that cuts an even count of batches, so one process and two ranks get the same global
    # batches (an odd count makes the iterator split one batch for the two ranks)
    budget = next(b for b in range(240, 400, 8) if batches_per_epoch(b) % 2 == 0)
    over = {
        "model.dropout": 0.0,
        "data.max_tokens": budget,
        "optim.tokens_per_update": 2 * budget,
        "train.max_steps": 4,
        "train.eval_every": 4,
        "train.save_every": 4,
    }
    cfg = config(task, corpus, **over)
    path = tmp_path / "cfg.yaml"
    cfg.save(path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = run_ranks(["-m", "aiayn", "train", "--config", str(path), "--run-dir", str(tmp_path / "ddp")], env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    train(Config.load(str(path)), tmp_path / "single")
    a = [r for r in records(tmp_path / "ddp") if r["kind"] == "train"]
    b = [r for r in records(tmp_path / "single") if r["kind"] == "train"]
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2, 3, 4]
    assert [r["loss"] for r in a] == pytest.approx([r["loss"] for r in b], rel=1e-4)
    wa, wb = weights(tmp_path / "ddp", 4), weights(tmp_path / "single", 4)
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


@pytest.mark.needs_mirror
@pytest.mark.parametrize("task", ["mlm", "classify"])
def test_training_on_real_multi30k_captions(task, home, multi30k_corpus, tmp_path):
    """The same runs on real text (the tests above use made-up captions): a few hundred Multi30k lines
    train, validate and save; the training loss falls."""
    run = tmp_path / "run"
    train(config(task, multi30k_corpus, **{"train.patience_metric": "accuracy"}), run)
    recs = records(run)
    valid = [r for r in recs if r["kind"] == "valid"]
    train_recs = [r for r in recs if r["kind"] == "train"]
    assert [r["step"] for r in valid] == [4, 8] and (run / "checkpoints/step_00000008.safetensors").is_file()
    assert train_recs[-1]["nll"] < train_recs[0]["nll"]
    assert {"accuracy", "macro_f1"} <= set(valid[-1]) if task == "classify" else "ppl" in valid[-1]


# -- filling in [MASK]: `aiayn predict` and `aiayn serve` on an mlm run --------------------------------

SOUNDS = {"dog": "barks", "cat": "meows", "cow": "moos", "bird": "sings", "duck": "quacks", "lion": "roars"}
ADJECTIVES = ["big", "small", "old", "young", "brown", "white", "happy", "lazy"]


@pytest.fixture(scope="module")
def sounds_run(home, tmp_path_factory) -> Path:
    """An mlm run on "the ADJ ANIMAL SOUND ADVERB" lines, where each animal makes one sound: the sound
    follows from the animal and back, the adjective from nothing. 60 updates (a few seconds) fill in a
    sound or an animal with probability > 0.9 (pre-LN, no dropout, 30% of tokens masked)."""
    rng = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("sounds")
    for split, n in (("train", 400), ("valid", 40)):
        animals = rng.choice(list(SOUNDS), n)
        lines = [
            f"the {rng.choice(ADJECTIVES)} {a} {SOUNDS[a]} {rng.choice(['loudly', 'softly', 'again'])}" for a in animals
        ]
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    over = {"train.max_steps": 60, "train.eval_every": 60, "train.save_every": 60, "data.max_tokens": 1024}
    over |= {"task.mask_prob": 0.3, "model.norm": "pre", "model.dropout": 0.0, "optim.label_smoothing": 0.0}
    run = d / "run"
    train(config("mlm", d, **over), run)
    return run


def test_predict_fills_in_masks_with_hugging_faces_records(sounds_run, tmp_path, capsys):
    texts = ["the big dog [MASK] loudly", "the old [MASK] moos again", "the [MASK] lion roars softly"]
    texts += ["the small cat [MASK] [MASK]", "the lazy duck[MASK] again"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    capsys.readouterr()
    assert cli(["predict", "-c", str(sounds_run), "--device", "cpu", "--input", str(tmp_path / "in.txt")]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [len(masks) for masks in out] == [1, 1, 1, 2, 1]  # per text, one list per [MASK]
    for masks in out:
        for found in masks:
            scores = [c["score"] for c in found]
            assert len(found) == 5 and scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-6
            assert {"score", "token", "token_str", "sequence"} == set(found[0])
    best = [[found[0] for found in masks] for masks in out]
    assert (best[0][0]["token_str"], best[0][0]["sequence"]) == ("barks", "the big dog barks loudly")
    assert best[0][0]["score"] > 0.9 and best[1][0]["token_str"] == "cow" and best[1][0]["score"] > 0.9
    # the adjective follows from nothing: the model spreads its belief over the adjectives
    assert best[2][0]["score"] < 0.5 and {c["token_str"] for c in out[2][0]} <= set(ADJECTIVES)
    assert best[3][0]["token_str"] == "meows" and best[3][0]["sequence"] == "the small cat meows [MASK]"
    # no space before the marker: a candidate that starts a word still gets its space in the sequence
    assert best[4][0]["sequence"] == f"the lazy duck {best[4][0]['token_str']} again"
    # the model reads what training's masking made of the whole sentence: "▁barks" became [MASK], and no
    # lone "▁" is left before it
    fm = FillMask.load(sounds_run, "cpu")
    whole = fm.tokenizer.encode("the big dog barks loudly")
    assert fm.encode(texts[0]) == [fm.mask_id if i == fm.tokenizer.piece_id("▁barks") else i for i in whole]
    (tmp_path / "bare.txt").write_text("the big dog barks loudly\n")
    assert cli(["predict", "-c", str(sounds_run), "--input", str(tmp_path / "bare.txt")]) == 2
    assert "no [MASK] in 'the big dog barks loudly'" in capsys.readouterr().err


def test_serve_answers_an_mlm_run_on_v1_predict_as_predict_does(sounds_run, capsys, monkeypatch):
    """`aiayn serve -c RUN` of a task other than translation: a real server process, its predictor at
    /v1/predict; and a task without a predictor is refused in one line before anything loads."""
    pytest.importorskip("uvicorn")
    import subprocess
    import sys
    import time

    import httpx

    from aiayn.train.tasks import get_spec, spec
    from local_http import free_port

    texts = ["the young bird [MASK] again", "the white [MASK] quacks softly"]
    expected = get_spec("mlm").predictor(str(sounds_run), "cpu")(texts)  # what `aiayn predict` prints
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    cmd = [sys.executable, "-m", "aiayn", "serve", "-c", str(sounds_run), "--port", str(port), "--device", "cpu"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                if httpx.get(url + "/health", timeout=1).json() == {"status": "ok", "task": "mlm"}:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.1)
        r = httpx.post(url + "/v1/predict", json={"q": texts}, timeout=30)
        assert r.status_code == 200 and r.json() == {"task": "mlm", "predictions": expected}
        r = httpx.post(url + "/v1/predict", json={"q": "the big dog barks"}, timeout=30)
        assert r.status_code == 422 and "no [MASK]" in r.json()["error"]
        assert httpx.post(url + "/v1/translate", json={"q": "Ein Hund."}, timeout=30).status_code == 404
    finally:
        proc.terminate()
        proc.wait(30)
    monkeypatch.setitem(spec._LOADED, "mlm", dataclasses.replace(get_spec("mlm"), predictor=None))
    assert cli(["serve", "-c", str(sounds_run)]) == 2
    assert "task mlm has no predictor to serve" in capsys.readouterr().err
