"""Data: corpora, joint BPE, encoded arrays on disk, token-budget batching (paper §5.1).

    prep = prepare(DataConfig(corpus="multi30k", src_lang="de", tgt_lang="en"), run_dir)
    it = BatchIterator(prep.splits["train"], max_tokens=4096, seed=0, rank=0, world_size=1)
    for batch in it: ...   # Batch(src (B,S), tgt_in (B,T), tgt_out (B,T), ids, src_tokens, tgt_tokens)

Names load lazily (PEP 562), so `aiayn --help` and a task's record import neither torch nor numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiayn._lazy import lazy_exports

# submodule -> the names it gives the package, loaded when first asked for: numpy, sentencepiece and torch
# stay out of a module that imports one light part of this package (a task's record: aiayn.train.tasks)
_EXPORTS = {
    "batching": ("Batch", "BatchIterator", "collate"),
    "encoded": ("EncodedSplit",),
    "errors": ("DataError",),
    "io": ("read_lines", "read_parallel"),
    "pairs": ("Prepared", "prepare"),
    "tokenizer": ("Tokenizer",),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from aiayn.data.batching import Batch, BatchIterator, collate
    from aiayn.data.encoded import EncodedSplit
    from aiayn.data.errors import DataError
    from aiayn.data.io import read_lines, read_parallel
    from aiayn.data.pairs import Prepared, prepare
    from aiayn.data.tokenizer import Tokenizer
