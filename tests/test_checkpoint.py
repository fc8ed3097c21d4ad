"""Weights files: self-describing, atomic, never unpickled, clear errors when damaged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aiayn.checkpoint import CheckpointError, load_model, read_metadata, resolve_weights, save_weights
from aiayn.config import ModelConfig
from aiayn.model import Transformer


def make(**kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig.preset("tiny", vocab_size=40, **kw)).eval()


@pytest.mark.parametrize("tie", [True, False])
def test_round_trip_keeps_config_weights_and_tying(tmp_path, tie):
    model = make(tie_embeddings=tie, positional="learned", max_positions=32)
    path = save_weights(model, tmp_path / "w.safetensors", step=7)
    assert read_metadata(path)["step"] == "7"
    loaded = load_model(path)
    assert loaded.config == model.config
    src, tgt = torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]])
    torch.testing.assert_close(loaded(src, tgt), model(src, tgt))
    assert (loaded.generator.weight is loaded.src_embed.tokens.weight) == tie
    assert not list(tmp_path.glob("*.tmp"))


def test_run_directory_prefers_best_then_newest(tmp_path):
    model = make()
    with pytest.raises(CheckpointError, match="no checkpoint"):
        resolve_weights(tmp_path)
    save_weights(model, tmp_path / "checkpoints" / "step_00000010.safetensors")
    save_weights(model, tmp_path / "checkpoints" / "step_00000020.safetensors")
    assert resolve_weights(tmp_path).name == "step_00000020.safetensors"
    save_weights(model, tmp_path / "best.safetensors")
    assert resolve_weights(tmp_path).name == "best.safetensors"


def test_truncated_or_foreign_files_give_clear_errors(tmp_path):
    path = save_weights(make(), tmp_path / "w.safetensors")
    data = path.read_bytes()
    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated.safetensors"):
        load_model(bad)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="junk.safetensors"):
        load_model(junk)
    with pytest.raises(CheckpointError, match="not found"):
        load_model(tmp_path / "missing.safetensors")
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(CheckpointError, match="not an aiayn checkpoint"):
        load_model(tmp_path / "foreign.safetensors")


def test_failed_write_leaves_previous_file(tmp_path, monkeypatch):
    model = make()
    path = save_weights(model, tmp_path / "w.safetensors", step=1)
    before = path.read_bytes()
    import aiayn.checkpoint as ck

    real = ck._st_save_model
    written = []

    def dies_halfway(model, filename, metadata=None):  # a full disk: half the file, then the error
        real(model, filename, metadata=metadata)
        data = open(filename, "rb").read()
        with open(filename, "wb") as f:
            f.write(data[: len(data) // 2])
        written.append(filename)
        raise OSError("disk full")

    monkeypatch.setattr(ck, "_st_save_model", dies_halfway)
    with pytest.raises(OSError, match="disk full"):
        save_weights(model, path, step=2)
    assert written and written[0] != str(path)  # it really wrote somewhere: a temp file next to the target
    assert Path(written[0]).parent == tmp_path
    assert path.read_bytes() == before and read_metadata(path)["step"] == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]  # no temp file left, hidden or not
