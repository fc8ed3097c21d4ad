"""Scoring translations the ways results are compared (paper §6.1, Table 2). Torch-free, below
decode and train (validation BLEU); `aiayn.evaluate` runs it over a run's data.

- `score`: sacreBLEU on detokenized, cased text (13a tokenization) plus chrF, each with its
  signature: the comparable, reproducible number.
- `tokenized_bleu`: the published Multi30k / WMT-2014 protocol (multi-bleu.perl): hypotheses
  lowercased, punctuation-normalised and Moses-tokenized, scored against the dataset's own
  tokenized references with no further tokenization. Moses HTML escapes (&apos; &quot; ...) are
  undone on both sides, so escaped and plain tokenized references score alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiayn.errors import AiaynError

_MOSES_ESCAPES = (
    ("&#124;", "|"),
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&apos;", "'"),
    ("&quot;", '"'),
    ("&#91;", "["),
    ("&#93;", "]"),
    ("&amp;", "&"),
)


def score(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """Corpus sacreBLEU (detokenized, cased) and chrF of `hyps` against one reference each."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise AiaynError(f"{len(hyps)} hypotheses but {len(refs)} references")
    bleu, chrf = BLEU(), CHRF()
    b = bleu.corpus_score(list(hyps), [list(refs)])
    c = chrf.corpus_score(list(hyps), [list(refs)])
    return {
        "bleu": b.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_str": str(b),
        "chrf": c.score,
        "chrf_signature": str(chrf.get_signature()),
        "chrf_str": str(c),
        "sentences": len(hyps),
    }


def unescape_moses(line: str) -> str:
    for esc, char in _MOSES_ESCAPES:
        line = line.replace(esc, char)
    return line


def moses_tokenize(lines: Sequence[str], lang: str) -> list[str]:
    """lowercase -> normalize-punctuation -> tokenizer (the Multi30k tok/*.lc.norm.tok.* pipeline)."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [
        tok.tokenize(norm.normalize(line.lower()), escape=False, aggressive_dash_splits=False, return_str=True).strip()
        for line in lines
    ]


def tokenized_bleu(hyps: Sequence[str], tok_refs: Sequence[str], lang: str) -> float:
    """BLEU of detokenized `hyps` against already lowercased+tokenized references (multi-bleu.perl)."""
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(tok_refs):
        raise AiaynError(f"{len(hyps)} hypotheses but {len(tok_refs)} references")
    refs = [unescape_moses(r.strip()) for r in tok_refs]
    return BLEU(tokenize="none", force=True).corpus_score(moses_tokenize(hyps, lang), [refs]).score
