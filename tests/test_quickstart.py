"""`aiayn quickstart` end to end in a real process: no network and no mirror -> the embedded corpus."""

from __future__ import annotations

import os
import subprocess
import sys

import torch
from matplotlib.image import imread


def test_quickstart_falls_back_to_the_embedded_corpus_and_writes_pictures(tmp_path):
    env = {
        **os.environ,
        "AIAYN_HOME": str(tmp_path / "home"),
        "OMP_NUM_THREADS": "1",
        "AIAYN_MULTI30K_URL": "http://127.0.0.1:9/multi30k",
    }  # nothing listens: the download fails at once
    env.pop("AIAYN_DATA_DIR", None)
    run = tmp_path / "run"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiayn",
            "quickstart",
            "--minutes",
            "0.05",
            "--run-dir",
            str(run),
            "--test-limit",
            "20",
            "--beam",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "running the embedded digits->English corpus instead" in p.stderr
    assert "test BLEU" in p.stdout and "[beam 2, length penalty 1, 20 test sentences]" in p.stdout
    assert "  21  ->  " in p.stdout  # sample translations are shown
    for name in ("training.png", "attention.png"):
        img = imread(run / "plots" / name)
        assert img.shape[0] > 100 and img.shape[1] > 100
    assert (run / "best.safetensors").is_file() and (run / "spm.model").is_file()


def test_quickstart_decodes_with_the_average_of_its_last_two_checkpoints(tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    from aiayn import quickstart, viz
    from aiayn.checkpoint import list_checkpoints

    monkeypatch.setenv("AIAYN_HOME", str(tmp_path / "home"))
    real = quickstart.quickstart_config

    def often(minutes, corpus, data_dir):  # save every 3 updates so a few seconds leave several checkpoints
        cfg = real(minutes, corpus, data_dir)
        cfg.train.save_every, cfg.train.max_steps, cfg.train.max_minutes = 3, 9, None
        return cfg

    monkeypatch.setattr(quickstart, "quickstart_config", often)
    maps, real_map = [], viz.attention_map

    def recording_map(*args, **kwargs):  # the real heat map, kept for the assertion below
        maps.append(real_map(*args, **kwargs))
        return maps[-1]

    monkeypatch.setattr(viz, "attention_map", recording_map)
    run = tmp_path / "run"
    quickstart.run(1.0, run, corpus="embedded", beam=2, test_limit=5)
    out = capsys.readouterr().out
    assert "decoding with the average of the last 2 checkpoints" in out
    # the heat map shows the pair printed for the first sample, not a translation of its own
    first = quickstart.SAMPLES["digits"][0]
    printed = next(line for line in out.splitlines() if line.startswith(f"  {first}  ->  "))
    assert [(m.source, m.translation) for m in maps] == [(first, printed.split("  ->  ", 1)[1])]
    last_two = [load_file(w) for _, w, _ in list_checkpoints(run)[-2:]]
    avg = load_file(run / "average.safetensors")
    assert avg.keys() == last_two[0].keys()
    for name, value in avg.items():
        torch.testing.assert_close(value, (last_two[0][name] + last_two[1][name]) / 2)
    assert any(not torch.equal(last_two[0][n], last_two[1][n]) for n in avg)  # two different points


def test_the_recipe_is_the_config_file_and_the_fallback_swaps_only_the_data(tmp_path):
    from pathlib import Path

    import yaml

    from aiayn.quickstart import RECIPE, quickstart_config

    assert RECIPE == Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
    recipe = yaml.safe_load(RECIPE.read_text())
    recipe["model"]["d_model"] = 64
    edited = tmp_path / "quickstart.yaml"
    edited.write_text(yaml.safe_dump(recipe))
    m30k = quickstart_config(2.5, "multi30k", "/mirror", recipe=edited)
    assert m30k.model["d_model"] == 64 and m30k.train.max_minutes == 2.5 and m30k.data.data_dir == "/mirror"
    emb = quickstart_config(2.5, "embedded", None, recipe=edited)
    assert (emb.data.corpus, emb.data.src_lang, emb.data.vocab_size) == ("embedded", "digits", 1000)
    assert {k: v for k, v in emb.to_dict().items() if k != "data"} == {
        k: v for k, v in m30k.to_dict().items() if k != "data"
    }
