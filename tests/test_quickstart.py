"""`aiayn quickstart` end to end in a real process: no network and no mirror -> the embedded corpus."""

from __future__ import annotations

import os
import subprocess
import sys

from matplotlib.image import imread


def test_quickstart_falls_back_to_the_embedded_corpus_and_writes_pictures(tmp_path):
    env = {**os.environ, "AIAYN_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1",
           "AIAYN_MULTI30K_URL": "http://127.0.0.1:9/multi30k"}  # nothing listens: the download fails at once
    env.pop("AIAYN_DATA_DIR", None)
    run = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "aiayn", "quickstart", "--minutes", "0.05", "--run-dir", str(run),
                        "--test-limit", "20", "--beam", "2"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "running the embedded digits->English corpus instead" in p.stderr
    assert "test BLEU" in p.stdout and "[beam 2, length penalty 1, 20 test sentences]" in p.stdout
    assert "  21  ->  " in p.stdout  # sample translations are shown
    for name in ("training.png", "attention.png"):
        img = imread(run / "plots" / name)
        assert img.shape[0] > 100 and img.shape[1] > 100
    assert (run / "best.safetensors").is_file() and (run / "spm.model").is_file()
