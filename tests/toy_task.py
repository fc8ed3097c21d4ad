"""A task added from one file: `reverse` trains the encoder-decoder to write a sequence of letters
backwards. Importing this module registers it; nothing else in aiayn is edited (tests/test_tasks.py)."""

from __future__ import annotations

import random
from pathlib import Path

from aiayn.config import Config, DataConfig
from aiayn.data.prepare import Prepared, prepare
from aiayn.train.tasks import TaskSpec, TranslationTask, register
from aiayn.train.tasks.spec import sentence_batches


def prepare_reversal(cfg: Config, data: DataConfig, run_dir: Path | None) -> Prepared:
    """Writes its own parallel text (letters -> the letters reversed) next to the run, then prepares it
    as any pair of files."""
    root = Path(run_dir if run_dir is not None else data.data_dir or ".") / "reverse-data"
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(cfg.train.seed)
    files = {}
    for split, n in (("train", 600), ("valid", 40)):
        words = [" ".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 7))) for _ in range(n)]
        for side, lines in (("src", words), ("tgt", [" ".join(reversed(w.split())) for w in words])):
            path = root / f"{split}.{side}"
            path.write_text("".join(x + "\n" for x in lines))
            files[f"{split}_{side}"] = str(path)
    own = DataConfig(**{**vars(data), "corpus": "files", **files})
    return prepare(own, run_dir)


SPEC = register(
    TaskSpec(
        name="reverse",
        model_kind="encoder-decoder",
        prepare=prepare_reversal,
        train_batches=lambda cfg, prepared, dist, device: sentence_batches(cfg, prepared, dist, device),
        build=TranslationTask,
        longest_row=lambda cfg: (cfg.data.max_len + 1, "data.max_len letters + EOS", "data.max_len"),
        default_metric=lambda cfg: "loss",
    )
)
