"""`aiayn evaluate`: translate a split of a run's data (or a file) and score it against its
references with `aiayn.scoring` (sacreBLEU + chrF, and the tokenized BLEU of the published
Multi30k / WMT-2014 protocol).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiayn.config import Config, DecodeConfig
from aiayn.data.io import read_lines
from aiayn.data.multi30k import tokenized_reference_path
from aiayn.errors import AiaynError
from aiayn.scoring import moses_tokenize, score, tokenized_bleu

if TYPE_CHECKING:
    from aiayn.decode.translator import Translator

# -- whole evaluations (the `aiayn evaluate` command) ------------------------------------------------


def _run_data_config(run_dir: Path):
    cfg_file = run_dir / "config.yaml"
    if not cfg_file.is_file():
        raise AiaynError(f"{cfg_file} not found: --split reads the run's data section from it")
    return Config.load(str(cfg_file)).data


def _split_data(run_dir: Path, split: str, lang: str | None, tokenized: bool):
    """(src lines, ref lines, tokenized refs or None, target language) of one of the run's splits."""
    from aiayn.data.pairs import prepare, with_run_tokenizer  # torch: not for a --hyp file only scored

    cfg = with_run_tokenizer(_run_data_config(run_dir), run_dir)
    key = {"val": "valid", "validation": "valid", "test_2016_flickr": "test"}.get(split, split)
    src, ref = prepare(cfg).raw(key)
    lang = lang or cfg.tgt_lang
    tok = None
    if tokenized and cfg.corpus == "multi30k":
        tok = read_lines(tokenized_reference_path(key, lang, cfg.data_dir))
    return src, ref, tok, lang


def _sources_and_references(
    checkpoint: str | os.PathLike | None,
    split: str | None,
    src: str | None,
    ref: str | None,
    hyp: str | None,
    lang: str | None,
    tokenized: bool,
) -> tuple[list[str] | None, list[str], list[str] | None, str | None]:
    """What an evaluation reads: (source lines, None when a --hyp file is only scored; references;
    tokenized references, None where the protocol has none; target language, None when unknown)."""
    if split is not None and (src or ref):
        raise AiaynError("give either --split or --src/--ref, not both")
    tok_refs = None
    if split is not None:
        if checkpoint is None:
            raise AiaynError("--split needs -c RUN_DIR")
        run_dir = Path(checkpoint)
        if not run_dir.is_dir():
            raise AiaynError(f"--split needs a run directory, got {checkpoint}")
        src_lines, refs, tok_refs, lang = _split_data(run_dir, split, lang, tokenized)
    else:
        if ref is None or (src is None and hyp is None):
            raise AiaynError("give --split, or --ref with --src (translate) or --hyp (score a file)")
        refs = read_lines(ref)
        src_lines = read_lines(src) if src is not None else None
        if lang is None and checkpoint is not None and Path(checkpoint).is_dir():
            try:
                lang = _run_data_config(Path(checkpoint)).tgt_lang
            except AiaynError:
                lang = None
        if src_lines is not None and len(src_lines) != len(refs):
            raise AiaynError(f"{src} has {len(src_lines)} lines but {ref} has {len(refs)}")
    return src_lines, refs, tok_refs, lang


def evaluate_run(
    checkpoint: str | os.PathLike | None,
    split: str | None = None,
    src: str | None = None,
    ref: str | None = None,
    hyp: str | None = None,
    tokenized: bool = False,
    lang: str | None = None,
    average_last: int = 0,
    output: str | None = None,
    device: str | None = None,
    max_tokens: int | None = None,
    ensemble: Sequence[str] = (),
    int8: bool = False,
    decode: DecodeConfig | None = None,
    engine: str = "auto",
    on_load: Callable[[Translator], None] | None = None,
    **search: Any,
) -> dict[str, Any]:
    """Translate a split of the run's data (or --src) and score it against its references;
    `ensemble`: more runs decoded together with `checkpoint`, whose run gives the split;
    `int8`: decode with int8 weights on the CPU, as in Translator.load, as is `engine`. `on_load`: called
    with the Translator once it is loaded (the command line says which engine decodes).

    Search settings: `decode` (None: the run's config.yaml `decode` section, else DecodeConfig()),
    then `max_tokens` and the `search` keywords of `Translator.translate` (beam, length_penalty,
    max_len_a, max_len_b) where given."""
    src_lines, refs, tok_refs, lang = _sources_and_references(checkpoint, split, src, ref, hyp, lang, tokenized)

    if hyp is not None:
        hyps = read_lines(hyp)
    else:
        if checkpoint is None:
            raise AiaynError("translating needs -c RUN_DIR_OR_CHECKPOINT")
        from aiayn.decode.translator import Translator

        translator = Translator.load(
            checkpoint,
            device=device,
            ensemble=ensemble,
            average_last=average_last,
            int8=int8,
            decode=decode,
            max_tokens=max_tokens,
            engine=engine,
        )
        if on_load is not None:
            on_load(translator)
        assert src_lines is not None  # without --hyp, --src or --split gave them (_sources_and_references)
        hyps = translator.translate(src_lines, **search)
    if output is not None:
        Path(output).write_text("".join(h + "\n" for h in hyps), encoding="utf-8")

    res = score(hyps, refs)
    if tokenized:
        if lang is None:  # Moses rules differ per language: never guess
            raise AiaynError("--tokenized-bleu needs the target language: give --lang (or -c RUN_DIR)")
        res["tokenized_bleu"] = tokenized_bleu(
            hyps, tok_refs if tok_refs is not None else moses_tokenize(refs, lang), lang
        )
        res["tokenized_lang"] = lang
    return res
