"""Joint sentencepiece BPE over source and target (paper §5.1: a shared vocabulary).

Special ids match `aiayn.config`: pad 0, unk 1, bos 2, eos 3. Byte fallback keeps any input
encodable (unseen characters become byte pieces, not <unk>). Two repairs of text before a model sees
it: `collapse_whitespace`, the data pipeline's normalisation, and `replace_lone_surrogates`, what
translation does to any input line.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import sentencepiece as spm

from aiayn.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.data.errors import DataError

# Pieces some runs' tokenizers hold as user-defined symbols (aiayn.data.text trains them in); the
# decoders look them up by these names.
NEWLINE = "\n"  # the piece that ends every line of a document (decoder-only runs on running text)
ENCODER_SPECIALS = ("[MASK]", "[CLS]", "[SEP]")  # BERT's, for the encoder-only tasks
WORD_START = "\u2581"  # sentencepiece's mark of a piece that starts a word


def collapse_whitespace(line: str) -> str:
    """Collapse whitespace runs (sentencepiece does too), so decode(encode(x)) == x for raw text."""
    return " ".join(line.split())


def replace_lone_surrogates(line: str) -> str:
    """`line` with each lone surrogate (e.g. from surrogateescape) replaced by "?": they crash
    sentencepiece; anything else it can encode."""
    return str(line).encode("utf-8", "replace").decode("utf-8")


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
            raise DataError(
                f"{self.path}: special ids (pad, unk, bos, eos) are {got}, expected {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}"
            )
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        model_file: str | os.PathLike,
        vocab_size: int = 8000,
        max_sentences: int = 2_000_000,
        threads: int | None = None,
        *,
        model_type: str = "bpe",
        user_symbols: Sequence[str] = (),
    ) -> Tokenizer:
        """Train a BPE model on an iterator of lines (source and target text together).

        `model_type="char"` makes one piece per character seen, with nothing normalised (spaces, runs of
        spaces and case kept), so that decode(encode(x)) == x for character-level language models.
        `user_symbols` are extra pieces never split, with ids right after the four special ids
        (e.g. [MASK], [CLS], [SEP] for an encoder-only model, or a newline piece for running text).
        The model is written through `model_writer`, so no path is stored in it: the same text gives
        the same bytes on every machine (multi-node caches and ensembles compare them)."""
        model_file = Path(model_file)
        model_file.parent.mkdir(parents=True, exist_ok=True)
        proto = io.BytesIO()
        char = model_type == "char"
        extra: dict = (
            dict(
                normalization_rule_name="identity",
                remove_extra_whitespaces=False,
                add_dummy_prefix=False,
                split_by_whitespace=False,
            )
            if char
            else {}
        )
        if user_symbols:
            extra["user_defined_symbols"] = list(user_symbols)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=proto,
            model_type=model_type,
            vocab_size=vocab_size,
            character_coverage=1.0,
            byte_fallback=not char,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            num_threads=threads or os.cpu_count() or 1,
            minloglevel=2,
            hard_vocab_limit=False,
            **extra,
        )
        model_file.write_bytes(proto.getvalue())
        return cls(model_file)

    def piece_id(self, piece: str) -> int | None:
        """The id of a whole piece (e.g. "[MASK]"), or None when the vocabulary lacks it."""
        i = self.sp.piece_to_id(piece)
        return None if i == self.unk_id and piece != self.sp.id_to_piece(self.unk_id) else int(i)

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


class WordCacheEncoder:
    """Encodes whitespace-split text word by word through a bounded cache of each word's pieces.

    A BPE model trained with sentencepiece's default `split_by_whitespace` never merges across a space,
    so a sentence's ids are the concatenation of its words' ids (each word encoded alone gets the same
    leading "▁"). Corpora repeat words, so most words are looked up instead of encoded; the result
    equals `Tokenizer.encode_batch` of the whitespace-normalised text (tested on Multi30k and random
    text). Only for models trained here (`Tokenizer.train`), whose settings are known.
    """

    def __init__(self, sp: spm.SentencePieceProcessor, max_words: int = 300_000) -> None:
        self.sp, self.max_words = sp, max_words
        self.word_id: dict[str, int] = {}
        self._pieces: list[list[int]] = []
        self._flat = np.zeros(0, dtype=np.int64)  # pieces of every cached word, concatenated
        self._start = np.zeros(0, dtype=np.int64)  # (W,) where word w's pieces start in _flat
        self._len = np.zeros(0, dtype=np.int64)  # (W,) how many pieces word w has

    def encode(self, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(flat ids, per-line lengths) of `lines`, split on any whitespace."""
        words_per_line = list(map(str.split, lines))
        counts = np.fromiter(map(len, words_per_line), dtype=np.int64, count=len(lines))
        words = list(chain.from_iterable(words_per_line))
        new = set(words).difference(self.word_id)
        if len(self.word_id) + len(new) > self.max_words:  # full: start over rather than grow without bound
            self.word_id, self._pieces = {}, []
            new = set(words)
        if new:
            new_words = list(new)
            for w, ids in zip(new_words, self.sp.encode(new_words)):
                self.word_id[w] = len(self._pieces)
                self._pieces.append(ids)
            lengths = np.fromiter(map(len, self._pieces), dtype=np.int64, count=len(self._pieces))
            self._len = lengths
            self._start = np.cumsum(lengths) - lengths
            self._flat = np.fromiter(chain.from_iterable(self._pieces), dtype=np.int64, count=int(lengths.sum()))
        wid = np.fromiter(map(self.word_id.__getitem__, words), dtype=np.int64, count=len(words))  # (Nw,)
        plen = self._len[wid]  # (Nw,) pieces per word
        cum = np.zeros(len(wid) + 1, dtype=np.int64)
        np.cumsum(plen, out=cum[1:])
        last = np.cumsum(counts)  # one past each line's last word
        line_len = cum[last] - cum[last - counts]  # (L,)
        total = int(cum[-1])
        within = np.arange(total, dtype=np.int64) - np.repeat(cum[:-1], plen)
        flat = self._flat[np.repeat(self._start[wid], plen) + within]
        return flat, line_len
