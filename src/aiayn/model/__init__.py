"""The Transformer model: masks, embeddings, attention, layers, cache; the encoder-decoder and the two
families built from the same layers, encoder-only (BERT) and decoder-only (GPT)."""

from torch import nn

from aiayn.config import ModelConfig
from aiayn.model.cache import DecoderCache
from aiayn.model.decoder_only import DecoderOnly
from aiayn.model.encoder_only import EncoderOnly
from aiayn.model.masks import causal_mask, cross_mask, decoder_mask, padding_mask
from aiayn.model.transformer import Transformer


def build_model(config: ModelConfig) -> nn.Module:
    """The model a config describes: `config.kind` picks the encoder-decoder, the encoder-only or the
    decoder-only stack (all three from the same layer classes)."""
    kinds: dict[str, type[nn.Module]] = {
        "encoder-decoder": Transformer,
        "encoder-only": EncoderOnly,
        "decoder-only": DecoderOnly,
    }
    return kinds[config.kind](config)


__all__ = [
    "build_model",
    "Transformer",
    "EncoderOnly",
    "DecoderOnly",
    "DecoderCache",
    "padding_mask",
    "causal_mask",
    "decoder_mask",
    "cross_mask",
]
