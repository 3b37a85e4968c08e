"""Resuming: model, tokenizers and data settings from a checkpoint, and what the command line may change.

A resumed run continues the same model on the same data: its architecture, tokenizers and corpus come from the
checkpoint (``FROM_CHECKPOINT``), only the training settings from the command line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from nmt.analysis.curves import read_curve
from nmt.data.textio import atomic_write
from nmt.models import checkpoint
from nmt.settings import adopt, differences, override_keys, same_setting, to_plain
from nmt.training.guided import keep_guided
from nmt.training.reverse import REVERSE_DIR, keep_agreement
from nmt.training.schedule import SCHEDULE_KEYS

log = logging.getLogger(__name__)


FROM_CHECKPOINT = ("model", "attention", "decoder", "tokenizer", "data")  # what a resumed run cannot change


REPORTED_ELSEWHERE = ("resume", "ema_decay", "batch_tokens")  # train.* keys with a resume warning of their own


BUDGET_KEYS = ("max_steps", "max_minutes", "max_epochs")  # what a resume changes to extend a run: logged as info


SAME_RUN = (*FROM_CHECKPOINT, "seed")  # what a resume keeps from the checkpoint, whatever the command line says
SWEEP_SAME_RUN = (*SAME_RUN, "train", "decode")  # what a sweep job's run shares with the job (the budget aside)
NOT_OF_THE_MODEL = (*BUDGET_KEYS, "resume", "dist_timeout", "log_every")  # train.* keys a sweep job may change


def other_changes(ckpt_cfg, cfg, skip=()) -> list[tuple[str, object, object]]:
    """The ``train.*`` and ``decode.*`` settings of a resumed run that differ from its checkpoint's, as
    ``(dotted name, checkpoint's value, this run's value)``: validation, checkpointing and the final evaluation
    follow this run's, so a resume by the run folder alone (``hydra.run.dir=RUN``) falls back to the defaults for
    whatever the first command set (``train.valid_every``, a preset's ``decode.beam_size``). Left out: the keys in
    ``skip`` and ``REPORTED_ELSEWHERE``, and keys one of the two configs lacks (a checkpoint from before the key
    existed)."""
    changed = []
    for section, left_out in (("train", (*REPORTED_ELSEWHERE, *skip)), ("decode", ())):
        before, now = ckpt_cfg.get(section) or {}, cfg.get(section) or {}
        changed += [(f"{section}.{key}", before[key], now[key]) for key in sorted(set(before) & set(now), key=str)
                    if key not in left_out and differences(before[key], now[key], key)]
    return changed


def _changed(before, now, keys) -> list[tuple[str, object, object]]:
    """``(key, before[key], now[key])`` for each of ``keys`` whose value differs between two config nodes."""
    return [(key, before.get(key), now.get(key)) for key in keys if before.get(key) != now.get(key)]


def _yaml(value) -> str:
    """A setting as it is written on the command line: ``null``, ``true``, ``0.5``."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def keep_number(ckpt_cfg, cfg, overrides, key: str) -> bool:
    """On a resume: ``train.<key>`` becomes the checkpoint's when it is set there (not null) and the command line's
    ``overrides`` do not set it, so a run resumed by its folder alone keeps averaging (``ema_decay``) or R-Drop
    (``rdrop_alpha``); ``train.<key>=null`` turns it off. Returns whether the checkpoint's value was taken."""
    before = ckpt_cfg.train.get(key)
    if before is None or key not in cfg.train or any(o.lstrip("+").startswith(f"train.{key}=") for o in overrides):
        return False
    cfg.train[key] = before
    return True


def resume_from(path, cfg, run_dir: Path, device, overrides=()):
    """Model, tokenizers and data config from a checkpoint to resume; its SentencePiece models are copied to
    ``run_dir/spm``.

    The architecture and the corpus (``data``, with its paths already absolute) come from the checkpoint's own
    config, so a resumed run trains on the same data; a different one on the command line is ignored with a
    warning, and so does a changed learning-rate schedule; the other ``train.*`` and ``decode.*`` settings that are
    not the checkpoint's (:func:`other_changes`) are named in one warning and apply. Resuming into another run
    folder copies the checkpoint's ``best.pt`` and ``step_N.pt`` along, and its run's ``metrics.jsonl`` records up
    to the checkpoint's step, so the final evaluation and averaging still see them. ``train.ema_decay`` stays the
    checkpoint's unless the command line's ``overrides`` set it (a resume by the run folder alone keeps averaging).
    Returns ``(model, src_tok, tgt_tok, payload, cfg)``: ``cfg`` is the command line's config with those groups
    (``FROM_CHECKPOINT``) taken from the checkpoint, so the checkpoints, logs and scores of the resumed run
    describe the model it trains. The model holds the weights to train on: a checkpoint written with
    ``train.ema_decay`` stores the average as its model and the raw weights as ``train_weights``; the model gets
    the raw ones and ``payload["averaged_weights"]`` the average, for :func:`moving_average`.

    Raises:
        FileNotFoundError / nmt.checkpoint.CheckpointError: as :func:`nmt.checkpoint.load`, and for a checkpoint
            that holds weights only (``step_N.pt``, ``averaged.pt``): resume from ``last.pt`` (or ``best.pt``),
            and for ``train_weights`` that do not fit the model.
    """
    model, ckpt_cfg, src_tok, tgt_tok, payload = checkpoint.load(path, device)
    missing = [key for key in ("optimizer", "progress", "rng") if key not in payload]
    if missing:
        raise checkpoint.CheckpointError(
            f"{path} holds weights only (no {', '.join(missing)}), so training cannot continue from it: resume from "
            f"the run's checkpoints/last.pt (or best.pt), or start a new run")
    if payload.get("train_weights") is not None:  # written with train.ema_decay: model holds the average
        payload["averaged_weights"] = {key: value.clone() for key, value in model.state_dict().items()}
        try:
            model.load_state_dict(payload["train_weights"])
        except (RuntimeError, TypeError, AttributeError) as err:
            raise checkpoint.CheckpointError(f"{path}: its train_weights (the raw weights to continue training) do not "
                                             f"fit the model in its own config: {err}") from None
    before, now = ckpt_cfg.train.get("ema_decay"), cfg.train.get("ema_decay")
    if keep_number(ckpt_cfg, cfg, overrides, "ema_decay"):  # a run resumed by its folder alone keeps averaging
        now = before
        log.info("resuming %s: train.ema_decay=%s from the checkpoint (train.ema_decay=null stops the average)",
                 path, before)
    if before != now:
        log.warning("resuming %s: train.ema_decay was %s and is %s now: validation BLEU from here is of %s, but the "
                    "best BLEU so far (best.pt, the plateau schedule, early stopping) was measured on %s", path,
                    _yaml(before), _yaml(now), "the raw weights" if now is None else "a moving average",
                    "the raw weights" if before is None else "the average")
    keep_agreement(ckpt_cfg, cfg, overrides)  # train.agreement: a run of both directions stays one
    keep_guided(ckpt_cfg, cfg, overrides)  # train.guided_alignment: a guided run stays guided
    keep_number(ckpt_cfg, cfg, overrides, "rdrop_alpha")  # train.rdrop_alpha: an R-Drop run stays one
    if ckpt_cfg.train.get("init"):  # a fine-tuning run resumed: it still started from that model
        cfg.train.init = ckpt_cfg.train.init
    warn_about_changes(path, ckpt_cfg, cfg, named_settings(cfg, overrides))
    bring_along(path, run_dir, payload)
    save_subword_models(run_dir, src_tok, tgt_tok)
    cfg = adopt(cfg, ckpt_cfg, FROM_CHECKPOINT)
    if ckpt_cfg.get("seed") is not None:
        cfg.seed = ckpt_cfg.seed  # batches of epoch e come from seed + e: the skip only holds for the same order
    return model.train(), src_tok, tgt_tok, payload, cfg


def save_subword_models(run_dir: Path, src_tok, tgt_tok, replace: bool = False) -> None:
    """Write the checkpoint's SentencePiece models to ``run_dir/spm/{src,tgt}.model`` (``replace``: also over
    files already there, else those are kept)."""
    spm_dir = Path(run_dir) / "spm"
    spm_dir.mkdir(parents=True, exist_ok=True)
    for name, tok in (("src", src_tok), ("tgt", tgt_tok)):
        if replace or not (spm_dir / f"{name}.model").is_file():
            atomic_write(spm_dir / f"{name}.model", tok.model_proto)


def named_settings(cfg, overrides) -> list[str] | None:
    """The dotted keys and config groups the command line's ``overrides`` set (:func:`nmt.settings.override_keys`),
    or None when a preset (``+experiment=...``, a key outside the config) may have set any of them."""
    keys = override_keys(overrides)
    return None if {key.split(".")[0] for key in keys} - set(cfg) else keys


def _named(name: str, value, named: list[str] | None) -> bool:
    """Whether the differing setting ``name`` was asked for: ``named`` is None (anything may have been), it or a
    node above it is among ``named``, or it is an absolute path (from the environment, e.g. ``NMT_DATA_DIR``)."""
    return named is None or isinstance(value, str) and value.startswith("/") or \
        any(name == key or name.startswith(f"{key}.") for key in named)


def warn_taken_from_checkpoint(doing: str, path, ckpt_cfg, cfg, groups, keep=(), named=None) -> None:
    """One warning per config group of ``groups`` whose settings differ from the checkpoint's, which the run uses
    instead (``doing``: "resuming", "fine-tuning"); the dotted names in ``keep`` are the run's own and left out, and
    with ``named`` (:func:`named_settings`) only what the command line set or an absolute path is named, so a run
    resumed by its folder alone is not told about the defaults it never asked for."""
    for key in groups:
        if changed := [c for c in differences(ckpt_cfg.get(key), cfg.get(key), key)
                       if c[0] not in keep and _named(c[0], c[2], named)]:
            log.warning("%s %s: %s comes from the checkpoint, not from this run's settings: %s", doing, path, key,
                        "; ".join(f"{name}={before} (this run: {now})" for name, before, now in changed))


def warn_about_changes(path, ckpt_cfg, cfg, named=None) -> None:
    """The warnings of a resume whose command line differs from the checkpoint's settings: what comes from the
    checkpoint anyway (of it, with ``named``, only what the command line set), a changed seed, batch size or
    schedule, the budget, and the other settings that apply."""
    warn_taken_from_checkpoint("resuming", path, ckpt_cfg, cfg, FROM_CHECKPOINT, named=named)
    if ckpt_cfg.get("seed") is not None and ckpt_cfg.seed != cfg.get("seed"):
        log.warning("resuming %s: seed=%s comes from the checkpoint (this run: %s), so the rest of the epoch is "
                    "batched in the order it began with", path, ckpt_cfg.seed, cfg.get("seed"))
    if ckpt_cfg.train.get("batch_tokens") != cfg.train.get("batch_tokens"):
        log.warning("resuming %s: train.batch_tokens was %s and is %s now: the batches of the current epoch are cut "
                    "anew, so until it ends some of its pairs are seen twice and others not at all", path,
                    ckpt_cfg.train.get("batch_tokens"), cfg.train.get("batch_tokens"))
    schedule = SCHEDULE_KEYS.get(ckpt_cfg.train.get("lr_scheduler"), SCHEDULE_KEYS["budget"])
    if moved := _changed(ckpt_cfg.train, cfg.train, schedule):
        log.warning("resuming %s: %s; the learning-rate schedule changes from here (repeat the original train.* "
                    "settings to continue it unchanged)", path,
                    "; ".join(f"train.{key} was {_yaml(before)} when it was saved and is {_yaml(now)} now"
                              for key, before, now in moved))
    if budget := _changed(ckpt_cfg.train, cfg.train, [key for key in BUDGET_KEYS if key not in schedule]):
        log.info("resuming %s: the budget is %s", path, ", ".join(f"train.{key}={_yaml(now)} (it was {_yaml(before)})"
                                                                  for key, before, now in budget))  # extending it
    every_schedule_key = {key for keys in SCHEDULE_KEYS.values() for key in keys}  # another schedule's: no effect
    if changed := other_changes(ckpt_cfg, cfg, skip=(*every_schedule_key, *BUDGET_KEYS)):
        log.warning("resuming %s: settings that are not the checkpoint's apply from here: %s (repeat the run's own "
                    "on the command line to keep them)", path,
                    "; ".join(f"{name} was {_yaml(before)} and is {_yaml(now)} now" for name, before, now in changed))


def bring_along(path, run_dir: Path, payload: dict) -> None:
    """Resuming into a new folder: copy the checkpoint's ``best.pt`` and ``step_N.pt`` there (and the reverse
    model's ``reverse/checkpoints/best.pt`` of ``train.agreement``), and its run's
    validations up to the checkpoint's step (averaging ranks the copied step_N.pt by them, and the new run's
    learning curve continues the old one)."""
    source_dir, target_dir = Path(path).resolve().parent, (run_dir / "checkpoints").resolve()
    if source_dir != target_dir:  # resuming into a new folder: bring the best checkpoints along
        target_dir.mkdir(parents=True, exist_ok=True)
        for kept in [source_dir / "best.pt", *sorted(source_dir.glob("step_*.pt"))]:
            if kept.is_file() and not (target_dir / kept.name).exists():
                checkpoint.write_payload(target_dir / kept.name, checkpoint.load_payload(kept))
        reverse = Path(REVERSE_DIR) / "checkpoints" / "best.pt"  # train.agreement's reverse model
        if (source_dir.parent / reverse).is_file() and not (run_dir / reverse).exists():
            checkpoint.write_payload(run_dir / reverse, checkpoint.load_payload(source_dir.parent / reverse))
        # and the validations up to the checkpoint's step: averaging ranks the copied step_N.pt by them, and the
        # new run's learning curve continues the old one
        source_metrics, target_metrics = source_dir.parent / "metrics.jsonl", run_dir / "metrics.jsonl"
        if source_metrics.is_file() and source_metrics.read_text(encoding="utf-8").strip() \
                and not target_metrics.exists():
            records = [r for r in read_curve(source_dir.parent).records if r["step"] <= payload["progress"]["step"]]
            atomic_write(target_metrics, "".join(json.dumps(r) + "\n" for r in records))


class RunMismatch(ValueError):
    """A run folder that holds a run of other settings than the command's (names the folder, the settings that
    differ, and what to do)."""


def check_run_folder(cfg, run_dir: Path, keys=(), sweep: bool = False) -> None:
    """Refuse a command whose run folder already holds a run (``checkpoints/last.pt``) that it would resume
    without meaning to, before anything is written there. Without ``train.resume``, the folder's run resumes
    only when the settings the command sets are that run's: on a single run, the ``FROM_CHECKPOINT`` and
    ``seed`` settings among ``keys`` (the command line's, :func:`nmt.settings.override_keys`; a preset, e.g.
    ``+experiment=...``, counts as setting them all); in a sweep job (``sweep``), every model, data, seed,
    ``train.*`` and ``decode.*`` setting but the budget, since a job folder is named by the job's number, score
    model and decoder style alone. Settings a checkpoint lacks (older than the setting) are not compared. With
    ``train.resume``, the checkpoint must be the folder's own run or the folder must hold none.

    Raises:
        RunMismatch: for a folder whose run differs, naming each differing setting, or that holds another run
            than ``train.resume``'s.
        FileNotFoundError / nmt.checkpoint.CheckpointError: for a ``last.pt`` that cannot be read.
    """
    last = Path(run_dir) / "checkpoints" / "last.pt"
    if not last.is_file():
        return
    if cfg.train.get("resume"):
        wanted = Path(cfg.train.resume)
        wanted = wanted / "checkpoints" / "last.pt" if wanted.is_dir() else wanted
        if wanted.resolve().parent != last.resolve().parent:
            raise RunMismatch(
                f"run folder {run_dir} already holds a run (checkpoints/last.pt), and train.resume={cfg.train.resume}"
                " is another run's checkpoint: resuming it here would mix the two runs' checkpoints and scores. "
                "Resume it in a new folder (hydra.run.dir=...), or leave train.resume out to resume this folder's run")
        return
    before, now = checkpoint.load_payload(last)["config"], to_plain(cfg)
    if sweep:
        names = [k for k in SWEEP_SAME_RUN if k != "train"] + [f"train.{k}" for k in now.get("train") or {}
                                                                 if k not in NOT_OF_THE_MODEL]
    else:
        tops = {key.split(".")[0] for key in keys}
        names = list(SAME_RUN) if tops - set(now) else [key for key in keys if key.split(".")[0] in SAME_RUN]
    found = [m for name in dict.fromkeys(names) for m in _mismatches(_at(before, name), _at(now, name), name)]
    if found:
        raise RunMismatch(mismatch_message(run_dir, found, sweep))


_ABSENT = object()


def _at(config: dict, name: str):
    """The value at the dotted ``name`` of a plain config (``_ABSENT`` when a key on the way is missing)."""
    for key in name.split("."):
        if not isinstance(config, dict) or key not in config:
            return _ABSENT
        config = config[key]
    return config


def _mismatches(before, now, name: str) -> list[tuple[str, object, object]]:
    """``(dotted name, run's value, command's value)`` for the leaves present in both that differ."""
    if before is _ABSENT or now is _ABSENT:
        return []
    if isinstance(before, dict) and isinstance(now, dict):
        return [m for key in before if key in now for m in _mismatches(before[key], now[key], f"{name}.{key}")]
    return [] if same_setting(before, now) else [(name, before, now)]


def mismatch_message(run_dir: Path, found: list, sweep: bool) -> str:
    """The refusal of :func:`check_run_folder`: the folder, what differs (six settings at most) and what to do."""
    listed = "; ".join(f"{name}={_yaml(before)} in that run, {_yaml(now)} in this command"
                       for name, before, now in found[:6])
    listed += f"; and {len(found) - 6} more" if len(found) > 6 else ""
    if sweep:
        return (f"job folder {run_dir} already holds a run of other settings than this job's: {listed}. A sweep "
                "never continues another sweep's runs: run this sweep in a new folder (hydra.sweep.dir=...), or "
                "repeat the settings of the sweep that made it (only train.max_steps, max_epochs and max_minutes "
                "may change, to extend its runs)")
    return (f"run folder {run_dir} already holds a run of other settings than this command's: {listed}. This command "
            "would resume that run and report its results, not train what it asks for. To train a new model, choose "
            "another folder (hydra.run.dir=...); to continue that run, leave these settings out or give its own "
            f"values (or resume it with train.resume={run_dir}, which keeps its model and data settings)")
