"""`aiayn export --ctranslate2` / `--argos` (parsing only; the conversion lives in aiayn.export, the package in
aiayn.argos)."""

from __future__ import annotations

import argparse

from aiayn.errors import AiaynError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a trained model for serving (CTranslate2, Argos Translate)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--ctranslate2",
        metavar="OUT_DIR",
        help="write a CTranslate2 model directory here (spm.model copied beside it)",
    )
    what.add_argument(
        "--argos",
        metavar="OUT.argosmodel",
        help='write an Argos Translate package; install it with python -c "import argostranslate.package as p; '
        "p.install_from_path('OUT.argosmodel')\" (argospm installs only from the online index); LibreTranslate "
        "offline: ARGOS_CHUNK_TYPE=SPACY (docs/serving.md)",
    )
    p.add_argument(
        "-c",
        "--checkpoint",
        required=True,
        metavar="RUN_DIR",
        help="run directory (its default weights: RUN/weights.json's, else best.safetensors, else the newest "
        "checkpoint) or a weights file",
    )
    p.add_argument(
        "--spm", default=None, help="--ctranslate2: sentencepiece model (default: spm.model of the run directory)"
    )
    p.add_argument(
        "--quantization",
        default=None,
        help="CTranslate2 weight type: int8, int8_float32, int16, float16, bfloat16 (default float32)",
    )
    p.add_argument("--source-lang", help="--argos: the package's from_code (default: the run's data.src_lang)")
    p.add_argument("--target-lang", help="--argos: the package's to_code (default: the run's data.tgt_lang)")
    p.add_argument("--package-version", default="1.0", help="--argos: the package's version (default 1.0)")
    p.add_argument("--force", action="store_true", help="replace the output if it exists")

    def run(a: argparse.Namespace) -> int:
        import sys

        from aiayn.argos import export_argos
        from aiayn.checkpoint import describe_weights
        from aiayn.export import export_ctranslate2

        flag = "--argos" if a.argos else "--ctranslate2"
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            raise AiaynError(f"aiayn export {flag} needs ctranslate2: pip install 'aiayn[bench]'") from None
        weights = describe_weights(a.checkpoint)  # said once the export is written: an error stays one line
        if a.argos:
            if a.spm:
                raise AiaynError("--spm is for --ctranslate2: --argos packages the run's own spm.model")
            pkg = export_argos(
                a.checkpoint,
                a.argos,
                from_code=a.source_lang,
                to_code=a.target_lang,
                package_version=a.package_version,
                quantization=a.quantization,
                force=a.force,
            )
            print(f"weights: {weights}", file=sys.stderr)
            print(f"wrote Argos Translate package to {pkg}")
            return 0
        out = export_ctranslate2(
            a.checkpoint, a.ctranslate2, spm_file=a.spm, quantization=a.quantization, force=a.force
        )
        print(f"weights: {weights}", file=sys.stderr)
        print(f"wrote CTranslate2 model to {out}")
        return 0

    p.set_defaults(run=run)
