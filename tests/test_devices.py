"""The device settings every command gets from aiayn.devices."""

from __future__ import annotations

import pytest
import torch

from aiayn.devices import resolve_device, shape_free_attention


@pytest.fixture
def cudnn_sdp():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_cuda_attention_runs_without_cudnn_plans_and_the_cpu_is_untouched(cudnn_sdp, monkeypatch):
    monkeypatch.delenv("AIAYN_CUDNN_SDP", raising=False)
    shape_free_attention(torch.device("cpu"))
    assert torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.setenv("AIAYN_CUDNN_SDP", "1")  # a user who keeps cuDNN's kernel
    shape_free_attention(torch.device("cuda"))
    assert torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.delenv("AIAYN_CUDNN_SDP")
    shape_free_attention(torch.device("cuda"))
    assert not torch.backends.cuda.cudnn_sdp_enabled()


def test_every_command_resolving_a_cuda_device_gets_the_setting(cudnn_sdp, monkeypatch):
    monkeypatch.delenv("AIAYN_CUDNN_SDP", raising=False)
    assert resolve_device("cpu").type == "cpu" and torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # resolve as on a GPU machine
    assert resolve_device("auto").type == "cuda"
    assert not torch.backends.cuda.cudnn_sdp_enabled()
