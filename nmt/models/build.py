"""Building a model from its settings: the ``model``, ``decoder`` and ``attention`` config nodes -> a
:class:`nmt.models.seq2seq.Seq2Seq`.
"""

from __future__ import annotations

from nmt.data.tokenizer import PAD_ID
from nmt.models.biases import with_biases
from nmt.models.decoder import Decoder
from nmt.models.encoder import Encoder
from nmt.models.seq2seq import Seq2Seq
from nmt.settings import instantiate, to_plain


def build_model(model, decoder, attention, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """Instantiate the model described by its settings: ``model`` (sizes, dropout, tying: ``cfg.model``),
    ``decoder`` (style, input feeding: ``cfg.decoder``) and ``attention`` (``cfg.attention``, a
    ``_partial_: true`` node: instantiating it gives the factory the decoder calls with
    ``query_size``/``key_size``). An ``attention.bias`` node (``{position, markov, fertility}``) wraps that
    factory's score model in Cohn et al.'s structural alignment biases (:mod:`nmt.models.biases`).

    Raises:
        hydra.errors.InstantiationException / omegaconf errors: for an attention node with unknown keys.
        ValueError: for invalid sizes or settings (odd ``hidden_size``, an unknown decoder style, an unknown
            ``attention.bias`` key, ...).
    """
    m = model
    if attention.get("bias") is None:
        factory = instantiate(attention)
    else:  # the score model's node without its biases, then the wrapper around it
        node = {key: value for key, value in to_plain(attention).items() if key != "bias"}
        factory = with_biases(instantiate(node), attention.bias)
    encoder = Encoder(src_vocab_size, m.emb_size, m.hidden_size, m.encoder_layers, m.dropout,
                      decoder_layers=m.decoder_layers, pad_id=PAD_ID,
                      word_dropout=m.get("source_word_dropout", 0.0))
    decoder = Decoder(tgt_vocab_size, m.emb_size, m.hidden_size, factory,
                      num_layers=m.decoder_layers, dropout=m.dropout, style=decoder.style, pad_id=PAD_ID,
                      tie_embeddings=m.get("tie_embeddings", False),
                      input_feeding=decoder.get("input_feeding", True),
                      word_dropout=m.get("target_word_dropout", 0.0))
    return Seq2Seq(encoder, decoder)
