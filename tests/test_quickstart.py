"""`aiayn quickstart` end to end: in a real process with no network and no mirror -> the embedded corpus;
in this process with made-up Multi30k files downloaded from a local server -> Multi30k, and a rerun resumes."""

from __future__ import annotations

import gzip
import json
import os
import re
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
    result = quickstart.run(1.0, run, corpus="embedded", beam=2, test_limit=5)
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

    # the run loads what was scored: `aiayn translate -c RUN` on the same sentences gives the BLEU printed
    from aiayn.config import Config
    from aiayn.data import prepare
    from aiayn.scoring import score
    from inprocess import run_aiayn

    assert result["weights"] == str(run / "average.safetensors")
    src, ref = prepare(Config.load(run / "config.yaml").data).raw("test")
    r = run_aiayn("translate", "-c", run, "--beam", "2", input="\n".join(src[:5]) + "\n", text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == (
        f"weights: {run}/average.safetensors (step 9; weights.json: the average of the last 2 checkpoints "
        "(steps 6, 9), what aiayn quickstart scored)"
    )
    printed = re.search(r"test BLEU (\d+\.\d\d) ", out)
    assert printed and f"{score(r.stdout.splitlines(), ref[:5])['bleu']:.2f}" == printed.group(1)


def test_the_recipe_is_the_config_file_and_the_fallback_swaps_only_the_data(tmp_path):
    from pathlib import Path

    import yaml

    from aiayn.quickstart import RECIPE, quickstart_config

    # the packaged recipe, which a checkout's configs/ links to
    assert RECIPE == Path(__file__).resolve().parents[1] / "src" / "aiayn" / "recipes" / "quickstart.yaml"
    assert (Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml").resolve() == RECIPE
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


def test_quickstart_picks_multi30k_from_a_download_then_the_cache_and_a_rerun_resumes(tmp_path, monkeypatch, capsys):
    """README: the quickstart trains on Multi30k when it can get it (the mirror, the cache, else a
    download from $AIAYN_MULTI30K_URL), and a rerun into the same directory resumes the run. Made-up
    Multi30k files (their checksums put into multi30k's tables) from a real HTTP server on 127.0.0.1;
    the recipe with a smaller model, a tiny --minutes on an injected clock."""
    import http.server

    from aiayn import quickstart
    from aiayn.data import multi30k
    from local_http import LocalHTTPServer
    from synthetic_text import synthetic_multi30k

    home = tmp_path / "home"
    monkeypatch.setenv("AIAYN_HOME", str(home))
    monkeypatch.delenv("AIAYN_DATA_DIR", raising=False)
    mirror = synthetic_multi30k(tmp_path / "mirror", monkeypatch)
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  raw/<name> as is, tok/<name> uncompressed, as upstream
            requests.append(self.path)
            kind, name = self.path.strip("/").split("/")[-2:]
            path = mirror / name if kind == "raw" else mirror / "tok" / f"{name}.gz"
            if not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes() if kind == "raw" else gzip.decompress(path.read_bytes())
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = LocalHTTPServer(Handler)
    real = quickstart.quickstart_config

    def smaller(minutes, corpus, data_dir):  # the recipe, smaller: a vocabulary the made-up text can fill
        cfg = real(minutes, corpus, data_dir)
        cfg.data.vocab_size, cfg.train.eval_max_sentences = 400, 4
        cfg.model.update(d_model=64, d_ff=128, n_encoder_layers=2, n_decoder_layers=2)  # the choice is under test
        cfg.decode.max_len_a, cfg.decode.max_len_b = 0.0, 8  # a barely trained model says EOS late: keep it short
        return cfg

    monkeypatch.setattr(quickstart, "quickstart_config", smaller)
    monkeypatch.setattr(quickstart, "_pictures", lambda *a: [])  # drawn in the test above; seconds each here
    # the trainer's clock (train.max_minutes) moves one second each time it is read: the budgets below
    # are counts of updates, the same on any machine
    import itertools
    import types

    import aiayn.train.progress as progress

    ticks = itertools.count()
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    try:
        monkeypatch.setenv("AIAYN_MULTI30K_URL", server.url + "/data/")
        run = tmp_path / "run"
        first = quickstart.run(0.1, run, beam=2, test_limit=5)  # 6 s on that clock
        out = capsys.readouterr()
        assert out.out.startswith("quickstart: multi30k de->en") and "(resuming)" not in out.out
        assert f"downloading {server.url}/data/raw/train.de.gz" in out.err
        fetched = sorted(requests)
        assert fetched == sorted(
            [f"/data/raw/{n}" for n in multi30k.raw_files(["de", "en"])]
            + [f"/data/tok/{n}" for n in multi30k.tok_files(["de", "en"])]
        )
        multi30k.verify(home / "multi30k", ["de", "en"])  # into the cache, checksums ok
        assert "test_tokenized_bleu" in first and first["test"]["sentences"] == 5  # Multi30k's protocol too
        records = (run / "metrics.jsonl").read_text()

        # the rerun: the cache, nothing downloaded; the same run resumed, its budget now 24 s
        second = quickstart.run(0.4, run, beam=2, test_limit=5)
        out = capsys.readouterr()
        assert out.out.startswith("quickstart: multi30k de->en") and "(resuming)" in out.out.splitlines()[0]
        assert sorted(requests) == fetched and "downloading" not in out.err
        assert second["steps"] > first["steps"]
        assert (run / "metrics.jsonl").read_text().startswith(records)  # continued, not started over
        train_steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
        assert train_steps == sorted(train_steps) and train_steps[-1] == second["steps"]
    finally:
        server.close()
    # a mirror given to it is used in place (verified, nothing fetched), the server gone
    monkeypatch.setenv("AIAYN_MULTI30K_URL", "http://127.0.0.1:9/")
    assert quickstart._pick_corpus(str(mirror)) == "multi30k" and sorted(requests) == fetched
