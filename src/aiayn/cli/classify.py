"""`aiayn classify`: label texts with a classifier run (parsing only; the work is in aiayn.decode.classifier)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "classify",
        help="label texts (or sentence pairs) with a classifier run; score against gold labels when the input has them",
    )
    p.add_argument("-c", "--checkpoint", required=True, help="a task: classify run directory or weights file")
    p.add_argument("--input", required=True, help="TSV: LABEL<TAB>TEXT[<TAB>TEXT_B] or TEXT[<TAB>TEXT_B] lines")
    p.add_argument(
        "--output",
        help="write PREDICTED_LABEL<TAB>TEXT[<TAB>TEXT_B] lines here (default: stdout when the input has no labels)",
    )
    p.add_argument("--confusion", help="confusion-matrix PNG (input with gold labels only)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-tokens", type=int, default=8192, help="tokens per batch")

    def run(a: argparse.Namespace) -> int:
        from aiayn.decode.classifier import Classifier, ClassifyError
        from aiayn.fileio import atomic_write
        from aiayn.scoring import format_scores, scores
        from aiayn.viz import plot_confusion

        clf = Classifier.load(a.checkpoint, a.device)
        ex = clf.read(a.input)
        predicted = [clf.labels[i] for i in clf.predict(ex.a, ex.b, a.max_tokens)]
        texts = ex.a if ex.b is None else [f"{x}\t{y}" for x, y in zip(ex.a, ex.b)]
        lines = "".join(f"{label}\t{t}\n" for label, t in zip(predicted, texts))
        if a.output:
            atomic_write(a.output, lambda tmp: Path(tmp).write_text(lines))
        elif ex.gold is None:
            print(lines, end="")
        if ex.gold is None:
            if a.confusion:
                raise ClassifyError("--confusion needs gold labels in the input (LABEL<TAB>... lines)")
            return 0
        s = scores(ex.gold, predicted, clf.labels)
        print(format_scores(s))
        if a.confusion:
            print(f"wrote {plot_confusion(s, a.confusion)}")
        return 0

    p.set_defaults(run=run)
