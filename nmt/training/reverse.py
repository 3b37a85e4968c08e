"""The reverse model of an agreement run (``train.agreement``, :mod:`nmt.training.agreement`): building it (or
putting back the one a checkpoint holds), its validation figures, its checkpoint, and the commands that symmetrize
the pair and score it against ``eval.gold``.

What an agreement run adds to its run folder:

- ``reverse/checkpoints/best.pt``: the target -> source model at the step of ``checkpoints/best.pt`` (the forward
  model's best validation BLEU), a normal checkpoint (its config has ``data.src_lang`` and ``data.tgt_lang`` the
  other way round) that ``nmt.align``, ``translate.py`` and ``nmt.Translator`` load as any other;
  ``reverse_checkpoint=RUN/reverse`` names it.
- ``reverse_model`` in ``checkpoints/last.pt`` and ``best.pt``: the reverse weights to resume from (the one Adam
  state of both models is their ``optimizer``).
- in each ``metrics.jsonl`` record: ``reverse_valid_loss`` (per source token), ``reverse_valid_bleu`` (greedy),
  ``valid_agreement`` (the mean Δ per validation sentence) and, with ``eval.gold``, ``reverse_aer``,
  ``reverse_alignment_precision`` and ``reverse_alignment_recall``, and the same figures of the two directions
  soft-symmetrized (``symmetrized_aer``, ``symmetrized_alignment_precision``, ``symmetrized_alignment_recall``).
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import asdict
from pathlib import Path

import torch

from nmt.analysis.align_args import combine_defaults
from nmt.data.batches import iterate_batches
from nmt.data.corpus import Parallel
from nmt.data.textio import file_named
from nmt.decoding.scoring import greedy_bleu
from nmt.models import checkpoint
from nmt.models.build import build_model
from nmt.settings import from_plain, to_plain
from nmt.training.agreement import Bidirectional, agreement_settings, joint_objective
from nmt.training.gold import gold_settings, load_gold

log = logging.getLogger(__name__)

REVERSE_DIR = "reverse"  # RUN/reverse/checkpoints/best.pt
SYMMETRIZED = Path("eval") / "symmetrized.align"  # RUN/eval/symmetrized.align: what the printed nmt.align writes


def reverse_config(cfg):
    """The config of the reverse model: ``cfg`` with the data's two sides swapped (``src_lang``/``tgt_lang`` and
    any ``*_src``/``*_tgt`` file settings), so the reverse checkpoint describes a target -> source model."""
    plain = to_plain(cfg)
    data = plain["data"]
    for key in [k for k in data if k == "src_lang" or k.endswith("_src")]:
        other = "tgt_lang" if key == "src_lang" else key[:-4] + "_tgt"
        if other in data:
            data[key], data[other] = data[other], data[key]
    return from_plain(plain)


def check_agreement(cfg) -> None:
    """The checks of ``train.agreement`` that need no corpus (:func:`nmt.training.checks.check_settings`).

    Raises:
        ValueError: a bad ``train.agreement`` (:func:`agreement_settings`), or agreement with
            ``train.ema_decay`` (the moving average follows one model only).
    """
    if agreement_settings(cfg.train) is not None and cfg.train.get("ema_decay") is not None:
        raise ValueError("train.agreement does not combine with train.ema_decay (the moving average of the weights "
                         "follows one model): set train.ema_decay=null, or train.agreement.weight=null")


def keep_agreement(ckpt_cfg, cfg, overrides=()) -> None:
    """On a resume of a run trained with ``train.agreement``: the setting stays the checkpoint's unless the command
    line's ``overrides`` set it (a run resumed by its folder alone goes on training both directions)."""
    if agreement_settings(ckpt_cfg.train) is not None and "agreement" in cfg.train and \
            not any(o.lstrip("+").startswith("train.agreement") for o in overrides):
        cfg.train.agreement = ckpt_cfg.train.agreement


def joint_training(cfg, model, toks, payload: dict | None, device,
                   init_reverse: dict | None = None) -> tuple[Agreement | None, torch.nn.Module]:
    """With ``train.agreement``: the reverse model (new, the checkpoint's ``reverse_model`` on a resume, or
    ``init_reverse``, the reverse weights of a ``train.init`` checkpoint) and ``(Agreement, Bidirectional module)``,
    the module to optimise and train through; without: ``(None, model)``.

    Raises:
        ValueError: a resume that would switch agreement on or off (the optimizer state is of one model, or of
            two): the message says what to do.
    """
    settings = agreement_settings(cfg.train)
    saved = (payload or {}).get("reverse_model")
    if payload is not None and (settings is None) != (saved is None):
        raise ValueError("the checkpoint to resume was trained with train.agreement (both directions): resume it "
                         "without changing train.agreement" if saved is not None else
                         "the checkpoint to resume was trained in one direction: train.agreement cannot be switched "
                         "on when resuming it; start a new run (hydra.run.dir=...) with train.agreement")
    if settings is None:
        return None, model
    reverse = build_model(cfg.model, cfg.decoder, cfg.attention, len(toks[1]), len(toks[0])).to(device)
    if saved is not None or init_reverse is not None:
        reverse.load_state_dict(saved if saved is not None else init_reverse)
    elif cfg.train.get("init"):
        log.warning("train.init=%s holds no reverse model (it was trained in one direction): the %s -> %s model of "
                    "this agreement run starts from random weights", cfg.train.init, cfg.data.tgt_lang,
                    cfg.data.src_lang)
    joint = Bidirectional(model, reverse, **settings).train()
    log.info("agreement training (Cheng et al. 2016): a %s -> %s model beside the %s -> %s one, %s loss, weight %s",
             cfg.data.tgt_lang, cfg.data.src_lang, cfg.data.src_lang, cfg.data.tgt_lang, settings["loss"],
             settings["weight"])
    return Agreement(cfg, joint, toks), joint


class Agreement:
    """The reverse model's side of an agreement run: what the loop, validation and checkpoints need of it.

    Attributes:
        joint: the :class:`nmt.training.agreement.Bidirectional` module (``joint.yx`` is the reverse model).
        cfg: the reverse model's config (:func:`reverse_config`). toks: its ``(src_tok, tgt_tok)``, the forward
            model's the other way round (one SentencePiece model with ``tokenizer.joint``, else the two swapped).
        objective: the batch loss for :func:`nmt.training.step.train_step`.
    """

    objective = staticmethod(joint_objective)

    def __init__(self, cfg, joint: Bidirectional, toks):
        self.joint, self.cfg, self.toks = joint, reverse_config(cfg), (toks[1], toks[0])
        self.gold = None  # eval.gold in the reverse direction, read at the first validation (rank 0 only)

    def state(self) -> dict:
        """What ``last.pt`` and ``best.pt`` hold besides the forward model's state: the reverse weights."""
        return {"reverse_model": self.joint.yx.state_dict()}

    @torch.no_grad()
    def teacher_forced(self, pairs, batch_tokens: int, device) -> tuple[float, float]:
        """Over the forward model's validation ``pairs``: the reverse model's loss per source token (nats, no label
        smoothing) and the mean Δ per sentence."""
        self.joint.eval()
        nll = delta = 0.0
        tokens = sentences = 0
        for batch in iterate_batches(pairs, batch_tokens, shuffle=False):
            batch = batch.to(device)
            _, _, nll_yx, total = self.joint(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_out)
            nll, delta = nll + float(nll_yx), delta + float(total)
            tokens, sentences = tokens + int(batch.src_mask.sum()), sentences + batch.src.size(0)
        self.joint.train()
        return nll / max(tokens, 1), delta / max(sentences, 1)

    def validate(self, cfg, valid_pairs, valid: Parallel, device, forward=None) -> dict:
        """The reverse model's figures for the validation record (``cfg``: the run's config). ``forward``: with
        ``eval.gold``, the forward model's ``(GoldSet, forced alignments)`` of this validation; the record then
        also gets the AER of the two directions soft-symmetrized (``symmetrized_aer``, ...), the figure that
        ``nmt.align combine=product`` and ``nmt.aer`` give for the pair's checkpoints of this step."""
        loss, delta = self.teacher_forced(valid_pairs, cfg.train.batch_tokens, device)
        reverse = self.joint.yx
        bleu = greedy_bleu(reverse, *self.toks, valid.tgt, valid.src, cfg.decode, device, cfg.data.src_lang)
        record = {"reverse_valid_loss": loss, "reverse_valid_bleu": bleu, "valid_agreement": delta}
        if self.gold is None and gold_settings(cfg.eval.get("gold")) is not None:
            self.gold = load_gold(self.cfg, quiet=True)
        if self.gold is not None:
            backward = self.gold.force(reverse, self.toks, device)
            record.update({f"reverse_{key}": value for key, value in self.gold.score_forced(backward).items()})
            if forward is not None:
                gold, forced = forward
                record.update({f"symmetrized_{key}": value
                               for key, value in gold.score_forced(forced, backward).items()})
        self.joint.train()
        aer = f", AER {100 * record['reverse_aer']:.1f}%" if "reverse_aer" in record else ""
        both = (f"; both directions (combine=product): AER {100 * record['symmetrized_aer']:.1f}%"
                if "symmetrized_aer" in record else "")
        log.info("reverse model: valid loss %.3f BLEU %.2f%s; agreement Δ %.3f per sentence%s", loss, bleu, aer, delta,
                 both)
        return record

    def save_best(self, run_dir: Path, progress) -> None:
        """Write ``RUN/reverse/checkpoints/best.pt``: the reverse model of the step of ``best.pt``."""
        checkpoint.save(Path(run_dir) / REVERSE_DIR / "checkpoints" / "best.pt", self.joint.yx, self.cfg,
                        *self.toks, progress=asdict(progress))

    def align_command(self, cfg, run_dir: Path) -> str:
        """The ``nmt.align`` command that symmetrizes the pair (``combine=product``) on the ``eval.gold`` sentences
        with its extraction (``method``, and ``threshold``/``shift``/``temperature`` where they differ from
        ``nmt.align``'s defaults), so it gives the ``symmetrized_aer`` of ``best.pt``'s step; on placeholder files
        without ``eval.gold``."""
        run = Path(run_dir).resolve()
        gold = gold_settings(cfg.eval.get("gold"))
        paths = dict(gold["paths"]) if gold and gold.get("paths") else {}
        src, tgt = (file_named(paths.get(str(lang), f"SENTENCES.{lang}")) for lang in (cfg.data.src_lang, cfg.data.tgt_lang))
        extract = [f"{key}={gold[key]}" for key, default in combine_defaults().items() if gold and gold[key] != default]
        args = [f"checkpoint={run / 'checkpoints' / 'best.pt'}",
                f"reverse_checkpoint={run / REVERSE_DIR / 'checkpoints' / 'best.pt'}", "combine=product", *extract,
                f"src={src}", f"tgt={tgt}", f"out={run / SYMMETRIZED}"]
        return "python -m nmt.align " + shlex.join(args)

    @staticmethod
    def aer_command(cfg, run_dir: Path) -> str | None:
        """The ``nmt.aer`` command that scores the file :meth:`align_command` writes against ``eval.gold``'s links
        as validation does (links outside the sentences dropped), or None without ``eval.gold`` or with its
        sentences as ``bitext``."""
        gold = gold_settings(cfg.eval.get("gold"))
        if not gold or not gold.get("paths"):
            return None
        src, tgt = str(cfg.data.src_lang), str(cfg.data.tgt_lang)
        args = [f"gold={file_named(gold['links'])}", f"hyp={Path(run_dir).resolve() / SYMMETRIZED}",
                f"src={file_named(gold['paths'][src])}", f"tgt={file_named(gold['paths'][tgt])}"]
        args += ["gold_format=naacl"] if gold["format"] == "naacl" else []
        args += ["one_based=true"] if gold["one_based"] else []
        args += ["target_first=true"] if gold["link_langs"][0] == tgt else []
        return "python -m nmt.aer " + shlex.join(args)
