"""The Transformer model: masks, embeddings, attention, layers, cache; the encoder-decoder and the two
families built from the same layers, encoder-only (BERT) and decoder-only (GPT)."""

from aiayn.model.cache import DecoderCache
from aiayn.model.decoder_only import DecoderOnly
from aiayn.model.encoder_only import EncoderOnly
from aiayn.model.masks import causal_mask, cross_mask, decoder_mask, padding_mask
from aiayn.model.transformer import Transformer

__all__ = ["Transformer", "EncoderOnly", "DecoderOnly", "DecoderCache", "padding_mask", "causal_mask",
           "decoder_mask", "cross_mask"]
