"""RUN/metrics.jsonl: the one owner of its format, writer and reader. Torch-free (`aiayn plot` reads it).

One JSON object per line, each with `kind` and `step`:

    {"kind": "train", "step", "loss", "nll", "ppl", "lr", "tokens_per_s", "elapsed", "epoch"}
    {"kind": "valid", "step", "loss", "nll", "ppl", "bleu"}            (bleu null without task.eval_bleu)
    {"kind": "skip",  "step", "reason", "consecutive", "total"[, "scale"]}
    {"kind": "stop",  "step", "reason", "metric", "best", "best_step"}   (early stopping)

A resumed run truncates the file to its checkpoint's step and writes the replayed steps again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aiayn.errors import AiaynError
from aiayn.fileio import atomic_write  # torch-free: reading and writing metrics stay so

FILE_NAME = "metrics.jsonl"


class MetricsError(AiaynError, ValueError):
    """The metrics file is missing or holds something that is not a metrics record."""


class MetricsWriter:
    """Appends records to RUN/metrics.jsonl; only rank 0 writes (`enabled`). With `tensorboard`, every
    numeric field of every record is also a TensorBoard scalar `<kind>/<field>` in RUN/tensorboard/."""

    def __init__(self, run_dir: str | os.PathLike, enabled: bool, tensorboard: bool = False) -> None:
        self.path, self.enabled = Path(run_dir) / FILE_NAME, enabled
        self.tensorboard = tensorboard and enabled
        self.events: Any = None  # the SummaryWriter, opened by truncate (every run starts with one)

    def truncate(self, step: int) -> None:
        """Drop records after `step` (written before a crash, replayed by the resumed run). TensorBoard's
        event files cannot be cut: the new writer marks `step + 1` as a restart, and readers drop the
        earlier files' events from there on, so a replayed step is never shown twice."""
        if not self.enabled:
            return
        if self.tensorboard:
            self._open_events(step)
        keep = []
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:  # a line cut by kill -9
                    continue
                if rec.get("step", 0) <= step:
                    keep.append(line)
        text = "".join(line + "\n" for line in keep)
        atomic_write(self.path, lambda tmp: Path(tmp).write_text(text))

    def write(self, kind: str, step: int, **fields: Any) -> dict[str, Any]:
        rec = {"kind": kind, "step": step, **fields}
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            if self.events is not None:
                for name, value in fields.items():
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        self.events.add_scalar(f"{kind}/{name}", value, step)
        return rec

    def _open_events(self, step: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise MetricsError("train.tensorboard needs tensorboard: pip install 'aiayn[tensorboard]'") from None
        self.close()
        self.events = SummaryWriter(str(self.path.parent / "tensorboard"), purge_step=step + 1, flush_secs=10)

    def close(self) -> None:
        if self.events is not None:
            self.events.close()
            self.events = None


def read_metrics(path: str | os.PathLike) -> dict[str, list[dict]]:
    """RUN/metrics.jsonl (or the run directory) -> {kind: [records]} sorted by step; "train" and
    "valid" always present.

    A resumed run logs some steps twice (from its last checkpoint on): the later record wins. A cut
    final line (a crash mid-write) is ignored; a broken line elsewhere is an error.
    """
    path = Path(path)
    if path.is_dir():
        path = path / FILE_NAME
    if not path.is_file():
        raise MetricsError(f"no metrics file at {path} (expected RUN_DIR/{FILE_NAME})")
    lines = path.read_text(encoding="utf-8").splitlines()
    by_kind: dict[str, dict[int, dict]] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise MetricsError(f"{path}:{n}: not a JSON object: {line[:80]!r}") from None
        if not isinstance(rec, dict) or "kind" not in rec or "step" not in rec:
            raise MetricsError(f"{path}:{n}: a metrics record needs 'kind' and 'step': {line[:80]!r}")
        by_kind.setdefault(rec["kind"], {})[int(rec["step"])] = rec
    out = {k: [recs[s] for s in sorted(recs)] for k, recs in by_kind.items()}
    out.setdefault("train", [])
    out.setdefault("valid", [])
    return out


def stopped_early(run_dir: str | os.PathLike) -> bool:
    """Whether a run stopped before its last update (early stopping, a `stop` record): it is finished."""
    try:
        return bool(read_metrics(run_dir).get("stop"))
    except MetricsError:
        return False
