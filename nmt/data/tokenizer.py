"""Subwords with SentencePiece (Kudo and Richardson 2018): a small Tokenizer wrapper around a model trained by
:func:`nmt.data.spm_training.train_spm` (re-exported here with the fixed special ids ``PAD_ID = 0``,
``UNK_ID = 1``, ``BOS_ID = 2``, ``EOS_ID = 3``).

Byte fallback is on by default, so characters never seen in training are encoded as UTF-8 byte pieces
(``<0xC3>`` ...) and survive an encode/decode round trip; ``decode`` turns byte pieces back into text and
never emits a raw ``<0x..>`` piece. A hypothesis that contains ``<unk>`` (possible only with byte fallback
off) is decoded to the surface string `` ⁇ `` (SentencePiece's own convention).

What a round trip changes (``decode(encode(text)) == normalize(text)``, with byte fallback): the model's
normalization rule (``tokenizer.normalization``; the default ``nmt_nfkc`` applies NFKC, drops control and
zero-width characters and reads tabs as spaces; ``identity`` changes no character), then every line-break
character (those ``str.splitlines`` breaks at) and the word-boundary mark "▁" (U+2581) become spaces, runs of
spaces become one, and leading and trailing spaces go. Text must be valid Unicode (no lone surrogates).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import sentencepiece as spm

from nmt.data.spm_training import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, UNK, UNK_ID, train_spm

__all__ = ["BOS", "BOS_ID", "EOS", "EOS_ID", "PAD", "PAD_ID", "UNK", "UNK_ID", "WORD_START", "Tokenizer",
           "needed_pieces", "restrict_model_proto", "train_spm"]


WORD_START = "\u2581"  # "▁", SentencePiece's word-boundary piece


_SPACES = re.compile(" {2,}")


_LINE_BREAKS = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # what str.splitlines() splits on


def restrict_model_proto(model_proto: bytes, keep: Iterable[int]) -> bytes:
    """A copy of a SentencePiece model in which every normal piece outside ``keep`` is marked unused, so that
    (deterministic) encoding never produces it and segments such words into smaller kept pieces instead:
    SentencePiece's vocabulary restriction (``spm_encode --vocabulary``), done on the model itself.
    Needs ``protobuf`` (SentencePiece's model format)."""
    from sentencepiece import sentencepiece_model_pb2 as pb  # protobuf, only needed here

    model = pb.ModelProto()
    model.ParseFromString(model_proto)
    keep = set(keep)
    for i, piece in enumerate(model.pieces):
        if i not in keep and piece.type == pb.ModelProto.SentencePiece.NORMAL:
            piece.type = pb.ModelProto.SentencePiece.UNUSED
    return model.SerializeToString()


def needed_pieces(model_proto: bytes, used: Iterable[int]) -> set[int]:
    """The ids a restricted vocabulary of a SentencePiece model must keep besides the pieces its text ``used``, so
    that it segments any text as the whole model does, down to single characters and bytes: every piece that is
    not a normal one (the special ids, the user-defined symbols, the byte pieces), the word-boundary piece "▁",
    and the single-character piece of every character of the ``used`` pieces (BPE takes a word apart into them,
    so none of its letters falls back to bytes); every single-character piece when the model has no byte pieces
    (they are then the only way to spell a word not in the vocabulary). Without "▁" a word boundary outside
    the kept pieces would be written as the three bytes of U+2581 and decode to a literal "▁" glued to the words.
    """
    from sentencepiece import sentencepiece_model_pb2 as pb  # protobuf, only needed here

    model = pb.ModelProto()
    model.ParseFromString(model_proto)
    normal, byte = pb.ModelProto.SentencePiece.NORMAL, pb.ModelProto.SentencePiece.BYTE
    types = [p.type for p in model.pieces]
    singles = {p.piece: i for i, p in enumerate(model.pieces) if p.type == normal and len(p.piece) == 1}
    if byte in types:
        chars = {c for i in used if types[i] == normal for c in model.pieces[i].piece} | {WORD_START}
    else:
        chars = set(singles)
    return {i for i, piece_type in enumerate(types) if piece_type != normal} | {singles[c] for c in chars if c in singles}


class Tokenizer:
    """A trained SentencePiece model with this toolkit's conventions.

    ``encode`` gives ids ending in ``EOS_ID`` (and starting with ``BOS_ID`` when ``add_bos``); ``decode`` turns
    ids back into detokenized text, dropping special ids. Built from a ``.model`` file or from its bytes
    (checkpoints carry the bytes, so a checkpoint is self-contained).

    With ``vocab`` (SentencePiece ids, see :meth:`restricted`) the tokenizer's ids are positions in that list:
    a joint subword model can then give each side its own smaller vocabulary, the pieces that side actually
    uses, which shrinks the target embedding and output layer (``tokenizer.restrict_vocab``). The special
    ids stay 0-3, and the pieces any text needs (:func:`needed_pieces`) are kept, so every text still round-trips.

    Raises:
        ValueError: if the bytes are not a SentencePiece model, the model's special ids differ from the fixed
            ones above (a SentencePiece model not trained by :func:`train_spm`), or ``vocab`` lacks a special id.
    """

    def __init__(self, model_proto: bytes, name: str = "<bytes>", vocab: Iterable[int] | None = None):
        self.name = name
        self.model_proto = bytes(model_proto)
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        except RuntimeError as err:  # SentencePiece's parse error names neither the file nor a fix
            raise ValueError(f"{name} is not a readable SentencePiece model ({str(err).strip()})") from err
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"sentencepiece model {name} has special ids pad/unk/bos/eos = {ids}, expected "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}: train it with nmt.data.tokenizer.train_spm"
            )
        self.vocab: list[int] | None = None
        if vocab is not None:
            self.vocab = sorted({int(i) for i in vocab})
            if self.vocab[:4] != [PAD_ID, UNK_ID, BOS_ID, EOS_ID] or self.vocab[-1] >= self.sp.get_piece_size():
                raise ValueError(f"{name}: a restricted vocabulary must hold the special ids 0-3 and ids of the "
                                 f"model's {self.sp.get_piece_size()} pieces")
            self.sp = spm.SentencePieceProcessor(model_proto=restrict_model_proto(self.model_proto, self.vocab))
            self._to_spm = np.asarray(self.vocab, dtype=np.int64)
            self._to_model = np.full(self.sp.get_piece_size(), UNK_ID, dtype=np.int64)
            self._to_model[self._to_spm] = np.arange(len(self.vocab))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Load a ``.model`` file.

        Raises:
            FileNotFoundError: naming the path, if it is missing.
            ValueError: naming the path, if it is not a SentencePiece model of this toolkit (see the class).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sentencepiece model not found: {path}")
        data = path.read_bytes()
        try:
            spm.SentencePieceProcessor(model_proto=data)
        except RuntimeError as err:  # a damaged file: say how to replace it (checkpoints say so themselves)
            raise ValueError(f"{path} is not a readable SentencePiece model ({str(err).strip()}): replace it with "
                             "one trained by nmt.data.tokenizer.train_spm (in a run folder: delete its spm/ folder and "
                             "the run trains it again)") from err
        return cls(data, name=str(path))

    def restricted(self, texts: Iterable[str]) -> Tokenizer:
        """This model with the vocabulary restricted to the pieces ``texts`` use, plus the pieces any text needs
        (:func:`needed_pieces`: the special ids, user-defined symbols, byte pieces, "▁" and single characters), so
        that every text still round-trips and counts its words as the whole model does."""
        used = {PAD_ID, UNK_ID, BOS_ID, EOS_ID}
        texts = iter(texts)
        while chunk := list(itertools.islice(texts, 20_000)):  # a stream: a chunk in memory at a time
            for ids in self.sp.encode([t for t in chunk if t.strip()]):
                used.update(ids)
        return Tokenizer(self.model_proto, self.name, vocab=used | needed_pieces(self.model_proto, used))

    def __len__(self) -> int:
        return len(self.vocab) if self.vocab is not None else self.sp.get_piece_size()

    def _model_ids(self, ids: list[int]) -> list[int]:
        return ids if self.vocab is None else self._to_model[ids].tolist()

    def _spm_ids(self, ids: Iterable[int]) -> list[int]:
        ids = [int(i) for i in ids]
        return ids if self.vocab is None else self._to_spm[ids].tolist()

    def encode(self, text: str, add_bos: bool = False, sample_alpha: float = 0.0) -> list[int]:
        """Text -> ids ``[len]`` ending in EOS. ``sample_alpha > 0`` samples a segmentation (subword
        regularization, Kudo 2018) instead of the best one."""
        return self.encode_batch([text], add_bos, sample_alpha)[0]

    def encode_batch(self, texts: list[str], add_bos: bool = False, sample_alpha: float = 0.0) -> list[list[int]]:
        """Many texts at once (SentencePiece's threaded batch encode); each list ends in EOS.

        ``sample_alpha > 0`` samples segmentations (subword regularization, Kudo 2018; BPE-dropout with
        probability alpha for BPE models, Provilkov et al. 2020) in one thread, so that
        ``spm.set_random_generator_seed`` makes the result reproducible. With a restricted vocabulary the
        sampled pieces stay inside it (SentencePiece skips, or splits back into their parts, the pieces marked
        unused); a sampled sentence that still held a piece outside it would get its best segmentation instead.
        """
        head = [BOS_ID] if add_bos else []
        if sample_alpha > 0:
            encoded = self.sp.encode(texts, enable_sampling=True, alpha=sample_alpha, nbest_size=-1, num_threads=1)
        else:
            encoded = self.sp.encode(texts)
        ids = [self._model_ids(e) for e in encoded]
        if sample_alpha > 0 and self.vocab is not None:
            outside = [i for i, sentence in enumerate(ids) if UNK_ID in sentence]
            for i, best in zip(outside, self.sp.encode([texts[i] for i in outside])):
                ids[i] = self._model_ids(best)
        return [head + sentence + [EOS_ID] for sentence in ids]

    def decode(self, ids: Iterable[int]) -> str:
        r"""Ids -> detokenized text; pad/bos/eos ids are dropped, byte pieces are joined into characters, and the
        spaces of bare "▁" pieces that nothing continues are collapsed (a generated ``["▁Ein", "▁", "▁Mann", "▁"]``
        reads "Ein Mann", two words, as :func:`nmt.decoding.word_alignment.words_from_pieces` counts them). A generated line
        break (the byte pieces ``<0x0A>``/``<0x0D>``, kept in every vocabulary by byte fallback, or any other
        character that ``str.splitlines`` breaks at: ``\v``, ``\f``, U+001C-U+001E, U+0085, U+2028, U+2029) becomes
        a space, so a translation is always one line and output files keep one line per input line; so does a "▁"
        spelt in byte pieces (``<0xE2><0x96><0x81>``: encoding reads a "▁" in the text as a space too)."""
        return _clean(self.sp.decode(self._spm_ids(i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID))))

    def normalize(self, text: str) -> str:
        """``text`` as a round trip gives it back: ``decode(encode(text)) == normalize(text)`` whenever byte fallback
        is on (the module docstring lists what changes: the model's normalization rule, line breaks and "▁" read as
        spaces, spaces collapsed and stripped)."""
        return _clean(self.sp.normalize(text))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Ids -> piece strings (``"▁Ein"``, ``"</s>"``), the labels used for alignment matrices and plots."""
        return [self.sp.id_to_piece(i) for i in self._spm_ids(ids)]

    def piece_to_id(self, piece: str) -> int:
        """A piece string -> this tokenizer's id (UNK_ID for a piece outside a restricted vocabulary)."""
        return self._model_ids([self.sp.piece_to_id(piece)])[0]


def _clean(text: str) -> str:
    """Decoded or normalized text as one line: "▁" and line breaks -> spaces, runs of spaces -> one, stripped."""
    return _SPACES.sub(" ", _LINE_BREAKS.sub(" ", text.replace(WORD_START, " "))).strip(" ")


LANGUAGE_MARGIN = 1.15  # how many times more pieces per word text takes with the other side's vocabulary


def pieces_per_word(tok: Tokenizer, lines: list[str]) -> float:
    """Subword pieces per whitespace word of ``lines`` under ``tok`` (``</s>`` not counted; 0.0 without words)."""
    words = sum(len(line.split()) for line in lines)
    return sum(len(ids) for ids in tok.encode_batch(lines)) / words if words else 0.0


def fits_other_side(own: Tokenizer, other: Tokenizer, lines: list[str],
                    margin: float = LANGUAGE_MARGIN) -> tuple[float, float] | None:
    """``(pieces per word with own, with other)`` when ``lines`` split into fewer pieces per word with the
    other side's vocabulary than with their own, by ``margin``; else None. With per-side vocabularies restricted
    to the pieces each language uses (``tokenizer.restrict_vocab``), a language's text takes many more pieces
    under the other language's, so this says the text is in the other language; with one shared vocabulary the
    two figures are equal and it says nothing."""
    with_own, with_other = pieces_per_word(own, lines), pieces_per_word(other, lines)
    return (with_own, with_other) if with_own > margin * with_other else None
