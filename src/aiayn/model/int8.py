"""Int8 inference on CPU: every projection's weights quantized to int8, one scale per output row.

`quantize_int8(model)` returns a copy whose `nn.Linear` layers (attention projections, feed-forward,
the pre-softmax projection) are torch's dynamic int8 linears: the weights are stored as int8 with one
symmetric scale per output row (per channel: each row's largest |w| maps to the end of the int8
range), and each call quantizes its input to uint8 on the fly, multiplies in int8 with int32
accumulation (fbgemm kernels) and returns float32. Embeddings, positions, LayerNorms, softmax and the
search stay float32. CTranslate2's `compute_type="int8"` also keeps int8 weights per row; it scales
activations per row, torch per call (one scale for the whole (rows, d) input), so a sentence's int8
output can depend slightly on the batch it is decoded in (float32 output does not).

Tied embeddings (§3.4): the pre-softmax projection shares the embedding matrix. The copy's generator
gets its own int8 copy of that matrix, while the embedding lookups keep reading the float32 one, so
quantizing the projection never changes what the embeddings return.

The kernels are CPU-only; the model is expected on the CPU (call `.cpu()` first).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from aiayn.errors import AiaynError


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` (a Transformer, an Ensemble, any module) with every nn.Linear as a dynamic
    int8 linear with per-output-row weight scales; the original is left untouched."""
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise AiaynError(
            "int8 decoding runs on the CPU only (torch's int8 kernels): load the model with device='cpu' / --device cpu"
        )
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as e:  # torch moves eager quantization to torchao; say so instead of a bare ImportError
        raise AiaynError(
            f"int8 needs torch.ao.quantization.quantize_dynamic, missing in torch {torch.__version__}: {e}"
        ) from None
    was_training = model.training
    model.eval()
    try:
        with warnings.catch_warnings():
            # torch >= 2.10 announces the move of eager quantization to torchao on every call
            warnings.simplefilter("ignore")
            q = quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=False)
    finally:
        model.train(was_training)
    return q


def is_int8(model: nn.Module) -> bool:
    """Whether `model` holds dynamic int8 linears (made by `quantize_int8`)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    return any(isinstance(m, DynamicLinear) for m in model.modules())
