"""How sentencepiece pieces are written on the axes of a heatmap.

A word-initial piece is shown without its "▁" (``"▁Mann"`` -> ``"Mann"``); a piece that continues a word is
shown with a leading middle dot (``"s"`` -> ``"·s"``), so word starts stay visible; special tokens
(``"</s>"``) are shown as they are, a bare ``"▁"`` as ``"▁"``. Byte pieces (SentencePiece's byte fallback for
characters outside the vocabulary) are shown as the characters they spell: the first byte piece of a
character carries the character (``"<0xF0>" "<0x9F>" "<0xA6>" "<0x9C>"`` -> ``"🦜" "·" "·" "·"``); bytes that
do not form a valid UTF-8 character, and characters that would be invisible (spaces, controls), keep their
``<0xNN>`` names.
"""

from __future__ import annotations

import re
import unicodedata

WORD_START = "\u2581"


SPECIAL_TOKENS = frozenset({"</s>", "<s>", "<pad>", "<unk>"})


CONT_MARK = "\u00b7"  # "·" before pieces that continue a word, and alone on the later bytes of a character


_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def display_token(piece: str) -> str:
    """How one sentencepiece piece is written on an axis, taken alone (byte pieces keep their names; see
    :func:`display_tokens` for a sentence)."""
    if piece in SPECIAL_TOKENS or _BYTE_PIECE.match(piece):
        return piece
    if piece.startswith(WORD_START):
        return piece[len(WORD_START) :] or WORD_START
    return CONT_MARK + piece


def _utf8_length(lead: int) -> int:
    """Bytes of the UTF-8 character that starts with byte ``lead`` (1 for a byte that cannot start one)."""
    return 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1


def display_tokens(pieces: list[str]) -> list[str]:
    """The axis labels of a sentence's pieces ``[n]`` -> ``[n]`` strings (see the module docstring)."""
    labels = [display_token(piece) for piece in pieces]
    values = [int(m.group(1), 16) if (m := _BYTE_PIECE.match(p)) else None for p in pieces]
    i = 0
    while i < len(pieces):
        size = _utf8_length(values[i]) if values[i] is not None else 0
        run = values[i : i + size]
        if size and all(v is not None for v in run) and len(run) == size:
            try:
                char = bytes(run).decode("utf-8")
            except UnicodeDecodeError:
                char = ""
            if char and not char.isspace() and unicodedata.category(char)[0] != "C":
                labels[i : i + size] = [char, *[CONT_MARK] * (size - 1)]
                i += size
                continue
        i += 1
    return labels
