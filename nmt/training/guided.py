"""Guided alignment: supervising the attention with word alignments from a statistical aligner (Chen et al. 2016,
"Guided alignment training for topic-aware neural machine translation", AMTA; Garg et al. 2019, "Jointly learning
to align and translate with transformer models", EMNLP, §3), the ``train.guided_alignment`` of OpenNMT-py
(``lambda_align``), fairseq (``--alignment-lambda``) and Marian (``--guided-alignment``)::

    J = NLL(y | x) + λ · Σ_sentences Σ_t Σ_s −G[t, s] · log A[t, s]

A ``[B, T, S]`` is the model's teacher-forced attention (row t: target piece y_t, the row that ``nmt.align`` reads
with ``shift=0``), G the word links made into a distribution over source pieces per target piece:

- the links are between whitespace words of the training text as the model reads it (after ``data.normalize``);
  a word's pieces are those :func:`nmt.decoding.word_alignment.words_from_pieces` gives it;
- each piece of target word w spreads its row equally over the source words linked to w, and each source word
  equally over its pieces; a target word without a link has no row (no term), and ``</s>`` never has one;
- like the training loss, the term is summed over the batch and divided by the update's target tokens
  (:func:`nmt.training.step.train_step`), so λ weighs one target piece's cross-entropy with its links like one
  target token's loss (OpenNMT-py and Garg et al. use λ = 0.05); the reported training loss stays the NLL alone,
  and the term itself, per target token of the batches since the last validation and without λ, goes into
  ``metrics.jsonl`` as ``guided_term`` (nats) and the validation's log line.

Pairs are matched to their links by their piece ids, so the links follow a pair through the token store, the
dropping of empty and too long pairs, repetitions (``data.extra_train`` ``repeat``) and shuffling.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from nmt.data.batches import Batch
from nmt.data.tokenizer import PAD_ID
from nmt.decoding.word_alignment import words_from_pieces
from nmt.training.loss import loss_fn

log = logging.getLogger(__name__)

KEYS = ("weight", "links", "one_based", "aligner")
ALIGNERS = ("eflomal", "none")  # none: the run writes its training text and stops, to align it elsewhere
TINY = 1e-9  # floor of an attention weight under log (local attention has exact zeros)


def guided_settings(t) -> dict | None:
    """``train.guided_alignment`` (``t`` is ``cfg.train``) as ``{"weight", "links", "one_based", "aligner"}``, or
    None when it is off (the node or its ``weight`` null).

    Raises:
        ValueError: an unknown key, a weight that is not a number >= 0, an unknown aligner, or ``one_based``
            that is not a boolean, each naming the setting.
    """
    node = t.get("guided_alignment")
    if node is None:
        return None
    if not hasattr(node, "keys"):
        raise ValueError(f"train.guided_alignment={node!r} must be null or a mapping {{weight: λ, links: FILE}}")
    given = dict(node)
    if unknown := sorted(set(given) - set(KEYS)):
        raise ValueError(f"train.guided_alignment: unknown key(s) {', '.join(map(str, unknown))}; keys: "
                         f"{', '.join(KEYS)}")
    weight = given.get("weight")
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
        raise ValueError(f"train.guided_alignment.weight={weight!r} must be a number >= 0 (λ, the weight of the "
                         "alignment term, e.g. 0.05; null: off)")
    aligner = given.get("aligner") or "eflomal"
    if aligner not in ALIGNERS:
        raise ValueError(f"train.guided_alignment.aligner={aligner!r}; valid: {', '.join(ALIGNERS)} (or give "
                         "train.guided_alignment.links=FILE)")
    one_based = given.get("one_based", False)
    if one_based not in (True, False):
        raise ValueError(f"train.guided_alignment.one_based={one_based!r} must be true or false")
    links = given.get("links")
    return {"weight": float(weight), "links": str(links) if links else None, "one_based": one_based,
            "aligner": aligner}


def check_guided(cfg) -> None:
    """The checks of ``train.guided_alignment`` that need no corpus (:func:`nmt.training.checks.check_settings`).

    Raises:
        ValueError: a bad setting (:func:`guided_settings`), guided alignment with ``train.agreement`` (the two
            terms are not combined) or with ``tokenizer.sample_alpha`` > 0 (sampled segmentations have no links).
        FileNotFoundError: a ``links`` file that does not exist.
    """
    settings = guided_settings(cfg.train)
    if settings is None:
        node = cfg.train.get("guided_alignment")
        if node is not None and hasattr(node, "get") and node.get("links"):
            log.warning("train.guided_alignment.links=%s is set but train.guided_alignment.weight is null: no guided "
                        "alignment (give the weight, e.g. train.guided_alignment.weight=0.05)", node.get("links"))
        return
    agreement = cfg.train.get("agreement")
    if agreement is not None and agreement.get("weight") is not None:
        raise ValueError("train.guided_alignment does not combine with train.agreement: set one of "
                         "train.guided_alignment.weight=null or train.agreement.weight=null")
    if cfg.tokenizer.get("sample_alpha"):
        raise ValueError("train.guided_alignment needs the best segmentation of every training pair: set "
                         "tokenizer.sample_alpha=0 (sampled segmentations have no links)")
    if settings["links"] and not Path(settings["links"]).is_file():
        raise FileNotFoundError(f"train.guided_alignment.links={settings['links']}: no such file (a Pharaoh file "
                                "with one line per training pair; null: eflomal computes the links)")


def keep_guided(ckpt_cfg, cfg, overrides=()) -> None:
    """On a resume of a run trained with ``train.guided_alignment``: the setting stays the checkpoint's unless the
    command line's ``overrides`` set it (a run resumed by its folder alone goes on with its guidance)."""
    if guided_settings(ckpt_cfg.train) is not None and "guided_alignment" in cfg.train and \
            not any(o.lstrip("+").startswith("train.guided_alignment") for o in overrides):
        cfg.train.guided_alignment = ckpt_cfg.train.guided_alignment


def piece_targets(src_pieces: Sequence[str], tgt_pieces: Sequence[str],
                  links: Iterable[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The guiding distribution G of one pair as sparse cells ``(rows, cols, values)`` (module docstring).

    Args:
        src_pieces: ``[S]`` the source pieces (``</s>`` included), tgt_pieces: ``[T]`` the target's.
        links: 0-based ``(source word, target word)`` pairs; links to a word the pieces do not have are left out.
    Returns:
        ``rows`` (target piece t), ``cols`` (source piece s), int64 ``[N]``, and ``values`` float32 ``[N]``;
        the values of each row sum to 1.
    """
    src_words, tgt_words = words_from_pieces(list(src_pieces)), words_from_pieces(list(tgt_pieces))
    pieces_of: dict[int, list[int]] = {}
    for pos, word in enumerate(src_words):
        if word >= 0:
            pieces_of.setdefault(word, []).append(pos)
    linked: dict[int, list[int]] = {}
    for src, tgt in sorted(set(links)):
        if src in pieces_of:
            linked.setdefault(tgt, []).append(src)
    rows, cols, values = [], [], []
    for t, word in enumerate(tgt_words):
        for src in linked.get(word, []) if word >= 0 else []:
            share = 1.0 / (len(linked[word]) * len(pieces_of[src]))
            rows += [t] * len(pieces_of[src])
            cols += pieces_of[src]
            values += [share] * len(pieces_of[src])
    return np.array(rows, np.int64), np.array(cols, np.int64), np.array(values, np.float32)


class GuidedLinks:
    """The guiding distributions of the training pairs, keyed by the pairs' piece ids (both sides ending in
    ``</s>``, as :func:`nmt.data.batches.encode_pairs` gives them); ``len()`` is the number of distinct pairs held,
    ``covered`` the pairs added with links (repetitions included), ``links`` the piece cells held."""

    def __init__(self):
        self.table: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[np.ndarray, ...]] = {}
        self.links = 0  # piece cells held
        self.covered = 0  # pairs added with links, repetitions included

    def __len__(self) -> int:
        return len(self.table)

    def add(self, src_ids: Sequence[int], tgt_ids: Sequence[int], cells: tuple[np.ndarray, ...]) -> None:
        """Hold ``cells`` (:func:`piece_targets`) for the pair; a pair without any is not held, and a pair held
        already (a repetition) keeps its first cells."""
        if len(cells[0]):
            self.covered += 1
            if self.table.setdefault((tuple(src_ids), tuple(tgt_ids)), cells) is cells:
                self.links += len(cells[0])

    def targets(self, batch: Batch) -> tuple[torch.Tensor, int]:
        """G ``[B, T, S]`` float32 for a batch (zero rows for pairs and pieces without links), and the number of
        sentences of the batch that have links."""
        src, tgt = batch.src.cpu(), batch.tgt_out.cpu()
        src_len, tgt_len = (src != PAD_ID).sum(1).tolist(), (tgt != PAD_ID).sum(1).tolist()
        index = [[], [], []]
        values = []
        for b, (s, t) in enumerate(zip(src_len, tgt_len)):
            cells = self.table.get((tuple(src[b, :s].tolist()), tuple(tgt[b, :t].tolist())))
            if cells is not None:
                index[0].append(np.full(len(cells[0]), b))
                index[1].append(cells[0])
                index[2].append(cells[1])
                values.append(cells[2])
        out = torch.zeros(tuple(src.shape[:1]) + (tgt.size(1), src.size(1)))
        if values:
            where = tuple(torch.from_numpy(np.concatenate(part)) for part in index)
            out[where] = torch.from_numpy(np.concatenate(values))
        return out.to(batch.src.device), len(values)


def build_links(src_lines: Iterable[str], tgt_lines: Iterable[str], links: Iterable[Iterable[tuple[int, int]]],
                toks, chunk: int = 10_000) -> GuidedLinks:
    """:class:`GuidedLinks` of training pairs: line i of ``src_lines`` and ``tgt_lines`` (the text as the model
    reads it) with the word links ``links[i]`` (0-based ``(source word, target word)``), encoded with ``toks``
    (source and target :class:`nmt.data.tokenizer.Tokenizer`), ``chunk`` pairs at a time."""
    src_tok, tgt_tok = toks
    table = GuidedLinks()
    rows = zip(src_lines, tgt_lines, links)
    while part := [row for _, row in zip(range(chunk), rows)]:
        src_ids = src_tok.encode_batch([s for s, _, _ in part])
        tgt_ids = tgt_tok.encode_batch([t for _, t, _ in part])
        for s, t, (_, _, pair_links) in zip(src_ids, tgt_ids, part):
            if (tuple(s), tuple(t)) in table.table:  # a repetition (data.extra_train repeat): held already
                table.covered += 1
            elif pair_links:
                table.add(s, t, piece_targets(src_tok.pieces(s), tgt_tok.pieces(t), pair_links))
    return table


def guided_loss(attention: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Σ −G · log A over a batch (module docstring): attention ``[B, T, S]``, targets G ``[B, T, S]`` (rows sum
    to 1 or are all zero) -> a scalar (nats), computed in float32."""
    return -(targets * attention.float().clamp_min(TINY).log()).sum()


class GuidedObjective:
    """The loss of one batch with guided alignment, for :func:`nmt.training.step.train_step`: calling it with
    ``(model, batch, label_smoothing)`` gives ``(NLL + λ · guided term, NLL)``, both summed over the batch.
    :meth:`window` reports the term since its last call.

    Args:
        links: the guiding distributions (:class:`GuidedLinks`). weight: λ >= 0.
    """

    def __init__(self, links: GuidedLinks, weight: float):
        self.links, self.weight = links, weight
        self.term: torch.Tensor | float = 0.0  # summed guided term (nats) since the last window(), detached
        self.tokens = 0  # target tokens of those batches

    def __call__(self, model, batch: Batch, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
        logits, attention = model(batch.src, batch.src_mask, batch.tgt_in)  # [B, T, V], [B, T, S]
        nll = loss_fn(logits.float(), batch.tgt_out, label_smoothing)
        self.tokens += batch.num_tgt_tokens
        targets, guided = self.links.targets(batch)
        if not guided:
            return nll, nll
        term = guided_loss(attention, targets)
        self.term = self.term + term.detach()  # no device sync per step: read once per window
        return nll + self.weight * term, nll

    def window(self) -> dict:
        """``{"guided_term": nats per target token}`` of the batches since the last call (``{}`` when none), and
        a new window."""
        found = {"guided_term": float(self.term) / self.tokens} if self.tokens else {}
        self.term, self.tokens = 0.0, 0
        return found
