"""Training SentencePiece models (Kudo and Richardson 2018) with this toolkit's conventions, and checking the
``tokenizer.*`` settings and the training text first, so that a refusal names the setting or file and what to do
before anything is written.

The special ids are fixed here, once, for every model this toolkit trains:
``PAD_ID = 0``, ``UNK_ID = 1``, ``BOS_ID = 2``, ``EOS_ID = 3`` (:mod:`nmt.data.tokenizer` uses them).
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"


NORMALIZATIONS = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity")  # SentencePiece's built-in rules


MAX_SENTENCE_LENGTH = 4192  # SentencePiece's default: it learns from no training line longer (in UTF-8 bytes)


_BYTE_PIECE = re.compile("<0x[0-9A-Fa-f]{2}>")


_FIXED = {"pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID, "pad_piece": PAD, "unk_piece": UNK,
          "bos_piece": BOS, "eos_piece": EOS, "shuffle_input_sentence": True, "hard_vocab_limit": False,
          "num_threads": 2, "minloglevel": 2}  # SentencePiece options every model of this toolkit is trained with


log = logging.getLogger(__name__)


def check_settings(model_type: str = "bpe", normalization: str = "nmt_nfkc", user_defined_symbols=(),
                   max_sentence_length: int = MAX_SENTENCE_LENGTH) -> list[str]:
    """Check the SentencePiece settings ``tokenizer.*`` before any work; returns the user-defined symbols as a list.

    Raises:
        ValueError: naming the setting and the values it takes: an unknown ``model_type`` or ``normalization``; a
            ``user_defined_symbols`` that is not a list of distinct non-empty strings without whitespace (or one that
            is a special piece or looks like a byte piece ``<0x41>``); a ``max_sentence_length`` below 1.
    """
    if model_type not in ("bpe", "unigram"):
        raise ValueError(f"tokenizer.model_type must be 'bpe' or 'unigram', got {model_type!r}")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"tokenizer.normalization must be one of {', '.join(NORMALIZATIONS)} (SentencePiece's "
                         f"normalization rules), got {normalization!r}")
    if isinstance(user_defined_symbols, str) or not isinstance(user_defined_symbols, Iterable):
        raise ValueError(  # noqa: TRY004 (a setting: train.py reports a ValueError in one line)
            f"tokenizer.user_defined_symbols must be a list, got {user_defined_symbols!r}: on the command line "
            """'tokenizer.user_defined_symbols=["<NUM>","<URL>"]' (Hydra needs the inner quotes)""")
    symbols = list(user_defined_symbols)
    for symbol in symbols:
        if (not isinstance(symbol, str) or not symbol or any(c.isspace() for c in symbol)
                or symbol in (PAD, UNK, BOS, EOS) or _BYTE_PIECE.fullmatch(symbol)):
            raise ValueError(f"tokenizer.user_defined_symbols: {symbol!r} cannot be a symbol: each must be a non-empty "
                             f"string without spaces, and none of {PAD} {UNK} {BOS} {EOS} or a byte piece like <0x41>")
    if len(set(symbols)) < len(symbols):
        raise ValueError(f"tokenizer.user_defined_symbols lists a symbol twice: {symbols}")
    if isinstance(max_sentence_length, bool) or not isinstance(max_sentence_length, int) or max_sentence_length < 1:
        raise ValueError(f"tokenizer.max_sentence_length must be a whole number of bytes >= 1 (SentencePiece's "
                         f"default: {MAX_SENTENCE_LENGTH}), got {max_sentence_length!r}")
    return symbols


def usable_sentences(sentences: Iterable[str], max_sentence_length: int = MAX_SENTENCE_LENGTH,
                     source: str = "the training text") -> list[str]:
    """The sentences SentencePiece learns from: the non-blank ones of at most ``max_sentence_length`` bytes in
    UTF-8 (SentencePiece skips longer ones). Logs a warning naming ``source`` when some are left out.

    Raises:
        ValueError: naming ``source`` when none is left: there is no text, or every line is too long (then with the
            longest line's length and what to change).
    """
    kept, seen, longest = [], 0, 0
    for sentence in sentences:
        if not sentence.strip():
            continue
        seen += 1
        size = len(sentence.encode("utf-8", "surrogatepass"))
        if size > max_sentence_length:
            longest = max(longest, size)
        else:
            kept.append(sentence)
    if not seen:
        raise ValueError(f"cannot train a sentencepiece model on no sentences: {source} has no line with text")
    if not kept:
        raise ValueError(f"{source}: all {seen} lines with text are longer than tokenizer.max_sentence_length="
                         f"{max_sentence_length} bytes (UTF-8; the longest has {longest}), and SentencePiece learns "
                         "from no longer line: put one sentence per line, or set tokenizer.max_sentence_length="
                         f"{longest} or more")
    if len(kept) < seen:
        log.warning("%s: %d of %d lines are longer than tokenizer.max_sentence_length=%d bytes (UTF-8; the longest has "
                    "%d): SentencePiece learns its pieces without them", source, seen - len(kept), seen,
                    max_sentence_length, longest)
    return kept


def train_spm(
    sentences: Iterable[str],
    model_path: str | Path,
    vocab_size: int = 8000,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    byte_fallback: bool = True,
    input_sentence_size: int = 2_000_000,
    seed_sentencepiece_size: int = 1_000_000,
    user_defined_symbols: Iterable[str] = (),
    normalization: str = "nmt_nfkc",
    max_sentence_length: int = MAX_SENTENCE_LENGTH,
    source: str = "the training text",
) -> Path:
    """Train a SentencePiece model on ``sentences`` and write it to ``model_path`` (a ``.model`` file).

    Args:
        sentences: training text, one sentence per item (empty strings are skipped).
        model_path: where the ``.model`` file goes; a ``.vocab`` file is written beside it.
        vocab_size: number of pieces, including the four special ids above.
        model_type: ``"bpe"`` or ``"unigram"``.
        character_coverage: share of characters covered by single-character pieces (1.0 for Latin scripts).
        byte_fallback: encode unseen characters as UTF-8 byte pieces instead of ``<unk>``.
        user_defined_symbols: pieces never split (placeholders such as ``<NUM>``), one id each.
        normalization: SentencePiece's normalization rule, one of ``NORMALIZATIONS``.
        max_sentence_length: longer sentences (UTF-8 bytes) are left out of training (:func:`usable_sentences`).
        source: what the sentences are (file names), for the messages.

    Returns:
        the path of the written model.

    Raises:
        ValueError: naming the setting or ``source``: a bad setting (:func:`check_settings`), no sentence to learn
            from (:func:`usable_sentences`), a ``vocab_size`` too small for the text's characters, or another
            SentencePiece refusal. Nothing is written then.

    A text too small for ``vocab_size`` gives a smaller vocabulary, not an error (``hard_vocab_limit=False``).
    """
    symbols = check_settings(model_type, normalization, user_defined_symbols, max_sentence_length)
    text = usable_sentences(sentences, max_sentence_length, source)
    proto = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text), model_writer=proto, vocab_size=vocab_size, model_type=model_type,
            character_coverage=character_coverage, byte_fallback=byte_fallback, user_defined_symbols=symbols,
            normalization_rule_name=normalization, max_sentence_length=max_sentence_length,
            input_sentence_size=input_sentence_size, seed_sentencepiece_size=seed_sentencepiece_size, **_FIXED)
    except RuntimeError as err:  # SentencePiece's own message names neither the text nor the setting
        raise _training_error(str(err).strip(), source, vocab_size) from None
    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = model_path.with_suffix(".model.tmp")
    tmp.write_bytes(proto.getvalue())
    tmp.replace(model_path)
    _write_vocab(model_path, proto.getvalue())
    return model_path


def _training_error(message: str, source: str, vocab_size: int) -> ValueError:
    """A SentencePiece training error as a ValueError that names ``source`` and the setting to change."""
    if needed := re.search(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)", message):
        return ValueError(f"tokenizer.vocab_size={vocab_size} is too small for {source}: SentencePiece needs at least "
                          f"{needed[1]} pieces for it (the special and byte pieces, the user-defined symbols and one "
                          f"piece per character): set tokenizer.vocab_size={needed[1]} or more")
    return ValueError(f"SentencePiece could not learn from {source} ({message}): check the tokenizer.* settings")


def _write_vocab(model_path: Path, model_proto: bytes) -> None:
    """Write the ``.vocab`` file beside ``model_path``: one ``piece<TAB>score`` line per id."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    vocab = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))
    tmp = model_path.with_suffix(".vocab.tmp")
    tmp.write_text(vocab, encoding="utf-8")
    tmp.replace(model_path.with_suffix(".vocab"))
