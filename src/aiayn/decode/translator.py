"""Text in, text out: load a model once and translate lists of lines (paper §6.1 settings by default).

    from aiayn import Translator
    t = Translator.load("run/")                  # run dir or weights file; spm.model found alongside
    t = Translator.load("a/", ensemble=["b/"], average_last=10)   # two runs' averages, decoded together
    t.translate(["Ein Hund rennt."])             # -> ["A dog runs."], the run's decode settings
    t.translate(["Ein Hund rennt."], beam=1)     # one setting overridden for this call (greedy)
    t = Translator.load("run/", int8=True)       # CPU, int8 weights (aiayn.model.int8)
    t = Translator.load("run/", packed=True)     # CPU float32, weights packed once for MKL (aiayn.model.cpu_layout)

Search settings come from one `DecodeConfig` held by the Translator (`t.decode`): the run's config.yaml
`decode` section with `load`, else DecodeConfig()'s defaults (paper §6.1); a keyword given to
`translate` overrides one field for that call.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch

from aiayn.checkpoint import find_in_run
from aiayn.config import Config, DecodeConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.decode.ensemble import load_members
from aiayn.decode.search import beam_search, greedy_search
from aiayn.errors import AiaynError
from aiayn.model.cpu_layout import pack_for_cpu
from aiayn.model.int8 import quantize_int8


def auto_device(device: str | torch.device | None = None) -> torch.device:
    """None or "auto" -> CUDA when present, else CPU; otherwise the named device (checked)."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise AiaynError(f"bad device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AiaynError(f"device {device!r} requested but CUDA is not available")
    return dev


def _clean(line: str) -> str:
    # Lone surrogates (e.g. from surrogateescape) crash sentencepiece; anything else it can encode.
    return str(line).encode("utf-8", "replace").decode("utf-8")


def run_decode_config(path: str | os.PathLike) -> DecodeConfig:
    """The `decode` section of the config.yaml of the run at `path` (a run directory or a weights file
    in one), else DecodeConfig()'s defaults."""
    found = find_in_run(path, "config.yaml")
    return Config.load(str(found)).decode if found else DecodeConfig()


class Translator:
    """A model + its tokenizer + the search settings it decodes with (`decode`; its `max_tokens` bounds
    a batch: padded source tokens x beam). `max_tokens`, when given, overrides `decode.max_tokens`."""

    def __init__(
        self,
        model,
        tokenizer: Tokenizer,
        device: str | torch.device | None = None,
        max_tokens: int | None = None,
        max_input_len: int | None = None,
        decode: DecodeConfig | None = None,
    ) -> None:
        on = next(model.parameters()).device
        # device=None: keep a model already on an accelerator; else CUDA when present.
        self.device = on if device is None and on.type != "cpu" else auto_device(device)
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        if tokenizer.vocab_size > model.config.vocab_size:
            raise AiaynError(
                f"tokenizer has {tokenizer.vocab_size} pieces but the model only "
                f"{model.config.vocab_size}: wrong spm.model for this checkpoint?"
            )
        decode = decode or DecodeConfig()
        self.decode = decode if max_tokens is None else dataclasses.replace(decode, max_tokens=max_tokens)
        # Source pieces + EOS must fit the model's positions.
        limit = model.config.max_positions
        self.max_input_len = min(max_input_len or limit, limit)

    @property
    def max_tokens(self) -> int:
        return self.decode.max_tokens

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        device: str | torch.device | None = None,
        *,
        ensemble: Sequence[str | os.PathLike] = (),
        average_last: int = 0,
        int8: bool = False,
        decode: DecodeConfig | None = None,
        packed: bool = False,
        **kw,
    ) -> Translator:
        """From a run directory (best.safetensors, else the newest checkpoint) or a weights file.
        `decode`: the search settings; None reads the run's config.yaml `decode` section (DecodeConfig()
        when there is none). `ensemble`: more runs/weights decoded together with `path`
        (decode.ensemble); `average_last` K: each run's last K step checkpoints averaged (§6.1) instead
        of its best weights. `int8`: decode with int8 weights, one scale per output row
        (aiayn.model.int8); CPU only, so device=None means the CPU then. `packed`: the decoder's float32
        weights packed once for MKL's matrix product, as CTranslate2 does (aiayn.model.cpu_layout): 1-8 %
        faster decoding on the CPU (docs/benchmarks.md) for one more copy of those weights; logits may
        differ from nn.Linear's in the last bits. Ignored with int8, off the CPU and without MKL."""
        dev = auto_device("cpu" if int8 and device is None else device)
        model, spm = load_members([path, *ensemble], dev, average_last)
        if int8:
            model = quantize_int8(model)  # after averaging/ensembling: each member's final weights
        elif packed:  # off the CPU or without MKL nothing is packed (cpu_layout.pack_linear)
            model = pack_for_cpu(model)  # likewise after averaging; the model is ours, changed in place
        return cls(model, Tokenizer(spm), dev, decode=decode if decode is not None else run_decode_config(path), **kw)

    def search_config(
        self,
        beam: int | None = None,
        length_penalty: float | None = None,
        max_len_a: float | None = None,
        max_len_b: float | None = None,
    ) -> DecodeConfig:
        """`decode` with the given (not None) settings replacing its own."""
        given: dict[str, Any] = dict(beam=beam, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b)
        return dataclasses.replace(self.decode, **{k: v for k, v in given.items() if v is not None})

    def translate(
        self,
        lines: Sequence[str],
        beam: int | None = None,
        length_penalty: float | None = None,
        max_len_a: float | None = None,
        max_len_b: float | None = None,
        n_best: int = 1,
    ) -> list:
        """Translate lines, input order kept; empty line -> "". beam=1 is greedy search. A setting left
        None is the Translator's own (`decode`).

        Returns list[str], or with n_best > 1 a list of n-best lists of strings.
        """
        nbest = self.translate_scored(lines, beam, length_penalty, max_len_a, max_len_b, n_best)
        if n_best == 1:
            return [h[0][0] if h else "" for h in nbest]
        return [[text for text, _ in h] for h in nbest]

    def translate_scored(
        self,
        lines: Sequence[str],
        beam: int | None = None,
        length_penalty: float | None = None,
        max_len_a: float | None = None,
        max_len_b: float | None = None,
        n_best: int = 1,
        first_line: int = 1,
    ) -> list[list[tuple[str, float]]]:
        """Like `translate`, with each hypothesis' score (sum log p / lp; greedy: nan). `first_line`:
        the number of lines[0] in the user's input, for warnings (a stream is translated in chunks)."""
        d = self.search_config(beam, length_penalty, max_len_a, max_len_b)
        texts = [_clean(line) for line in lines]
        encoded = self.tokenizer.encode_batch(texts) if texts else []
        limit = self.max_input_len - 1  # room for EOS
        for i, ids in enumerate(encoded):
            if len(ids) > limit:
                print(
                    f"aiayn: warning: input line {first_line + i} has {len(ids)} pieces; truncated to {limit}",
                    file=sys.stderr,
                    flush=True,
                )
                encoded[i] = ids[:limit]
        results: list[list[tuple[str, float]]] = [[("", float("nan"))] for _ in texts]
        order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
        batch: list[int] = []
        for i in order:  # ascending length: the newest line is the longest of its batch
            if batch and (len(batch) + 1) * (len(encoded[i]) + 1) * d.beam > d.max_tokens:
                self._run(batch, encoded, results, d, n_best)
                batch = []
            batch.append(i)
        if batch:
            self._run(batch, encoded, results, d, n_best)
        return results

    def _run(
        self,
        batch: list[int],
        encoded: list[list[int]],
        results: list[list[tuple[str, float]]],
        d: DecodeConfig,
        n_best: int,
    ) -> None:
        eos, pad = self.model.config.eos_id, self.model.config.pad_id
        S = max(len(encoded[i]) for i in batch) + 1
        src = torch.full((len(batch), S), pad, dtype=torch.long)  # (B, S) pieces + EOS, right-padded
        for r, i in enumerate(batch):
            src[r, : len(encoded[i]) + 1] = torch.tensor(encoded[i] + [eos])
        src = src.to(self.device)
        was_training = self.model.training
        self.model.eval()  # the trainer validates with its live model: restore its mode after
        try:
            if d.beam == 1 and n_best == 1:
                hyps = [[(ids, float("nan"))] for ids in greedy_search(self.model, src, d.max_len_a, d.max_len_b)]
            else:
                hyps = beam_search(self.model, src, d.beam, d.length_penalty, d.max_len_a, d.max_len_b, n_best)
        finally:
            self.model.train(was_training)
        for i, nbest in zip(batch, hyps):
            results[i] = [(_one_line(self.tokenizer.decode(ids)), score) for ids, score in nbest]


def _one_line(text: str) -> str:
    # Byte pieces can spell line breaks; one input line must give one output line.
    return text.replace("\r", " ").replace("\n", " ") if ("\n" in text or "\r" in text) else text
