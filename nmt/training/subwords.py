"""The run's subwords: SentencePiece models trained on the training split (or reused from ``spm/``), restricted
to the pieces each side uses.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from nmt.data.corpus import Parallel
from nmt.data.stream import TrainStream
from nmt.data.textio import atomic_write
from nmt.data.tokenizer import Tokenizer, train_spm

log = logging.getLogger(__name__)


SPM_SETTINGS = ("vocab_size", "model_type", "joint", "byte_fallback")  # what a SentencePiece model is trained with


def prepare_tokenizers(tok_cfg, train: Parallel | TrainStream, spm_dir: Path,
                       corpus: dict | None = None) -> tuple[Tokenizer, Tokenizer]:
    """Train SentencePiece on the training split (joint or one per side), or reuse models already in ``spm_dir``;
    with ``restrict_vocab`` each side keeps only the pieces its training text uses (the checkpoint stores the lists).
    A :class:`~nmt.data.stream.TrainStream` is read as a stream: SentencePiece learns from a uniform sample of at
    most ``tokenizer.train_pairs`` pairs (all of them, in order, when the corpus is smaller), and the restriction
    reads every line.

    The settings the models were trained with, and ``corpus`` (what the training text is:
    :func:`nmt.data.stream.corpus_settings`), go to ``spm_dir/settings.json``; a later attempt in the same run
    folder with other settings or another corpus is refused rather than given the earlier models.

    Raises:
        ValueError: when models already in ``spm_dir`` (from an earlier attempt in the same run folder) were trained
            with other settings or on another corpus (``settings.json``) than this run's.
    """
    names = ["joint", "joint"] if tok_cfg.joint else ["src", "tgt"]
    if not all((spm_dir / f"{name}.model").is_file() for name in names):
        sample = train if isinstance(train, Parallel) else train.sample(tok_cfg.get("train_pairs"), seed=0)
        texts = {"joint": sample.src + sample.tgt, "src": sample.src, "tgt": sample.tgt}
    wanted = {**{key: tok_cfg.get(key) for key in SPM_SETTINGS}, "corpus": corpus}
    record = spm_dir / "settings.json"
    if record.is_file() and any((spm_dir / f"{name}.model").is_file() for name in names):
        used = json.loads(record.read_text(encoding="utf-8"))
        differ = [f"tokenizer.{key}={used.get(key)} (this run: {wanted[key]})" for key in SPM_SETTINGS
                  if used.get(key) != wanted[key]]
        if corpus is not None and "corpus" in used and used["corpus"] != corpus:  # records before it lack it
            differ += [f"data.{key}={used['corpus'].get(key)} (this run: {corpus.get(key)})"
                       for key in sorted({*corpus, *used["corpus"]}) if used["corpus"].get(key) != corpus.get(key)]
        if differ:
            raise ValueError(f"{spm_dir} holds SentencePiece models of an earlier attempt in this run folder, trained "
                             f"with {', '.join(differ)}: delete that spm/ folder or use a new run folder")
    for name in set(names):
        path = spm_dir / f"{name}.model"
        if not path.is_file():
            log.info("training sentencepiece %s model (%s, %d pieces) on %d sentences", name, tok_cfg.model_type,
                     tok_cfg.vocab_size, len(texts[name]))
            train_spm(texts[name], path, tok_cfg.vocab_size, tok_cfg.model_type,
                      byte_fallback=tok_cfg.byte_fallback)
            trained = Tokenizer.load(path).sp.get_piece_size()
            if trained < tok_cfg.vocab_size:
                log.warning("the %s model has %d pieces, fewer than tokenizer.vocab_size=%d: the training text has "
                            "no more merges to make", name, trained, tok_cfg.vocab_size)
            atomic_write(record, json.dumps(wanted) + "\n")
    src_tok, tgt_tok = Tokenizer.load(spm_dir / f"{names[0]}.model"), Tokenizer.load(spm_dir / f"{names[1]}.model")
    if tok_cfg.get("restrict_vocab"):
        src_tok, tgt_tok = src_tok.restricted(train.lines("src")), tgt_tok.restricted(train.lines("tgt"))
        log.info("vocabularies restricted to the pieces each side uses: source %d, target %d", len(src_tok),
                 len(tgt_tok))
    return src_tok, tgt_tok
