"""`aiayn push` and `hf://user/model` loading, with the real huggingface_hub client against a local
stand-in for the Hub API (tests/local_http.py LocalHub): push a tiny run, load it back as a run."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from aiayn.checkpoint import save_weights
from aiayn.config import Config, DataConfig, DecodeConfig, ModelConfig
from aiayn.data.tokenizer import Tokenizer
from aiayn.errors import AiaynError
from aiayn.model import Transformer

huggingface_hub = pytest.importorskip("huggingface_hub")

from local_http import LocalHub  # noqa: E402
from test_decode_cli import LINES  # noqa: E402  (the sentences its runs translate)

TOKEN = "hf_standin"


def make_run(run: Path, spm: Path, seed: int) -> Path:
    """A run directory with untrained weights (seeded: two seeds, two models), a config and metrics."""
    run.mkdir(parents=True)
    shutil.copyfile(spm, run / "spm.model")
    vocab = Tokenizer(run / "spm.model").vocab_size
    torch.manual_seed(seed)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=vocab, max_positions=32)).eval()
    save_weights(model, run / "best.safetensors", step=5)
    for step in (3, 5):  # step checkpoints for --weights newest / average (the state file need only exist)
        torch.manual_seed(seed * 10 + step)
        other = Transformer(ModelConfig.preset("tiny", vocab_size=vocab, max_positions=32))
        save_weights(other, run / "checkpoints" / f"step_{step:08d}.safetensors", step=step)
        (run / "checkpoints" / f"step_{step:08d}.state.pt").write_bytes(b"")
    cfg = Config(
        model={"preset": "tiny", "max_positions": 32},
        data=DataConfig(corpus="embedded", src_lang="de", tgt_lang="en"),
        decode=DecodeConfig(beam=2, max_len_a=0.0, max_len_b=5),  # untrained weights rarely say EOS
    )
    cfg.save(run / "config.yaml")
    records = [
        {"kind": "valid", "step": 3, "loss": 5.0, "nll": 5.0, "ppl": 148.4, "bleu": 1.25},
        {"kind": "valid", "step": 5, "loss": 4.0, "nll": 4.0, "ppl": 54.6, "bleu": 2.5},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hub-runs")
    Tokenizer.train(LINES * 20, root / "spm.model", vocab_size=320)
    return make_run(root / "a", root / "spm.model", 0), make_run(root / "b", root / "spm.model", 1)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHub]:
    """The stand-in, with huggingface_hub pointed at it and its cache in tmp_path. huggingface_hub
    reads its environment once, at import: aiayn.hub reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE
    when called, and the constants the client itself falls back on are pointed here too."""
    from huggingface_hub import constants

    server = LocalHub()
    home = tmp_path / "hf-home"
    for k, v in {"HF_ENDPOINT": server.url, "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    yield server
    server.close()


def translate(path: str | Path) -> list[str]:
    from aiayn import Translator

    return Translator.load(path, device="cpu", engine="torch").translate(LINES)


def test_push_then_load_translates_as_the_run_does(runs: tuple[Path, Path], hub: LocalHub) -> None:
    from aiayn.publish import push_run

    info = push_run(runs[0], "user/tiny", token=TOKEN, license="mit")
    assert len(info.oid) == 40 and hub.refs[("user/tiny", "main")] == info.oid
    pushed = hub.commits[info.oid]
    assert sorted(pushed) == ["README.md", "config.yaml", "model.safetensors", "spm.model"]
    assert pushed["model.safetensors"] == (runs[0] / "best.safetensors").read_bytes()
    assert translate("hf://user/tiny") == translate(runs[0])

    card = pushed["README.md"].decode()
    assert card.startswith("---\nlibrary_name: aiayn\n")
    for line in ("license: mit", "language:\n- de\n- en", "- translation", "- aiayn"):
        assert line in card.split("---")[1], line
    assert "Languages: de -> en" in card
    assert "Validation BLEU: 2.50 (step 5)" in card
    assert "Trained with: `aiayn train --config config.yaml`" in card
    assert 'Translator.load("hf://user/tiny")' in card
    assert re.search(r"d_model 64, 2 encoder and 2 decoder layers, .* [\d,]+ parameters", card)


def test_push_stages_the_newest_or_averaged_weights(runs: tuple[Path, Path], tmp_path: Path) -> None:
    from aiayn.checkpoint import load_model
    from aiayn.publish import stage_run

    newest = stage_run(runs[0], tmp_path / "newest", "user/tiny", weights="newest")
    ckpt = runs[0] / "checkpoints"
    assert (newest / "model.safetensors").read_bytes() == (ckpt / "step_00000005.safetensors").read_bytes()
    assert "- Weights: newest" in (newest / "README.md").read_text()
    averaged = stage_run(runs[0], tmp_path / "average", "user/tiny", weights="average", average_last=2)
    a, b = (load_model(ckpt / f"step_{s:08d}.safetensors").state_dict() for s in (3, 5))
    mean = load_model(averaged / "model.safetensors").state_dict()
    key = "encoder.layers.0.ffn.w1.weight" if "encoder.layers.0.ffn.w1.weight" in mean else next(iter(mean))
    torch.testing.assert_close(mean[key], (a[key].double() + b[key].double()).div(2).float())


def test_push_uploads_the_weights_the_run_loads_and_their_export(
    runs: tuple[Path, Path], hub: LocalHub, tmp_path: Path
) -> None:
    """After `aiayn average --default`, `-c RUN` loads the average (RUN/weights.json): push uploads it as
    model.safetensors, and with --ctranslate2 the export made from it; hf:// then translates as the run."""
    pytest.importorskip("ctranslate2")
    from aiayn.export import cached_export
    from aiayn.publish import push_run, stage_run
    from inprocess import run_aiayn

    run = Path(shutil.copytree(runs[0], tmp_path / "run"))
    assert run_aiayn("average", run, "--last", "2", "--default").returncode == 0
    average = run / "average_last2.safetensors"
    info = push_run(run, "user/avg", token=TOKEN, ctranslate2=True)
    pushed = hub.commits[info.oid]
    assert pushed["model.safetensors"] == average.read_bytes() != (run / "best.safetensors").read_bytes()
    assert pushed["ctranslate2/model.bin"] == (cached_export(average)[0] / "model.bin").read_bytes()
    card = pushed["README.md"].decode()
    assert "- Weights: average_last2.safetensors, the run's default (weights.json: the average of the last 2" in card
    assert translate("hf://user/avg") == translate(run) == translate(average) != translate(run / "best.safetensors")
    best = stage_run(run, tmp_path / "best", "user/avg", weights="best", ctranslate2=True)  # by name: still there
    assert (best / "model.safetensors").read_bytes() == (run / "best.safetensors").read_bytes()
    assert (best / "ctranslate2" / "model.bin").read_bytes() == (
        cached_export(run / "best.safetensors")[0] / "model.bin"
    ).read_bytes()


def test_a_revision_pins_the_model(runs: tuple[Path, Path], hub: LocalHub) -> None:
    from aiayn.publish import push_run

    first = push_run(runs[0], "user/tiny", token=TOKEN).oid
    second = push_run(runs[1], "user/tiny", token=TOKEN).oid
    assert first != second
    a, b = translate(runs[0]), translate(runs[1])
    assert a != b, "the two seeds should give two models"
    assert translate(f"hf://user/tiny@{first}") == a
    assert translate("hf://user/tiny") == b
    assert translate(f"hf://user/tiny@{second}") == b


def test_a_pushed_ctranslate2_export_is_what_auto_decodes_with(runs: tuple[Path, Path], hub: LocalHub) -> None:
    pytest.importorskip("ctranslate2")
    from aiayn import Translator
    from aiayn.hub import resolve_run
    from aiayn.publish import push_run

    info = push_run(runs[0], "user/ct2", token=TOKEN, ctranslate2=True)
    assert {"ctranslate2/model.bin", "ctranslate2/spm.model"} <= set(hub.commits[info.oid])
    t = Translator.load("hf://user/ct2", device="cpu")
    assert t.engine == "ctranslate2"
    assert t.translate(LINES) == translate(runs[0])
    snapshot = Path(resolve_run("hf://user/ct2"))
    assert not (snapshot / "ct2").exists(), "exported again into the HF cache instead of using ctranslate2/"


def test_offline_loads_from_the_cache(runs: tuple[Path, Path], hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiayn.publish import push_run

    push_run(runs[0], "user/tiny", token=TOKEN)
    expected = translate("hf://user/tiny")
    seen = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert translate("hf://user/tiny") == expected
    assert hub.requests[seen:] == []
    with pytest.raises(AiaynError, match=r"^cannot download hf://user/other"):
        translate("hf://user/other")
    assert hub.requests[seen:] == []


def test_a_repo_without_an_aiayn_model_is_one_clear_error(hub: LocalHub, tmp_path: Path) -> None:
    api = huggingface_hub.HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo("user/notes")
    api.upload_file(path_or_fileobj=b"just notes\n", path_in_repo="README.md", repo_id="user/notes")
    with pytest.raises(AiaynError) as e:
        translate("hf://user/notes")
    assert str(e.value) == "hf://user/notes holds no aiayn model: no model.safetensors or spm.model in the repository"
    api.upload_file(path_or_fileobj=b"not safetensors", path_in_repo="model.safetensors", repo_id="user/notes")
    api.upload_file(path_or_fileobj=b"not spm", path_in_repo="spm.model", repo_id="user/notes")
    with pytest.raises(AiaynError, match=r"^hf://user/notes holds no aiayn model: its model.safetensors carries no"):
        translate("hf://user/notes")
    with pytest.raises(AiaynError, match=r"^cannot download hf://user/missing: .*(not found|RepoNotFound|404)"):
        translate("hf://user/missing")
    with pytest.raises(AiaynError, match=r"^not a Hub model path: 'hf://tiny'"):
        translate("hf://tiny")


def test_without_huggingface_hub_one_line_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from aiayn.hub import resolve_run

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(AiaynError, match=r'pip install "aiayn\[hub\]"$'):
        resolve_run("hf://user/tiny")
    assert resolve_run("some/run") == "some/run"  # not a Hub path: as given


def test_cli_push_and_translate(
    runs: tuple[Path, Path], hub: LocalHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aiayn.cli import main

    assert main(["push", str(runs[1]), "user/cli", "--token", TOKEN, "--revision", "v1", "--weights", "best"]) == 0
    out = capsys.readouterr().out
    sha = hub.refs[("user/cli", "v1")]
    assert f"commit {sha}" in out and "hf://user/cli@v1" in out
    assert "model.safetensors" not in hub.commits[hub.refs[("user/cli", "main")]]  # the branch only

    src = tmp_path / "src.txt"
    src.write_text("\n".join(LINES) + "\n")
    for path in ("hf://user/cli@v1", f"hf://user/cli@{sha}"):
        assert main(["translate", "-c", path, "--engine", "torch", "--device", "cpu", "--input", str(src)]) == 0
        assert capsys.readouterr().out.splitlines() == translate(runs[1])

    assert main(["translate", "-c", "hf://user/nothing", "--engine", "torch", "--input", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot download hf://user/nothing:")


def test_cli_serve_takes_a_hub_path(
    runs: tuple[Path, Path], hub: LocalHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uvicorn = pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    from aiayn.cli import main
    from aiayn.publish import push_run

    push_run(runs[0], "user/tiny", token=TOKEN)
    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))  # the app, not a listening server
    assert main(["serve", "-c", "hf://user/tiny", "--engine", "torch", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert served and "aiayn serve: hf://user/tiny (" in out and "de->en, beam 2" in out  # the run's config.yaml
