"""TensorBoard logging of a run (``train.tensorboard=true``), for ``tensorboard --logdir outputs/``.

Into ``RUN/tensorboard/`` (rank 0 alone): the training loss (nats per target token), the learning rate and
target tokens/s every ``TRAIN_EVERY`` steps; every figure of a validation (the record ``metrics.jsonl`` gets, the
gold-set AER, precision and recall of ``eval.gold`` under ``alignment/``);
and at the end the run's main settings with its final scores (``add_hparams``), so that TensorBoard's
HParams tab compares runs. The ``tensorboard`` package is optional (``pip install "nmt[tensorboard]"``).
"""

from __future__ import annotations

import numbers
from pathlib import Path

from nmt.settings import setting_at

TRAIN_EVERY = 10  # steps between the training scalars

# the gold-set figures of a validation record (eval.gold, nmt.training.gold) -> their TensorBoard tags; an
# agreement run also has the reverse model's and the two directions' soft-symmetrized ones (nmt.training.reverse)
ALIGNMENT_FIGURES = {**{f"{prefix}{name}": f"alignment/{prefix}{tag}"
                        for prefix in ("", "reverse_", "symmetrized_")
                        for name, tag in (("aer", "aer"), ("alignment_precision", "precision"),
                                          ("alignment_recall", "recall"))},
                     "guided_term": "alignment/guided_term"}  # train.guided_alignment: the term, per target token

# the loss terms of other objectives, per target token since the last validation -> their TensorBoard tags
TERM_FIGURES = {"rdrop_term": "train/rdrop_term"}  # train.rdrop_alpha: the symmetric KL without α

# the settings shown in TensorBoard's HParams tab: (name there, dotted key of the config)
HPARAMS = (("attention", "attention._target_"), ("decoder_style", "decoder.style"), ("emb_size", "model.emb_size"),
           ("hidden_size", "model.hidden_size"), ("dropout", "model.dropout"), ("vocab_size", "tokenizer.vocab_size"),
           ("lr", "train.lr"), ("batch_tokens", "train.batch_tokens"), ("label_smoothing", "train.label_smoothing"),
           ("seed", "seed"))


def check_available(enabled: bool) -> None:
    """Before any work: can ``train.tensorboard=true`` write? (the ``tensorboard`` package is installed)

    Raises:
        ValueError: naming the setting and the package to install.
    """
    if enabled:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401 (needs the tensorboard package)
        except ImportError:
            raise ValueError('train.tensorboard=true needs the tensorboard package: pip install "nmt[tensorboard]" '
                             "(or pip install tensorboard)") from None


def _setting(cfg, key: str):
    """The config value at a dotted key, as TensorBoard takes it (a number, a string or a bool)."""
    value = setting_at(cfg, key)
    if isinstance(value, str) and key.endswith("_target_"):
        value = value.rsplit(".", 1)[-1]
    return value if isinstance(value, (bool, numbers.Number, str)) else str(value)


class Board:
    """The run's TensorBoard writer, or nothing at all when ``enabled`` is false (every method is then a no-op).

    Args:
        run_dir: the run folder; the event files go to ``run_dir/tensorboard/``.
        enabled: ``train.tensorboard`` on this process (rank 0 of a distributed run).
    """

    def __init__(self, run_dir: str | Path, enabled: bool):
        self.folder = Path(run_dir) / "tensorboard"
        self.writer = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.folder))

    def training(self, step: int, loss: float, lr: float, tokens_per_sec: float) -> None:
        """Training scalars at ``step`` (every ``TRAIN_EVERY`` steps): loss in nats per target token, lr, tok/s."""
        if self.writer is None or step % TRAIN_EVERY:
            return
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/lr", lr, step)
        self.writer.add_scalar("train/tokens_per_sec", tokens_per_sec, step)

    def validation(self, record: dict) -> None:
        """The validation figures of a ``metrics.jsonl`` record (``valid_bleu`` -> ``valid/bleu``, ...; with
        ``eval.gold`` ``aer`` -> ``alignment/aer``, ``alignment_precision`` -> ``alignment/precision``, ...) and the
        training time (``time/minutes``) at its step; the training figures come every ``TRAIN_EVERY`` steps."""
        if self.writer is None:
            return
        for name, value in record.items():
            if name.startswith("valid_") and isinstance(value, numbers.Number):
                self.writer.add_scalar(f"valid/{name.removeprefix('valid_')}", value, record["step"])
            elif name in (tags := ALIGNMENT_FIGURES | TERM_FIGURES) and isinstance(value, numbers.Number):
                self.writer.add_scalar(tags[name], value, record["step"])
        if isinstance(record.get("elapsed_sec"), numbers.Number):  # the training time so far, validation included
            self.writer.add_scalar("time/minutes", record["elapsed_sec"] / 60, record["step"])
        self.writer.flush()

    def final(self, cfg, results: dict) -> None:
        """The run's settings (``HPARAMS``) with its final scores (the numbers of ``results``), then close."""
        if self.writer is None:
            return
        metrics = {f"final/{k}": v for k, v in results.items() if isinstance(v, numbers.Number)
                   and not isinstance(v, bool) and ("bleu" in k or "chrf" in k)}
        self.writer.add_hparams({name: _setting(cfg, key) for name, key in HPARAMS}, metrics, run_name=".")
        self.close()

    def close(self) -> None:
        """Write what is buffered and close the event file."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
