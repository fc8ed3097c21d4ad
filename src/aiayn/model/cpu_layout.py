"""Float32 CPU decoding with the weights of the per-token layers pre-packed for MKL's matrix product.

`F.linear` hands MKL's `sgemm` the plain (out, in) weight matrix, and sgemm copies ("packs") it into
its internal blocked layout on every call. At decoding sizes (tens to hundreds of rows against a
whole weight matrix) that copy is a large share of the product: each decoder step multiplies a few
rows by every weight of the decoder. CTranslate2 packs each weight once at load time
(`cblas_sgemm_pack`) and multiplies with `cblas_sgemm_compute`; `PackedLinear` does the same through
torch's own bindings of those two calls (`torch.ops.mkl._mkl_reorder_linear_weight` and
`_mkl_linear`, which torch's inductor uses for frozen CPU graphs).

One pack serves every row count. torch's `_mkl_linear` takes the row count the weights were packed for
and falls back to the plain product for any other; MKL's packed B matrix, though, has one size whatever
row count it was packed for and works with any (CTranslate2 packs with m = 1 and multiplies any number
of rows), so the forward pass names the actual row count and always takes the packed path. The rows it
is packed for only steers MKL's choice of kernel: in whole decodes, packing for 64 rows served greedy
search of 64 sentences best and 256 rows beam search of them (256 rows); 128 comes within a few
percent of both (docs/benchmarks.md). Each pack is checked once against F.linear at several row
counts before it is used; a mismatch keeps the plain nn.Linear.

Rounding: the packed product equals F.linear's bit for bit at most shapes measured (8 or more rows,
256 or 512 inputs), and differs by a few units in the last place otherwise (fewer rows, 2,048
inputs: the FFN's second product at d_model 512). A near-tie between two tokens can then break the
other way: docs/benchmarks.md counts the Multi30k test lines that change.

`pack_for_cpu(model)` swaps, in place, the nn.Linear layers that run once per generated token (the
decoder side of a Transformer, all of a decoder-only model) for a `PackedLinear` that keeps the
original weight and bias parameters (same state_dict, tied embeddings stay tied; the pack is one more
copy of each matrix). Inference only: with autograd recording or on another device or dtype the layer
runs F.linear on its own weights, and where torch has no MKL (e.g. ARM builds) nothing is swapped. The
pack is not updated when the weights change afterwards.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.decoder_only import DecoderOnly
from aiayn.model.transformer import Transformer

PACK_ROWS = 128  # the row count MKL is told at packing time (see above)
CHECK_ROWS = (1, 3, 17, PACK_ROWS + 5)  # row counts each pack is checked at before use


def mkl_packing_available() -> bool:
    """Whether this torch build carries MKL and its packed-GEMM ops (x86 builds do; ARM builds do not)."""
    if not torch.backends.mkl.is_available():
        return False
    try:
        torch.ops.mkl._mkl_linear  # noqa: B018  (looked up, not called: raises when the op is missing)
        torch.ops.mkl._mkl_reorder_linear_weight  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


class PackedLinear(nn.Module):
    """y = x W^T + b with W packed once for MKL's `cblas_sgemm_compute`; inference only (see above)."""

    def __init__(self, linear: nn.Linear, packed: Tensor) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # the same Parameter: state_dict and weight tying unchanged
        self.bias = linear.bias
        self.packed = packed  # an opaque MKL buffer, not a buffer of the module: never saved or moved

    def forward(self, x: Tensor) -> Tensor:
        if (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)) or (
            x.device.type != "cpu" or x.dtype != torch.float32
        ):
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(-1, self.in_features)  # (rows, in): the packed product takes 2-D input
        y = torch.ops.mkl._mkl_linear(flat, self.packed, self.weight, self.bias, flat.size(0))  # (rows, out)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


@torch.no_grad()
def pack_linear(linear: nn.Linear, rows: int = PACK_ROWS) -> PackedLinear | None:
    """`linear` with its weights packed (MKL told `rows` rows), or None where packing is unavailable or
    its product does not match F.linear's (relative error above 1e-4 at any of CHECK_ROWS)."""
    w = linear.weight
    if w.device.type != "cpu" or w.dtype != torch.float32 or not mkl_packing_available():
        return None
    layer = PackedLinear(linear, torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), rows))
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for rows in CHECK_ROWS:
            x = torch.randn(rows, linear.in_features, generator=gen)
            ref, got = F.linear(x, w, linear.bias), layer(x)
            if not torch.allclose(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max().clamp(min=1.0))):
                return None
    return layer


def _pack_below(parent: nn.Module, rows: int) -> None:
    for module in list(parent.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and (layer := pack_linear(child, rows)) is not None:
                setattr(module, name, layer)


def pack_for_cpu(model: nn.Module, rows: int = PACK_ROWS) -> nn.Module:
    """Swap, in place, the nn.Linear layers that run once per generated token for PackedLinear: the
    decoder stack and pre-softmax projection of every encoder-decoder Transformer in `model` (a
    Transformer or an Ensemble of them) and every layer of a decoder-only model. Encoders, which run
    once per batch on many rows, keep nn.Linear (packing measured no faster there), as does a layer
    that cannot be packed. `rows`: the row count MKL is told at packing time (see above). Returns
    `model`. For float32 inference on the CPU: call it after loading, averaging and moving the weights."""
    for m in list(model.modules()):
        if isinstance(m, Transformer):
            _pack_below(m.decoder, rows)
            if type(m.generator) is nn.Linear and (gen := pack_linear(m.generator, rows)) is not None:
                m.generator = gen  # type: ignore[assignment]  # declared nn.Linear
        elif isinstance(m, DecoderOnly):
            _pack_below(m, rows)
    return model


def is_packed(model: nn.Module) -> bool:
    """Whether `pack_for_cpu` has swapped layers of `model`."""
    return any(isinstance(m, PackedLinear) for m in model.modules())
