"""`aiayn quickstart`: the whole pipeline in one command, for a newcomer right after install.

Multi30k German -> English (mirror from $AIAYN_DATA_DIR or --data-dir, then the cache, then the
download); with no network and no mirror it says so in one line and uses the embedded corpus,
so it always runs. It trains a small model (d_model 128, 4+4 layers) for a fixed wall-clock
budget, averages its last two checkpoints (§6.1), scores the test set with beam search
(sacreBLEU, and the published tokenized BLEU on Multi30k), translates a few sentences and writes
a training-curve and an attention heat-map PNG into the run directory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from aiayn import viz
from aiayn.checkpoint import load_translation_model
from aiayn.config import Config, DataConfig, DecodeConfig, OptimConfig, TrainConfig
from aiayn.data import multi30k, prepare
from aiayn.data.io import read_lines
from aiayn.data.multi30k import tokenized_reference_path
from aiayn.decode import Translator
from aiayn.errors import AiaynError
from aiayn.evaluate import score, tokenized_bleu
from aiayn.train import train
from aiayn.train.average import average_run
from aiayn.train.state import list_checkpoints

SAMPLES = {  # shown after training; the first is seed 001's kind of sentence
    "de": [
        "Ein Hund rennt über die Wiese.",
        "Zwei Männer spielen Fußball im Park.",
        "Eine Frau mit rotem Hut liest ein Buch.",
    ],
    "digits": ["21", "345", "70012"],
}


def quickstart_config(minutes: float, corpus: str, data_dir: str | None) -> Config:
    """The §5 recipe sized for a CPU and a short budget: fairseq's `transformer_tiny` shape (the
    published Multi30k anchor), joint 8k BPE, label smoothing 0.1, Adam (0.9, 0.98, 1e-9) with the
    paper's schedule, 1,024-token batches; the average of the last two checkpoints decodes."""
    if corpus == "multi30k":
        data = DataConfig(
            corpus="multi30k", src_lang="de", tgt_lang="en", data_dir=data_dir, vocab_size=8000, max_tokens=1024
        )
    else:
        data = DataConfig(corpus="embedded", src_lang="digits", tgt_lang="en", vocab_size=1000, max_tokens=1024)
    return Config(
        # d_model 128, 4+4 layers, d_ff 256: half the cost per update of `small` and ahead at equal
        # time (docs/results.md). Learned positions (Table 3 row E) converge faster early on.
        model={
            "preset": "small",
            "d_model": 128,
            "d_ff": 256,
            "n_heads": 4,
            "n_encoder_layers": 4,
            "n_decoder_layers": 4,
            "dropout": 0.1,
            "positional": "learned",
        },
        data=data,
        # 1,024-token batches: 4x the updates of 4,096 at the same tokens/s on a CPU (~5,300 in
        # 15 minutes on 2 cores), and at equal tokens val PPL 7.08 against 8.59 (2,048: 7.54).
        # Warm-up over the first 2,000 updates (the ~2M tokens of 500 at 4,096); peak
        # 128^-0.5 * 2000^-0.5 = 2.0e-3.
        optim=OptimConfig(warmup=2000, lr_scale=1.0, label_smoothing=0.1),
        train=TrainConfig(
            max_steps=100_000,
            max_minutes=minutes,
            log_every=200,
            eval_every=1000,
            save_every=1000,
            keep_last=5,
            eval_max_sentences=300,
            seed=1,
        ),
        # a model this briefly trained ends sentences early under the paper's alpha 0.6 (brevity
        # penalty 0.96 on val); on val alpha 0.6 / 1.0 / 1.5 give 37.74 / 38.03 / 38.34 tokenized
        # BLEU, and 1.5 ran away into overlong outputs on a weaker model: 1.0
        decode=DecodeConfig(length_penalty=1.0),
    )


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
    # ones are too far back in a run this short.
    weights: Path = run_dir
    if len(list_checkpoints(run_dir)) >= 2:
        weights = average_run(run_dir, 2, run_dir / "average.safetensors")
        print(f"decoding with the average of the last 2 checkpoints: {weights}")
    translator = Translator.load(weights)  # decodes with the run's config.yaml `decode` section

    src, ref = prepare(cfg.data).raw("test")  # the cached preparation training used
    src, ref = src[:test_limit], ref[:test_limit]
    search = translator.search_config(beam=beam)  # the run's settings, --beam given or not
    beam, lp = search.beam, search.length_penalty
    hyps = translator.translate(src, beam=beam)
    result = {"test": score(hyps, ref), "steps": summary["step"]}
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
