"""An Argos Translate package of a run (`aiayn export --argos OUT.argosmodel -c RUN`), which LibreTranslate
serves: the run's CTranslate2 export (aiayn.export.cached_export), its tokenizer and a blank spaCy pipeline.

Its own module, above both aiayn.export and aiayn.decode: it writes the export, and asks the decoding side
whether CTranslate2 can run the model at all (aiayn.decode.engines), which the export itself need not know.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from aiayn.config import ConfigError
from aiayn.export import cached_export

ARGOS_VERSION = "1.11"  # the Argos Translate release whose package format this writes
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "fr": "French",
    "it": "Italian", "ja": "Japanese", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ru": "Russian",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def _spacy_sentencizer(lang: str, where: Path) -> list[tuple[Path, str]]:
    """A blank spaCy pipeline of `lang` (its tokenizer's abbreviation rules; "xx" when spaCy has no such
    language) as (file, path inside spacy/) pairs, for the package's spacy/ directory: Argos with
    ARGOS_CHUNK_TYPE=SPACY loads it and adds spaCy's rule-based sentencizer, so sentences are split
    with nothing downloaded (its default, MiniSBD, downloads a model on the first translation, and
    offline LibreTranslate answers 500). Written under `where`; empty without spaCy (argostranslate
    installs it)."""
    try:
        import spacy
    except ImportError:
        return []
    try:
        nlp = spacy.blank(lang)
    except Exception:  # noqa: BLE001 - spaCy raises ImportError or its own errors for an unknown code
        nlp = spacy.blank("xx")
    nlp.to_disk(where)  # no sentencizer in it: Argos adds one, and a second would be refused
    return [(f, f.relative_to(where).as_posix()) for f in sorted(where.rglob("*")) if f.is_file()]


def export_argos(
    path: str | os.PathLike,
    out_file: str | os.PathLike,
    from_code: str | None = None,
    to_code: str | None = None,
    package_version: str = "1.0",
    quantization: str | None = None,
    force: bool = False,
) -> Path:
    """Write an Argos Translate package (`argostranslate.package.install_from_path`, LibreTranslate's
    models directory): a zip holding one directory with metadata.json, model/ (the CTranslate2 export
    of the run, `cached_export`), sentencepiece.model (the run's spm.model) and README.md.

    The package translates as `Translator.load(run, engine="ctranslate2")` does up to the search, which
    is Argos's: sentencepiece pieces in, CTranslate2 appends EOS (`add_source_eos`) and starts from BOS
    as for our engine; Argos then searches with beam 4 (ARGOS_BEAM_SIZE), CTranslate2's length penalty
    0.2 (sum log p / |Y|^0.2, not GNMT's), its default length limit (256), no suppressed tokens, and
    compute type "auto" (ARGOS_COMPUTE_TYPE; int8_float32 on most CPUs, where ours loads float32).
    `from_code`/`to_code`: ISO 639 codes, by default the run's data.src_lang / data.tgt_lang."""
    import zipfile

    from aiayn.checkpoint import find_in_run
    from aiayn.config import Config, DataConfig
    from aiayn.decode.engines import ctranslate2_obstacle

    out = Path(out_file)
    if out.exists() and not force:
        raise ConfigError(f"{out} exists (--force replaces it)")
    why = ctranslate2_obstacle(path, device="cpu")
    if why is not None:
        raise ConfigError(f"cannot export {path} for Argos Translate, which decodes with CTranslate2: {why}")
    found = find_in_run(path, "config.yaml")
    data = Config.load(str(found)).data if found else DataConfig()
    src, tgt = from_code or data.src_lang, to_code or data.tgt_lang
    ct2_dir, _ = cached_export(path, quantization=quantization)
    name = f"translate-{src}_{tgt}-{package_version.replace('.', '_')}"
    metadata = {
        "package_version": package_version,
        "argos_version": ARGOS_VERSION,
        "from_code": src,
        "from_name": LANGUAGE_NAMES.get(src, src),
        "to_code": tgt,
        "to_name": LANGUAGE_NAMES.get(tgt, tgt),
        "type": "translate",
        "links": [],
    }
    readme = (
        f"# {LANGUAGE_NAMES.get(src, src)} -> {LANGUAGE_NAMES.get(tgt, tgt)} ({src}->{tgt})\n\n"
        f"A Transformer trained with aiayn, exported with `aiayn export --argos` from {Path(path).name}.\n"
        "model/ is its CTranslate2 export (quantization: "
        f"{quantization or 'float32'}); sentencepiece.model is its tokenizer (source and target).\n"
        "spacy/ (when spaCy was installed at export) is a blank spaCy pipeline of the source language: with\n"
        "ARGOS_CHUNK_TYPE=SPACY, Argos splits sentences with it and spaCy's rule-based sentencizer, offline.\n"
        "Install: python -c \"import argostranslate.package as p; p.install_from_path('PACKAGE.argosmodel')\"\n"
        "(argospm install takes only names from the online index).\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp_name, "w", zipfile.ZIP_DEFLATED) as z, tempfile.TemporaryDirectory() as spacy_dir:
            z.writestr(f"{name}/metadata.json", json.dumps(metadata, indent=1) + "\n")
            z.writestr(f"{name}/README.md", readme)
            z.write(ct2_dir / "spm.model", f"{name}/sentencepiece.model")
            for f in sorted(ct2_dir.iterdir()):  # a CTranslate2 export aiayn serve/translate also read
                if f.is_file() and f.name != "source.json":  # source.json: paths on this machine
                    z.write(f, f"{name}/model/{f.name}")
            for f, arc in _spacy_sentencizer(src, Path(spacy_dir)):
                z.write(f, f"{name}/spacy/{arc}")
        os.replace(tmp_name, out)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return out
