"""EVALB in pure Python: constituency bracket scoring exactly as `evalb.c` (Sekine & Collins 1997, the
2006 bug-fix version by David Ellis) scores it, for English constituency parsing (paper §6.3). Torch-free.

The C program is the authority; this is a port of its reading and scoring, not a reimplementation of
the idea, so every number and every line of its standard output comes out the same (tests/test_evalb.py
builds the C program and compares the two on real CRAFT trees). What is ported, by EVALB README section:

- [2]/[3] running: `evaluate(gold, test, params)` is `evalb -p params gold test`; `evaluate_files` reads
  the files as the C program does (`fgets` into a 5000-byte buffer: one line, or 4999-byte pieces of a
  longer one); `Evaluation.report()` is its standard output and `Evaluation.stderr()` its error messages.
- [4] output: the per-sentence table and the `=== Summary ===` for all sentences and for length <=
  CUTOFF_LEN, with C's printf rounding (Python's %-formatting rounds the same exact binary value the
  same way) and the "Bracketing FMeasure" line that the 2006 version added (printed `-nan`, as glibc on
  x86-64 prints 0.0/0.0, when no bracket was scored at all).
- [6] the parameter file: `Params.parse`/`Params.read` read a .prm file as `read_parameter_file` does
  (first word the key, the rest of the line the value); `Params.collins()` is COLLINS.prm.
- [7].1 DELETE_LABEL: a preterminal with a deleted label is dropped with its word (so it is neither
  scored nor counted as a word); a bracket whose label (after [7].2) is deleted is not scored; a bracket
  that spans no word once those words are gone (e.g. one holding only -NONE- traces) is not scored.
- [7].2 labels of brackets are cut at their first '-' or '=' (NP-SBJ-1 -> NP, NP=2 -> NP). As in the C
  code this happens at *any* position, the first included: a bracket labelled -NONE- becomes the empty
  label. Preterminal (POS) labels are never cut: they are matched whole, so -NONE-, -LRB- stay intact.
- [7].3 tagging accuracy over the words that remain; POS brackets are never scored as brackets.
- [7].4 sentence length (for the CUTOFF_LEN statistics) counts every word whose POS is not in
  DELETE_LABEL_FOR_LENGTH, deleted punctuation included; it is taken from the gold tree.
- [7].5 duplicate brackets match one to one: each gold bracket, in order, takes the first unmatched test
  bracket with the same span and an equal label (EQ_LABEL pairs are equal, both ways).
- the 2006 bug fix (README top): with QUOTE_LABEL lines, a quote-like word (' " /) whose tag is deleted
  on one side but not on the other is put back where it was, so the lengths agree again. COLLINS.prm has
  no QUOTE_LABEL line: under it, ('' ') in gold against (POS ') in the test is still a length mismatch.
- errors: a length or word mismatch makes a sentence an error sentence (status 1), an empty test line a
  skipped one (status 2); both are printed and left out of the totals. MAX_ERROR: as `evalb.c`, the run
  stops (no summary, `Evaluation.aborted`) at the error after MAX_ERROR + 1 errors.

Worth knowing when reading EVALB's numbers: the unlabeled root of "( (S ...) )" is a bracket labelled ""
that COLLINS.prm does not delete, so it is scored (give both sides the same root, or TOP); a test tree
with a word where a bracket belongs ("(NP a b)") makes EVALB call Error() until it exits; only C's six
ASCII spaces separate tokens (CRAFT has U+00A0, U+2009, U+200A inside words).

Not reproduced: DEBUG output (`-d`, `DEBUG 1`), and what the C program does past its fixed arrays (more
than 200 words or brackets in a sentence, labels of 30 or words of 100 bytes or more, 20 quote terms):
it overruns them, this port has no limits. A ')' with no open bracket is undefined behaviour in C; here
it is an error sentence.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiayn.errors import AiaynError

log = logging.getLogger(__name__)

__all__ = [
    "Evaluation",
    "Params",
    "SentenceResult",
    "Totals",
    "evaluate",
    "evaluate_files",
    "f1",
    "read_evalb_lines",
    "read_trees",
]

# C's isspace() in the "C" locale. Python's str.isspace() also takes Unicode spaces (U+00A0, U+2009...)
# that evalb.c treats as parts of a word.
_C_SPACE = " \t\n\v\f\r"
_SPACES = re.compile(r"[ \t\n\v\f\r]*")
_TOKEN = re.compile(r"[^ \t\n\v\f\r()]*")  # a label or a word: up to the next space or bracket
_FGETS_BUFFER = 5000  # main()'s `fgets(buff, 5000, fd)`: at most 4999 bytes a read
_QUOTE_WORDS = ("'", '"', "/")  # is_quote_term(): the words the 2006 fix may reinsert

HEADER = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
    "============================================================================\n"
)
_RULE = "============================================================================\n"


def _printf(fmt: str, *args: object) -> str:
    """printf with evalb.c's own format strings, copied verbatim so that they can be checked against it."""
    return fmt % args


def _atoi(s: str) -> int:
    """C's atoi: leading spaces, an optional sign, digits; 0 if none."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", s)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class Params:
    """An EVALB parameter (.prm) file (README [6]) plus the command-line settings -c and -e.

    `labeled` is LABELED (0: spans only); `delete_labels` DELETE_LABEL; `delete_labels_for_length`
    DELETE_LABEL_FOR_LENGTH; `quote_labels` QUOTE_LABEL (the 2006 fix); `eq_labels`/`eq_words` EQ_LABEL /
    EQ_WORD pairs; `max_error` MAX_ERROR (None: never stop); `cutoff_len` CUTOFF_LEN; `debug` DEBUG
    (read, but its output is not reproduced).
    """

    debug: int = 0
    max_error: int | None = 10
    cutoff_len: int = 40
    labeled: bool = True
    delete_labels: tuple[str, ...] = ()
    delete_labels_for_length: tuple[str, ...] = ()
    quote_labels: tuple[str, ...] = ()
    eq_labels: tuple[tuple[str, str], ...] = ()
    eq_words: tuple[tuple[str, str], ...] = ()

    @classmethod
    def collins(cls) -> Params:
        """COLLINS.prm, the setting of Collins (1997) and of every published PTB parsing F1."""
        return cls(
            max_error=10,
            cutoff_len=40,
            labeled=True,
            delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
            delete_labels_for_length=("-NONE-",),
            eq_labels=(("ADVP", "PRT"),),
        )

    @classmethod
    def read(cls, path: str | Path) -> Params:
        """A .prm file, read as `read_parameter_file` reads it."""
        try:
            text = Path(path).read_bytes().decode("utf-8", "surrogateescape")
        except OSError as e:
            raise AiaynError(f"can't open parameter file {path}: {e.strerror}") from e
        return cls.parse(text)

    @classmethod
    def parse(cls, text: str) -> Params:
        """The text of a .prm file. As in `read_parameter_file`/`set_param`: trailing spaces are cut; a line
        starting with '#' or shorter than 3 characters is skipped; the first word is the key (an exact
        match), the rest of the line after the spaces that follow it is the value, whole (so a
        DELETE_LABEL value may even hold spaces); numbers are read with atoi; EQ_LABEL / EQ_WORD need
        exactly two words. An unknown key or a malformed pair is ignored, as EVALB ignores it after a
        warning on stderr (logged here)."""
        numbers: dict[str, int] = {}
        lists: dict[str, list[str]] = {"DELETE_LABEL": [], "DELETE_LABEL_FOR_LENGTH": [], "QUOTE_LABEL": []}
        pairs: dict[str, list[tuple[str, str]]] = {"EQ_LABEL": [], "EQ_WORD": []}
        for number, raw in enumerate(text.split("\n"), 1):  # fgets: lines end at '\n' only
            # `for(i=strlen(buff)-1; i>0 && isspace(buff[i]); i--)`: never the first character
            line = raw[:1] + raw[1:].rstrip(_C_SPACE)
            if line.startswith("#") or len(line) < 3:
                continue
            key_end = 0
            while key_end < len(line) and line[key_end] not in _C_SPACE:
                key_end += 1
            key, value = line[:key_end], line[key_end:].lstrip(_C_SPACE)
            if not value:
                log.warning("Empty value in parameter file (%d)", number)
            if key in ("DEBUG", "MAX_ERROR", "CUTOFF_LEN", "LABELED"):
                numbers[key] = _atoi(value)
            elif key in lists:
                lists[key].append(value)
            elif key in pairs:
                words = value.split()
                if len(words) != 2:
                    log.warning("%s requires two values", key)
                    continue
                pairs[key].append((words[0], words[1]))
            else:
                log.warning("Unknown keyword (%s) in parameter file", line)
        return cls(
            debug=numbers.get("DEBUG", 0),
            max_error=numbers.get("MAX_ERROR", 10),
            cutoff_len=numbers.get("CUTOFF_LEN", 40),
            labeled=numbers.get("LABELED", 1) != 0,  # C tests `F_label==0`: any other number is labeled
            delete_labels=tuple(lists["DELETE_LABEL"]),
            delete_labels_for_length=tuple(lists["DELETE_LABEL_FOR_LENGTH"]),
            quote_labels=tuple(lists["QUOTE_LABEL"]),
            eq_labels=tuple(pairs["EQ_LABEL"]),
            eq_words=tuple(pairs["EQ_WORD"]),
        )


class _Abort(Exception):
    """EVALB's `exit(1)` in Error(): more than MAX_ERROR errors."""


class _Errors:
    """Error(): every call prints "LINE : message" on stderr, marks the sentence as an error (status 1),
    and `if(Error_count++ > Max_error) exit(1)`, so the run stops at error number MAX_ERROR + 2."""

    def __init__(self, max_error: int | None) -> None:
        self.max_error = max_error
        self.messages: list[str] = []

    def __call__(self, line: int, message: str) -> None:
        self.messages.append(f"{line} : {message}")
        if self.max_error is not None and len(self.messages) - 1 > self.max_error:
            raise _Abort


@dataclass
class _Bracket:
    start: int
    end: int
    label: str
    result: int = 9  # as bracket[].result: 0 unmatched, 1 matched, 5 deleted (not scored)


@dataclass
class _QuoteTerm:
    """s_term_ind: a quote-like terminal remembered for the 2006 fix, with where it would go back."""

    word: str
    label: str
    index: int  # its word position (the next word's, had its tag been deleted)
    bracket: int  # brackets opened before it: those from here on start after it
    ends: tuple[int, ...]  # the brackets open around it: they end after it


@dataclass
class _Sentence:
    terminals: list[tuple[str, str]]  # (word, POS) of the words that remain after DELETE_LABEL
    brackets: list[_Bracket]
    length: int  # words not in DELETE_LABEL_FOR_LENGTH (deleted punctuation counts)
    quotes: list[_QuoteTerm]


def _read_line(buff: str, params: Params, line: int, error: _Errors) -> _Sentence:
    """read_line(): one tree as EVALB reads it, character by character in the same order, so that a tree
    EVALB misreads is misread the same way (e.g. "(NP a b)" is an error; "(X )" is a word "" tagged X;
    the unlabeled root of "( (S ...) )" is a bracket labelled "" that is scored)."""
    terminals: list[tuple[str, str]] = []
    brackets: list[_Bracket] = []
    quotes: list[_QuoteTerm] = []
    stack: list[int] = []
    length = 0
    n, p = len(buff), 0
    while p < n:
        c = buff[p]
        if c in _C_SPACE:
            p += 1
        elif c == "(":
            m = _TOKEN.match(buff, p + 1)
            assert m is not None  # the pattern matches the empty string
            label, p = m.group(), m.end()
            if p < n and buff[p] in _C_SPACE:
                q = _SPACES.match(buff, p).end()  # type: ignore[union-attr]
                m = _TOKEN.match(buff, q)
                assert m is not None
                word, q = m.group(), m.end()
                closes = q < n and buff[q] == ")"
                if closes and label not in params.delete_labels_for_length:
                    length += 1
                if closes and label in params.quote_labels and word in _QUOTE_WORDS:
                    quotes.append(_QuoteTerm(word, label, len(terminals), len(brackets), tuple(stack)))
                if closes:
                    # is_deletelabel() compares the whole tag: POS tags are never cut at '-'
                    if label not in params.delete_labels:
                        terminals.append((word, label))
                    p = q + 1
                    continue
                if q >= n or buff[q] != "(":
                    error(line, "More than two elements in a bracket")
                    # and, as in C, it carries on: the label opens a bracket, and reading resumes at the word
            stack.append(len(brackets))
            brackets.append(_Bracket(len(terminals), -1, label))
        elif c == ")":
            if not stack:  # C reads stack[-1] here: undefined; an error sentence instead
                error(line, "Bracketing unbalance (too many close bracket)")
                p += 1
                continue
            brackets[stack.pop()].end = len(terminals)
            p += 1
        else:
            # EVALB calls Error("Reading sentence") without moving on, again and again, until it exits.
            error(line, "Reading sentence")
            while error.max_error is not None:
                error(line, "Reading sentence")
            break  # no MAX_ERROR to stop at: the sentence is an error, the rest of the line unread
    if stack:
        error(line, "Bracketing is unbalanced (too many open bracket)")
    return _Sentence(terminals, brackets, length, quotes)


@dataclass(frozen=True)
class SentenceResult:
    """One line of EVALB's table (README [4]). `status`: 0 scored, 1 error (length or word mismatch, bad
    brackets), 2 skipped (the test tree has no words). `recall`/`precision`/`tag_accuracy` are percentages
    as printed (0.0 when there is nothing to divide by). An error sentence shows the counts EVALB shows
    (zeros after a length or word mismatch) but is left out of the totals."""

    id: int
    length: int
    status: int
    matched: int
    gold_brackets: int
    test_brackets: int
    cross_brackets: int
    words: int
    correct_tags: int

    @property
    def recall(self) -> float:
        return 0.0 if self.gold_brackets == 0 else 100.0 * self.matched / self.gold_brackets

    @property
    def precision(self) -> float:
        return 0.0 if self.test_brackets == 0 else 100.0 * self.matched / self.test_brackets

    @property
    def tag_accuracy(self) -> float:
        return 0.0 if self.words == 0 else 100.0 * self.correct_tags / self.words

    def line(self) -> str:
        """individual_result()'s printf, with its trailing newline."""
        return (
            _printf("%4d  %3d    %d  ", self.id, self.length, self.status)
            + _printf(
                "%6.2f %6.2f   %3d    %3d  %3d    %3d",
                self.recall,
                self.precision,
                self.matched,
                self.gold_brackets,
                self.test_brackets,
                self.cross_brackets,
            )
            + _printf("   %4d  %4d   %6.2f\n", self.words, self.correct_tags, self.tag_accuracy)
        )


def _fmt(x: float) -> str:
    # printf("%6.2f") of 0.0/0.0 on x86-64 glibc: the SSE default NaN has its sign bit set
    return "  -nan" if math.isnan(x) else _printf("%6.2f", x)


@dataclass
class Totals:
    """The TOTAL_* (all sentences) or TOT40_* (length <= CUTOFF_LEN) counters of evalb.c, and the summary
    figures computed from them as `print_total` computes them."""

    sentences: int = 0
    error_sentences: int = 0
    skip_sentences: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    matched: int = 0
    complete: int = 0
    words: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less_crossing: int = 0
    correct_tags: int = 0

    def add(self, s: SentenceResult) -> None:
        self.sentences += 1
        if s.status == 1:
            self.error_sentences += 1
        elif s.status == 2:
            self.skip_sentences += 1
        else:
            self.gold_brackets += s.gold_brackets
            self.test_brackets += s.test_brackets
            self.matched += s.matched
            self.complete += s.gold_brackets == s.test_brackets == s.matched
            self.words += s.words
            self.crossing += s.cross_brackets
            self.no_crossing += s.cross_brackets == 0
            self.two_or_less_crossing += s.cross_brackets <= 2
            self.correct_tags += s.correct_tags

    @property
    def valid_sentences(self) -> int:
        return self.sentences - self.error_sentences - self.skip_sentences

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets > 0 else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets > 0 else 0.0

    @property
    def fmeasure(self) -> float:
        """`2*p*r/(p+r)` on the percentages; NaN (EVALB prints -nan) when both are 0."""
        p, r = self.precision, self.recall
        return math.nan if p + r == 0 else 2 * p * r / (p + r)

    def _per_sentence(self, count: int, scale: float) -> float:
        n = self.valid_sentences
        return scale * count / n if n > 0 else 0.0

    @property
    def complete_match(self) -> float:
        return self._per_sentence(self.complete, 100.0)

    @property
    def average_crossing(self) -> float:
        return self._per_sentence(self.crossing, 1.0)

    @property
    def no_crossing_pct(self) -> float:
        return self._per_sentence(self.no_crossing, 100.0)

    @property
    def two_or_less_crossing_pct(self) -> float:
        return self._per_sentence(self.two_or_less_crossing, 100.0)

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words > 0 else 0.0

    def summary(self, title: str) -> str:
        """One block of `=== Summary ===`."""
        rows = [
            ("Number of sentence", _printf("%6d", self.sentences)),
            ("Number of Error sentence ", _printf("%6d", self.error_sentences)),
            ("Number of Skip  sentence ", _printf("%6d", self.skip_sentences)),
            ("Number of Valid sentence ", _printf("%6d", self.valid_sentences)),
            ("Bracketing Recall", _fmt(self.recall)),
            ("Bracketing Precision", _fmt(self.precision)),
            ("Bracketing FMeasure", _fmt(self.fmeasure)),
            ("Complete match", _fmt(self.complete_match)),
            ("Average crossing", _fmt(self.average_crossing)),
            ("No crossing", _fmt(self.no_crossing_pct)),
            ("2 or less crossing", _fmt(self.two_or_less_crossing_pct)),
            ("Tagging accuracy", _fmt(self.tagging_accuracy)),
        ]
        return f"\n-- {title} --\n" + "".join(f"{name:<26}= {value}\n" for name, value in rows)


@dataclass
class Evaluation:
    """What one EVALB run computes: the per-sentence results, the two sets of totals, the messages it
    writes on stderr, and whether it stopped early (more than MAX_ERROR errors: then EVALB prints no
    totals and exits with status 1)."""

    params: Params
    sentences: list[SentenceResult] = field(default_factory=list)
    all: Totals = field(default_factory=Totals)
    cutoff: Totals = field(default_factory=Totals)
    errors: list[str] = field(default_factory=list)
    aborted: bool = False

    def report(self) -> str:
        """EVALB's standard output, byte for byte (print_head, individual_result, print_total)."""
        out = [HEADER, *(s.line() for s in self.sentences)]
        if self.aborted:
            return "".join(out)
        t = self.all
        out.append(_RULE)
        if t.gold_brackets > 0 and t.test_brackets > 0:
            out.append(
                _printf(
                    "                %6.2f %6.2f %6d %5d %5d  %5d",
                    *(t.recall, t.precision, t.matched, t.gold_brackets, t.test_brackets, t.crossing),
                )
            )
        out.append(_printf("  %5d %5d   %6.2f\n", t.words, t.correct_tags, t.tagging_accuracy))
        out.append("=== Summary ===\n")
        out.append(self.all.summary("All"))
        out.append(self.cutoff.summary(f"len<={self.params.cutoff_len}"))
        return "".join(out)

    def by_length(self, width: int = 10) -> list[tuple[int, Totals]]:
        """The totals of the sentences whose length (EVALB's: the gold words, deleted punctuation counted,
        traces not) falls in each bucket of `width` -> (the bucket's first length, its totals), ascending;
        buckets without a sentence are left out. Not an EVALB figure: where the brackets are lost."""
        if width < 1:
            raise AiaynError(f"width must be >= 1, got {width}")
        buckets: dict[int, Totals] = {}
        for s in self.sentences:
            buckets.setdefault(s.length // width * width, Totals()).add(s)
        return sorted(buckets.items())

    def stderr(self) -> str:
        """EVALB's error messages ("LINE : message"), one a line."""
        return "".join(m + "\n" for m in self.errors)


class _Scorer:
    def __init__(self, params: Params) -> None:
        self.params = params
        eq = set(params.eq_labels) | {(b, a) for a, b in params.eq_labels}
        self.eq_labels = eq
        self.eq_words = set(params.eq_words) | {(b, a) for a, b in params.eq_words}
        # massage_data() deletes a bracket whose label is label_comp()-equal to a DELETE_LABEL: EQ pairs count
        self.deleted = set(params.delete_labels) | {b for a, b in eq if a in params.delete_labels}

    def label_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels

    def score(self, line: int, gold: _Sentence, test: _Sentence, status: int, error: _Errors) -> SentenceResult:
        """calc_result(): `status` is 1 when reading either tree already called Error()."""
        wn1, wn2 = len(gold.terminals), len(test.terminals)

        def failed(status: int) -> SentenceResult:
            # individual_result(0,0,0,0,0,0): the printed bracket counts are r_bn1/r_bn2, still 0 here
            return SentenceResult(line, gold.length, status, 0, 0, 0, 0, 0, 0)

        if wn2 == 0:
            return failed(2)
        if wn1 != wn2:
            self.fix_quote(gold, test)
            wn1, wn2 = len(gold.terminals), len(test.terminals)
            if wn1 != wn2:
                error(line, f"Length unmatch ({wn1}|{wn2})")
                return failed(1)
        for (w1, _), (w2, _) in zip(gold.terminals, test.terminals):
            if w1 != w2 and (w1, w2) not in self.eq_words:
                error(line, f"Words unmatch ({w1}|{w2})")
                return failed(1)

        for b in (*gold.brackets, *test.brackets):  # massage_data()
            if b.start == b.end:  # spans no word (all deleted): not scored
                b.result = 5
                continue
            b.result = 0
            b.label = re.split("[-=]", b.label, maxsplit=1)[0]  # modify_label(): from the first - or =
            if b.label in self.deleted:
                b.result = 5
        gold_b = [b for b in gold.brackets if b.result != 5]
        test_b = [b for b in test.brackets if b.result != 5]

        # One to one, in C's order: each gold bracket takes the first unmatched test bracket of its span
        # whose label is equal (EQ_LABEL pairs need not be transitive, so the order is kept, not a count).
        by_span: dict[tuple[int, int], list[_Bracket]] = {}
        for b in test_b:
            by_span.setdefault((b.start, b.end), []).append(b)
        match = 0
        for g in gold_b:
            for t in by_span.get((g.start, g.end), ()):
                if t.result == 0 and (not self.params.labeled or self.label_eq(g.label, t.label)):
                    g.result = t.result = 1
                    match += 1
                    break

        # Crossing brackets are counted on the test side: test brackets that cross some gold bracket.
        crossing = 0
        for t in test_b:
            for g in gold_b:
                if (g.start < t.start < g.end < t.end) or (t.start < g.start < t.end < g.end):
                    crossing += 1
                    break

        correct = sum(self.label_eq(a, b) for (_, a), (_, b) in zip(gold.terminals, test.terminals))
        return SentenceResult(line, gold.length, status, match, len(gold_b), len(test_b), crossing, wn1, correct)

    def fix_quote(self, gold: _Sentence, test: _Sentence) -> None:
        """The 2006 fix (fix_quote/reinsert_term): where a quote term sits at the same word position on both
        sides with different tags, one deleted and one not, the deleted one goes back into its tree."""
        deleted = self.params.delete_labels
        for i, q2 in enumerate(test.quotes):
            ind = q2.index  # read once, before the increments below (as in C)
            for j, q1 in enumerate(gold.quotes):
                if q1.index != ind or q1.label == q2.label:
                    continue
                if q1.label in deleted and q2.label not in deleted:
                    _reinsert(q1, gold)
                    for later in gold.quotes[j:]:  # this one included, as in C
                        later.index += 1
                elif q2.label in deleted and q1.label not in deleted:
                    _reinsert(q2, test)
                    for later in test.quotes[i:]:
                        later.index += 1


def _reinsert(q: _QuoteTerm, s: _Sentence) -> None:
    """reinsert_term(): the word goes back at its index; brackets opened after it move right by one, the
    ones open around it end one later."""
    s.terminals.insert(q.index, (q.word, q.label))
    for k, b in enumerate(s.brackets):
        if k >= q.bracket:
            b.start += 1
            b.end += 1
    for k in q.ends:
        s.brackets[k].end += 1


def evaluate(gold: Iterable[str], test: Iterable[str], params: Params | None = None) -> Evaluation:
    """Score test trees against gold trees as `evalb -p PARAMS GOLD TEST` does; each string is one line of
    EVALB's input (one tree; line breaks inside it read as spaces). `params` defaults to COLLINS.prm.
    Sentences are numbered from 1; an extra line on either side is an error, as in EVALB."""
    params = Params.collins() if params is None else params
    scorer = _Scorer(params)
    error = _Errors(params.max_error)
    ev = Evaluation(params, errors=error.messages)
    test_iter = iter(test)
    line = 0
    try:
        for line, gold_line in enumerate(gold, 1):
            first = len(error.messages)
            g = _read_line(gold_line, params, line, error)
            test_line = next(test_iter, None)
            if test_line is None:
                error(line, "Number of lines unmatch (too many lines in gold file)")
                break
            t = _read_line(test_line, params, line, error)
            result = scorer.score(line, g, t, 1 if len(error.messages) > first else 0, error)
            ev.sentences.append(result)
            ev.all.add(result)
            if result.length <= params.cutoff_len:
                ev.cutoff.add(result)
        else:
            if next(test_iter, None) is not None:
                error(line + 1, "Number of lines unmatch (too many lines in test file)")
    except _Abort:
        ev.aborted = True
    return ev


def read_evalb_lines(path: str | Path) -> list[str]:
    """A file's lines as EVALB's `fgets(buff, 5000, fd)` returns them: a line of 5000 bytes or more comes
    in pieces of 4999 bytes, each a line of its own to EVALB (and so to this port)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise AiaynError(f"can't open {path}: {e.strerror}") from e
    lines = []
    for raw in re.findall(rb"[^\n]*\n|[^\n]+", data):  # fgets stops after '\n' only ('\r' is a space)
        for i in range(0, len(raw), _FGETS_BUFFER - 1):
            lines.append(raw[i : i + _FGETS_BUFFER - 1].decode("utf-8", "surrogateescape"))
    return lines


def evaluate_files(gold: str | Path, test: str | Path, params: Params | str | Path | None = None) -> Evaluation:
    """`evalb -p PARAMS GOLD TEST`: the files read as EVALB reads them; `params` a Params or a .prm path."""
    if params is not None and not isinstance(params, Params):
        params = Params.read(params)
    return evaluate(read_evalb_lines(gold), read_evalb_lines(test), params)


def scoring(gold_trees: Sequence[str], test_trees: Sequence[str], params: Params | None = None) -> Evaluation:
    """The evaluation behind `f1` and `f1_by_length`: COLLINS.prm by default, but with no MAX_ERROR (a
    half-trained model's bad trees must not stop the count). Error sentences are left out as EVALB leaves
    them out; the evaluation says how many there were."""
    if len(gold_trees) != len(test_trees):
        raise AiaynError(f"{len(gold_trees)} gold trees but {len(test_trees)} test trees")
    return evaluate(gold_trees, test_trees, dataclasses.replace(params or Params.collins(), max_error=None))


def _score(t: Totals) -> float:
    f = t.fmeasure
    return 0.0 if math.isnan(f) else f  # EVALB's -nan: nothing matched, nothing to compare


def f1(gold_trees: Sequence[str], test_trees: Sequence[str], params: Params | None = None) -> tuple[float, float]:
    """(Bracketing FMeasure over all sentences, over those of length <= CUTOFF_LEN) of `scoring`, for
    validation during training; 0.0 where EVALB would print -nan."""
    return f1_of(scoring(gold_trees, test_trees, params))


def f1_of(ev: Evaluation) -> tuple[float, float]:
    """`f1` of an evaluation already made."""
    return _score(ev.all), _score(ev.cutoff)


def f1_by_length(ev: Evaluation, width: int = 10) -> list[tuple[int, int, float]]:
    """F1 per sentence-length bucket of an evaluation (`scoring`) -> (the bucket's first length, its valid
    sentences, its Bracketing FMeasure, 0.0 for -nan), ascending."""
    return [(start, t.valid_sentences, _score(t)) for start, t in ev.by_length(width)]


def read_trees(text: str) -> list[str]:
    """Trees written over several lines (the Penn Treebank's own files, CRAFT's penn/*.tree) as one line
    each, the form EVALB reads: a tree ends where its brackets balance; runs of spaces and line breaks
    become one space (EVALB reads every run of spaces alike)."""
    trees: list[str] = []
    depth, start = 0, None
    for i, c in enumerate(text):
        if c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise AiaynError(f"unbalanced ')' at character {i}")
            if depth == 0:
                assert start is not None
                trees.append(re.sub(r"[ \t\n\v\f\r]+", " ", text[start : i + 1]))
        elif depth == 0 and c not in _C_SPACE:
            raise AiaynError(f"text outside any tree at character {i}: {text[i : i + 20]!r}")
    if depth:
        raise AiaynError("unbalanced '(' at the end of the text")
    return trees
