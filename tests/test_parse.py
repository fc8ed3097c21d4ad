"""Parsing as translation end to end (paper §6.3): a `task: parse` run trained on a WSJ-layout directory
written here (no LDC data), validated with EVALB F1, then `aiayn parse` on sentences, on the run's own
test split, and on two tree files."""

from __future__ import annotations

import json
import re

import pytest
import torch

from aiayn.config import Config
from aiayn.data.pipeline import Options
from aiayn.decode.parser import Parser
from aiayn.errors import AiaynError
from aiayn.train import train
from inprocess import run_aiayn
from test_treebank import write_wsj


@pytest.fixture(scope="module")
def parse_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("wsj")
    write_wsj(root, n=6)
    run = tmp_path_factory.mktemp("parse") / "run"
    cfg = Config.load(
        None,
        {
            **{"task.name": "parse", "data.corpus": "wsj", "task.ptb_root": str(root), "data.vocab_size": 400},
            **{"model.preset": "tiny", "model.dropout": 0.0, "optim.warmup": 30, "optim.lr_scale": 0.5},
            # F1 reaches 100 by step 40 (the synthetic sentences have two shapes); 80 steps leave margin
            **{"train.max_steps": 80, "train.eval_every": 40, "train.save_every": 40, "train.progress": False},
            **{"decode.beam": 2, "decode.max_len_b": 40},
        },
    )
    train(cfg, run)
    return run


def test_a_parse_run_validates_with_evalb_f1_and_stops_on_it(parse_run):
    valid = [json.loads(x) for x in (parse_run / "metrics.jsonl").read_text().splitlines() if '"valid"' in x]
    assert [r["step"] for r in valid] == [40, 80] and all(0 <= r["f1"] <= 100 for r in valid)
    assert valid[-1]["f1"] > 50  # the synthetic sentences have two shapes: a trained parser gets them
    meta = json.loads((parse_run / "parse.json").read_text())
    assert meta["leaves"] == "pos" and {"(S", ")S", "(NP", ")NP", "NNP", "VBZ", "."} <= set(meta["markup"])


def test_every_tree_token_is_one_piece_of_the_runs_vocabulary(parse_run):
    import sentencepiece as spm

    from aiayn.data.treebank import split_words, treebank_dir

    sp = spm.SentencePieceProcessor(model_file=str(parse_run / "spm.model"))
    cfg = Config.load(str(parse_run / "config.yaml"))
    trees = (treebank_dir(cfg.data, "pos", cfg.task.options["ptb_root"])[0] / "train.tree").read_text()
    tokens = {t for line in trees.splitlines() for t in split_words(line)}
    assert {"(S", ")S", "(NP", ")NP", "NNP", "."} <= tokens
    for line in trees.splitlines()[:20]:
        pieces = sp.encode(line, out_type=str)
        assert pieces == ["\u2581" + t for t in split_words(line)] and sp.decode(sp.encode(line)) == line


def test_parse_sentences_and_the_runs_test_split(parse_run, tmp_path):
    parser = Parser.load(parse_run)
    sentences = ["w5x1 runs .", "It was w9x3 .", "", "a sentence of unseen words that runs on"]
    trees = parser.parse(sentences)
    assert [t.words() for t in trees] == [s.split() for s in sentences]  # every sentence gets a tree
    # constrained search: a leaf of the model's own for every word, even in a sentence twice as long as
    # any it was trained on (the placeholder XX marks a word the model's output left without one)
    assert parser.translator.engine == "torch" and parser.translator.searcher.constraint is not None
    assert "(XX " not in str(trees[3]) and len(trees[3].leaves()) == 8
    assert str(trees[0]).startswith("(TOP (S (NP")
    cli = ["parse", "-c", str(parse_run)]
    png = tmp_path / "tree.png"
    p = run_aiayn(*cli, "--pretty", "--draw", str(png), input="\nw5x1 runs .\n", text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[:2] == ["(TOP )", "(TOP"] and p.stdout.count("(") == p.stdout.count(")")
    assert f"drew the first sentence's tree to {png}" in p.stderr and png.read_bytes()[:4] == b"\x89PNG"
    p = run_aiayn(*cli, "--split", "test", "--output", str(tmp_path / "t.tree"), text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("test: EVALB F1 ") and "(all 12 sentences)" in p.stdout
    by_length = p.stdout.splitlines()[1]  # F1 per 10-word bucket, with its sentence counts
    assert by_length.startswith("F1 by length: 0-9: ") and sum(map(int, re.findall(r"\((\d+)\)", by_length))) <= 12
    p = run_aiayn(*cli, "--split", "valid", "--limit", "3", "--unconstrained", text=True)
    assert p.returncode == 0 and p.stdout.startswith("valid: EVALB F1 ") and "(all 3 sentences)" in p.stdout, p
    p = run_aiayn("evaluate", "-c", str(parse_run), "--split", "test", "--json", text=True)
    assert p.returncode == 0 and p.stdout.startswith("test: EVALB F1 "), p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["sentences"] == 12
    gold = tmp_path / "gold.tree"
    gold.write_text((tmp_path / "t.tree").read_text())
    p = run_aiayn("parse", "--gold", str(gold), "--test", str(tmp_path / "t.tree"), text=True)
    assert p.returncode == 0 and "Bracketing FMeasure" in p.stdout and "100.00" in p.stdout, p.stdout


def test_words_leaves_are_the_sentence_copied_piece_by_piece(parse_run, tmp_path):
    # the run's real BPE and model, loaded as a `words` run: unseen words of several pieces, and
    # characters the vocabulary lacks (byte pieces), come out as the sentence itself between brackets
    import shutil

    from aiayn.data.treebank import split_words

    run = tmp_path / "words_run"
    shutil.copytree(parse_run, run)
    meta = json.loads((run / "parse.json").read_text())
    (run / "parse.json").write_text(json.dumps({**meta, "leaves": "words"}))
    parser = Parser.load(run)
    translator = parser.translator
    assert translator.engine == "torch" and translator.searcher.constraint.copy
    sentences = ["w5x1 runs .", "zebrafish β-catenin knockdowns runs w9x3 .", "Ωμέγα"]
    for beam in (1, 3):
        for hyp, s in zip(translator.translate(sentences, beam=beam), sentences):
            tokens = split_words(hyp)
            assert [t for t in tokens if t[0] not in "()"] == s.split(), hyp
            depth = [sum((t[0] == "(") - (t[0] == ")") for t in tokens[: i + 1]) for i in range(len(tokens))]
            assert min(depth, default=0) >= 0 and depth[-1] == 0, hyp
        assert [t.words() for t in parser.parse(sentences, beam=beam)] == [s.split() for s in sentences]


def test_a_run_of_another_task_is_not_a_parser(tmp_path):
    with pytest.raises(AiaynError, match="is not a parse run"):
        Parser.load(tmp_path)


def test_placeholder_leaves_are_scored_with_the_gold_tags():
    from aiayn import evalb
    from aiayn.data.treebank import delinearize, linearize, parse_tree
    from aiayn.decode.parser import score_trees

    gold = "(TOP (S (NP (DT The) (NN dog)) (, ,) (VP (VBZ runs)) (. .)))"
    tree = delinearize(linearize(parse_tree(gold), "xx"), ["The", "dog", ",", "runs", "."], "xx")
    assert score_trees([gold], [tree]) == (100.0, 100.0)
    assert evalb.evaluate([gold], [str(tree)]).all.valid_sentences == 0  # XX where gold has ',': a mismatch


def test_a_sentence_the_model_mistags_is_still_scored():
    """A model's own tags decide nothing: EVALB would drop a sentence whose punctuation the model tags
    differently from gold (a length mismatch), and a half-trained parser would be scored on the few
    sentences it tags right."""
    from aiayn import evalb
    from aiayn.data.treebank import delinearize
    from aiayn.decode.parser import score_trees

    words = ["The", "dog", ",", "runs", "."]
    gold = "(TOP (S (NP (DT The) (NN dog)) (, ,) (VP (VBZ runs)) (. .)))"
    right = delinearize("(S (NP DT NN )NP , (VP VBZ )VP . )S", words)
    wrong = delinearize("(S DT (NP , NN VBZ )NP . )S", words)  # "dog" tagged ",", and NP over "dog , runs"
    assert evalb.evaluate([gold], [str(wrong)]).all.valid_sentences == 0  # EVALB alone: left out
    assert score_trees([gold], [right]) == (100.0, 100.0)
    # S matches, NP (dog runs) does not: 4 of the 5 test brackets match 4 of the 6 gold ones
    p, r = 4 / 5, 4 / 6
    assert score_trees([gold, gold], [right, wrong])[0] == pytest.approx(100 * 2 * p * r / (p + r))


# -- task.loss_on_forced: false, the loss over the decoder's choices only ---------------------------------

TREES = [
    "(TOP (S (NP (NN Phosphorylation)) (VP (VBZ inhibits) (NP (JJ mitochondrial) (NN transcription))) (. .)))",
    "(TOP (NP (NP (NNS Mice)) (PP (IN with) (NP (NN hyperglycemia)))))",
]


def words_tokenizer(tmp_path):
    """A real BPE small enough that the words split into several pieces, with the markup whole."""
    from aiayn.data.tokenizer import Tokenizer
    from aiayn.data.treebank import linearize, markup_tokens, parse_tree
    from aiayn.decode.parser import WORD_START

    trees = [parse_tree(t) for t in TREES]
    targets = [linearize(t, "words") for t in trees]
    markup = markup_tokens(targets, "words")
    lines = [" ".join(t.words()) for t in trees] + targets
    tok = Tokenizer.train(
        lines * 20, tmp_path / "spm.model", vocab_size=300, user_symbols=[WORD_START + m for m in markup]
    )
    return tok, trees, targets, markup


def padded(rows):
    out = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for r, ids in enumerate(rows):
        out[r, : len(ids)] = torch.tensor(ids)
    return out


def test_the_forced_positions_are_those_where_the_constraint_allows_one_token(tmp_path):
    from aiayn.config import ModelConfig
    from aiayn.decode.parser import TreeConstraint

    tok, trees, targets, markup = words_tokenizer(tmp_path)
    config = ModelConfig.preset("tiny", vocab_size=tok.vocab_size)
    c = TreeConstraint.build(tok, markup, "words", config, "cpu")
    src = padded([tok.encode(" ".join(t.words())) + [config.eos_id] for t in trees])
    tgt_out = padded([tok.encode(t) + [config.eos_id] for t in targets])
    # the real search's rule, step by step along the gold target: forced = one token allowed
    state, expected = c.start(src), torch.zeros_like(tgt_out, dtype=torch.bool)
    for t in range(tgt_out.size(1)):
        allowed = ~c.banned(state, torch.full((len(trees),), 10**6))  # (B, V)
        real = tgt_out[:, t] != config.pad_id
        assert allowed.gather(1, tgt_out[:, t : t + 1]).squeeze(1)[real].all()  # gold is a path it allows
        expected[:, t] = allowed.sum(1) == 1
        state = c.advance(state, tgt_out[:, t])
    real = tgt_out != config.pad_id
    got = c.forced(tgt_out)
    assert torch.equal(got[real], expected[real])
    # words of several pieces: more forced positions than the EOS of each row, and choices among them
    assert got[real].sum() > len(trees) and (~got[real]).sum() > 10


def test_the_loss_without_forced_positions_ignores_their_logits(tmp_path):
    from aiayn.data.batching import BatchIterator
    from aiayn.model import build_model
    from aiayn.train.tasks.parse import prepare_parse
    from aiayn.train.tasks.parse_task import ParseTask

    root = tmp_path / "wsj"
    write_wsj(root, n=2)

    def task(on_forced):
        over = {"task.name": "parse", "task.tree_leaves": "words", "task.loss_on_forced": on_forced}
        over |= {"data.corpus": "wsj", "data.ptb_root": str(root), "data.vocab_size": 300, "model.preset": "tiny"}
        cfg = Config.load(None, over)
        prepared = prepare_parse(cfg, cfg.data, tmp_path / f"run{on_forced}", Options())
        return ParseTask(cfg, cfg.model_config(prepared.tokenizer.vocab_size), prepared, torch.device("cpu")), cfg

    free, cfg = task(False)
    full = task(True)[0]
    torch.manual_seed(0)
    model = build_model(free.model_config).eval()
    batch = next(iter(BatchIterator(free.prepared.splits["train"], cfg.data.max_tokens, shuffle=False)))
    forced = free.constraint.forced(batch.tgt_out) & (batch.tgt_out != 0)
    assert forced.sum() > (batch.tgt_out == free.model_config.eos_id).sum()  # pieces of words among them
    assert free.tokens(batch) == batch.tgt_tokens - int(forced.sum()) and full.tokens(batch) == batch.tgt_tokens

    class Noisy(torch.nn.Module):  # the model's logits, changed at the forced positions only
        def __init__(self, noise: float) -> None:
            super().__init__()
            self.noise = noise

        def forward(self, src, tgt_in, keep=None):
            logits = model(src, tgt_in).flatten(0, 1).clone()  # (B*T, V)
            logits[forced.view(-1)] += self.noise * torch.randn_like(logits[forced.view(-1)])
            return logits.index_select(0, keep)

    with torch.no_grad():
        for t, same in ((free, True), (full, False)):
            clean, noisy = t.loss(Noisy(0.0), batch), t.loss(Noisy(5.0), batch)
            assert torch.allclose(clean[0], noisy[0]) == same and torch.allclose(clean[1], noisy[1]) == same


def test_validation_f1_parses_only_the_capped_sentences(parse_run, monkeypatch):
    from aiayn.data.io import read_lines
    from aiayn.data.treebank import treebank_dir
    from aiayn.model import build_model
    from aiayn.train.tasks import parse, parse_task
    from aiayn.train.validate import validate

    cfg = Config.load(str(parse_run / "config.yaml"), {"task.eval_max_words": 3, "train.eval_max_sentences": 4})
    prepared = parse.prepare_parse(cfg, cfg.data, None, Options())
    task = parse_task.ParseTask(cfg, cfg.model_config(prepared.tokenizer.vocab_size), prepared, torch.device("cpu"))
    parsed, real = [], parse_task.parse_lines

    def spy(translator, lines, *args, **kw):  # what validation parses, parsed for real
        parsed.append(list(lines))
        return real(translator, lines, *args, **kw)

    monkeypatch.setattr(parse_task, "parse_lines", spy)
    assert 0 <= validate(task, build_model(task.model_config))["f1"] <= 100
    words = read_lines(treebank_dir(cfg.data, "pos", cfg.task.options["ptb_root"])[0] / "valid.words")
    short = [w for w in words if len(w.split()) <= 3]
    assert parsed == [short[:4]] and len(short) > 4 and len(short) < len(words)  # both caps bite


def test_the_validation_loss_covers_the_first_eval_max_sentences_pairs(tmp_path):
    from aiayn.model import build_model
    from aiayn.train.tasks.parse import prepare_parse
    from aiayn.train.tasks.parse_task import ParseTask
    from aiayn.train.validate import validate

    write_wsj(tmp_path / "wsj", n=2)
    over = {"task.name": "parse", "data.corpus": "wsj", "data.ptb_root": str(tmp_path / "wsj"), "data.vocab_size": 300}
    cfg = Config.load(None, {**over, "model.preset": "tiny", "train.eval_max_sentences": 3})
    prepared = prepare_parse(cfg, cfg.data, tmp_path / "run", Options())
    task = ParseTask(cfg, cfg.model_config(prepared.tokenizer.vocab_size), prepared, torch.device("cpu"))
    seen, forward = [], task._forward

    def spy(model, b):  # the validation pairs the loss reads, read for real
        seen.append(b.src.size(0))
        return forward(model, b)

    task._forward = spy
    model = build_model(task.model_config)
    capped = validate(task, model)
    assert sum(seen) == 3 < len(prepared.splits["valid"])
    assert task.eval_pairs().pair(2)[1].tolist() == prepared.splits["valid"].pair(2)[1].tolist()
    assert capped["loss"] != task.valid_loss(model.eval())["loss"]  # the whole split: other pairs, another mean


def test_data_prepare_prepares_the_tree_pairs_that_training_then_finds(tmp_path, monkeypatch, capsys):
    """`aiayn data prepare` goes through the task: a parse config's treebank is written as tree pairs and
    prepared with the markup kept whole, into the cache entry the run's own preparation then finds."""
    import yaml

    from aiayn.cli import main
    from aiayn.train import tasks

    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    write_wsj(tmp_path / "wsj", n=2)
    data = {"corpus": "wsj", "vocab_size": 300}
    task = {"name": "parse", "tree_leaves": "words", "ptb_root": str(tmp_path / "wsj")}
    path = tmp_path / "parse.yaml"
    path.write_text(yaml.safe_dump({"task": task, "data": data, "model": {"preset": "tiny"}}))
    assert main(["data", "prepare", "--config", str(path), "--workers", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("prepared ") and "(task parse): train 80, valid 4, test 4 pairs" in out
    cfg = tasks.resolved(Config.load(str(path)), tasks.spec_for(Config.load(str(path))))
    run = tasks.prepare_data(tasks.get_spec("parse"), cfg, cfg.data, tmp_path / "run")
    assert run.report["cached"] and str(run.cache_dir) in out
    assert run.tokenizer.piece_id("▁(NP") is not None  # a bracket of the markup: one piece
    assert (tmp_path / "run" / "parse.json").is_file()
