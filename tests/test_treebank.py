"""Treebank reading, cleaning and linearisation for parsing (paper §6.3), on trees written here; the
CRAFT download against a real HTTP server on 127.0.0.1, and WSJ's layout in a temporary directory."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.config import DataConfig
from aiayn.data import craft
from aiayn.data.errors import DataError
from aiayn.data.treebank import (
    Tree,
    clean,
    corpus_trees,
    craft_splits,
    delinearize,
    linearize,
    markup_tokens,
    parse_tree,
    pretty,
    read_trees,
    split_words,
    write_parallel,
)
from local_http import FileServer

PTB = """( (S
    (NP-SBJ-1 (DT The) (NNS mice))
    (VP (VBD were)
      (VP (VBN treated)
        (NP-1 (-NONE- *))
        (PP-MNR=2 (IN with) (NP (NN insulin)))))
    (. .)) )
(TOP (NP (NN Abstract)))( (HEADING (NP (NNS Results))) )
(ROOT (S (NP (-NONE- *PRO*)) (VP (VB go)) (-LRB- -LRB-) (NP (NN Xpd\u200aTTD)) (-RRB- -RRB-)))
"""


def test_ptb_files_are_read_and_cleaned_as_parsers_are_scored():
    trees = [clean(t) for t in read_trees(PTB, "a.mrg")]
    assert [str(t) for t in trees] == [
        "(TOP (S (NP (DT The) (NNS mice)) (VP (VBD were) (VP (VBN treated) (PP (IN with) (NP (NN insulin))))) (. .)))",
        "(TOP (NP (NN Abstract)))",
        "(TOP (NP (NNS Results)))",  # CRAFT's HEADING wrapper unwrapped
        "(TOP (S (VP (VB go)) (-LRB- -LRB-) (NP (NN Xpd\u200aTTD)) (-RRB- -RRB-)))",  # -NONE- and its NP gone
    ]
    assert trees[3] is not None and trees[3].words() == ["go", "-LRB-", "Xpd\u200aTTD", "-RRB-"]  # a Unicode space


@pytest.mark.parametrize(
    "text, where",
    [
        ("( (S (NP (DT The))) )\n( (S (VP (VB go)))", "b.mrg:2: bracket opened here is never closed"),
        ("(S (NP (DT a)))\n)", "b.mrg:2: ')' closes no bracket"),
        ("(S (NP (DT a) word))", "b.mrg:1: word 'word' beside constituents in (NP ...)"),
        ("(S ())", "b.mrg:1: empty bracket"),
        ("word (S (X y))", "b.mrg:1: 'word' outside any bracket"),
    ],
)
def test_a_bad_tree_is_one_error_with_file_and_line(text, where):
    with pytest.raises(DataError, match=where.replace("(", r"\(").replace(")", r"\)")):
        list(read_trees(text, "b.mrg"))


def test_linearisation_in_each_leaf_form_and_back():
    tree = clean(parse_tree("(TOP (S (NP (DT The) (NNS mice)) (VP (VBD ran)) (. .)))"))
    assert tree is not None
    assert linearize(tree) == "(S (NP DT NNS )NP (VP VBD )VP . )S"
    assert linearize(tree, "xx") == "(S (NP XX XX )NP (VP XX )VP XX )S"
    assert linearize(tree, "words") == "(S (NP The mice )NP (VP ran )VP . )S"
    assert str(delinearize(linearize(tree), tree.words())) == str(tree)
    xx = delinearize(linearize(tree, "xx"), tree.words(), "xx")
    assert str(xx) == "(TOP (S (NP (XX The) (XX mice)) (VP (XX ran)) (XX .)))"
    assert pretty(tree).splitlines() == [
        "(TOP",
        "  (S",
        "    (NP (DT The) (NNS mice))",
        "    (VP (VBD ran))",
        "    (. .)))",
    ]
    # the markup: brackets and, unless the leaves are words, leaf tokens
    assert markup_tokens([linearize(tree)]) == "(NP (S (VP )NP )S )VP . DT NNS VBD".split()
    assert markup_tokens([linearize(tree, "words")], "words") == "(NP (S (VP )NP )S )VP".split()


def test_broken_outputs_become_trees_over_exactly_the_words():
    words = split_words("The mice ran .")
    cases = {
        "": "(TOP (XX The) (XX mice) (XX ran) (XX .))",
        ")S )NP (S DT": "(TOP (S (DT The) (XX mice) (XX ran) (XX .)))",  # stray closes; words appended
        "(S (NP DT NNS NN JJ . . )NP )S": "(TOP (S (NP (DT The) (NNS mice) (NN ran) (JJ .))))",  # extra leaves cut
        "(S (NP )NP (VP VBD VBD VBD VBD": "(TOP (S (VP (VBD The) (VBD mice) (VBD ran) (VBD .))))",  # empty NP
    }
    for target, expected in cases.items():
        assert str(delinearize(target, words)) == expected, target


def test_a_model_output_nested_thousands_deep_is_still_a_tree() -> None:
    """A half-trained model once wrote brackets nested far past any treebank tree, and the recursive
    tree functions hit Python's recursion limit during validation, ending the training run. Opens past
    MAX_DEPTH are not made, and their closes are skipped with them."""
    from aiayn.data.treebank import MAX_DEPTH
    from aiayn.decode.parser import score_trees

    words = split_words("The mice were treated with insulin .")
    target = " ".join(["(NP"] * 3000 + ["DT", "NNS"] + [")NP"] * 2990 + ["(VP VBD VBN )VP"] + [")NP"] * 10)
    tree = delinearize(target, words)
    assert tree.words() == words and len(tree.leaves()) == len(words)
    depth, node = 0, tree
    while not node.is_preterminal:
        node, depth = node.children[0], depth + 1  # down the left edge: the deepest path here
    assert depth == MAX_DEPTH + 1  # TOP and MAX_DEPTH NPs above the first leaf
    assert [str(t) for t in read_trees(str(tree))] == [str(tree)]
    gold = "(TOP (S (NP (DT The) (NNS mice)) (VP (VBD were) (VBN treated) (PP (IN with) (NP (NN insulin)))) (. .)))"
    assert 0.0 <= score_trees([gold], [tree])[0] < 100.0


TOKENS = st.sampled_from(["(S", "(NP", "(VP", ")S", ")NP", ")VP", ")", "NN", "XX", "DT", "(", "junk"])


@settings(max_examples=300)
@given(st.lists(TOKENS, max_size=40), st.lists(st.sampled_from(["a", "dog", "ran", ".", "(", ")S"]), max_size=12))
def test_every_output_is_a_tree_over_the_input_words(target, words):
    tree = delinearize(target, words)
    assert tree.label == "TOP" and tree.words() == words
    again = (
        list(read_trees(str(tree)))
        if words and all(w not in "()" and "(" not in w and ")" not in w for w in words)
        else None
    )
    if again is not None:
        assert [str(t) for t in again] == [str(tree)]  # what it prints reads back as the same tree


def random_tree(rng: random.Random, depth: int = 0) -> Tree:
    if depth > 3 or rng.random() < 0.3:
        return Tree(rng.choice(["NN", "DT", "VB", "JJ", ","]), [rng.choice(["a", "b", "c", "d"])])
    return Tree(rng.choice(["S", "NP", "VP", "PP"]), [random_tree(rng, depth + 1) for _ in range(rng.randint(1, 3))])


@given(st.integers(0, 10_000))
def test_linearisation_round_trips_any_tree(seed):
    tree = Tree("TOP", [random_tree(random.Random(seed))])
    assert str(delinearize(linearize(tree), tree.words())) == str(tree)


def write_wsj(root, n: int = 2) -> None:
    for section in range(25):
        d = root / "parsed" / "mrg" / "wsj" / f"{section:02d}"
        d.mkdir(parents=True)
        for k in range(n):
            word = f"w{section}x{k}"
            (d / f"wsj_{section:02d}{k:02d}.mrg").write_text(
                f"( (S (NP-SBJ (NNP {word})) (VP (VBZ runs) (NP (-NONE- *T*-1))) (. .)) )\n"
                f"( (S (NP (PRP It)) (VP (VBD was) (ADJP-PRD (JJ {word}))) (. .)) )\n"
            )


def test_wsj_reads_the_standard_sections_of_an_ldc_layout(tmp_path):
    write_wsj(tmp_path)
    key, load = corpus_trees(DataConfig(corpus="wsj"), str(tmp_path))
    trees = load()
    assert {s: len(t) for s, t in trees.items()} == {"train": 20 * 2 * 2, "valid": 4, "test": 4}
    assert trees["test"][0].words() == ["w23x0", "runs", "."] and key.startswith("wsj-")
    assert corpus_trees(DataConfig(corpus="wsj"), str(tmp_path / "parsed"))[0] == key
    with pytest.raises(DataError, match="no WSJ sections under"):
        corpus_trees(DataConfig(corpus="wsj"), str(tmp_path / "nothing"))
    out = write_parallel(trees, tmp_path / "out")
    assert (tmp_path / "out" / "valid.tree").read_text().splitlines()[0] == "(S (NP NNP )NP (VP VBZ )VP . )S"
    assert (tmp_path / "out" / "valid.gold").read_text().splitlines()[0] == str(trees["valid"][0])
    assert out["test_src"].endswith("test.words")


def synthetic_craft() -> dict[str, bytes]:
    """A corpus laid out as CRAFT's repository: 3 articles, one per split."""
    files = {}
    for split, pmid in (("train", "101"), ("dev", "202"), ("test", "303")):
        files[f"articles/ids/craft-ids-{split}.txt"] = f"{pmid}\n".encode()
        files[f"structural-annotation/treebank/penn/{pmid}.tree"] = (
            f"( (HEADING (NP (NN Article{pmid}))) )\n( (S (NP-SBJ (NNS Mice)) (VP (VBD ran)) (. .)) )\n".encode()
        )
    return files


def test_craft_downloads_into_the_cache_once_and_checks_one_digest(home, monkeypatch):
    files = synthetic_craft()
    local = {k.replace("articles/ids/", "").replace("structural-annotation/treebank/", ""): v for k, v in files.items()}
    monkeypatch.setattr(craft, "DIGEST", craft.digest(local))
    monkeypatch.delenv("AIAYN_CRAFT_DIR", raising=False)
    server = FileServer(files)
    try:
        monkeypatch.setenv("AIAYN_CRAFT_URL", server.url)
        d = craft.locate()
        assert d == home / "craft" and len(server.requests) == 6
        assert {s: [str(t) for t in ts] for s, ts in craft_splits(d).items()}["valid"] == [
            "(TOP (NP (NN Article202)))",
            "(TOP (S (NP (NNS Mice)) (VP (VBD ran)) (. .)))",
        ]
        assert craft.locate() == d and len(server.requests) == 6  # the cache, nothing fetched again
    finally:
        server.close()


def test_a_craft_download_that_does_not_match_publishes_nothing(home, monkeypatch):
    files = synthetic_craft()
    monkeypatch.setattr(craft, "DIGEST", hashlib.sha256(b"another corpus").hexdigest())
    server = FileServer(files)
    try:
        monkeypatch.setenv("AIAYN_CRAFT_URL", server.url)
        with pytest.raises(DataError, match="does not hold CRAFT v5's trees and splits"):
            craft.fetch()
        assert not (home / "craft").exists() and not list(home.glob(".craft-*"))
    finally:
        server.close()
    with pytest.raises(DataError, match="download of http://127.0.0.1:9/.*failed.*AIAYN_CRAFT_DIR"):
        monkeypatch.setenv("AIAYN_CRAFT_URL", "http://127.0.0.1:9/")
        craft.locate()


@pytest.mark.needs_shared
def test_the_real_craft_treebank_reads_cleans_and_round_trips():
    from conftest import shared_data

    directory = craft.locate(shared_data("craft-treebank"))
    craft.verify(directory)  # the digest the download is checked against is this corpus'
    trees = craft_splits(directory)
    assert sum(len(t) for t in trees.values()) == 30_830 and {s: len(t) > 1000 for s, t in trees.items()} == {
        "train": True,
        "valid": True,
        "test": True,
    }
    for split in trees.values():
        for tree in split:
            assert tree.label == "TOP" and "-NONE-" not in str(tree)
            assert str(delinearize(linearize(tree), tree.words())) == str(tree)
