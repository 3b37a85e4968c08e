"""Checks of the numeric settings before any work: a bad ``train.*``/``model.*``/``data.*`` value fails at once
with a message naming the key.
"""

from __future__ import annotations

import logging
import math

from nmt.decoding.options import check_decoding
from nmt.settings import setting_at
from nmt.training.ema import DECAY_MEANING
from nmt.training.gold import load_gold
from nmt.training.guided import check_guided
from nmt.training.rdrop import check_rdrop
from nmt.training.reverse import check_agreement
from nmt.training.schedule import check_schedule
from nmt.training.tensorboard import check_available

log = logging.getLogger(__name__)


# Numeric settings checked before any work: key -> (whole number?, smallest allowed, null allowed?)
NUMERIC_SETTINGS = {
    "seed": (True, None, False),
    "tokenizer.vocab_size": (True, 1, False), "tokenizer.sample_alpha": (False, 0.0, True),
    "model.emb_size": (True, 1, False), "model.hidden_size": (True, 2, False),
    "model.encoder_layers": (True, 1, False), "model.decoder_layers": (True, 1, False),
    "model.dropout": (False, 0.0, False), "model.source_word_dropout": (False, 0.0, False),
    "model.target_word_dropout": (False, 0.0, False),
    "train.batch_tokens": (True, 1, False), "train.lr": (False, 0.0, False), "train.clip": (False, 0.0, False),
    "train.label_smoothing": (False, 0.0, False), "train.lr_factor": (False, 0.0, False),
    "train.ema_decay": (False, 0.5, True),
    "train.lr_patience": (True, 0, False), "train.min_lr": (False, 0.0, True), "train.max_steps": (True, 1, True),
    "train.max_epochs": (True, 1, True), "train.max_minutes": (False, 0.0, True), "train.valid_every": (True, 1, False),
    "train.log_every": (True, 0, True), "train.patience": (True, 0, True), "train.keep_best": (True, 0, True),
    "data.max_len": (True, 1, False), "data.train_limit": (True, 1, True), "data.eval_limit": (True, 1, True),
    "eval.plots": (True, 0, True),
    "train.accum_steps": (True, 1, True), "train.dist_timeout": (False, 0.0, False),
    "train.rdrop_alpha": (False, 0.0, True),
}


POSITIVE = ("train.lr", "train.clip", "train.lr_factor", "train.max_minutes", "train.dist_timeout",
            "train.rdrop_alpha")  # 0 would silently train nothing


# (clip 0 zeroes gradients); a limit of 0 would silently mean none (the stop test reads 0 as unset)
LIMITS = ("train.max_steps", "train.max_epochs", "train.max_minutes")


MAY_BE_INF = ("train.clip",)  # clip=inf: no clipping; any other nan or inf trains on NaN


HINTS = {"train.ema_decay": f" (or null: no average): {DECAY_MEANING}", "train.rdrop_alpha": " (or null: no R-Drop)"}


BELOW_ONE = ("model.dropout", "model.source_word_dropout", "model.target_word_dropout", "train.label_smoothing",
             "train.lr_factor", "train.ema_decay")  # probabilities; factors that must shrink


def _parses_as_number(text: str) -> bool:
    """Whether ``text`` reads as a finite float (``"0.9"``, ``"1e-4"``; not ``"nan"``)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def check_numbers(cfg) -> None:
    """Refuse a numeric setting of ``NUMERIC_SETTINGS`` that is not a finite number (``train.max_minutes=one``,
    nan, inf: ``train.lr=inf`` trained on NaN for the whole budget), not a whole number where one is needed
    (``1e5`` is one), or below its smallest value, before any corpus or SentencePiece work. Keys missing from
    ``cfg`` are skipped. ``POSITIVE`` keys must be above 0, ``BELOW_ONE`` keys below 1.

    Raises:
        ValueError: naming the key, the value given and what it takes.
    """
    for key, (whole, low, nullable) in NUMERIC_SETTINGS.items():
        value = setting_at(cfg, key, ...)
        if value is ... or (value is None and nullable):
            continue
        kind = "a whole number" if whole else "a number"
        if whole and isinstance(value, float) and value.is_integer():
            value = int(value)  # 1e5 on the command line
        infinite_allowed = key in MAY_BE_INF and value == math.inf
        if isinstance(value, float) and not whole and not math.isfinite(value) and not infinite_allowed:
            either = " (or null: no limit)" if key in LIMITS else " (or null)" if nullable else ""
            raise ValueError(f"{key}={value} must be a finite number{either}")
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            quoted = isinstance(value, str) and _parses_as_number(value)  # train.lr="'0.001'": a string
            shown, hint = (repr(value), ("; it is text: give it without quotes (or wrap an ${oc.env:...} in "
                                        "${oc.decode:...})")) if quoted else (value, "")
            either = " (or null)" if nullable else ""
            raise ValueError(f"{key}={shown} must be {kind}{either}{hint}")  # noqa: TRY004 (a setting, not a type)
        extra = (" (or null: no limit)" if key in LIMITS else "") + HINTS.get(key, "")
        if key in POSITIVE and value <= 0:  # before the lower bound: -3 is refused as 0 is, "must be above 0"
            raise ValueError(f"{key}={value} must be above 0{extra}")
        if low is not None and value < low:
            raise ValueError(f"{key}={value} must be {kind} >= {low}{extra}")
        if key in BELOW_ONE and value >= 1:
            raise ValueError(f"{key}={value} must be below 1{HINTS.get(key, '')}")


def check_required(cfg) -> None:
    """Refuse a run that leaves out a setting its preset ``requires`` (dotted keys, e.g. ``train.init`` for a
    second stage that continues a trained model).

    Raises:
        ValueError: naming the first such setting and what to add to the command line.
    """
    for key in cfg.get("requires") or []:
        if setting_at(cfg, str(key)) in (None, ""):
            what = "RUN (the run folder or checkpoint to continue from)" if key == "train.init" else "..."
            raise ValueError(f"{key} is not set, and this preset requires it: add {key}={what} to the command line")


def check_sampling(tokenizer) -> None:
    """The subword regularization settings (``tokenizer.sample_alpha``, ``tokenizer.sample_side``); a side chosen
    without sampling is warned about (it does nothing).

    Raises:
        ValueError: ``sample_side`` not one of both, source, target; ``sample_alpha`` of 1 or more for BPE, where
            it is the probability of dropping each merge (Provilkov et al. 2020: 0.1), so 1 leaves only characters.
    """
    side, alpha = tokenizer.get("sample_side") or "both", tokenizer.get("sample_alpha") or 0.0
    if side not in ("both", "source", "target"):
        raise ValueError(f"tokenizer.sample_side={side}: use both, source or target (the sides that "
                         "tokenizer.sample_alpha segments anew)")
    if tokenizer.get("model_type", "bpe") == "bpe" and alpha >= 1:
        raise ValueError(f"tokenizer.sample_alpha={alpha}: for BPE it is the probability of dropping each merge, "
                         "below 1 (0.1 is the usual value; 0 turns sampling off)")
    if side != "both" and not alpha:
        log.warning("tokenizer.sample_side=%s does nothing without tokenizer.sample_alpha > 0", side)


def check_settings(cfg) -> None:
    """Every check of a training configuration that needs no corpus: the numbers (:func:`check_numbers`), the
    learning-rate schedule (:func:`nmt.training.schedule.check_schedule`), the decoding settings
    (:func:`nmt.decoding.options.check_decoding`), with ``train.tensorboard=true`` the tensorboard package, and with
    ``eval.gold`` the gold alignment set, read once (:func:`nmt.training.gold.load_gold`: its files and languages),
    ``train.agreement`` (:func:`nmt.training.reverse.check_agreement`), ``train.guided_alignment``
    (:func:`nmt.training.guided.check_guided`) and ``train.rdrop_alpha`` (:func:`nmt.training.rdrop.check_rdrop`).

    Raises:
        ValueError: naming the first setting that is refused (also ``train.init`` with ``train.resume``, and a
            setting the preset ``requires`` left unset: :func:`check_required`).
        FileNotFoundError / nmt.data.textio.TextFileError: a file of ``eval.gold`` missing or unreadable, naming it.
    """
    check_required(cfg)
    check_numbers(cfg)
    check_sampling(cfg.tokenizer)
    check_schedule(cfg.train)
    check_decoding(cfg.decode.beam_size, 1, "decode.beam_size", cfg.decode)
    check_available(bool(cfg.train.get("tensorboard")))
    load_gold(cfg, quiet=True)  # the run loads it again, with its warnings
    check_agreement(cfg)
    check_guided(cfg)
    check_rdrop(cfg)
    if cfg.train.get("init") and cfg.train.get("resume"):
        raise ValueError(f"train.init={cfg.train.init} and train.resume={cfg.train.resume}: train.resume continues a "
                         "run (its data, optimizer and schedule), train.init starts a new one from a model's weights "
                         "on this run's data; set one of them")
