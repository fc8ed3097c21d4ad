"""aiayn.evalb against the C EVALB it ports: the sample shipped with EVALB, the C program itself (built here)
on thousands of real CRAFT trees with seeded perturbations, and properties of bracket scoring."""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiayn.errors import AiaynError
from aiayn.evalb import (
    Params,
    evaluate,
    evaluate_files,
    f1,
    f1_by_length,
    read_evalb_lines,
    read_trees,
    scoring,
)
from conftest import shared_data
from inprocess import run_aiayn

needs_shared = pytest.mark.needs_shared  # the shared-data rule: tests/conftest.py

# ---------------------------------------------------------------------------------------------------------
# trees for the tests: a node is [label, child, ...], a preterminal (tag, word)

Tree = list | tuple


def parse(s: str) -> Tree:
    tokens = re.findall(r"\(|\)|[^ \t\n\v\f\r()]+", s)  # C's spaces: CRAFT has U+2009, U+200A inside words
    pos = 0

    def node() -> Tree:
        nonlocal pos
        assert tokens[pos] == "("
        pos += 1
        label = ""
        if tokens[pos] not in "()":
            label = tokens[pos]
            pos += 1
        if tokens[pos] not in "()" and tokens[pos + 1] == ")":
            word = tokens[pos]
            pos += 2
            return (label, word)
        children: list = [label]
        while tokens[pos] != ")":
            children.append(node())
        pos += 1
        return children

    return node()


def show(t: Tree) -> str:
    if isinstance(t, tuple):
        return f"({t[0]} {t[1]})"
    return f"({t[0]} " + " ".join(show(c) for c in t[1:]) + ")"


def internal_nodes(t: Tree) -> list[list]:
    if isinstance(t, tuple):
        return []
    return [t, *(n for c in t[1:] for n in internal_nodes(c))]


def preterminals(t: Tree) -> list[tuple[list, int]]:
    """(parent, index) of every preterminal."""
    out = []
    for n in internal_nodes(t):
        out += [(n, i) for i in range(1, len(n)) if isinstance(n[i], tuple)]
    return out


def fits_c(line: str) -> bool:
    """Within evalb.c's fixed arrays (200 words, 200 brackets, 30-byte labels, 100-byte words, 20 quote
    terms, a 5000-byte line), where the C program is defined at all."""
    tokens = re.findall(r"[^ \t\n\v\f\r()]+", line)
    return (
        line.count("(") < 200
        and len(line.encode()) < 4990
        and all(len(x.encode()) < 30 for x in tokens)
        and sum(x in ("'", '"', "/") for x in tokens) < 20
    )


LABELS = ["NP", "VP", "PP", "S", "SBAR", "ADJP", "ADVP", "PRT", "NP-SBJ", "NML", "QP", "X", "PP-LOC=2", "TOP"]
TAGS = ["NN", "NNS", "JJ", "IN", "DT", "VBZ", "CD", "RB", "NN-X", "SYM", "POS", "HYPH", "-LRB-"]
DELETED_TAGS = [",", ".", ":", "``", "''", "-NONE-"]
QUOTE_TAGS = ["``", "''", "POS", "SYM", "HYPH"]


def perturb(line: str, rng: random.Random) -> str:
    """A parser's mistakes, seeded: relabelled, removed and added brackets, changed tags, a trace or a
    function tag here and there; now and then a sentence EVALB must refuse (a word left out or added, a
    word changed, an empty line) or retagged quote-like words (the 2006 fix)."""
    t = parse(line)
    roll = rng.random()
    if roll < 0.01:
        return ""
    for _ in range(rng.randint(0, 5)):
        nodes = internal_nodes(t)[1:] or internal_nodes(t)
        pres = preterminals(t)
        kind = rng.choice(["relabel", "remove", "add", "shift", "retag", "trace", "ftag", "quote"])
        if kind == "relabel":
            rng.choice(nodes)[0] = rng.choice(LABELS)
        elif kind == "ftag":
            n = rng.choice(nodes)
            n[0] = n[0] + rng.choice(["-SBJ", "-TMP-1", "=2", "-"])
        elif kind == "remove":
            n = rng.choice(nodes)
            for parent in internal_nodes(t):
                for i in range(1, len(parent)):
                    if parent[i] is n:
                        parent[i : i + 1] = n[1:]
                        break
        elif kind == "add":
            n = rng.choice(internal_nodes(t))
            if len(n) > 2:
                i = rng.randrange(1, len(n))
                j = rng.randrange(i, len(n)) + 1
                n[i:j] = [[rng.choice(LABELS), *n[i:j]]]
        elif kind == "shift":  # a constituent's last child moves into its next sibling: crossing brackets
            n = rng.choice(internal_nodes(t))
            spots = [i for i in range(1, len(n) - 1) if isinstance(n[i], list) and len(n[i]) > 2]
            spots = [i for i in spots if isinstance(n[i + 1], list)]
            if spots:
                i = rng.choice(spots)
                n[i + 1].insert(1, n[i].pop())
        elif kind == "retag" and pres:
            parent, i = rng.choice(pres)
            tags = TAGS + DELETED_TAGS if rng.random() < 0.03 else TAGS
            parent[i] = (rng.choice(tags), parent[i][1])
        elif kind == "trace":
            n = rng.choice(internal_nodes(t))
            n.insert(rng.randrange(1, len(n) + 1), rng.choice([("-NONE-", "*T*-1"), ["NP-SBJ", ("-NONE-", "*")]]))
        elif kind == "quote":
            quotes = [(p, i) for p, i in pres if p[i][1] in ("'", '"', "/")]
            if quotes:
                parent, i = rng.choice(quotes)
                parent[i] = (rng.choice(QUOTE_TAGS), parent[i][1])
    if 0.01 <= roll < 0.02 and len(pres := preterminals(t)) > 1:  # a word left out: lengths differ
        parent, i = rng.choice(pres)
        del parent[i]
    elif 0.02 <= roll < 0.025 and (pres := preterminals(t)):  # a word added
        parent, i = rng.choice(pres)
        parent.insert(i, ("NN", "extra"))
    elif 0.025 <= roll < 0.03 and (pres := preterminals(t)):  # a word changed
        parent, i = rng.choice(pres)
        if parent[i][0] not in DELETED_TAGS:
            parent[i] = (parent[i][0], parent[i][1] + "x")
    out = show(t)
    return out if fits_c(out) else line


# ---------------------------------------------------------------------------------------------------------
# the C program and the real trees


@pytest.fixture(scope="module")
def evalb_c(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """evalb.c built from the shared copy (with its Makefile: gcc -Wall -g)."""
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("gcc and make are needed to build the C EVALB to compare with")
    build = tmp_path_factory.mktemp("evalb-c") / "evalb"
    shutil.copytree(shared_data("evalb"), build)
    subprocess.run(["make", "-s"], cwd=build, check=True, capture_output=True)
    return build / "evalb"


def run_c(evalb: Path, gold: list[str], test: list[str], prm: str, tmp_path: Path) -> tuple[str, str, int]:
    (tmp_path / "gold").write_text("".join(x + "\n" for x in gold))
    (tmp_path / "test").write_text("".join(x + "\n" for x in test))
    (tmp_path / "p.prm").write_text(prm)
    r = subprocess.run(
        [str(evalb), "-p", str(tmp_path / "p.prm"), str(tmp_path / "gold"), str(tmp_path / "test")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r.stdout, r.stderr, r.returncode


def same_nan(text: str) -> str:
    # 0.0/0.0 prints "-nan" on x86-64 (what the port prints) and "nan" where the default NaN is positive
    return text.replace("-nan", " nan") if platform.machine() not in ("x86_64", "AMD64") else text


def assert_same_as_c(evalb: Path, gold: list[str], test: list[str], prm: str, tmp_path: Path) -> None:
    out, err, rc = run_c(evalb, gold, test, prm, tmp_path)
    ours = evaluate_files(tmp_path / "gold", tmp_path / "test", tmp_path / "p.prm")
    assert rc == (1 if ours.aborted else 0)
    ours_out, c_out = ours.report().splitlines(), same_nan(out).splitlines()
    for i, (a, b) in enumerate(zip(ours_out, c_out)):  # the first differing line, not a 10,000-line diff
        assert a == b, f"line {i + 1} differs:\nours: {a!r}\nC:    {b!r}"
    assert len(ours_out) == len(c_out)
    assert ours.stderr() == err


@pytest.fixture(scope="module")
def craft_trees() -> dict[str, list[str]]:
    """CRAFT's dev and test documents, one tree a line, raw (unlabeled roots, -NONE-, function tags), those
    the C program can hold."""
    root = shared_data("craft-treebank")
    out: dict[str, list[str]] = {}
    with tarfile.open(root / "craft-penn-trees.tgz") as tf:
        for split in ("dev", "test"):
            trees: list[str] = []
            for pmid in (root / f"craft-ids-{split}.txt").read_text().split():
                member = tf.extractfile(f"penn/{pmid}.tree")
                assert member is not None
                trees += read_trees(member.read().decode("utf-8"))
            out[split] = [t for t in trees if fits_c(t)]
    return out


def prm(**changes: str) -> str:
    """COLLINS.prm as text, with keys replaced or added."""
    lines = {
        "MAX_ERROR": "MAX_ERROR 10",
        "CUTOFF_LEN": "CUTOFF_LEN 40",
        "LABELED": "LABELED 1",
        "DELETE_LABEL": "\n".join(f"DELETE_LABEL {x}" for x in ("TOP", "-NONE-", ",", ":", "``", "''", ".")),
        "DELETE_LABEL_FOR_LENGTH": "DELETE_LABEL_FOR_LENGTH -NONE-",
        "EQ_LABEL": "EQ_LABEL ADVP PRT",
    }
    lines.update(changes)
    return "# built by test_evalb\nDEBUG 0\n" + "\n".join(lines.values()) + "\n"


# new.prm of the 2006 version: the quote-like tags the bug fix may reinsert
QUOTES_PRM = "QUOTE_LABEL ``\nQUOTE_LABEL ''\nQUOTE_LABEL POS\nQUOTE_LABEL SYM\nQUOTE_LABEL HYPH"


# ---------------------------------------------------------------------------------------------------------
# the sample shipped with EVALB


@needs_shared
def test_sample_matches_the_c_program_byte_for_byte(evalb_c: Path) -> None:
    sample = evalb_c.parent / "sample"
    r = subprocess.run(
        [str(evalb_c), "-p", "sample.prm", "sample.gld", "sample.tst"], cwd=sample, capture_output=True, text=True
    )
    ours = evaluate_files(sample / "sample.gld", sample / "sample.tst", sample / "sample.prm")
    assert ours.report() == r.stdout
    assert ours.stderr() == r.stderr
    assert [s.status for s in ours.sentences].count(1) == 5


@needs_shared
def test_sample_matches_sample_rsl() -> None:
    """sample.rsl was written by the 1997 program: no FMeasure line, error sentences showing their word
    count, and a totals line with other spacing (and a crossing total of 16 where its own summary says
    0.06 x 17 = 1). Everything else must be equal: the summary and every scored sentence's line."""
    sample = shared_data("evalb") / "sample"
    ours = evaluate_files(sample / "sample.gld", sample / "sample.tst", sample / "sample.prm").report()
    rsl = (sample / "sample.rsl").read_text()
    summary = [x for x in ours[ours.index("=== Summary") :].splitlines() if "FMeasure" not in x]
    assert summary == rsl[rsl.index("=== Summary") :].splitlines()
    rows = {x.split()[0]: x for x in ours.splitlines()[3:27]}
    expected = {x.split()[0]: x for x in rsl.splitlines()[3:27]}
    assert rows.keys() == expected.keys()
    for sent, line in expected.items():
        if line.split()[2] == "0":
            assert rows[sent] == line
        else:  # status and length agree; the counts are the 1997 program's
            assert rows[sent].split()[1:3] == line.split()[1:3]


# ---------------------------------------------------------------------------------------------------------
# the C program on real trees


@needs_shared
@pytest.mark.parametrize(
    "setting, splits, extra",
    [
        ("collins", ("dev", "test"), {}),
        ("unlabeled-cutoff-20", ("dev",), {"LABELED": "LABELED 0", "CUTOFF_LEN": "CUTOFF_LEN 20"}),
        ("quote-fix", ("dev",), {"EQ_LABEL": "EQ_LABEL ADVP PRT\n" + QUOTES_PRM}),
        # a deleted label's EQ_LABEL partner is deleted too; NP = NML = QP is not transitive (NP != QP)
        (
            "odd-eq-labels",
            ("dev",),
            {"EQ_LABEL": "EQ_LABEL ADVP PRT\nDELETE_LABEL PRT\nEQ_LABEL NP NML\nEQ_LABEL NML QP"},
        ),
    ],
)
def test_matches_the_c_program_on_craft(
    evalb_c: Path, craft_trees: dict[str, list[str]], tmp_path: Path, setting: str, splits: tuple, extra: dict
) -> None:
    """Every line of the report (each sentence and the summary) and every error message equal the C
    program's, on the CRAFT dev (+ test) trees against seeded perturbations of themselves."""
    gold = [t for s in splits for t in craft_trees[s]]
    assert len(gold) >= 1000
    rng = random.Random(f"evalb-{setting}")
    test = [perturb(t, rng) for t in gold]
    assert_same_as_c(evalb_c, gold, test, prm(MAX_ERROR="MAX_ERROR 100000", **extra), tmp_path)
    ev = evaluate(gold, test, Params.parse(prm(MAX_ERROR="MAX_ERROR 100000", **extra)))
    # the comparison covered what it is meant to: scored, refused and skipped sentences, imperfect scores
    statuses = [s.status for s in ev.sentences]
    assert statuses.count(0) > 0.9 * len(gold) and statuses.count(1) >= 10 and statuses.count(2) >= 5
    assert 50 < ev.all.fmeasure < 99 and ev.all.crossing > 0 and ev.cutoff.sentences < ev.all.sentences
    if setting == "quote-fix":  # the 2006 fix turned would-be length mismatches into scored sentences
        plain = evaluate(gold, test, Params.parse(prm(MAX_ERROR="MAX_ERROR 100000")))
        assert plain.all.error_sentences > ev.all.error_sentences


@needs_shared
def test_craft_report_under_collins_prm_itself(evalb_c: Path, craft_trees: dict[str, list[str]], tmp_path: Path):
    """COLLINS.prm unchanged (MAX_ERROR 10), on 1000 trees with only bracket and tag changes."""
    gold = craft_trees["test"][:1000]
    rng = random.Random("collins-prm")
    test = [perturb(t, rng) for t in gold]
    test = [t if evaluate([g], [t]).sentences[0].status == 0 else g for g, t in zip(gold, test)]
    prm_text = (shared_data("evalb") / "COLLINS.prm").read_text()
    assert Params.parse(prm_text) == Params.collins()
    assert_same_as_c(evalb_c, gold, test, prm_text, tmp_path)
    all_f1, cut_f1 = f1(gold, test)
    assert f"Bracketing FMeasure       = {all_f1:6.2f}" in evaluate(gold, test).report()
    assert f"Bracketing FMeasure       = {cut_f1:6.2f}" in evaluate(gold, test).report()


@needs_shared
def test_max_error_and_malformed_lines_stop_like_c(
    evalb_c: Path, craft_trees: dict[str, list[str]], tmp_path: Path
) -> None:
    """EVALB exits (status 1, no summary) at the error after MAX_ERROR + 1 errors; a tree with a word where
    a bracket should be makes it call Error() until it exits; extra lines on either side are errors."""
    gold = craft_trees["dev"][:40]
    short = [drop_a_word(t) for t in gold]
    for max_error in (0, 3, 10):
        text = prm(MAX_ERROR=f"MAX_ERROR {max_error}")
        assert_same_as_c(evalb_c, gold, gold[:5] + short[5:], text, tmp_path)
        assert evaluate(gold, gold[:5] + short[5:], Params.parse(text)).aborted
    bad = list(gold)
    bad[7] = "(S (NP a b) (VP c))"
    assert_same_as_c(evalb_c, gold, bad, prm(), tmp_path)
    assert_same_as_c(evalb_c, gold, gold[:30], prm(), tmp_path)  # too many lines in gold
    assert_same_as_c(evalb_c, gold[:30], gold, prm(), tmp_path)  # too many lines in test
    assert_same_as_c(evalb_c, ["(X a)", "(Y (Z b))"], ["(X a)", "(Y (Z b))"], prm(), tmp_path)  # -nan
    test = gold[:5] + short[5:]  # `aiayn parse --gold --test`, COLLINS.prm: the C program's streams and status
    out, err, rc = run_c(evalb_c, gold, test, (shared_data("evalb") / "COLLINS.prm").read_text(), tmp_path)
    p = parse_cli(gold, test, tmp_path)
    assert (p.returncode, p.stdout, p.stderr) == (rc, out, err) and rc == 1


# hand-written corner cases: (gold, test)
CORNERS = [
    ("(S (NML (QP (NN a))) (VB b))", "(S (NP (NML (NN a))) (VB b))"),  # EQ_LABEL order: NP = NML = QP
    ("( (S (NP (NN a)) (VP (VB b))) )", "(TOP (S (NP (NN a)) (VP (VB b))))"),  # unlabeled root
    ("(S (-NONE- (NN a)) (VP (VB b)))", "(S (X (NN a)) (VP (VB b)))"),  # -NONE- bracket cut to ""
    ("(S (NP (NP (NN a))) (VB b))", "(S (NP (NP (NP (NN a)))) (VB b))"),  # duplicates
    ("(S (A (X )) (B (Y b)))", "(S (A (X )) (B (Y b)))"),  # "(X )": a word "" tagged X
    ("(S (NP-SBJ=2 (NN-X a)) (, ,) (PRT (RP up)))", "(S (NP (NN a)) (ADVP (: ,) (RP up)))"),
    ("(S (NP (NNS dogs) ('' ')) (VP (VB run)))", "(S (NP (NNS dogs) (POS ')) (VP (VB run)))"),  # quote fix
    ("(S (`` ') (NP (NN a)) (VP (VB b) ('' ')))", "(S (POS ') (NP (NN a) (POS ')) (VP (VB b)))"),  # not the same
    ("(S (`` ') (NP (NN a)) (VP (VB b) ('' ')))", "(S (POS ') (NP (NN a)) (VP (VB b) (POS ')))"),  # two fixed
    ("(S\t(A a)\r(B b))", "(S (A a) (B b))"),  # C's spaces
    ("(S (NP (NN Xpd\u200aTTD)) (VB\u00a0b))", "(S (NP (NN Xpd\u200aTTD)) (VB\u00a0b))"),  # not C's spaces
    ("(S (A (X a)) (B (Y b)))", "(S (A (X a)) (B (Y b))"),  # unbalanced: an error sentence, but scored and printed
]


@needs_shared
def test_corner_cases_match_the_c_program(evalb_c: Path, tmp_path: Path) -> None:
    gold, test = [g for g, _ in CORNERS], [t for _, t in CORNERS]
    extra = {"EQ_LABEL": "EQ_LABEL ADVP PRT\nEQ_LABEL NP NML\nEQ_LABEL NML QP\n" + QUOTES_PRM}
    assert_same_as_c(evalb_c, gold, test, prm(**extra), tmp_path)
    ev = evaluate(gold, test, Params.parse(prm(**extra)))
    assert ev.sentences[0].matched == 3
    assert [s.status for s in ev.sentences[6:9]] == [0, 1, 0] and ev.sentences[8].words == 4
    assert (ev.sentences[-1].status, ev.sentences[-1].matched, ev.sentences[-1].test_brackets) == (1, 2, 3)
    # fgets reads 4999 bytes at a time: a tree of exactly 4999 bytes leaves its "\n" as an empty line of its own
    # (a longer one is cut in the middle, which the C program then reads past the end of its buffer)
    head = "(S " + " ".join(f"(NN x{i}{'x' * 80})" for i in range(56)) + " (NN "
    pad = 4999 - len(head) - len("))")
    assert 0 < pad < 100  # words under 100 bytes, or C's word[] overflows
    long = head + "y" * pad + "))"
    lines = ["(A (B a))", long, "(A (B a))"]
    assert_same_as_c(evalb_c, lines, lines, prm(), tmp_path)
    assert [s.status for s in evaluate_files(tmp_path / "gold", tmp_path / "test").sentences] == [0, 0, 2, 0]


def drop_a_word(line: str) -> str:
    t = parse(line)
    parent, i = next((p, i) for p, i in preterminals(t) if p[i][0] not in DELETED_TAGS)
    del parent[i]
    return show(t)


# a random tree over given words: every word a preterminal, brackets above them
LABEL = st.sampled_from(["NP", "VP", "S", "PP", "ADVP", "PRT", "NP-SBJ", "S=1", "X"])
TAG = st.sampled_from(["NN", "VB", "DT", "IN", "NN-X"])


@st.composite
def trees(draw: st.DrawFn, words: list[str] | None = None) -> Tree:
    if words is None:
        words = [f"w{i}" for i in range(draw(st.integers(1, 12)))]

    def build(ws: list[str], depth: int) -> list[Tree]:
        if len(ws) == 1 and (depth > 3 or draw(st.booleans())):
            return [(draw(TAG), ws[0])]
        # a run of several words is cut at least once, so the recursion ends; one word may get unary brackets
        cuts = sorted(set(draw(st.lists(st.integers(1, len(ws) - 1), min_size=1, max_size=3)))) if len(ws) > 1 else []
        parts = [ws[a:b] for a, b in zip([0, *cuts], [*cuts, len(ws)])]
        kids = [k for p in parts for k in build(p, depth + 1)]
        return [[draw(LABEL), *kids]] if depth > 0 and draw(st.booleans()) else kids

    return [draw(LABEL), *build(words, 0)]


@st.composite
def pairs(draw: st.DrawFn) -> tuple[Tree, Tree]:
    gold = draw(trees())
    words = [w for _, w in (p[i] for p, i in preterminals(gold))]
    return gold, draw(trees(words))


@needs_shared
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(pairs(), min_size=1, max_size=30))
def test_random_trees_match_the_c_program(evalb_c: Path, tmp_path: Path, batch: list) -> None:
    gold, test = [show(g) for g, _ in batch], [show(t) for _, t in batch]
    assert_same_as_c(evalb_c, gold, test, prm(MAX_ERROR="MAX_ERROR 1000"), tmp_path)


# ---------------------------------------------------------------------------------------------------------
# properties


@given(t=trees())
def test_identical_trees_score_100(t: Tree) -> None:
    s = show(t)
    ev = evaluate([s], [s])
    r = ev.sentences[0]
    assert r.status == 0 and r.matched == r.gold_brackets == r.test_brackets and r.cross_brackets == 0
    assert ev.all.complete_match == 100.0 and ev.all.tagging_accuracy == 100.0
    assert f1([s], [s]) == ((100.0, 100.0) if r.gold_brackets else (0.0, 0.0))


@pytest.mark.parametrize("labeled", [False, True])
@given(pair=pairs())
def test_swapping_gold_and_test_swaps_recall_and_precision(labeled: bool, pair: tuple[Tree, Tree]) -> None:
    """Matching is one to one and (with COLLINS.prm's EQ_LABEL, an equivalence) label equality symmetric,
    so the matched count is the same either way round."""
    params = dataclasses.replace(Params.collins(), labeled=labeled)
    a, b = show(pair[0]), show(pair[1])
    ab, ba = evaluate([a], [b], params), evaluate([b], [a], params)
    assert ab.all.recall == ba.all.precision and ab.all.precision == ba.all.recall
    assert ab.all.matched == ba.all.matched
    assert f1([a], [b]) == f1([b], [a])


@given(pair=pairs(), data=st.data())
def test_deleted_labels_and_function_tags_change_nothing(pair: tuple[Tree, Tree], data: st.DataObject) -> None:
    """A TOP above the tree, traces (-NONE- and the brackets over only them), punctuation both sides, and
    function tags (-SBJ, =2) leave every count as it was (README [6], [7].1, [7].2)."""
    gold, test = pair
    before = evaluate([show(gold)], [show(test)]).sentences[0]
    noisy = parse(show(test))
    for n in internal_nodes(noisy):
        if data.draw(st.booleans()):
            n[0] += data.draw(st.sampled_from(["-SBJ", "-TMP-2", "=3"]))
        if data.draw(st.booleans()):
            n.insert(data.draw(st.integers(1, len(n))), ["NP-SBJ-1", ("-NONE-", "*PRO*")])
    after = evaluate([show(gold)], [show(["TOP", noisy])]).sentences[0]
    assert after == before
    # the same punctuation mark in both trees at the same word: only the length changes
    g2, t2 = parse(show(gold)), parse(show(test))
    g2.append((",", ",")), t2.append((",", ","))
    after = evaluate([show(g2)], [show(t2)]).sentences[0]
    assert (after.length, after.matched, after.gold_brackets, after.test_brackets) == (
        before.length + 1,
        before.matched,
        before.gold_brackets,
        before.test_brackets,
    )


# ---------------------------------------------------------------------------------------------------------
# EVALB's reading and scoring rules, case by case


def one(gold: str, test: str, params: Params | None = None):
    ev = evaluate([gold], [test], params)
    return ev.sentences[0]


def test_labels_are_cut_at_the_first_dash_or_equals_but_tags_are_not() -> None:
    r = one("(S (NP-SBJ-1 (NN a)) (VP=2 (VB b)))", "(S (NP (NN-X a)) (VP (VB b)))")
    assert (r.matched, r.gold_brackets, r.correct_tags, r.words) == (3, 3, 1, 2)
    # a bracket labelled -NONE- is cut to "" (from position 0), so it is neither deleted nor equal to X
    r = one("(S (-NONE- (NN a)) (VP (VB b)))", "(S (X (NN a)) (VP (VB b)))")
    assert (r.matched, r.gold_brackets, r.test_brackets) == (2, 3, 3)


def test_unlabeled_root_is_a_bracket_and_top_is_not() -> None:
    r = one("( (S (NP (NN a)) (VP (VB b))) )", "(TOP (S (NP (NN a)) (VP (VB b))))")
    assert (r.matched, r.gold_brackets, r.test_brackets) == (3, 4, 3)


def test_duplicate_brackets_match_one_to_one() -> None:
    """README [7].5: n gold and m test brackets of one span and label match min(n, m) times."""
    r = one("(S (NP (NP (NN a))) (VB b))", "(S (NP (NP (NP (NN a)))) (VB b))")
    assert (r.matched, r.gold_brackets, r.test_brackets) == (3, 3, 4)
    assert (r.recall, r.precision) == (100.0, 75.0)


def test_eq_label_and_eq_word() -> None:
    assert one("(S (PRT (RP up)) (VB b))", "(S (ADVP (RP up)) (VB b))").matched == 2
    params = dataclasses.replace(Params.collins(), eq_words=(("This", "this"),))
    assert one("(S (X This) (Y b))", "(S (X this) (Y b))", params).status == 0
    assert one("(S (X This) (Y b))", "(S (X this) (Y b))").status == 1


def test_length_counts_deleted_punctuation_but_not_traces() -> None:
    r = one("(S (NP (NN a)) (, ,) (-NONE- *) (VP (VB b)) (. .))", "(S (NP (NN a)) (VP (VB b)))")
    assert (r.length, r.words, r.status) == (4, 2, 0)


def test_errors_and_skips_are_left_out_of_the_totals() -> None:
    ev = evaluate(["(S (A a) (B b))"] * 4, ["(S (A a) (B b))", "(S (A a))", "", "(S (A a) (B c))"])
    assert [s.status for s in ev.sentences] == [0, 1, 2, 1]
    assert (ev.all.valid_sentences, ev.all.error_sentences, ev.all.skip_sentences) == (1, 2, 1)
    assert ev.stderr() == "2 : Length unmatch (2|1)\n4 : Words unmatch (b|c)\n"
    assert f1(["(S (A a) (B b))"] * 2, ["(S (A a) (B b))", "(S (A a))"]) == (100.0, 100.0)


def parse_cli(gold: list[str], test: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`aiayn parse --gold G --test T` (COLLINS.prm) on files of these lines: its output and exit status."""
    (tmp_path / "g.tree").write_text("".join(x + "\n" for x in gold))
    (tmp_path / "t.tree").write_text("".join(x + "\n" for x in test))
    files = ["--gold", str(tmp_path / "g.tree"), "--test", str(tmp_path / "t.tree")]
    return run_aiayn("parse", *files, text=True)


def test_parse_cli_reports_errors_on_stderr_and_an_abort_with_status_1(tmp_path: Path) -> None:
    """As the C evalb: every error sentence's line on stderr; under MAX_ERROR 10 the 12th error stops the
    run with status 1 and no summary (the C program's output: test_max_error_and_malformed_lines_stop_like_c)."""
    gold, wrong = ["(S (A a) (B b))"] * 15, ["(S (A a) (B c))"] * 15
    p = parse_cli(gold, gold[:13] + wrong[13:], tmp_path)  # two errors: scored, with the totals
    assert p.returncode == 0 and "=== Summary ===" in p.stdout, p
    assert p.stderr == "14 : Words unmatch (b|c)\n15 : Words unmatch (b|c)\n"
    p = parse_cli(gold, wrong, tmp_path)
    assert p.returncode == 1, p
    assert p.stderr.splitlines() == [f"{i} : Words unmatch (b|c)" for i in range(1, 13)]
    assert "Summary" not in p.stdout and len(p.stdout.splitlines()) == 3 + 11  # the head, then 11 sentences


@settings(deadline=None)  # a dozen pairs per example: slow on a loaded machine
@given(batch=st.lists(pairs(), min_size=1, max_size=12), width=st.integers(1, 6))
def test_length_buckets_partition_the_totals(batch: list[tuple[Tree, Tree]], width: int) -> None:
    """Every sentence falls in exactly one bucket, so the buckets' counts add up to the totals."""
    gold, test = [show(g) for g, _ in batch], [show(t) for _, t in batch]
    ev = evaluate(gold, test, dataclasses.replace(Params.collins(), max_error=None))
    buckets = ev.by_length(width)
    assert [start for start, _ in buckets] == sorted({s.length // width * width for s in ev.sentences})
    for name in ("sentences", "error_sentences", "matched", "gold_brackets", "test_brackets", "words"):
        assert sum(getattr(t, name) for _, t in buckets) == getattr(ev.all, name), name
    assert [n for _, n, _ in f1_by_length(scoring(gold, test), width)] == [t.valid_sentences for _, t in buckets]


def test_f1_by_length_tells_short_sentences_from_long_ones() -> None:
    short = "(S (NP (DT The) (NN dog)) (VP (VBZ runs)))"
    long_gold = "(S (NP (DT The) (NN dog) (PP (IN with) (NP (DT a) (NN hat)))) (VP (VBZ runs) (ADVP (RB fast))))"
    long_test = "(S (NP (DT The) (NN dog)) (PP (IN with) (NP (DT a) (NN hat) (VBZ runs))) (ADVP (RB fast)))"
    got = f1_by_length(scoring([short, long_gold], [short, long_test]), width=5)
    assert [(start, n) for start, n, _ in got] == [(0, 1), (5, 1)]  # 3 words; 7 words
    assert got[0][2] == 100.0 and 0.0 < got[1][2] < 100.0
    with pytest.raises(AiaynError, match="width"):
        evaluate([short], [short]).by_length(0)


def test_quote_fix_reinserts_a_deleted_quote() -> None:
    """The 2006 fix: '' (deleted) in gold, POS (kept) in the test, for the same word "'"."""
    gold = "(S (NP (NNS dogs) ('' ')) (VP (VB run)))"
    test = "(S (NP (NNS dogs) (POS ')) (VP (VB run)))"
    assert one(gold, test).status == 1  # COLLINS.prm has no QUOTE_LABEL: a length mismatch
    params = Params.parse(prm(EQ_LABEL=QUOTES_PRM))
    r = one(gold, test, params)
    assert (r.status, r.words, r.correct_tags, r.matched, r.gold_brackets) == (0, 3, 2, 3, 3)


def test_params_file_reading() -> None:
    p = Params.parse(
        "# comment\nX\nMAX_ERROR 7   \nLABELED 0\nDELETE_LABEL A B\nEQ_LABEL P Q R\nEQ_WORD a b\nCUTOFF_LEN 12x\n"
    )
    assert (p.max_error, p.labeled, p.cutoff_len) == (7, False, 12)
    assert p.delete_labels == ("A B",) and p.eq_labels == () and p.eq_words == (("a", "b"),)
    assert Params.parse("") == Params()


def test_read_trees_and_fgets_lines(tmp_path: Path) -> None:
    text = "( (S (NP-SBJ (NN a))\n\t(VP (VB b))) )\n\n(X (Y c))\n"
    assert read_trees(text) == ["( (S (NP-SBJ (NN a)) (VP (VB b))) )", "(X (Y c))"]
    with pytest.raises(AiaynError):
        read_trees("(S (A a)")
    with pytest.raises(AiaynError):
        read_trees("word (S (A a))")
    (tmp_path / "f").write_bytes(b"(A a)\r\n" + b"x" * 5000 + b"\n(B b)")
    assert read_evalb_lines(tmp_path / "f") == ["(A a)\r\n", "x" * 4999, "x\n", "(B b)"]


def test_f1_wants_as_many_trees_on_both_sides() -> None:
    with pytest.raises(AiaynError):
        f1(["(S (A a))"], [])
    assert f1(["(X a)"], ["(X a)"]) == (0.0, 0.0)  # EVALB prints -nan: nothing to score
    assert "Bracketing FMeasure       =   -nan" in evaluate(["(X a)"], ["(X a)"]).report()


# ---------------------------------------------------------------------------------------------------------
# the shared-data rule of tests/conftest.py

RULE_TESTS = """
import pytest
from conftest import shared_data


def test_forgets_the_mark():
    shared_data("evalb")


@pytest.mark.needs_shared
def test_marked_reads_it():
    assert (shared_data("evalb") / "evalb.c").read_text() == "int main;"


@pytest.mark.needs_shared
def test_marked_wants_what_is_not_there():
    shared_data("nothing-here")
"""


@pytest.mark.parametrize("ci", ["", "true"])
def test_shared_data_needs_the_mark_and_skips_or_fails_without_the_data(tmp_path: Path, ci: str) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(Path(__file__).with_name("conftest.py"), suite / "conftest.py")
    (suite / "test_new.py").write_text(RULE_TESTS)
    (tmp_path / "shared" / "evalb").mkdir(parents=True)
    (tmp_path / "shared" / "evalb" / "evalb.c").write_text("int main;")

    def run(shared: Path) -> str:
        env = {**os.environ, "AIAYN_SHARED_DATA": str(shared), "CI": ci, "PYTHONPATH": str(suite)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rfs", "test_new.py"]
        return subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=240).stdout

    out = run(tmp_path / "shared")
    assert "test_forgets_the_mark reads the shared reference data but is not marked needs_shared" in out, out
    assert ("2 failed, 1 passed" if ci else "1 failed, 1 passed, 1 skipped") in out, out
    out = run(tmp_path / "no-such-dir")  # no data at all: every marked test skips, or fails under CI
    assert ("1 failed, 2 errors" if ci else "1 failed, 2 skipped") in out, out  # CI: failed at setup
    assert "shared reference data" in out
