"""Constituency trees for parsing as translation (paper §6.3, after Vinyals et al., 2015, "Grammar as a
Foreign Language"): Penn Treebank bracket files, their standard cleaning, the linearised target a
sequence-to-sequence model learns, and its inverse, which turns any output into a tree.

Reading: PTB brackets, one tree over several lines or many trees on one line, with an unlabelled or a
`TOP`/`ROOT` root. Cleaning (what EVALB-scored parsing papers train and test on): `-NONE-` elements
and the constituents they leave empty are removed, function tags and indices are cut (`NP-SBJ-2` ->
`NP`, `PP-LOC=1` -> `PP`; `-LRB-`, `-NONE-` keep their names), unary chains of the same label are kept
as they are. CRAFT wraps some sentences in document-structure roots (`TITLE`, `HEADING`, `CAPTION`,
`CIT`); they say where a sentence stands in an article, not its syntax, so they are unwrapped: what
they hold goes directly under the tree's TOP root (EVALB deletes TOP, so it is never scored).

Linearisation: the source is the words; the target is the tree in prefix order with labelled open
brackets `(NP` and labelled close brackets `)NP`, each word replaced by its POS tag (`pos`, the
default), by one placeholder `XX` (`xx`, Vinyals et al.'s choice) or kept (`words`). The inverse
(`delinearize`) never fails: brackets are balanced, words are attached left to right, missing ones
appended and extra leaves dropped, so every output is a tree over exactly the input's words.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.config import DataConfig
from aiayn.data.errors import DataError
from aiayn.data.io import read_lines

LEAF_MODES = ("pos", "xx", "words")
PARSE_META = "parse.json"  # in a parse run: {"leaves": ..., "markup": [...]}, how its targets were linearised
PLACEHOLDER = "XX"
ROOT = "TOP"
MAX_DEPTH = 100  # constituents in a decoded tree at most (CRAFT's deepest: 29), see delinearize
# CRAFT's document-structure wrappers around a sentence's tree
WRAPPERS = frozenset({"TITLE", "HEADING", "CAPTION", "CIT"})
# Only ASCII whitespace separates tokens (as in EVALB, which reads bytes): CRAFT's words may hold
# Unicode spaces (e.g. U+200A in "Xpd\u200aTTD"), which str.split() would cut.
_TOKEN = re.compile(r"\(|\)|[^ \t\n\r\f\v()]+")
_SPACES = re.compile(r"[ \t\n\r\f\v]+")


@dataclass
class Tree:
    """A constituent: its label and its children; a preterminal has one child, the word (a str)."""

    label: str
    children: list[Tree | str] = field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self) -> list[tuple[str, str]]:
        """(POS tag, word) of every word, left to right."""
        if self.is_preterminal:
            return [(self.label, str(self.children[0]))]
        return [leaf for c in self.children if isinstance(c, Tree) for leaf in c.leaves()]

    def words(self) -> list[str]:
        return [w for _, w in self.leaves()]

    def __str__(self) -> str:
        """One line of PTB brackets: `(TOP (S (NP (DT The) (NN dog)) (VP (VBZ runs))))`."""
        if self.is_preterminal:
            return f"({self.label} {self.children[0]})"
        return f"({self.label} {' '.join(str(c) for c in self.children)})"


def read_trees(text: str, source: str = "<text>") -> Iterator[Tree]:
    """Every tree of PTB bracket text (one tree may span lines; an unlabelled root is named TOP).
    A bracket that does not close, or closes nothing, is one DataError naming `source` and its line."""

    def line(at: int) -> int:  # counted only for an error: per token it was most of the reading time
        return text.count("\n", 0, at) + 1

    stack: list[tuple[Tree, int]] = []  # open constituents, with where each opened
    pending_label = False
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok == "(":
            if pending_label:  # "( (" : the previous bracket has no label
                stack[-1][0].label = ROOT if len(stack) == 1 else ""
            stack.append((Tree(""), m.start()))
            pending_label = True
        elif tok == ")":
            if not stack:
                raise DataError(f"{source}:{line(m.start())}: ')' closes no bracket")
            if pending_label:
                raise DataError(f"{source}:{line(m.start())}: empty bracket '()'")
            tree, _ = stack.pop()
            if not tree.children:
                raise DataError(f"{source}:{line(m.start())}: constituent ({tree.label}) has no children")
            if stack:
                stack[-1][0].children.append(tree)
            else:
                yield tree
        else:
            if not stack:
                raise DataError(f"{source}:{line(m.start())}: {tok!r} outside any bracket")
            if pending_label:
                stack[-1][0].label = tok
                pending_label = False
            else:
                parent = stack[-1][0]
                if parent.children:
                    raise DataError(
                        f"{source}:{line(m.start())}: word {tok!r} beside constituents in ({parent.label} ...)"
                    )
                parent.children.append(tok)
    if stack:
        raise DataError(f"{source}:{line(stack[0][1])}: bracket opened here is never closed")


def split_words(line: str) -> list[str]:
    """The tokens of a line separated by ASCII whitespace (a sentence's words, a linearised tree)."""
    return [w for w in _SPACES.split(line) if w]


def parse_tree(s: str, source: str = "<text>") -> Tree:
    """The one tree in `s`."""
    trees = list(read_trees(s, source))
    if len(trees) != 1:
        raise DataError(f"{source}: expected one tree, found {len(trees)}")
    return trees[0]


@functools.lru_cache(maxsize=4096)  # a treebank has a few hundred labels and a million constituents
def base_label(label: str) -> str:
    """`NP-SBJ-2` -> `NP`, `PP-LOC=1` -> `PP`, `-NONE-` and `-LRB-` as they are."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


def clean(tree: Tree) -> Tree | None:
    """The tree as parsers train and are scored on: rooted at TOP with its sentence's label below,
    no empty elements, no constituents left empty by them, labels without function tags or indices,
    CRAFT's wrappers unwrapped. None when nothing is left (a tree of empty elements only)."""

    def strip(t: Tree) -> Tree | None:
        if t.is_preterminal:
            return None if t.label == "-NONE-" else Tree(base_label(t.label), list(t.children))
        kids = [k for k in (strip(c) for c in t.children if isinstance(c, Tree)) if k is not None]
        return Tree(base_label(t.label), list(kids)) if kids else None

    inner = [c for c in tree.children if isinstance(c, Tree)] if tree.label in (ROOT, "ROOT", "") else [tree]
    kept = [k for k in (strip(c) for c in inner) if k is not None]
    while len(kept) == 1 and kept[0].label in WRAPPERS and not kept[0].is_preterminal:
        kept = [c for c in kept[0].children if isinstance(c, Tree)]
    return Tree(ROOT, list(kept)) if kept else None


# -- linearisation -------------------------------------------------------------------------------


def linearize(tree: Tree, leaves: str = "pos") -> str:
    """The target sequence of `tree` (cleaned, TOP root): `(S (NP NN )NP (VP VBZ )VP . )S` for `pos`."""
    if leaves not in LEAF_MODES:
        raise DataError(f"leaves must be one of {', '.join(LEAF_MODES)}, not {leaves!r}")
    out: list[str] = []

    def walk(t: Tree) -> None:
        if t.is_preterminal:
            out.append(t.label if leaves == "pos" else PLACEHOLDER if leaves == "xx" else str(t.children[0]))
            return
        out.append(f"({t.label}")
        for c in t.children:
            if isinstance(c, Tree):
                walk(c)
        out.append(f"){t.label}")

    for c in tree.children if tree.label == ROOT else [tree]:
        if isinstance(c, Tree):
            walk(c)
    return " ".join(out)


def markup_tokens(tree_lines: Iterable[str], leaves: str = "pos") -> list[str]:
    """The markup of linearised targets, sorted: every bracket (`(NP`, `)NP`) and, unless the leaves are
    words, every leaf token (POS tags, `XX`). The joint BPE keeps each whole (parse task), and
    constrained decoding (aiayn.decode.parser.TreeConstraint) tells brackets from leaves by them."""
    found: set[str] = set()
    for line in tree_lines:
        found.update(t for t in split_words(line) if leaves != "words" or t[0] in "()")
    return sorted(found)


def delinearize(target: str | Sequence[str], words: Sequence[str], leaves: str = "pos") -> Tree:
    """A tree over exactly `words` from any token sequence (a model's output, however broken).

    Open brackets `(X` start a constituent; `)X` or `)` close the innermost open one (a stray close
    is ignored); any other token is a leaf that takes the next word (its POS tag is the token itself
    in `pos` mode, else `XX`); leaves past the last word are dropped; words left over are attached at
    the end of the outermost open constituent (or the root) as `XX` leaves; constituents with no word
    are removed; open constituents are closed at the end. Constituents nested deeper than MAX_DEPTH
    (a treebank's trees stay far below it; a model's output need not) are not opened, and the close
    that would end one is skipped with it, so the tree's own functions, which recurse, stay within
    Python's recursion limit."""
    tokens = split_words(target) if isinstance(target, str) else list(target)
    root = Tree(ROOT)
    stack = [root]
    deep = 0  # opens past MAX_DEPTH not made, whose closes are still to come
    i = 0
    for tok in tokens:
        if tok.startswith("(") and len(tok) > 1:
            if len(stack) > MAX_DEPTH:
                deep += 1
                continue
            node = Tree(tok[1:])
            stack[-1].children.append(node)
            stack.append(node)
        elif tok.startswith(")"):
            if deep:
                deep -= 1
            elif len(stack) > 1:
                stack.pop()
        elif i < len(words):
            # a tag holding a bracket would not read back as a tree: such a leaf is a placeholder
            tag = tok if leaves == "pos" and "(" not in tok and ")" not in tok else PLACEHOLDER
            stack[-1].children.append(Tree(tag, [words[i]]))
            i += 1
    if i < len(words):
        host = stack[1] if len(stack) > 1 else root
        host.children.extend(Tree(PLACEHOLDER, [w]) for w in words[i:])
    pruned = _prune(root)
    return pruned if pruned is not None else Tree(ROOT)


def retag(tree: Tree, tags: Sequence[str]) -> Tree:
    """A copy of `tree` whose preterminals carry `tags`, left to right (as many as it has words)."""
    it = iter(tags)

    def walk(t: Tree) -> Tree:
        if t.is_preterminal:
            return Tree(next(it, t.label), list(t.children))
        return Tree(t.label, [walk(c) for c in t.children if isinstance(c, Tree)])

    return walk(tree)


def _prune(t: Tree) -> Tree | None:
    if t.is_preterminal:
        return t
    kids = [k for k in (_prune(c) for c in t.children if isinstance(c, Tree)) if k is not None]
    return Tree(t.label, list(kids)) if kids else None


def pretty(tree: Tree, indent: int = 2) -> str:
    """The tree over several lines, one constituent a line, preterminals kept on their parent's line
    when they are all it holds."""
    lines: list[str] = []

    def walk(t: Tree, depth: int) -> None:
        pad = " " * (indent * depth)
        if t.is_preterminal or all(isinstance(c, Tree) and c.is_preterminal for c in t.children):
            lines.append(pad + str(t))
            return
        lines.append(f"{pad}({t.label}")
        for c in t.children:
            if isinstance(c, Tree):
                walk(c, depth + 1)
        lines[-1] += ")"

    walk(tree, 0)
    return "\n".join(lines)


# -- corpora --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Trees hold no reference cycles, so reference counting frees them; the cyclic collector would
    only walk the millions of young objects a treebank makes, again and again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def clean_trees(text: str, source: str = "<text>") -> list[Tree]:
    """The cleaned trees of PTB bracket text; trees that clean to nothing are left out."""
    with _no_cycle_collection():
        return [t for t in (clean(x) for x in read_trees(text, source)) if t is not None]


def read_tree_file(path: str | Path) -> list[Tree]:
    """The cleaned trees of a PTB bracket file (plain or gzipped)."""
    return clean_trees("\n".join(read_lines(path)), str(path))


def craft_splits(directory: Path) -> dict[str, list[Tree]]:
    """The cleaned trees of CRAFT's splits (train / valid / test), articles in the split file's order."""
    from aiayn.data import craft

    return {
        split: [t for name, text in texts for t in clean_trees(text, name)]
        for split, texts in craft.articles(directory).items()
    }


def wsj_sections(ptb_root: str | Path) -> dict[str, list[Path]]:
    """The standard WSJ split of LDC99T42 (`parsed/mrg/wsj/NN/*.mrg` under `ptb_root`, or the `wsj/`
    directory itself): train 02-21, valid 22, test 23."""
    root = Path(ptb_root)
    for base in (root / "parsed" / "mrg" / "wsj", root / "mrg" / "wsj", root / "wsj", root):
        if (base / "23").is_dir():
            break
    else:
        raise DataError(f"no WSJ sections under {root} (expected parsed/mrg/wsj/00 ... 24 with *.mrg files)")
    split = {"train": [f"{s:02d}" for s in range(2, 22)], "valid": ["22"], "test": ["23"]}
    out = {name: sorted(p for s in sections for p in (base / s).glob("*.mrg")) for name, sections in split.items()}
    for name, files in out.items():
        if not files:
            raise DataError(f"WSJ {name} sections {split[name]} have no .mrg files under {base}")
    return out


def trees_of(files: Iterable[str | Path]) -> list[Tree]:
    return [t for f in files for t in read_tree_file(f)]


def write_parallel(trees: dict[str, list[Tree]], out: Path, leaves: str = "pos") -> dict[str, str]:
    """Each split as line-aligned files in `out`: `<split>.words` (the source), `<split>.tree` (the
    linearised target) and `<split>.gold` (the cleaned tree, one a line, for EVALB). Written into a
    temporary directory and published by one rename; an existing `out` is kept (same key, same text).
    Returns the files as DataConfig's train_src / train_tgt / ... fields."""
    names = {f"{s}_{side}": str(out / f"{s}.{ext}") for s in trees for side, ext in (("src", "words"), ("tgt", "tree"))}
    if out.is_dir():
        return names
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for split, ts in trees.items():
            (tmp / f"{split}.words").write_text("".join(" ".join(t.words()) + "\n" for t in ts))
            (tmp / f"{split}.tree").write_text("".join(linearize(t, leaves) + "\n" for t in ts))
            (tmp / f"{split}.gold").write_text("".join(str(t) + "\n" for t in ts))
        try:
            os.replace(tmp, out)
        except OSError:  # another process published the same files first
            if not out.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return names


def _stat_key(paths: Iterable[Path]) -> str:
    """A key from the files' names, sizes and modification times (their contents are not read)."""
    h = hashlib.sha256()
    for p in paths:
        st = p.stat()
        h.update(f"{p.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def corpus_trees(data: DataConfig, ptb_root: str | None = None) -> tuple[str, Callable[[], dict[str, list[Tree]]]]:
    """The treebank a parse run reads, as (a key naming exactly that text, a loader of its cleaned trees
    by split: train / valid / test). `craft`: the CRAFT v5 corpus (data.data_dir, $AIAYN_CRAFT_DIR,
    the cache or a download); `wsj`: LDC99T42 under `ptb_root` (task.ptb_root); `trees`: bracket files named by
    data.train_src / valid_src / test_src (test optional)."""
    if data.corpus == "craft":
        from aiayn.data import craft

        directory = craft.locate(data.data_dir)

        def load_craft() -> dict[str, list[Tree]]:
            craft.verify(directory)
            return craft_splits(directory)

        return f"craft-{craft.DIGEST[:16]}", load_craft
    if data.corpus == "wsj":
        if not ptb_root:
            raise DataError("data.corpus wsj needs task.ptb_root: the LDC99T42 directory (parsed/mrg/wsj/NN/*.mrg)")
        sections = wsj_sections(ptb_root)
        key = _stat_key(p for files in sections.values() for p in files)
        return f"wsj-{key}", lambda: {split: trees_of(files) for split, files in sections.items()}
    if data.corpus == "trees":
        named = {"train": data.train_src, "valid": data.valid_src, "test": data.test_src}
        if not named["train"] or not named["valid"]:
            raise DataError("data.corpus trees needs data.train_src and data.valid_src: bracketed tree files")
        files = {split: Path(f) for split, f in named.items() if f}
        for split, f in files.items():
            if not f.is_file():
                raise DataError(f"{split} tree file not found: {f}")
        return f"trees-{_stat_key(files.values())}", lambda: {split: read_tree_file(f) for split, f in files.items()}
    raise DataError(f"task parse reads a treebank: data.corpus craft | wsj | trees, not {data.corpus!r}")


def treebank_dir(
    data: DataConfig, leaves: str, ptb_root: str | None = None
) -> tuple[Path, Callable[[], dict[str, list[Tree]]]]:
    """Where a parse run's treebank is kept as parallel text ($AIAYN_HOME/treebank/<corpus key>-<leaves>:
    `<split>.words`, `.tree`, `.gold`), and the loader of its trees (called only to write it)."""
    from aiayn.data.download import aiayn_home

    key, load = corpus_trees(data, ptb_root)
    return aiayn_home() / "treebank" / f"{key}-{leaves}", load
