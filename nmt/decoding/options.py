"""Decoding options: the checks of ``decode.*`` settings (beam size, n-best, penalties, MBR) and the settings a
score file records.
"""

from __future__ import annotations

import logging
import math

from nmt.decoding.mbr import UTILITIES

log = logging.getLogger(__name__)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_decoding(beam_size, n_best: int = 1, key: str = "decode.beam_size", decode=None) -> None:
    """Check the decoding settings before any work: ``beam_size`` (the setting ``key``) must be a whole number
    >= 1, ``n_best`` a whole number in ``[1, beam_size]`` (a beam of K keeps K hypotheses) and, when the ``decode``
    node is given, ``batch_size`` a whole number >= 1, ``max_src_len`` a whole number >= 2 (a subword and
    ``</s>``), ``length_penalty``, ``coverage_penalty`` (when present: configurations saved before it existed lack
    it) and ``max_len_a`` numbers >= 0, ``max_len_b`` a number with ``2 * max_len_a + max_len_b >= 2`` (the
    shortest source, a subword and ``</s>``, leaves room for a subword and ``</s>``), ``mbr`` null or a utility of
    :mod:`nmt.decoding.mbr` and ``mbr_temperature`` a number > 0 (infinity allowed) when present.

    Raises:
        ValueError: naming the first setting that is out of range.
    """
    if not _whole(beam_size) or beam_size < 1:
        raise ValueError(f"{key}={beam_size} must be a whole number >= 1 (1 = greedy search)")
    if not _whole(n_best) or not 1 <= n_best <= beam_size:
        raise ValueError(f"decode.n_best={n_best} must be a whole number between 1 and the beam size ({beam_size}): "
                         "a beam of K keeps K hypotheses; raise beam_size")
    if decode is None:
        return
    rules = {"batch_size": (_whole, 1, "a whole number >= 1 (sentences per batch)"),
             "max_src_len": (_whole, 2, "a whole number >= 2 (subwords kept of a source, </s> included)"),
             "length_penalty": (_number, 0, "a number >= 0 (GNMT alpha; 0 = raw log-probability)"),
             "coverage_penalty": (_number, 0, "a number >= 0 (GNMT beta; 0 = off)"),
             "max_len_a": (_number, 0, "a number >= 0 (output limit: max_len_a * source length + max_len_b)"),
             "max_len_b": (_number, None, "a number (output limit: max_len_a * source length + max_len_b)")}
    for name, (kind, least, what) in rules.items():
        if name == "coverage_penalty" and name not in decode:
            continue  # a run configured before decode.coverage_penalty existed: off (null is refused below)
        value = decode.get(name)
        if not kind(value) or (least is not None and value < least):
            raise ValueError(f"decode.{name}={value} must be {what}")
    mbr = decode.get("mbr")  # absent from the configs of runs before it existed: off
    if mbr is not None and mbr not in UTILITIES:
        raise ValueError(f"decode.mbr={mbr} must be null (off) or {' or '.join(UTILITIES)} (the utility of "
                         "minimum Bayes risk decoding)")
    temperature = decode.get("mbr_temperature", 1.0)
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)) or not temperature > 0:
        raise ValueError(f"decode.mbr_temperature={temperature} must be a number > 0 (1 = the model's distribution "
                         "over the n-best list; inf = uniform weights)")
    if 2 * decode.max_len_a + decode.max_len_b < 2:  # the shortest source is one subword and </s>
        raise ValueError(f"decode.max_len_a={decode.max_len_a} with decode.max_len_b={decode.max_len_b} leaves no "
                         "room for a translation: max_len_a * source length + max_len_b (which counts </s>) must "
                         "reach 2 for a source of 2 subwords")


def mbr_settings(decode, beam_size: int) -> dict:
    """What a decoding with ``beam_size`` did about MBR (``decode.mbr``), for scores files: ``{"mbr": None,
    "mbr_temperature": None}`` when it was off (``decode.mbr`` null, or greedy search, which has one hypothesis),
    else the utility and the temperature, ``"inf"`` for uniform weights (JSON has no infinity)."""
    mbr = decode.get("mbr") if beam_size > 1 else None  # absent from the configs of runs before it existed
    if mbr is None:
        return {"mbr": None, "mbr_temperature": None}
    temperature = float(decode.get("mbr_temperature", 1.0))
    return {"mbr": mbr, "mbr_temperature": temperature if math.isfinite(temperature) else "inf"}


def decoding_settings(decode, beam_size: int) -> dict:
    """The decoding settings that produced a scores file's translations, for its JSON: ``beam_size``,
    ``length_penalty`` (GNMT alpha), ``coverage_penalty`` (beta, 0.0 when absent from an older config) and the
    two :func:`mbr_settings` keys. The final evaluation of training and ``translate.py reference=`` both write
    them, so a score can always be traced to how it was decoded."""
    return {"beam_size": beam_size, "length_penalty": decode.length_penalty,
            "coverage_penalty": decode.get("coverage_penalty", 0.0), **mbr_settings(decode, beam_size)}
