"""Float32 CPU decoding with the decoder's weights stored transposed, (in, out) instead of (out, in).

`nn.Linear` keeps W as (out_features, in_features) and multiplies x W^T. For the pre-softmax
projection at decoding sizes, torch's MKL sgemm is faster on a copy of W^T made contiguous once:
vocabulary 8,000, 64 rows (greedy search, 64 sentences), 1 thread, on the 2-core AMD EPYC of
docs/benchmarks.md (issue 26): 1.20x for d_model 256 and 512 against F.linear, the decoder layers'
own products 1.0-1.08x (`python bench/packed_linear.py`). Pre-packing the weights with MKL
(`cblas_sgemm_pack`, torch.ops.mkl._mkl_linear, as CTranslate2 does) measured the same as this plain
transposed copy there, and is packed for one row count; oneDNN's packed weights were slower on the
decoder layers. The transposed copy is an ordinary `addmm` on a contiguous matrix and serves any row
count (batches shrink as sentences finish); at 1-16 rows the vocabulary projection measured 1.07-2.4x
faster than F.linear.

Rounding: MKL does not promise the same bits for the two layouts. On that CPU the outputs were bitwise
equal to nn.Linear's for 4, 8 and 12 or more rows, and differed by a few units in the last place for
1-3, 5-7 and 9-11 rows (largest |difference| 5e-5 on outputs of size ~16: N(0, 1) inputs and weights,
256 inputs). Greedy and beam outputs of the
test models are unchanged (tests/test_cpu_layout.py), but a near-tie between two tokens can break the
other way, so the Translator uses it only when asked (`Translator.load(..., transposed=True)`).

`transpose_for_cpu(model)` swaps, in place, every nn.Linear of each encoder-decoder Transformer's
decoder stack and its generator for a `TransposedLinear` (the encoder, run once per batch, keeps its
own). Inference only: the new modules hold buffers, not parameters, and no gradient reaches them.

Tied embeddings (§3.4): the generator shares the embedding matrix. Its TransposedLinear holds its own
transposed copy (d_model x vocab floats more memory); the embedding lookups keep reading the original
matrix, which is not touched.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.model.transformer import Transformer


class TransposedLinear(nn.Module):
    """y = x W^T + b with W^T stored contiguous (in_features, out_features); inference only."""

    weight_t: Tensor
    bias: Tensor | None

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_t", linear.weight.detach().t().contiguous())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)  # addmm/mm take 2-D operands, as F.linear folds them
        y = flat @ self.weight_t if self.bias is None else torch.addmm(self.bias, flat, self.weight_t)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _swap(parent: nn.Module) -> int:
    """Replace every nn.Linear below `parent` (not `parent` itself) by a TransposedLinear; the count."""
    n = 0
    for name, child in list(parent.named_children()):
        if type(child) is nn.Linear:
            setattr(parent, name, TransposedLinear(child))
            n += 1
        else:
            n += _swap(child)
    return n


def transpose_for_cpu(model: nn.Module) -> nn.Module:
    """Swap, in place, the decoder-side nn.Linear layers of every encoder-decoder Transformer in `model`
    (a Transformer or an Ensemble of them) for TransposedLinear; returns `model`. For float32 decoding
    on the CPU; call it after loading, averaging and moving the weights. Other models are returned as
    they are."""
    for m in list(model.modules()):
        if isinstance(m, Transformer) and type(m.generator) is nn.Linear:
            _swap(m.decoder)
            m.generator = TransposedLinear(m.generator)  # type: ignore[assignment]  # declared nn.Linear
    return model


def is_transposed(model: nn.Module) -> bool:
    """Whether `transpose_for_cpu` has swapped layers of `model`."""
    return any(isinstance(m, TransposedLinear) for m in model.modules())
