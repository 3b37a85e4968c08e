"""The Python API: load a trained model once, then translate or force-align text from a notebook or a service.

    from nmt import Translator
    tr = Translator.load("outputs/RUN")                      # a run folder or a checkpoint file
    best = tr.translate(["Ein Mann fährt Fahrrad."], beam_size=5)[0]
    best.text, best.score, best.alignment                    # str, float, [len(hyp_pieces), len(src_pieces)]
    forced = tr.align(["Ein Mann fährt Fahrrad."], ["A man rides a bike."])[0]
    forced.heads                                             # multi-head attention: [heads, T, S], else None

Decoding runs exactly as ``translate.py`` does (same search, batching, length limits, normalization of the
input for models trained on normalized text); ``nmt.decoding.word_alignment.merge_to_words`` turns a
translation's subword alignment into a word-level one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from nmt.analysis.forced import force_align
from nmt.analysis.heads import parse_head, with_head
from nmt.data.normalize import Normalizer
from nmt.decoding.ensemble import Ensemble, load_ensemble
from nmt.decoding.options import check_decoding
from nmt.decoding.translation import Translation, translate_nbest
from nmt.models import checkpoint
from nmt.models.device import pick_device, set_threads
from nmt.models.precision import Precision, check_precision

__all__ = ["Translation", "Translator"]


class DecodeSettings(dict):
    """The ``decode`` settings as a mapping with attribute access (what the search reads: ``beam_size``,
    ``length_penalty``, ``max_len_a``, ...)."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Translator:
    """A trained model with its subword models, ready to translate and to align.

    Build it with :meth:`load`. ``decode`` holds the decoding settings the model was trained with (the
    ``decode`` section of its config); keyword arguments of :meth:`translate` override them per call.

    Attributes:
        model: the :class:`nmt.models.seq2seq.Seq2Seq`, in eval mode on ``device``.
        source_lang, target_lang: the language codes of its training data.
        checkpoint: the checkpoint file loaded.
    """

    def __init__(self, model, src_tok, tgt_tok, config, device: torch.device, path: Path):
        self.model, self.src_tok, self.tgt_tok, self.device, self.checkpoint = model, src_tok, tgt_tok, device, path
        self.source_lang, self.target_lang = config.data.src_lang, config.data.tgt_lang
        self.decode = DecodeSettings(dict(config.decode.items()))
        self._normalizer = Normalizer.from_config(config.data.get("normalize"), self.source_lang)
        # forced alignment keeps word positions: only the token-preserving part (lowercasing), on both sides
        self._keep_tokens = Normalizer(self.source_lang, lowercase=self._normalizer.lowercase)

    @classmethod
    def load(cls, path: str | Path | Sequence[str | Path], device: str = "auto", threads: int | None = None,
             combine: str = "prob") -> Translator:
        """Load a run folder (the model its final evaluation scored, as ``translate.py checkpoint=RUN``) or a
        checkpoint file (``best.pt``, ``averaged.pt``, ``step_N.pt``, ``last.pt``); a list of them is an
        ensemble (:mod:`nmt.decoding.ensemble`: one vocabulary and direction, ``combine`` = ``prob`` or
        ``loglinear``).

        Args:
            path: a run folder or a checkpoint file, or a list of them.
            device: ``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``.
            threads: torch's CPU threads for this process (None: leave torch's setting).
        Raises:
            FileNotFoundError, nmt.models.checkpoint.CheckpointError: a missing or unusable checkpoint, named,
                and ensemble members of other subwords or another direction.
            ValueError: an unknown device, CUDA on a machine without it, threads below 1, an unknown combine, an
                empty list.
            TypeError: a path that is neither a str, a Path nor a list of them (e.g. None).
        """
        if not isinstance(path, (str, Path, Sequence)):
            raise TypeError(f"Translator.load: path must be a run folder or a checkpoint file (a str or Path), or a "
                            f"list of them, got {type(path).__name__}")
        set_threads(threads)
        chosen = pick_device(device)
        if isinstance(path, (str, Path)):
            file = checkpoint.run_model(path)
            model, config, src_tok, tgt_tok, _ = checkpoint.load(file, chosen)
            return cls(model, src_tok, tgt_tok, config, chosen, Path(file))
        paths = list(path)
        model, config, src_tok, tgt_tok = load_ensemble(paths, chosen, combine)
        return cls(model, src_tok, tgt_tok, config, chosen, Path(checkpoint.run_model(paths[0])))

    def settings(self, **overrides) -> DecodeSettings:
        """The decoding settings with ``overrides`` applied.

        Raises:
            ValueError: for a name that is not a decoding setting (the message lists them), or a value out of
                range (:func:`nmt.decoding.options.check_decoding`).
        """
        unknown = sorted(set(overrides) - set(self.decode))
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a decoding setting; use one of {', '.join(sorted(self.decode))}")
        decode = DecodeSettings({**self.decode, **overrides})
        check_decoding(decode.beam_size, decode.n_best if "n_best" in overrides else 1, "beam_size", decode)
        return decode

    def translate(self, sentences: str | Sequence[str], *, precision: str = "fp32",
                  **decode) -> list[Translation] | list[list[Translation]]:
        """Translate sentences (one line each; a single string counts as one sentence).

        Args:
            sentences: the source lines; empty lines get empty translations. Each string is one sentence
                whatever it holds: a line break inside it (``"\\n"``, ``"\\r"``, U+2028) is read as a space, so
                split a text into lines first (``text.splitlines()``) for one translation per line.
            precision: ``fp32``, ``bf16`` (autocast on CPU or GPU), ``fp16`` (CUDA only) or ``auto`` (bf16 on a
                CPU with bf16 units, else fp32: :func:`nmt.models.precision.auto_precision`) for the search's products.
            **decode: decoding settings for this call: ``beam_size`` (1 = greedy), ``n_best``, ``length_penalty``,
                ``coverage_penalty``, ``max_len_a``, ``max_len_b``, ``mbr``, ``batch_size``, ``max_src_len``, ...
        Returns:
            one :class:`Translation` per sentence (``text``, ``score``, ``log_prob``, ``src_pieces``,
            ``hyp_pieces``, ``alignment`` ``[len(hyp_pieces), len(src_pieces)]``, and for a multi-head attention
            model ``heads`` ``[heads, len(hyp_pieces), len(src_pieces)]``), in input order; with
            ``n_best > 1``, a list of the ``n_best`` best per sentence, best first.
        Raises:
            TypeError: for sentences that are not strings.
            ValueError: for an unknown or out-of-range setting, or an unusable precision on this device.
        """
        lines = [sentences] if isinstance(sentences, str) else list(sentences)
        if any(not isinstance(line, str) for line in lines):
            raise TypeError("sentences must be a string or a sequence of strings")
        settings = self.settings(**decode)
        precision = check_precision(precision, self.device, "precision")
        n_best = settings.n_best if "n_best" in decode else 1
        lines = self._normalizer.lines(lines)
        with Precision(precision, self.device).autocast():
            blocks = translate_nbest(self.model, self.src_tok, self.tgt_tok, lines, settings, self.device,
                                     settings.beam_size, n_best)
        return [block[0] for block in blocks] if n_best == 1 else blocks

    def align(self, sources: str | Sequence[str], targets: str | Sequence[str],
              batch_size: int = 64, head: str | int = "mean") -> list[Translation]:
        """Forced alignment (as ``python -m nmt.align``): the model's attention while it reads each target line
        as its own output. A model trained on lowercased text sees both sides lowercased; nothing else changes,
        so word positions stay those of the input.

        Args:
            head: for a multi-head attention model, the matrix in ``alignment``: ``"mean"`` (the heads' mean) or
                a 0-based head index (:mod:`nmt.analysis.heads`; choose one on gold links with
                :func:`nmt.analysis.heads.best_head`).
        Returns:
            one :class:`Translation` per pair: ``alignment`` ``[T, S]`` over ``hyp_pieces`` / ``src_pieces``
            (both ending in ``</s>``), ``heads`` ``[heads, T, S]`` every head's matrix of a multi-head model (None
            otherwise, and for an ensemble), ``score`` the target's log-probability in nats (for an ensemble: the
            means of the members' alignments and scores).
        Raises:
            ValueError: when the line counts differ, ``batch_size < 1``, or ``head`` is not ``"mean"`` or a head
                index of this model (an ensemble has only the mean).
        """
        head = parse_head(head) if isinstance(head, str) else head
        if head == "best":
            raise ValueError("head='best' needs gold links: choose with nmt.analysis.heads.best_head(translations, "
                             "gold), then pass its index")
        sources, targets = ([sources] if isinstance(sources, str) else list(sources),
                            [targets] if isinstance(targets, str) else list(targets))
        prepare = self._keep_tokens.lines
        sources, targets = prepare(sources, keep_tokens=True), prepare(targets, keep_tokens=True)
        if head != "mean" and isinstance(self.model, Ensemble):
            raise ValueError(f"head={head}: an ensemble's alignment is the mean of its members'; use head='mean'")
        return with_head(force_align(self.model, self.src_tok, self.tgt_tok, sources, targets, batch_size,
                                     self.device), head)
