"""Joint sentencepiece BPE over source and target (paper §5.1: a shared vocabulary).

Special ids match `aiayn.config`: pad 0, unk 1, bos 2, eos 3. Byte fallback keeps any input
encodable (unseen characters become byte pieces, not <unk>).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.errors import DataError


class Tokenizer:
    def __init__(self, model_file: str | os.PathLike) -> None:
        self.path = Path(model_file)
        if not self.path.is_file():
            raise DataError(f"sentencepiece model not found: {self.path}")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        except (RuntimeError, OSError) as e:
            raise DataError(f"{self.path} is not a sentencepiece model ({str(e).splitlines()[0]})") from None
        got = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if got != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise DataError(f"{self.path}: special ids (pad, unk, bos, eos) are {got}, "
                             f"expected {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}")
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @classmethod
    def train(cls, texts: Iterable[str], model_file: str | os.PathLike, vocab_size: int = 8000,
              max_sentences: int = 2_000_000, threads: int | None = None) -> "Tokenizer":
        """Train a BPE model on an iterator of lines (source and target text together)."""
        model_file = Path(model_file)
        model_file.parent.mkdir(parents=True, exist_ok=True)
        prefix = str(model_file.with_suffix(""))
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_prefix=prefix, model_type="bpe",
            vocab_size=vocab_size, character_coverage=1.0, byte_fallback=True,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            input_sentence_size=max_sentences, shuffle_input_sentence=True,
            num_threads=threads or os.cpu_count() or 1, minloglevel=2,
            hard_vocab_limit=False,
        )
        written = Path(prefix + ".model")
        if written != model_file:
            written.replace(model_file)
        Path(prefix + ".vocab").unlink(missing_ok=True)
        return cls(model_file)

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(texts))

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> detokenized text; special ids (pad/bos/eos) are dropped."""
        return self.sp.decode([i for i in ids if i > EOS_ID])

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]
