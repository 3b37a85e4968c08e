"""Subwords with SentencePiece (Kudo and Richardson 2018): training and a small Tokenizer wrapper.

The special ids are fixed here, once, for every model this toolkit trains:
``PAD_ID = 0``, ``UNK_ID = 1``, ``BOS_ID = 2``, ``EOS_ID = 3``.

Byte fallback is on by default, so characters never seen in training are encoded as UTF-8 byte pieces
(``<0xC3>`` ...) and survive an encode/decode round trip; ``decode`` turns byte pieces back into text and
never emits a raw ``<0x..>`` piece. A hypothesis that contains ``<unk>`` (possible only with byte fallback
off) is decoded to the surface string `` ⁇ `` (SentencePiece's own convention).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"


def train_spm(
    sentences: Iterable[str],
    model_path: str | Path,
    vocab_size: int = 8000,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    byte_fallback: bool = True,
    input_sentence_size: int = 2_000_000,
    seed_sentencepiece_size: int = 1_000_000,
) -> Path:
    """Train a SentencePiece model on ``sentences`` and write it to ``model_path`` (a ``.model`` file).

    Args:
        sentences: training text, one sentence per item (empty strings are skipped).
        model_path: where the ``.model`` file goes; a ``.vocab`` file is written beside it.
        vocab_size: number of pieces, including the four special ids above.
        model_type: ``"bpe"`` or ``"unigram"``.
        character_coverage: share of characters covered by single-character pieces (1.0 for Latin scripts).
        byte_fallback: encode unseen characters as UTF-8 byte pieces instead of ``<unk>``.

    Returns:
        the path of the written model.

    Raises:
        ValueError: if ``model_type`` is unknown or there are no sentences.
        RuntimeError: from SentencePiece if the vocabulary is too large for the text
            (lower ``vocab_size``; the message says the largest size possible).
    """
    if model_type not in ("bpe", "unigram"):
        raise ValueError(f"sentencepiece model_type must be 'bpe' or 'unigram', got {model_type!r}")
    text = [s for s in sentences if s.strip()]
    if not text:
        raise ValueError("cannot train a sentencepiece model on no sentences")
    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=proto,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_piece=PAD, unk_piece=UNK, bos_piece=BOS, eos_piece=EOS,
        input_sentence_size=input_sentence_size,
        seed_sentencepiece_size=seed_sentencepiece_size,
        shuffle_input_sentence=True,
        hard_vocab_limit=False,
        num_threads=2,
        minloglevel=2,
    )
    tmp = model_path.with_suffix(".model.tmp")
    tmp.write_bytes(proto.getvalue())
    tmp.replace(model_path)
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    vocab = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))
    model_path.with_suffix(".vocab").write_text(vocab, encoding="utf-8")
    return model_path


class Tokenizer:
    """A trained SentencePiece model with this toolkit's conventions.

    ``encode`` gives ids ending in ``EOS_ID`` (and starting with ``BOS_ID`` when ``add_bos``); ``decode`` turns
    ids back into detokenized text, dropping special ids. Built from a ``.model`` file or from its bytes
    (checkpoints carry the bytes, so a checkpoint is self-contained).

    Raises:
        ValueError: if the model's special ids differ from the fixed ones above
            (a SentencePiece model not trained by :func:`train_spm`).
    """

    def __init__(self, model_proto: bytes, name: str = "<bytes>"):
        self.name = name
        self.model_proto = bytes(model_proto)
        self.sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"sentencepiece model {name} has special ids pad/unk/bos/eos = {ids}, expected "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}: train it with nmt.tokenizer.train_spm"
            )

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Load a ``.model`` file. Raises FileNotFoundError naming the path if it is missing."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sentencepiece model not found: {path}")
        return cls(path.read_bytes(), name=str(path))

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, add_bos: bool = False, sample_alpha: float = 0.0) -> list[int]:
        """Text -> ids ``[len]`` ending in EOS. ``sample_alpha > 0`` samples a segmentation (subword
        regularization, Kudo 2018) instead of the best one."""
        if sample_alpha > 0:
            ids = self.sp.encode(text, enable_sampling=True, alpha=sample_alpha, nbest_size=-1)
        else:
            ids = self.sp.encode(text)
        return ([BOS_ID] if add_bos else []) + ids + [EOS_ID]

    def encode_batch(self, texts: list[str], add_bos: bool = False) -> list[list[int]]:
        """Many texts at once (SentencePiece's threaded batch encode); each list ends in EOS."""
        head = [BOS_ID] if add_bos else []
        return [head + ids + [EOS_ID] for ids in self.sp.encode(texts)]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> detokenized text; pad/bos/eos ids are dropped, byte pieces are joined into characters."""
        return self.sp.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Ids -> piece strings (``"▁Ein"``, ``"</s>"``), the labels used for alignment matrices and plots."""
        return [self.sp.id_to_piece(int(i)) for i in ids]
