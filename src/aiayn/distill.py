"""`aiayn distill`: sequence-level knowledge distillation (Kim & Rush, 2016), from a teacher run to a small,
fast student ready for LibreTranslate, in one resumable command.

    distill(teacher="runs/de_en", out=Path("distill/de_en"), preset="deep-shallow", steps=20_000)

Stages, each written under `out` and skipped when a run before this one finished it:

  1. data       the teacher's training source, validation and test pairs, written as files (streamed);
  2. translate  the training source translated by the teacher (a run, an ensemble or its average; its
                beam search): the student's targets (aiayn.synthetic.translate_into_pair, resumable);
  3. select     with keep_best, the pairs whose translation is closest to the original target
                (sentence chrF), that share of them;
  4. train      the student (a model preset made to decode fast, the teacher's tokenizer) on the
                teacher's translations, validated on the original pairs (resumes from its checkpoint);
  5. export     the student as an int8 CTranslate2 model and an Argos Translate package.

`out/stages.json` records what is done; a stage whose inputs change is not noticed, so start a new
directory for new settings.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiayn.config import Config
from aiayn.data.errors import DataError
from aiayn.data.io import LineStream
from aiayn.errors import AiaynError
from aiayn.fileio import atomic_write, replacing
from aiayn.train.metrics import stopped_early

STAGES = ("data", "translate", "select", "train", "export")


def distill(
    teacher: Sequence[str],
    out: Path,
    preset: str = "deep-shallow",
    steps: int = 20_000,
    beam: int | None = None,
    keep_best: float | None = None,
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run (or continue) every stage; returns the stages' records (also in out/stages.json)."""
    from aiayn.checkpoint import find_in_run
    from aiayn.dual_scores import check_share

    if keep_best is not None:
        check_share(keep_best)  # now, not after the teacher has translated

    found = find_in_run(teacher[0], "config.yaml")
    if found is None:
        raise DataError(f"{teacher[0]}: no config.yaml; the teacher must be a run directory (or weights in one)")
    cfg = Config.load(str(found))
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    out.mkdir(parents=True, exist_ok=True)
    stages = _Stages(out / "stages.json")
    data = out / "data"
    if not stages.done("data"):
        stages.mark("data", _write_data(cfg, data, src, tgt, log))
    if not stages.done("translate"):
        stages.mark("translate", _translate(teacher, cfg, data, src, tgt, beam, progress, log))
    train_files = (data / f"distilled.{src}", data / f"distilled.{tgt}")
    if keep_best is not None:
        if not stages.done("select"):
            stages.mark("select", _select(data, src, tgt, keep_best, log))
        train_files = (data / f"selected.{src}", data / f"selected.{tgt}")
    student = out / "student"
    if not stages.done("train"):
        stages.mark(
            "train", _train(cfg, teacher[0], student, train_files, data, preset, steps, overrides, progress, log)
        )
    if not stages.done("export"):
        stages.mark("export", _export(student, out, src, tgt, log))
    return stages.records


class _Stages:
    """out/stages.json: each finished stage's record, written atomically as each finishes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}

    def done(self, stage: str) -> bool:
        return stage in self.records

    def mark(self, stage: str, record: dict[str, Any]) -> None:
        self.records[stage] = record
        text = json.dumps(self.records, indent=1) + "\n"
        atomic_write(self.path, lambda tmp: Path(tmp).write_text(text))


def _write_data(cfg: Config, data: Path, src: str, tgt: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The teacher's corpus as files: the training source and its original target (for selection), and
    the validation and test pairs the student is measured on."""
    from aiayn.data.pairs import split_chunks

    data.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, stem in (("train", "source"), ("valid", "valid"), ("test", "test")):
        names = {"train": (f"source.{src}", f"reference.{tgt}")}.get(split, (f"{stem}.{src}", f"{stem}.{tgt}"))
        n = 0
        with replacing(*(data / name for name in names)) as parts:
            with open(parts[0], "w", encoding="utf-8") as a, open(parts[1], "w", encoding="utf-8") as b:
                for s, t in split_chunks(cfg.data, split):
                    a.write("".join(x + "\n" for x in s))
                    b.write("".join(x + "\n" for x in t))
                    n += len(s)
        counts[split] = n
    if counts["train"] == 0 or counts["valid"] == 0:
        raise DataError(f"the teacher's data has {counts['train']} training and {counts['valid']} validation pairs")
    log(f"distill: data: {counts['train']:,} training sources, {counts['valid']:,} validation pairs")
    return counts


def _translate(
    teacher: Sequence[str],
    cfg: Config,
    data: Path,
    src: str,
    tgt: str,
    beam: int | None,
    progress: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    from aiayn.decode.translator import Translator
    from aiayn.synthetic import translate_into_pair

    decode = cfg.decode if beam is None else dataclasses.replace(cfg.decode, beam=beam)
    t = Translator.load(teacher[0], ensemble=list(teacher[1:]), decode=decode)
    log(f"distill: translate: weights {t.weights}; engine {t.engine}; beam {decode.beam}")
    done = translate_into_pair(
        t, data / f"source.{src}", data / f"distilled.{tgt}", data / f"distilled.{src}", progress=progress
    )
    log(f"distill: translate: {done['lines']:,} lines in {done['seconds']:.0f} s")
    return {**done, "weights": t.weights, "engine": t.engine, "beam": decode.beam}


def _select(data: Path, src: str, tgt: str, keep_best: float, log: Callable[[str], None]) -> dict[str, Any]:
    """The pairs whose teacher translation is closest to the original target (sentence chrF), `keep_best`
    of them, in corpus order."""
    import numpy as np
    from sacrebleu.metrics import CHRF

    from aiayn.dual_scores import keep_lines

    chrf = CHRF()
    scores = []
    with LineStream(data / f"distilled.{tgt}") as hyp, LineStream(data / f"reference.{tgt}") as ref:
        while True:
            h, r = hyp.take(10_000), ref.take(10_000)
            if not h:
                break
            scores += [chrf.sentence_score(a.decode(), [b.decode()]).score for a, b in zip(h, r)]
    s = np.asarray(scores)
    k = max(1, int(round(keep_best * len(s))))
    threshold = float(np.sort(s)[::-1][k - 1])
    keep = s >= threshold
    selected = (data / f"selected.{src}", data / f"selected.{tgt}")
    for name, dest in zip((src, tgt), selected):
        shutil.copyfile(data / f"distilled.{name}", dest)
    keep_lines(selected, keep, np.arange(1, len(s) + 1))  # streamed, each file replaced when complete
    log(f"distill: select: {int(keep.sum()):,} of {len(s):,} pairs (sentence chrF >= {threshold:.1f})")
    return {"kept": int(keep.sum()), "of": len(s), "chrf_threshold": threshold}


def _train(
    cfg: Config,
    teacher: str,
    student: Path,
    files: tuple[Path, Path],
    data: Path,
    preset: str,
    steps: int,
    overrides: dict[str, Any] | None,
    progress: bool,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The student: the teacher's config but its model (`preset`) and data (the translations; the
    teacher's tokenizer, so the two share a vocabulary), for `steps` updates."""
    from aiayn.checkpoint import list_checkpoints
    from aiayn.train import train

    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    d = cfg.to_dict()
    d["model"] = {"preset": preset}
    d["data"].update(
        corpus="files",
        train_src=str(files[0]),
        train_tgt=str(files[1]),
        valid_src=str(data / f"valid.{src}"),
        valid_tgt=str(data / f"valid.{tgt}"),
        test_src=str(data / f"test.{src}") if (data / f"test.{src}").stat().st_size else None,
        test_tgt=str(data / f"test.{tgt}") if (data / f"test.{tgt}").stat().st_size else None,
        spm_model=str(Path(teacher) if Path(teacher).is_dir() else Path(teacher).parent),
    )
    d["train"].update(max_steps=steps, progress=progress, max_minutes=None)  # the updates, however long
    d["train"]["save_every"] = min(d["train"].get("save_every", steps), steps)
    for key, value in (overrides or {}).items():
        section, _, field = key.partition(".")
        d.setdefault(section, {})[field] = value
    student_cfg = Config.from_dict(d)
    found = list_checkpoints(student)
    resume = bool(found)
    if not (found and found[-1][0] >= steps) and not stopped_early(student):
        log(f"distill: train: student {preset} for {steps:,} updates{' (resumed)' if resume else ''}")
        if train(student_cfg, student, resume=resume).get("interrupted"):
            raise AiaynError("distill: the student's training was interrupted; the same command continues it")
    summary = [json.loads(x) for x in (student / "metrics.jsonl").read_text().splitlines() if '"valid"' in x]
    return {"run": str(student), "preset": preset, "steps": steps, "last_valid": summary[-1] if summary else None}


def _export(student: Path, out: Path, src: str, tgt: str, log: Callable[[str], None]) -> dict[str, Any]:
    from aiayn.argos import export_argos
    from aiayn.export import export_ctranslate2

    ct2 = export_ctranslate2(student, out / "student-ct2-int8", quantization="int8", force=True)
    pkg = export_argos(student, out / f"{src}_{tgt}.argosmodel", quantization="int8", force=True)
    log(f"distill: export: {ct2} (CTranslate2, int8) and {pkg} (Argos Translate)")
    return {"ctranslate2": str(ct2), "argos": str(pkg)}
