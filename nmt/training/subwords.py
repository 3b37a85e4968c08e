"""The run's subwords: SentencePiece models trained on the training split (or reused from ``spm/``), restricted
to the pieces each side uses.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from nmt.data.corpus import Parallel
from nmt.data.spm_training import MAX_SENTENCE_LENGTH, check_settings, train_spm, usable_sentences
from nmt.data.stream import TrainStream
from nmt.data.textio import atomic_write
from nmt.data.tokenizer import Tokenizer

log = logging.getLogger(__name__)


SPM_SETTINGS = ("vocab_size", "model_type", "joint", "byte_fallback", "user_defined_symbols", "normalization",
                "max_sentence_length")  # what a SentencePiece model is trained with


SPM_DEFAULTS = {"user_defined_symbols": [], "normalization": "nmt_nfkc", "max_sentence_length": MAX_SENTENCE_LENGTH}
# the value of a setting that a config (or a settings.json written before the setting existed) leaves out


def spm_settings(tok_cfg) -> dict:
    """The SentencePiece settings of a ``tokenizer`` node as plain data (``SPM_SETTINGS``; a missing or null one:
    its ``SPM_DEFAULTS`` value), checked.

    Raises:
        ValueError: naming the setting, for a value SentencePiece cannot train with
            (:func:`nmt.data.spm_training.check_settings`).
    """
    settings = {key: tok_cfg.get(key) for key in SPM_SETTINGS}
    settings.update({key: value for key, value in SPM_DEFAULTS.items() if settings[key] is None})
    settings["user_defined_symbols"] = check_settings(settings["model_type"], settings["normalization"],
                                                      settings["user_defined_symbols"],
                                                      settings["max_sentence_length"])
    return settings


def prepare_tokenizers(tok_cfg, train: Parallel | TrainStream, spm_dir: Path,
                       corpus: dict | None = None) -> tuple[Tokenizer, Tokenizer]:
    """Train SentencePiece on the training split (joint or one per side), or reuse models already in ``spm_dir``;
    with ``restrict_vocab`` each side keeps only the pieces its training text uses (the checkpoint stores the lists).
    A :class:`~nmt.data.stream.TrainStream` is read as a stream: SentencePiece learns from a uniform sample of at
    most ``tokenizer.train_pairs`` pairs (all of them, in order, when the corpus is smaller), and the restriction
    reads every line.

    The settings the models were trained with (``SPM_SETTINGS``: also ``user_defined_symbols``, ``normalization``
    and ``max_sentence_length``), and ``corpus`` (what the training text is:
    :func:`nmt.data.stream.corpus_settings`), go to ``spm_dir/settings.json``; a later attempt in the same run
    folder with other settings or another corpus is refused rather than given the earlier models. The settings and
    the training text are checked before anything is written or logged, so a refused run leaves no ``spm/``.

    Raises:
        ValueError: a ``tokenizer.*`` setting SentencePiece cannot train with; a side of the training text with no
            line SentencePiece can learn from (empty, or every line longer than ``tokenizer.max_sentence_length``:
            the message names the file); a ``tokenizer.vocab_size`` too small for the text's characters; or models
            already in ``spm_dir`` (from an earlier attempt in the same run folder) trained with other settings or
            on another corpus (``settings.json``) than this run's.
    """
    names = ["joint", "joint"] if tok_cfg.joint else ["src", "tgt"]
    settings = spm_settings(tok_cfg)
    wanted = {**settings, "corpus": corpus}
    record = spm_dir / "settings.json"
    if record.is_file() and any((spm_dir / f"{name}.model").is_file() for name in names):
        check_earlier_models(spm_dir, json.loads(record.read_text(encoding="utf-8")), wanted)
    missing = [name for name in dict.fromkeys(names) if not (spm_dir / f"{name}.model").is_file()]
    if missing:
        sample = train if isinstance(train, Parallel) else train.sample(tok_cfg.get("train_pairs"), seed=0)
        sources = text_sources(train)
        src, tgt = (usable_sentences(sample.lines(side), settings["max_sentence_length"], sources[side])
                    for side in ("src", "tgt"))
        texts = {"joint": src + tgt, "src": src, "tgt": tgt}
        warn_unseen_symbols(settings["user_defined_symbols"], texts["joint"])
    for name in missing:
        path = spm_dir / f"{name}.model"
        log.info("training sentencepiece %s model (%s, %d pieces) on %d sentences", name, tok_cfg.model_type,
                 tok_cfg.vocab_size, len(texts[name]))
        train_spm(texts[name], path, tok_cfg.vocab_size, tok_cfg.model_type, byte_fallback=tok_cfg.byte_fallback,
                  user_defined_symbols=settings["user_defined_symbols"], normalization=settings["normalization"],
                  max_sentence_length=settings["max_sentence_length"], source=sources[name])
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


def check_earlier_models(spm_dir: Path, used: dict, wanted: dict) -> None:
    """Refuse the models an earlier attempt left in ``spm_dir`` when ``used`` (its ``settings.json``) differs from
    ``wanted`` (this run's settings and corpus); a setting the record lacks counts as its ``SPM_DEFAULTS`` value.

    Raises:
        ValueError: naming ``spm_dir``, each setting that differs (both values) and what to do.
    """
    corpus = wanted["corpus"]
    differ = [f"tokenizer.{key}={used.get(key, SPM_DEFAULTS.get(key))} (this run: {wanted[key]})"
              for key in SPM_SETTINGS if used.get(key, SPM_DEFAULTS.get(key)) != wanted[key]]
    if corpus is not None and "corpus" in used and used["corpus"] != corpus:  # records before it lack it
        differ += [f"data.{key}={used['corpus'].get(key)} (this run: {corpus.get(key)})"
                   for key in sorted({*corpus, *used["corpus"]}) if used["corpus"].get(key) != corpus.get(key)]
    if differ:
        raise ValueError(f"{spm_dir} holds SentencePiece models of an earlier attempt in this run folder, trained "
                         f"with {', '.join(differ)}: delete that spm/ folder or use a new run folder")


def warn_unseen_symbols(symbols: list[str], texts: list[str]) -> None:
    """Warn about each user-defined symbol that no training line holds (after ``data.normalize``): the model never
    learns what to do with it, and ``data.normalize.tokenize`` may be what split it (``<NUM>`` -> ``< NUM >``)."""
    unseen = [symbol for symbol in symbols if not any(symbol in line for line in texts)]
    if unseen:
        log.warning("tokenizer.user_defined_symbols %s occur in no line of the training text SentencePiece learns "
                    "from, so the model never learns to translate them; if the corpus holds them, check "
                    "data.normalize (tokenize: true splits '<NUM>' into '< NUM >')", " ".join(unseen))


def text_sources(train: Parallel | TrainStream) -> dict[str, str]:
    """What the training text of each model is, for messages: the ``src``, ``tgt`` and ``joint`` files (or the
    split's sides when it has no files)."""
    files = [str(f) for f in getattr(train, "files", None) or []]
    src, tgt = files if len(files) == 2 else (f"the source side of the {train.name} split",
                                              f"the target side of the {train.name} split")
    if getattr(train, "extra", None):
        src, tgt = f"{src} (with data.extra_train)", f"{tgt} (with data.extra_train)"
    return {"src": src, "tgt": tgt, "joint": f"{src} and {tgt}"}
