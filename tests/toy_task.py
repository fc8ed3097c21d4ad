"""A task added from outside aiayn: `reverse` trains the encoder-decoder to write a sequence of letters
backwards. It has its own settings (`task.letters`), its own validation measure (`exact`, higher is
better), a predictor, an evaluation and a verb of its own (in tests/toy_task_cli.py, its command-line
module). tests/test_tasks.py installs both as a separate distribution (one entry point, `aiayn.tasks`)
and runs it through the real CLI. Nothing in aiayn is edited."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import torch

from aiayn.config import Config, DataConfig
from aiayn.data.pairs import Prepared, prepare
from aiayn.data.pipeline import Options
from aiayn.decode import Translator
from aiayn.registry import Later
from aiayn.train.tasks import TaskSpec, TranslationTask, task_options
from aiayn.train.tasks.translate_task import translations


@dataclasses.dataclass
class ReverseSettings:
    letters: str = "abcdefgh"  # the alphabet of the sequences (`--task.letters abc`)


def prepare_reversal(cfg: Config, data: DataConfig, run_dir: Path | None, options: Options) -> Prepared:
    """Writes its own parallel text (letters -> the letters reversed) next to the run, then prepares it
    as any pair of files."""
    letters = task_options(cfg, ReverseSettings).letters
    root = Path(run_dir if run_dir is not None else data.data_dir or ".") / "reverse-data"
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(cfg.train.seed)
    files = {}
    for split, n in (("train", 600), ("valid", 40)):
        words = [" ".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(n)]
        for side, lines in (("src", words), ("tgt", [" ".join(reversed(w.split())) for w in words])):
            path = root / f"{split}.{side}"
            path.write_text("".join(x + "\n" for x in lines))
            files[f"{split}_{side}"] = str(path)
    own = DataConfig(**{**vars(data), "corpus": "files", **files})
    return prepare(own, run_dir, options=options)


def exact_match(hyps: list[str], refs: list[str]) -> float:
    return sum(h == r for h, r in zip(hyps, refs)) / max(1, len(refs))


class ReverseTask(TranslationTask):
    """Translation's loss; validation adds `exact`: the share of greedy outputs equal to the reversal."""

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float | None]:
        src, ref = self.prepared.raw("valid")
        with self.autocast():
            hyps = Translator(model, self.prepared.tokenizer, device=self.device).translate(list(src), beam=1)
        return {**self.valid_loss(model), "exact": exact_match(hyps, list(ref))}


SPEC = TaskSpec(
    name="reverse",
    summary="writing a sequence of letters backwards (a toy)",
    model_kind="encoder-decoder",
    settings=ReverseSettings,
    measures={"exact": True},
    default_metric="exact",
    prepare=prepare_reversal,
    longest_row=lambda cfg: (cfg.data.max_len + 1, "data.max_len letters + EOS", "data.max_len"),
    build=ReverseTask,
    predictor=translations,
    evaluate=Later("toy_task_cli:evaluate"),
    commands="toy_task_cli",
)
