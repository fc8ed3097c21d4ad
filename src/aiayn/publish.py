"""`aiayn push`: a run's model onto the Hugging Face Hub, loadable as `Translator.load("hf://user/model")`.

The repository gets what a run directory needs to translate (aiayn.hub reads it back as one):

    model.safetensors   the weights: by default what `-c RUN` loads (aiayn.checkpoint.which_weights: the file
                        RUN/weights.json names, else best.safetensors), or the best, the newest checkpoint,
                        or an average of the last K
    spm.model           the tokenizer
    config.yaml         the run's configuration (the decode settings come from it)
    README.md           a model card: YAML front matter (library_name: aiayn, languages, license) and
                        what the model is, how it was trained and how to use it
    ctranslate2/        with --ctranslate2: the run's cached CTranslate2 export (aiayn.export.cached_export)

Uploads go through `huggingface_hub.HfApi` (create_repo, then one upload_folder commit), so HF_ENDPOINT
and HF_TOKEN work as with every Hub tool.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from aiayn.checkpoint import HUB_WEIGHTS, fallback_weights, find_in_run, find_tokenizer, list_checkpoints, which_weights
from aiayn.config import Config
from aiayn.errors import AiaynError
from aiayn.hub import HubError, endpoint, import_huggingface_hub

WEIGHTS_CHOICES = ("default", "best", "newest", "average")


def pick_weights(run: str | os.PathLike, which: str, average_last: int, staging: Path) -> tuple[Path, str]:
    """The weights file to publish and what it is (the model card's line): `default` (what `-c RUN`
    loads, aiayn.checkpoint.which_weights: the file RUN/weights.json names, else as `best`), `best`
    (best.safetensors, else the newest checkpoint), `newest` (the newest step checkpoint) or `average`
    (the mean of the last `average_last` checkpoints, written into `staging`)."""
    if which == "default":
        file, why = which_weights(run)
        return file, f"{file.relative_to(run).as_posix()}, the run's default ({why})"
    if which == "best":
        return fallback_weights(Path(run))[0], which
    if which == "newest":
        found = list_checkpoints(run)
        if not found:
            raise AiaynError(f"no step checkpoints in {Path(run) / 'checkpoints'} (--weights newest)")
        return found[-1][1], which
    if which == "average":
        from aiayn.averaging import average_run

        return average_run(Path(run), average_last, staging / "averaged.safetensors"), which
    raise AiaynError(f"--weights must be one of {', '.join(WEIGHTS_CHOICES)}, not {which!r}")


def count_parameters(weights: Path) -> int:
    """Parameters stored in a safetensors file (tied matrices once), read from its header."""
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        total = 0
        for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            n = 1
            for dim in f.get_slice(key).get_shape():
                n *= dim
            total += n
    return total


def last_valid(run: str | os.PathLike, metric: str) -> tuple[int, float] | None:
    """(step, value) of the run's last validation with a `metric` in RUN/metrics.jsonl, if any."""
    from aiayn.train.metrics import FILE_NAME, MetricsError, read_metrics

    if not (Path(run) / FILE_NAME).is_file():
        return None
    try:
        valid = read_metrics(run)["valid"]
    except MetricsError:
        return None
    scored = [r for r in valid if r.get(metric) is not None]
    return (int(scored[-1]["step"]), float(scored[-1][metric])) if scored else None


def training_command(run: str | os.PathLike) -> str:
    """The command line that trained the run, if it recorded one (RUN/command.txt), else the
    equivalent `aiayn train --config config.yaml`."""
    found = Path(run) / "command.txt"
    if found.is_file() and found.read_text(encoding="utf-8").strip():
        return found.read_text(encoding="utf-8").strip().splitlines()[0]
    return "aiayn train --config config.yaml"


def model_card(
    repo_id: str,
    cfg: Config | None,
    weights: Path,
    run: str | os.PathLike,
    license: str = "other",
    which: str = "default",
) -> str:
    """README.md for the repository: YAML front matter the Hub reads, then what the model is. The task's
    TaskSpec gives its Hub tag, its summary and the validation measure reported (what early stopping
    watched)."""
    from aiayn.checkpoint import weights_config
    from aiayn.train.tasks import get_spec, patience_metric

    m = weights_config(weights)
    cfg = cfg or Config()
    spec = get_spec(cfg.task.name)
    card = spec.card(spec, cfg, repo_id)  # what the task says of its runs
    front = ["---", "library_name: aiayn", "tags:", f"- {spec.hub_tag}", "- aiayn", f"license: {license}"]
    if card.languages:
        front += ["language:", *(f"- {lang}" for lang in card.languages)]
    front.append("---")
    task, corpus = cfg.task.name, cfg.data.corpus
    params = count_parameters(weights)
    metric = patience_metric(cfg, spec)
    label = metric.upper() if len(metric) <= 4 and metric != "loss" else metric
    value = last_valid(run, metric)
    body = [
        "",
        f"# {repo_id}",
        "",
        f"A Transformer ('Attention Is All You Need') trained with aiayn for the `{task}` task{card.what}",
        "",
        f"- Task: {task}",
        *card.facts,
        f"- Data: corpus `{corpus}`",
        f"- Model: {m.kind}, d_model {m.d_model}, {m.n_encoder_layers} encoder and {m.n_decoder_layers} decoder "
        f"layers, {m.n_heads} heads, d_ff {m.d_ff}, vocabulary {m.vocab_size}, {params:,} parameters",
        f"- Weights: {which}",
        f"- Validation {label}: {value[1]:.2f} (step {value[0]})" if value else f"- Validation {label}: not recorded",
        f"- Trained with: `{training_command(run)}`",
        "",
        "## Usage",
        "",
        *card.usage,
    ]
    return "\n".join(front + body)


def stage_run(
    run: str | os.PathLike,
    out: Path,
    repo_id: str,
    *,
    weights: str = "default",
    average_last: int = 5,
    ctranslate2: bool = False,
    license: str = "other",
) -> Path:
    """Write the repository's files into `out` (see the module docstring); returns `out`."""
    run = Path(run)
    if not run.is_dir():
        raise AiaynError(f"aiayn push needs a run directory, got {run}")
    out.mkdir(parents=True, exist_ok=True)
    work = out.parent / (out.name + ".work")
    work.mkdir(exist_ok=True)
    file, label = pick_weights(run, weights, average_last, work)
    shutil.copyfile(file, out / HUB_WEIGHTS)
    shutil.copyfile(find_tokenizer(run), out / "spm.model")
    found = find_in_run(run, "config.yaml")
    cfg = Config.load(str(found)) if found else None
    if found:
        shutil.copyfile(found, out / "config.yaml")
    (out / "README.md").write_text(model_card(repo_id, cfg, out / HUB_WEIGHTS, run, license, label), "utf-8")
    if ctranslate2:
        from aiayn.export import cached_export

        if weights == "newest":
            raise AiaynError("--ctranslate2 exports the run's best weights or an average: not with --weights newest")
        # the export of the very file uploaded as model.safetensors (an average staged outside the run: of
        # the run's last checkpoints, the same mean)
        export, _ = cached_export(run, average_last=average_last) if weights == "average" else cached_export(file)
        shutil.copytree(export, out / "ctranslate2", ignore=shutil.ignore_patterns("*.lock", "source.json"))
        (out / "ctranslate2" / "source.json").write_text(json.dumps({"weights": HUB_WEIGHTS}) + "\n")
    return out


def push_run(
    run: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    weights: str = "default",
    average_last: int = 5,
    ctranslate2: bool = False,
    token: str | None = None,
    license: str = "other",
) -> Any:
    """Upload the run's model to the Hub repository `repo_id` (created if missing; `revision`: a branch,
    created from the default branch if missing) in one commit. Returns huggingface_hub's CommitInfo
    (`.oid` is the commit: `hf://repo_id@<oid>` loads exactly this upload)."""
    hub = import_huggingface_hub("aiayn push")
    from huggingface_hub.errors import HfHubHTTPError

    api = hub.HfApi(endpoint=endpoint(), token=token)
    with tempfile.TemporaryDirectory(prefix="aiayn-push-") as tmp:
        staged = stage_run(
            run,
            Path(tmp) / "repo",
            repo_id,
            weights=weights,
            average_last=average_last,
            ctranslate2=ctranslate2,
            license=license,
        )
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            if revision:
                api.create_branch(repo_id, branch=revision, exist_ok=True)
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=staged,
                revision=revision,
                commit_message=f"aiayn push: {Path(run).name} ({weights} weights)",
            )
        except (HfHubHTTPError, OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise HubError(f"cannot push to {repo_id}: {first}") from None
