"""`aiayn export --ctranslate2` (parsing only; the conversion lives in aiayn.export)."""

from __future__ import annotations

import argparse

from aiayn.errors import AiaynError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a trained model for serving (CTranslate2)")
    p.add_argument(
        "--ctranslate2",
        metavar="OUT_DIR",
        required=True,
        help="write a CTranslate2 model directory here (spm.model copied beside it)",
    )
    p.add_argument(
        "-c",
        "--checkpoint",
        required=True,
        metavar="RUN_DIR",
        help="run directory (best.safetensors, else newest checkpoint) or a weights file",
    )
    p.add_argument("--spm", default=None, help="sentencepiece model (default: spm.model of the run directory)")
    p.add_argument(
        "--quantization",
        default=None,
        help="CTranslate2 weight type: int8, int8_float32, int16, float16, bfloat16 (default float32)",
    )
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")

    def run(a: argparse.Namespace) -> int:
        from aiayn.export import export_ctranslate2

        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            raise AiaynError("aiayn export --ctranslate2 needs ctranslate2: pip install 'aiayn[bench]'") from None
        out = export_ctranslate2(
            a.checkpoint, a.ctranslate2, spm_file=a.spm, quantization=a.quantization, force=a.force
        )
        print(f"wrote CTranslate2 model to {out}")
        return 0

    p.set_defaults(run=run)
