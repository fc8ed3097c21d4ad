"""The Transformer model: masks, embeddings, attention, layers, cache, encoder-decoder."""

from aiayn.model.cache import DecoderCache
from aiayn.model.masks import causal_mask, cross_mask, decoder_mask, padding_mask
from aiayn.model.transformer import Transformer

__all__ = ["Transformer", "DecoderCache", "padding_mask", "causal_mask", "decoder_mask", "cross_mask"]
