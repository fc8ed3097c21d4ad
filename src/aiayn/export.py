"""Export a trained model to CTranslate2 (through CTranslate2's own spec and converter API).

    aiayn export --ctranslate2 OUT_DIR -c RUN_DIR [--quantization int8]

The spec is filled the way CTranslate2's fairseq / OpenNMT-py converters fill theirs, with our
conventions made explicit rather than left to CTranslate2's defaults:

- post-LN (the paper, §3.1) or pre-LN, from `ModelConfig.norm`; LayerNorm epsilon 1e-5 (torch's);
- token embeddings scaled by sqrt(d_model) (§3.4); one matrix for both embeddings and the
  pre-softmax projection (tied; CTranslate2 stores the duplicate once as an alias);
- positions: our own table (interleaved sin/cos from position 0, §3.5, or the learned one) is
  written into the spec, so CTranslate2 adds exactly the vectors our model adds;
- vocabulary = the sentencepiece pieces in id order (pad 0, unk 1, bos 2 = "<s>", eos 3 = "</s>");
  sources get EOS appended by CTranslate2 (`add_source_eos`), the decoder starts from BOS.

The sentencepiece model is copied beside the CTranslate2 files as `spm.model`, so a user does

    sp = sentencepiece.SentencePieceProcessor(model_file="OUT_DIR/spm.model")
    tr = ctranslate2.Translator("OUT_DIR")
    out = tr.translate_batch([sp.encode(line, out_type=str)], beam_size=4, length_penalty=...)
    sp.decode(out[0].hypotheses[0])

`aiayn.argos.export_argos` (`aiayn export --argos OUT.argosmodel -c RUN`) wraps that export in an Argos
Translate package, which LibreTranslate serves.

`cached_export` is the same export as an artifact of the run, for Translator's CTranslate2 engine
(aiayn.decode.engines): written once into RUN/ct2/<key>/, keyed by the content of the weights it came
from, and reused.
"""

from __future__ import annotations

import atexit
import copy
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from aiayn.checkpoint import find_tokenizer, load_model, resolve_weights, weights_config
from aiayn.config import ConfigError
from aiayn.data.tokenizer import Tokenizer

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, used by every norm in aiayn.model


EXPORTABLE = ("encoder-decoder", "decoder-only")  # the model kinds CTranslate2 runs


def _np(t: Any) -> Any:
    return t.detach().cpu().float().contiguous().numpy()


def _linear(spec: Any, linear: Any) -> None:
    spec.weight = _np(linear.weight)  # (out, in): CTranslate2 uses torch's layout
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _norm(spec: Any, norm: Any) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _inputs(spec: Any, embed: Any, n_positions: int) -> None:
    """Token embeddings x sqrt(d_model) + our position table (rows 0..n_positions-1)."""
    emb_spec = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    emb_spec.weight = _np(embed.tokens.weight)
    spec.scale_embeddings = True  # multiply by sqrt(d_model), as aiayn.model.embedding does
    pos = embed.positions
    table = pos.table.weight if pos.kind == "learned" else pos.table  # (P, d_model)
    spec.position_encodings.encodings = _np(table[:n_positions])


def _check(c: Any, vocabulary: list[str]) -> None:
    """What CTranslate2 cannot represent, as one error."""
    if c.kind not in EXPORTABLE:
        raise ConfigError(f"CTranslate2 runs encoder-decoder and decoder-only models, not {c.kind}")
    if len(vocabulary) != c.vocab_size:
        raise ValueError(f"vocabulary has {len(vocabulary)} pieces but the model has vocab_size={c.vocab_size}")
    if c.value_dim != c.head_dim:
        raise ConfigError(f"CTranslate2 needs d_v = d_k; this model has d_k={c.head_dim}, d_v={c.value_dim}")
    if c.attention_window is not None:
        raise ConfigError(
            f"CTranslate2 has no restricted self-attention; this model's attention_window is {c.attention_window}"
        )


def build_spec(model: Any, vocabulary: list[str]) -> Any:
    """A validated-ready CTranslate2 spec holding `model`'s weights: a `TransformerSpec` for a translation
    model, a `TransformerDecoderModelSpec` (as for GPT-2) for a decoder-only one."""
    from ctranslate2.specs import common_spec, transformer_spec

    c = model.config
    _check(c, vocabulary)
    if c.kind == "decoder-only":
        return _decoder_only_spec(model, vocabulary)
    pre = c.norm == "pre"
    common = dict(pre_norm=pre, activation=common_spec.Activation.RELU, head_dim=_head_dim(c))
    encoder = transformer_spec.TransformerEncoderSpec(c.n_encoder_layers, c.n_heads, **common)
    # CTranslate2's attention output (aiayn.decode.align, the web page) is its alignment: the last layer's
    # encoder-decoder attention, here averaged over all heads (its default is the first head alone)
    decoder = transformer_spec.TransformerDecoderSpec(
        c.n_decoder_layers, c.n_heads, alignment_layer=-1, alignment_heads=c.n_heads, **common
    )
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    n_pos = c.max_positions
    _inputs(encoder, model.src_embed, n_pos)
    for ls, layer in zip(encoder.layer, model.encoder):
        _self_block(ls, layer)
    if pre:
        _norm(encoder.layer_norm, model.encoder_norm)

    _inputs(decoder, model.tgt_embed, n_pos)
    _linear(decoder.projection, model.generator)  # tied: same array as the embeddings -> alias
    for ls, layer in zip(decoder.layer, model.decoder):
        _self_attention(ls, layer)
        _linear(ls.attention.linear[0], layer.cross_attn.q)
        _linear(ls.attention.linear[1], layer.cross_attn.kv)  # fused [W^K | W^V]
        _linear(ls.attention.linear[2], layer.cross_attn.out)
        _norm(ls.attention.layer_norm, layer.r2.norm)
        _ffn(ls, layer, layer.r3)
    if pre:
        _norm(decoder.layer_norm, model.decoder_norm)

    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    _tokens(spec.config, c, vocabulary)
    spec.config.decoder_start_token = vocabulary[c.bos_id]
    spec.config.add_source_bos, spec.config.add_source_eos = False, True  # source = pieces + EOS
    return spec


def _head_dim(c: Any) -> int | None:
    """CTranslate2's head_dim: given only where d_k is not d_model / h."""
    return c.d_head if c.d_head is not None and c.d_head * c.n_heads != c.d_model else None


def _self_attention(ls: Any, layer: Any) -> None:
    _linear(ls.self_attention.linear[0], layer.self_attn.qkv)  # fused [W^Q | W^K | W^V]
    _linear(ls.self_attention.linear[1], layer.self_attn.out)
    _norm(ls.self_attention.layer_norm, layer.r1.norm)


def _ffn(ls: Any, layer: Any, residual: Any) -> None:
    _linear(ls.ffn.linear_0, layer.ffn.w1)
    _linear(ls.ffn.linear_1, layer.ffn.w2)
    _norm(ls.ffn.layer_norm, residual.norm)


def _self_block(ls: Any, layer: Any) -> None:
    """An `EncoderLayer` (self-attention + FFN): the encoder's blocks and the decoder-only model's."""
    _self_attention(ls, layer)
    _ffn(ls, layer, layer.r2)


def _tokens(cfg: Any, c: Any, vocabulary: list[str]) -> None:
    cfg.unk_token, cfg.bos_token, cfg.eos_token = (vocabulary[i] for i in (1, c.bos_id, c.eos_id))
    cfg.layer_norm_epsilon = LAYER_NORM_EPS


def _decoder_only_spec(model: Any, vocabulary: list[str]) -> Any:
    """`aiayn.model.DecoderOnly`: self-attention + FFN blocks (`EncoderLayer`s), tied projection."""
    from ctranslate2.specs import common_spec, transformer_spec

    c = model.config
    pre = c.norm == "pre"
    spec = transformer_spec.TransformerDecoderModelSpec.from_config(
        c.n_decoder_layers,
        c.n_heads,
        pre_norm=pre,
        activation=common_spec.Activation.RELU,
        no_final_norm=not pre,  # post-LN: each block ends normalised; pre-LN: one LayerNorm after the stack
        head_dim=_head_dim(c),
    )
    decoder = spec.decoder
    _inputs(decoder, model.embed, c.max_positions)
    _linear(decoder.projection, model.generator)
    for ls, layer in zip(decoder.layer, model.layers):
        _self_block(ls, layer)
    if pre:
        _norm(decoder.layer_norm, model.norm)
    spec.register_vocabulary(vocabulary)
    _tokens(spec.config, c, vocabulary)
    return spec


def spm_vocabulary(spm_file: str | Path) -> list[str]:
    """The sentencepiece pieces in id order (the ids the model was trained on)."""
    sp = Tokenizer(spm_file).sp  # checks the special ids
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def export_ctranslate2(
    model_or_path: Any,
    out_dir: str | Path,
    spm_file: str | Path | None = None,
    quantization: str | None = None,
    force: bool = False,
) -> Path:
    """Write a CTranslate2 model directory (model.bin, config.json, shared_vocabulary, spm.model,
    aiayn_model.json: our ModelConfig, for the position limit).

    `model_or_path`: an `aiayn.model.Transformer` or `DecoderOnly`, or a run directory / weights file.
    `quantization`: None (float32) or any CTranslate2 type, e.g. "int8", "float16".
    """
    if isinstance(model_or_path, (str, Path)):
        path = Path(model_or_path)
        model = _load_exportable(path)
        spm_file = Path(spm_file) if spm_file else find_tokenizer(path)
    else:
        model = model_or_path
        if spm_file is None:
            raise ValueError("exporting an in-memory model needs spm_file")
        spm_file = Path(spm_file)
    out = save_ctranslate2(model, spm_vocabulary(spm_file), out_dir, quantization=quantization, force=force)
    shutil.copyfile(spm_file, out / "spm.model")
    # CTranslate2's config has no position count; `aiayn serve` needs it to cut inputs and outputs
    # where the PyTorch model does.
    (out / "aiayn_model.json").write_text(json.dumps(model.config.to_dict(), indent=1) + "\n")
    return out


def save_ctranslate2(
    model: Any, vocabulary: list[str], out_dir: str | Path, quantization: str | None = None, force: bool = False
) -> Path:
    """Convert an in-memory model with an explicit vocabulary (no sentencepiece file needed)."""
    from ctranslate2.converters.converter import Converter

    if any(p.dtype != torch.float32 for p in model.parameters()):
        model = copy.deepcopy(model).float()  # leave the caller's (bf16/fp16) model as it is

    class _AiaynConverter(Converter):
        def _load(self) -> Any:
            return build_spec(model, vocabulary)

    _AiaynConverter().convert(str(out_dir), quantization=quantization, force=force)
    return Path(out_dir)


# -- the export as a cached artifact of a run ------------------------------------------------------

CACHE_DIR = "ct2"  # inside the run directory: RUN/ct2/<key>/


def _load_exportable(path: str | os.PathLike) -> Any:
    kind = weights_config(resolve_weights(path)).kind
    if kind not in EXPORTABLE:
        raise ConfigError(f"{path} holds an {kind} model: CTranslate2 runs encoder-decoder and decoder-only models")
    return load_model(path, "cpu")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def export_sources(path: str | os.PathLike, average_last: int = 0) -> list[Path]:
    """The weights files an export of `path` is made from: the run's best (or newest) weights, or with
    `average_last` K the run's last K step checkpoints."""
    if average_last:
        from aiayn.averaging import last_checkpoints

        if not Path(path).is_dir():
            raise ConfigError(f"--average-last needs a run directory, got {path}")
        return last_checkpoints(path, average_last)
    return [resolve_weights(path)]


def export_key(weights: list[Path], spm_file: Path, average_last: int, quantization: str | None) -> str:
    """A content key: what the exported files depend on (the weights' and tokenizer's bytes, the
    settings, and the CTranslate2 version whose converter wrote them)."""
    import ctranslate2

    parts = {
        "weights": [_sha256(w) for w in weights],
        "spm": _sha256(spm_file),
        "average_last": average_last,
        "quantization": quantization or "float32",
        "ctranslate2": ctranslate2.__version__,
        "format": 2,  # raised when the export writes other files for the same inputs
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def _writable_root(candidates: list[Path]) -> Path | None:
    for root in candidates:
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = Path(tempfile.mkdtemp(prefix=".probe.", dir=root))
            probe.rmdir()
            return root
        except OSError:
            continue
    return None


def cached_export(path: str | os.PathLike, average_last: int = 0, quantization: str | None = None) -> tuple[Path, bool]:
    """The CTranslate2 export of the run (or weights file) at `path`, built once and reused:
    (its directory, whether this call built it).

    It lives in RUN/ct2/<key>/, `key` hashing the weights it came from (see `export_key`), so new
    weights (a better best.safetensors, another average) get a new export and unchanged ones reuse
    theirs. A run directory that cannot be written falls back to $AIAYN_HOME/ct2/<key>/, then to a
    temporary directory removed at exit. The export is written into a temporary directory beside
    its final place and renamed there when complete (nothing half-written is ever found), under a
    file lock so that processes starting together export once and the others wait for it."""
    from aiayn.data.download import aiayn_home
    from aiayn.fileio import file_lock

    spm_file = find_tokenizer(path)
    weights = export_sources(path, average_last)
    key = export_key(weights, spm_file, average_last, quantization)
    run_dir = Path(path) if Path(path).is_dir() else spm_file.parent
    for place in (run_dir / CACHE_DIR, aiayn_home() / CACHE_DIR):
        if (place / key / "model.bin").is_file():
            return place / key, False
    root = _writable_root([run_dir / CACHE_DIR, aiayn_home() / CACHE_DIR])
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="aiayn-ct2-"))
        atexit.register(shutil.rmtree, tmp, True)
        return _export(weights, spm_file, average_last, quantization, tmp / key), True
    final = root / key
    with file_lock(root / f"{key}.lock", "another process is exporting this model for CTranslate2; waiting for it"):
        if (final / "model.bin").is_file():  # exported by the process we waited for
            return final, False
        for stale in root.glob(f".{key}.tmp*"):  # left by an exporter killed while holding the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp", dir=root))
        try:
            _export(weights, spm_file, average_last, quantization, tmp / "model")
            (tmp / "model" / "source.json").write_text(
                json.dumps(
                    {
                        "weights": [str(w) for w in weights],
                        "average_last": average_last,
                        "quantization": quantization or "float32",
                    },
                    indent=1,
                )
                + "\n"
            )
            try:
                os.rename(tmp / "model", final)
            except OSError:  # another machine sharing this directory published the same key first
                if not (final / "model.bin").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final, True


def _export(weights: list[Path], spm_file: Path, average_last: int, quantization: str | None, out: Path) -> Path:
    if average_last:
        from aiayn.averaging import average_checkpoints

        model: Any = average_checkpoints(weights).eval()
        if model.config.kind not in EXPORTABLE:
            raise ConfigError(f"{weights[-1]} holds a {model.config.kind} model: CTranslate2 cannot run it")
    else:
        model = _load_exportable(weights[0])
    return export_ctranslate2(model, out, spm_file=spm_file, quantization=quantization)
