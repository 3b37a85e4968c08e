"""Text normalization before subwords: Moses tokenization, lowercasing and the Hansards French de-contractions.

Word-alignment gold sets are pre-tokenized and lowercased (see each ``../shared/corpora/align_*/SOURCE.md``),
and a model that is to be scored as an aligner on them should be trained on text that looks the same
(``data.normalize`` in the config; presets ``+experiment=align_en_fr`` / ``align_de_en``). Off by default:
translation models train on raw text.

Steps, in order, each switched by a key of the ``data.normalize`` node:

- ``tokenize``: the Moses tokenizer (``sacremoses``, language-specific, no HTML escaping) splits punctuation
  off words (``"dog."`` -> ``"dog ."``, French ``"l'homme"`` -> ``"l' homme"``).
- ``split_hyphens``: ``"peut-être"`` -> ``"peut - être"`` (the Hansards gold set's EGYPT tokenization, both sides).
- ``lowercase``: ``str.lower`` of the whole line.
- ``french_decontract`` (French only): the Hansards convention of undoing elisions and article contractions:
  ``l'`` -> ``le``, ``d'`` -> ``de``, ``n'`` -> ``ne``, ``j'`` -> ``je``, ``c'`` -> ``ce``, ``qu'`` -> ``que``,
  ``s'`` -> ``se``, ``m'`` -> ``me``, ``t'`` -> ``te``, ``jusqu'``/``lorsqu'``/``puisqu'`` -> ``jusque``/...,
  ``quelqu'un`` -> ``quelque un``, ``du`` -> ``de le``, ``des`` -> ``de les``, ``au`` -> ``à le``,
  ``aux`` -> ``à les`` (in the gold set "le avis de le ministre", "de les raisons", "à le chef"; ``des`` never
  occurs there, so it is always expanded).

Only ``lowercase`` keeps the tokens of an already tokenized line; :meth:`Normalizer.keep_tokens` applies just
that, for gold sentences whose word positions must not move (nmt.align).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ELISIONS = {
    "l'": "le", "d'": "de", "n'": "ne", "j'": "je", "c'": "ce", "qu'": "que", "s'": "se", "m'": "me",
    "t'": "te", "jusqu'": "jusque", "lorsqu'": "lorsque", "puisqu'": "puisque",
}


_CONTRACTIONS = {"du": "de le", "des": "de les", "au": "à le", "aux": "à les", "quelqu'un": "quelque un",
                 "quelqu'": "quelque"}


_HYPHEN = re.compile(r"(?<=\w)-(?=\w)")


@dataclass(frozen=True)
class Normalizer:
    """One language's normalization (module docstring); calling it maps a raw line to a normalized line.

    Args:
        lang: ISO 639-1 code (``en``, ``de``, ``fr``, ...) for the Moses tokenizer's rules.
        tokenize: Moses tokenization (sacremoses).
        split_hyphens: split hyphenated words (``peut-être`` -> ``peut - être``).
        lowercase: lowercase the line.
        french_decontract: undo French elisions and contractions the Hansards way (``l'`` -> ``le``,
            ``du`` -> ``de le``); ``fr`` only.
    Raises:
        ValueError: ``french_decontract`` for a language other than ``fr``.
    """

    lang: str
    tokenize: bool = False
    split_hyphens: bool = False
    lowercase: bool = False
    french_decontract: bool = False

    def __post_init__(self):
        if self.french_decontract and self.lang != "fr":
            raise ValueError(f"french_decontract applies to French only, not to {self.lang!r}")

    @classmethod
    def from_config(cls, node, lang: str) -> Normalizer:
        """From a ``data.normalize`` config node (``None`` or missing keys = off)."""
        node = node or {}
        return cls(lang, bool(node.get("tokenize", False)), bool(node.get("split_hyphens", False)),
                   bool(node.get("lowercase", False)),
                   bool(node.get("french_decontract", False)) and lang == "fr")

    @property
    def active(self) -> bool:
        """Whether any step is on (an inactive normalizer returns lines unchanged)."""
        return self.tokenize or self.split_hyphens or self.lowercase or self.french_decontract

    def __call__(self, line: str) -> str:
        """Normalize one line; an empty or blank line gives ``""``."""
        if not self.active:
            return line
        if self.tokenize:
            line = _moses(self.lang).tokenize(line, escape=False, return_str=True)
        if self.split_hyphens:
            line = _HYPHEN.sub(" - ", line)
        if self.lowercase:
            line = line.lower()
        if self.french_decontract:
            line = " ".join(_decontract(token) for token in line.split())
        return " ".join(line.split())

    def keep_tokens(self, line: str) -> str:
        """The token-preserving part (lowercasing only), for pre-tokenized gold sentences."""
        return line.lower() if self.lowercase else line

    def lines(self, lines: list[str], keep_tokens: bool = False) -> list[str]:
        """Normalize many lines (same count, same order); ``keep_tokens`` applies only :meth:`keep_tokens`."""
        if not self.active:
            return lines
        return [self.keep_tokens(line) if keep_tokens else self(line) for line in lines]


def _decontract(token: str) -> str:
    low = token.lower()
    if low in _CONTRACTIONS:
        return _CONTRACTIONS[low]
    if low in _ELISIONS:
        return _ELISIONS[low]
    for elided, full in _ELISIONS.items():  # "l'homme" when the tokenizer kept it whole
        if low.startswith(elided) and len(low) > len(elided):
            return f"{full} {token[len(elided):]}"
    return token


_TOKENIZERS: dict[str, object] = {}


def _moses(lang: str):
    if lang not in _TOKENIZERS:
        from sacremoses import MosesTokenizer  # only when tokenization is on

        _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
    return _TOKENIZERS[lang]
