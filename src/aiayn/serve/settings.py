"""The settings of one `aiayn serve`: its languages, search defaults, batching and request limits (the CLI
flags), read by every part of the server."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiayn.config import DecodeConfig
from aiayn.data.sentence_starts import SentenceStarts


@dataclass
class ServeSettings:
    """Limits and defaults of one server (the CLI flags); -1 = no limit, as LibreTranslate."""

    source_lang: str = "de"
    target_lang: str = "en"
    beam: int = DecodeConfig.beam
    length_penalty: float = DecodeConfig.length_penalty
    max_len_a: float = DecodeConfig.max_len_a
    max_len_b: int = DecodeConfig.max_len_b
    max_batch_tokens: int = DecodeConfig.max_tokens  # sentences x longest source x beam
    max_wait_ms: float = 10.0
    adaptive_wait: bool = True  # a request that finds the server idle does not wait the window
    batching: str = "continuous"  # greedy searches join a running batch; "whole": batches run to their end
    char_limit: int = 5000  # characters per request, summed over its sentences
    batch_limit: int = 64  # texts per request (LibreTranslate's batch limit: q items)
    # sentences per request once its texts are split (413 beyond): the char limit alone let one text of
    # "Ja. Ja. ..." queue over a thousand searches
    sentence_limit: int = 512
    body_limit: int = 1 << 20  # bytes
    api_key: str | None = None
    # Texts are cut into sentences (aiayn.documents.segment), all decoded in one batch and rejoined with their
    # whitespace, as LibreTranslate does: the model was trained on single sentences (issue #47).
    split_sentences: bool = True
    # where a sentence without a final stop may run into the next (aiayn.data.sentence_starts.run_sentence_starts)
    sentence_starts: SentenceStarts = field(default_factory=SentenceStarts)
