"""`aiayn quickstart`: the whole pipeline in one command, for a newcomer right after install.

Multi30k German -> English (mirror from $AIAYN_DATA_DIR or --data-dir, then the cache, then the
download); with no network and no mirror it says so in one line and uses the embedded corpus,
so it always runs. It trains a small model (d_model 128, 4+4 layers) for a fixed wall-clock
budget, averages its last two checkpoints (§6.1) and makes the average the run's default weights
(RUN/weights.json, so `-c RUN` loads what was scored), scores the test set with beam search
(sacreBLEU, and the published tokenized BLEU on Multi30k), translates a few sentences and writes
a training-curve and an attention heat-map PNG into the run directory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from aiayn import recipes, viz
from aiayn.averaging import average_run
from aiayn.checkpoint import DEFAULT_WEIGHTS, list_checkpoints, load_translation_model, resolve_weights
from aiayn.config import Config
from aiayn.data import multi30k, prepare
from aiayn.data.io import read_lines
from aiayn.data.multi30k import tokenized_reference_path
from aiayn.decode import Translator
from aiayn.errors import AiaynError
from aiayn.scoring import score, tokenized_bleu
from aiayn.train import train

SAMPLES = {  # shown after training; the first is seed 001's kind of sentence
    "de": [
        "Ein Hund rennt über die Wiese.",
        "Zwei Männer spielen Fußball im Park.",
        "Eine Frau mit rotem Hut liest ein Buch.",
    ],
    "digits": ["21", "345", "70012"],
}


# The recipe is a config file like every other run's, shipped inside the package (aiayn.recipes), so
# the quickstart runs from an installed wheel in any directory.
RECIPE = recipes.HERE / "quickstart.yaml"
EMBEDDED = {"data.corpus": "embedded", "data.src_lang": "digits", "data.tgt_lang": "en", "data.vocab_size": 1000}


def quickstart_config(minutes: float, corpus: str, data_dir: str | None, recipe: str | Path = RECIPE) -> Config:
    """The quickstart recipe with the budget and the data the quickstart found: Multi30k (from
    `data_dir` when given) or the embedded digits -> English corpus."""
    if not Path(recipe).is_file():
        raise AiaynError(f"the quickstart recipe {recipe} is missing from this installation of aiayn: reinstall it")
    over: dict[str, Any] = {"train.max_minutes": minutes}
    if corpus == "multi30k":
        over["data.data_dir"] = data_dir
    else:
        over.update(EMBEDDED)
    return Config.load(str(recipe), over)


def _pick_corpus(data_dir: str | None) -> str:
    """multi30k when a mirror, the cache or the download has it; otherwise the embedded corpus."""
    mirror = multi30k.mirror_dir(data_dir)
    if mirror is not None:
        multi30k.verify(mirror, ["de", "en"])
        return "multi30k"
    try:
        multi30k.fetch(["de", "en"], log=lambda m: print(m, file=sys.stderr))
        return "multi30k"
    except (AiaynError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(
            f"Multi30k is not available ({first}); no mirror given (--data-dir or AIAYN_DATA_DIR): "
            f"running the embedded digits->English corpus instead",
            file=sys.stderr,
        )
        return "embedded"


def run(
    minutes: float,
    run_dir: str | Path,
    data_dir: str | None = None,
    beam: int | None = None,
    corpus: str | None = None,
    test_limit: int | None = None,
) -> dict[str, Any]:
    run_dir = Path(run_dir)
    corpus = corpus or _pick_corpus(data_dir)
    cfg = quickstart_config(minutes, corpus, data_dir)
    resume = (run_dir / "config.yaml").is_file()
    print(
        f"quickstart: {corpus} {cfg.data.src_lang}->{cfg.data.tgt_lang}, d_model {cfg.model['d_model']} model, "
        f"{minutes:g} minutes of training into {run_dir}" + (" (resuming)" if resume else ""),
        flush=True,
    )
    summary = train(cfg, run_dir, resume=resume)
    if summary.get("interrupted"):
        return summary

    # §6.1: average the last checkpoints. Two, saved 1,000 updates apart, help (docs/results.md); older
    # ones are too far back in a run this short. The average becomes the run's default weights
    # (RUN/weights.json), and what is scored below is the run as `-c RUN` loads it: the BLEU printed is
    # what `aiayn translate -c RUN`, serve, export and push give.
    if len(list_checkpoints(run_dir)) >= 2:
        average = average_run(
            run_dir, 2, run_dir / "average.safetensors", default_because="what aiayn quickstart scored"
        )
        print(f"decoding with the average of the last 2 checkpoints: {average} (the run's default: {DEFAULT_WEIGHTS})")
    weights = resolve_weights(run_dir)
    translator = Translator.load(run_dir)  # decodes with the run's config.yaml `decode` section

    src, ref = prepare(cfg.data).raw("test")  # the cached preparation training used
    src, ref = src[:test_limit], ref[:test_limit]
    search = translator.search_config(beam=beam)  # the run's settings, --beam given or not
    beam, lp = search.beam, search.length_penalty
    hyps = translator.translate(src, beam=beam)
    result = {"test": score(hyps, ref), "steps": summary["step"], "weights": str(weights)}
    line = f"test BLEU {result['test']['bleu']:.2f} (sacreBLEU, detokenized, cased), chrF {result['test']['chrf']:.2f}"
    if corpus == "multi30k":
        tok_ref = read_lines(tokenized_reference_path("test", cfg.data.tgt_lang, data_dir))[:test_limit]
        result["test_tokenized_bleu"] = tokenized_bleu(hyps, tok_ref, cfg.data.tgt_lang)
        line += f"; tokenized lowercased BLEU {result['test_tokenized_bleu']:.2f} (published protocol)"
    print(f"after {summary['step']} updates: {line}  [beam {beam}, length penalty {lp:g}, {len(src)} test sentences]")

    samples = SAMPLES["de" if corpus == "multi30k" else "digits"]
    outputs = translator.translate(samples, beam=beam)
    for s, t in zip(samples, outputs):
        print(f"  {s}  ->  {t}")
    result["pictures"] = _pictures(run_dir, translator, weights, samples[0], outputs[0])
    return result


def _pictures(run_dir: Path, translator, weights: Path, sentence: str, translation: str) -> list[str]:
    try:
        curves = viz.plot_runs([run_dir], run_dir / "plots" / "training.png")
        # The heat map of the translation printed above (beam search), not a greedy one of its own; read
        # from our model, whichever engine translated.
        model = translator.model if translator.engine == "torch" else load_translation_model(weights, "cpu")
        ids = translator.tokenizer.encode(translation)
        amap = viz.attention_map(model, translator.tokenizer, sentence, target_ids=ids)
        heat = viz.plot_attention(amap, run_dir / "plots" / "attention.png", kind="cross")
    except AiaynError as e:  # matplotlib missing: the numbers above are the result, say how to get pictures
        print(f"no pictures: {e}", file=sys.stderr)
        return []
    print(f"pictures: {curves} (training curves), {heat} (encoder-decoder attention)")
    return [str(curves), str(heat)]
