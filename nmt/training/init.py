"""Fine-tuning: a new run that starts from a trained model's weights (``train.init``).

Continued training on other data (domain adaptation, more pairs, a second stage on the in-domain part) as
OpenNMT-py's ``-train_from`` with ``-reset_optim all``, fairseq's ``--finetune-from-model`` and Joey NMT's
``load_model`` with the ``reset_*`` options do it: the model's weights, architecture and SentencePiece models come
from the checkpoint (``FROM_INIT``), the data and every training setting from this run's command line, and the
optimizer, learning-rate schedule, step count, best BLEU and data order start anew. A checkpoint of an agreement
run (``train.agreement``) also holds the reverse model, which then starts from its weights too. An interrupted
fine-tuning run resumes from its own ``last.pt`` like any other run (:mod:`nmt.training.resume`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from nmt.models import checkpoint
from nmt.models.build import build_model
from nmt.settings import adopt, from_plain, to_plain
from nmt.training.resume import save_subword_models, warn_taken_from_checkpoint

log = logging.getLogger(__name__)

FROM_INIT = ("model", "attention", "decoder", "tokenizer")  # what a fine-tuning run takes from its checkpoint
# ... but for these, which shape training and not the model: this run's
RUN_OWN = ("model.dropout", "model.source_word_dropout", "model.target_word_dropout", "tokenizer.sample_alpha",
           "tokenizer.sample_side")


def init_checkpoint(path) -> Path:
    """The checkpoint that ``train.init`` names: a file, or a run folder's ``checkpoints/best.pt``.

    Raises:
        FileNotFoundError: neither a file nor a run folder with ``checkpoints/best.pt``; the message says what to
            pass.
    """
    path = Path(str(path))
    if path.is_dir():
        if (path / "checkpoints" / "best.pt").is_file():
            return path / "checkpoints" / "best.pt"
        raise FileNotFoundError(f"train.init={path}: a folder without checkpoints/best.pt; name a checkpoint file "
                                "(RUN/checkpoints/best.pt, averaged.pt, last.pt) or a run folder that has one")
    if not path.is_file():
        raise FileNotFoundError(f"train.init={path}: no such checkpoint; name a checkpoint file "
                                "(RUN/checkpoints/best.pt, averaged.pt, last.pt) or a run folder")
    return path


def init_from(path, cfg, run_dir: Path, device, write: bool = True):
    """Model and tokenizers of a trained checkpoint to fine-tune in a new run; its SentencePiece models are copied
    to ``run_dir/spm`` (by rank 0: ``write``).

    Model, attention, decoder and tokenizer settings come from the checkpoint's config, whatever the command line
    says (a difference is named in a warning), except the regularizers in ``RUN_OWN`` (dropout, word dropout,
    subword sampling); the data and training settings are this run's. A checkpoint written with
    ``train.ema_decay`` starts from its moving average (the weights it was evaluated with).

    Returns:
        ``(model, src_tok, tgt_tok, cfg, reverse_weights)``: ``cfg`` is the command line's config with the
        ``FROM_INIT`` groups taken from the checkpoint; ``reverse_weights`` the state dict of the reverse model
        of an agreement checkpoint (``reverse_model``), else None.

    Raises:
        FileNotFoundError: see :func:`init_checkpoint`. nmt.checkpoint.CheckpointError: as
            :func:`nmt.checkpoint.load`. ValueError: a checkpoint of another language pair or direction than
            ``data.src_lang`` -> ``data.tgt_lang``.
    """
    path = init_checkpoint(path)
    model, ckpt_cfg, src_tok, tgt_tok, payload = checkpoint.load(path, device)
    pair = (ckpt_cfg.data.get("src_lang"), ckpt_cfg.data.get("tgt_lang"))
    if pair != (cfg.data.src_lang, cfg.data.tgt_lang):
        raise ValueError(f"train.init={path}: that model translates {pair[0]} -> {pair[1]}, this run's data is "
                         f"{cfg.data.src_lang} -> {cfg.data.tgt_lang}; set data.src_lang={pair[0]} "
                         f"data.tgt_lang={pair[1]}, or start from a model trained "
                         f"{cfg.data.src_lang} -> {cfg.data.tgt_lang}")
    merged, own = to_plain(adopt(cfg, ckpt_cfg, FROM_INIT)), to_plain(cfg)
    for section, name in (key.split(".") for key in RUN_OWN):
        merged[section][name] = own[section].get(name)
    merged = from_plain(merged)
    if merged.model != ckpt_cfg.model:  # other dropout: the same weights in modules built with this run's rates
        weights = model.state_dict()
        model = build_model(merged.model, merged.decoder, merged.attention, len(src_tok), len(tgt_tok)).to(device)
        model.load_state_dict(weights)
    warn_taken_from_checkpoint("fine-tuning", path, ckpt_cfg, cfg, FROM_INIT, keep=RUN_OWN)
    if write:
        save_subword_models(run_dir, src_tok, tgt_tok, replace=True)
    step = (payload.get("progress") or {}).get("step")
    log.info("fine-tuning %s%s: its weights, architecture and subword models; this run's data and training "
             "settings, with a new optimizer and learning-rate schedule from step 0", path,
             f" (step {step})" if step is not None else "")
    return model.train(), src_tok, tgt_tok, merged, payload.get("reverse_model")
