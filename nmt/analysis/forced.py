"""Forced alignment: the attention of a trained model over *given* target sentences, and word links from it.

Teacher forcing feeds the reference target ``y_1..y_T`` (ids from the target tokenizer, ending in ``</s>``) to
the decoder instead of its own predictions, and keeps the attention weights ``A[t, s] = a_t(s)`` of every step,
the soft alignment of docs/attention.md ("Alignments as an output"), shape ``[T, S]`` in pieces with ``</s>`` on
both sides. The decoder's state at step t depends only on the source and ``y_<t``, so forcing a model's own
greedy or beam output reproduces the matrix saved when that output was produced. This is how attention is
scored as a word aligner (Luong et al. 2015, §5.4, AER on gold alignments; Bahdanau et al. 2015, Fig. 3).

Word-level links (:mod:`nmt.decoding.word_alignment`): pieces are merged into words (sum over a word's source
columns, mean over its target rows), then linked per target word (``argmax_target``, Luong's), per source word
(``argmax_source``) or by a probability ``threshold``; ``shift=1`` reads target word t from attention row t+1;
``temperature`` < 1 sharpens the attention before merging (:func:`sharpen`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from nmt.analysis.symmetrize import combine_directions
from nmt.data.batches import collate
from nmt.data.normalize import Normalizer
from nmt.data.tokenizer import PAD_ID, Tokenizer, fits_other_side
from nmt.decoding.ensemble import Ensemble, load_ensemble
from nmt.decoding.hypothesis import log_probs
from nmt.decoding.translation import EMPTY, Translation
from nmt.decoding.word_alignment import hard_alignment, merge_to_words
from nmt.models import checkpoint
from nmt.models.precision import inference_context


def force_align(model, src_tok: Tokenizer, tgt_tok: Tokenizer, sources: list[str], targets: list[str],
                batch_size: int = 64, device: str | torch.device = "cpu") -> list[Translation]:
    """Teacher-force each target sentence under ``model`` and return its soft alignment, in input order.

    Sentences are batched (``batch_size`` per batch) after sorting by source length; the model runs in eval
    mode without gradients (:func:`nmt.models.precision.inference_context`). Sources are not cut (unlike
    ``translate``'s ``max_src_len``), so the columns always cover every source word.

    An :class:`nmt.decoding.ensemble.Ensemble` (members of one subword model) aligns with each member in turn;
    each line's alignment and score are then the means of the members' (its ``heads`` None).

    Args:
        model: a :class:`nmt.models.decoder.Seq2Seq` or an Ensemble of them (already on ``device``).
        src_tok: its source tokenizer.
        tgt_tok: its target tokenizer; ``tgt_tok.encode`` gives the forced ids ``[T]`` ending in ``</s>``.
        sources: source lines, parallel to ``targets`` (detokenized or pre-tokenized text).
        targets: target lines, parallel to ``sources``.
        batch_size: sentences per batch.
        device: where ``model`` is.
    Returns:
        one :class:`nmt.decoding.translation.Translation` per line: ``text`` = the target line, ``src_pieces`` ``[S]`` and
        ``hyp_pieces`` ``[T]`` (both ending in ``</s>``), ``alignment`` ``[T, S]`` float32 (row t = attention
        while emitting target piece t), ``score`` = Σ_t log p(y_t | y_<t, x) in nats (PAD/BOS excluded from the
        softmax as in search), ``heads`` ``[heads, T, S]`` every head's alignment for a multi-head attention model
        (None otherwise). A line whose source or target is empty or whitespace gives ``EMPTY``.
    Raises:
        ValueError: if the line counts differ (both counts in the message), or ``batch_size < 1``.
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source lines but {len(targets)} target lines: forced alignment needs "
                         "one target line per source line")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(model, Ensemble):
        return _averaged([force_align(member, src_tok, tgt_tok, sources, targets, batch_size, device)
                          for member in model.models])
    model.eval()
    results: list[Translation] = [EMPTY] * len(sources)
    todo = [i for i in range(len(sources)) if sources[i].strip() and targets[i].strip()]
    src_ids = src_tok.encode_batch([sources[i] for i in todo])
    tgt_ids = tgt_tok.encode_batch([targets[i] for i in todo])
    order = sorted(range(len(todo)), key=lambda k: (len(src_ids[k]), len(tgt_ids[k])))
    with inference_context(device):
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = collate([src_ids[k] for k in chunk], [tgt_ids[k] for k in chunk], chunk).to(device)
            # [B, T, V], [B, T, S] and, for multi-head attention, [B, T, heads, S] (else None)
            logits, weights, heads = model.teacher_force(batch.src, batch.src_mask, batch.tgt_in)
            logp = log_probs(logits).gather(2, batch.tgt_out.unsqueeze(2)).squeeze(2)  # [B, T]
            logp = logp.masked_fill(batch.tgt_out == PAD_ID, 0.0).sum(dim=1).cpu()  # [B]
            weights = weights.float().cpu()
            heads = None if heads is None else heads.float().cpu().transpose(1, 2)  # [B, heads, T, S]
            for b, k in enumerate(chunk):
                n_tgt, n_src = len(tgt_ids[k]), len(src_ids[k])
                results[todo[k]] = Translation(targets[todo[k]], src_tok.pieces(src_ids[k]),
                                               tgt_tok.pieces(tgt_ids[k]),
                                               weights[b, :n_tgt, :n_src].numpy().astype(np.float32),
                                               float(logp[b]), heads=None if heads is None else
                                               heads[b, :, :n_tgt, :n_src].numpy().astype(np.float32))
    return results


def _averaged(each: list[list[Translation]]) -> list[Translation]:
    """The ensemble's forced alignments: per line the first member's with the members' mean alignment and score."""
    return [line if line is EMPTY else
            replace(line, alignment=np.mean([r[i].alignment for r in each], axis=0).astype(np.float32),
                    score=float(np.mean([r[i].score for r in each])), heads=None)
            for i, line in enumerate(each[0])]


def sharpen(matrix: np.ndarray, temperature: float) -> np.ndarray:
    """Attention at extraction temperature ``temperature``: each row ``a`` becomes ``a**(1/T) / sum(a**(1/T))``.

    For softmax attention this equals ``softmax(e / T)`` of the energies ``e`` (Luong et al. 2015, Eq. 7 with the
    energies divided by T); for local-p it also sharpens the Gaussian-weighted row (Eq. 10). ``T < 1`` sharpens,
    ``T = 1`` returns the matrix unchanged, ``T > 1`` flattens.

    Args:
        matrix: ``[hyp_len, src_len]`` attention weights, rows summing to 1.
        temperature: ``T > 0``.
    Returns:
        ``[hyp_len, src_len]`` float32; for ``T != 1`` rows summing to 1 (an all-zero row stays zero); for
        ``T = 1`` the input as it is (a local-p row, which sums to at most 1, is not renormalised).
    Raises:
        ValueError: if ``temperature <= 0``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    a = np.asarray(matrix, dtype=np.float64)
    if temperature == 1.0 or a.size == 0:
        return a.astype(np.float32)
    logs = np.log(np.maximum(a, 1e-30)) / temperature
    logs -= logs.max(axis=1, keepdims=True)
    out = np.exp(logs) * (a > 0)
    total = out.sum(axis=1, keepdims=True)
    return (out / np.where(total > 0, total, 1.0)).astype(np.float32)


def word_alignment(translation: Translation, shift: int = 0, temperature: float = 1.0) -> np.ndarray:
    """The word-level soft alignment ``[target words, source words]`` of one forced alignment
    (:func:`sharpen` with ``temperature``, then nmt.decoding.word_alignment.merge_to_words with ``shift``); ``[0, 0]`` for
    an empty line."""
    if not translation.hyp_pieces:
        return np.zeros((0, 0), np.float32)
    matrix = sharpen(translation.alignment, temperature)
    return merge_to_words(matrix, translation.src_pieces, translation.hyp_pieces, shift)[0]


def links(translation: Translation, method: str = "argmax_target", threshold: float = 0.3,
          shift: int = 0, temperature: float = 1.0) -> list[tuple[int, int]]:
    """Word-level links ``(source_word, target_word)`` of one forced alignment (:func:`word_alignment`, then
    :func:`nmt.decoding.word_alignment.hard_alignment`); ``[]`` for an empty line."""
    return hard_alignment(word_alignment(translation, shift, temperature), method=method, threshold=threshold)


def combined_links(forward: Translation, backward: Translation, how: str = "product", method: str = "argmax_target",
                   threshold: float = 0.3, shift: int = 0, temperature: float = 1.0) -> list[tuple[int, int]]:
    """Soft symmetrization: links ``(source_word, target_word)`` extracted by ``method`` from the combination
    (nmt.decoding.word_alignment.combine_directions, ``how`` = product | mean) of the forward model's word alignment and the
    reverse model's (``backward`` aligns the same pair the other way round); ``[]`` when either line is empty.

    Raises:
        ValueError: if the two directions' word counts differ (the shapes in the message).
    """
    if not forward.hyp_pieces or not backward.hyp_pieces:
        return []
    combined = combine_directions(word_alignment(forward, shift, temperature),
                                  word_alignment(backward, shift, temperature), how)
    return hard_alignment(combined, method=method, threshold=threshold)


def word_counts(translation: Translation) -> tuple[int, int]:
    """``(source words, target words)`` after merging pieces (for checking against whitespace tokens)."""
    words = word_alignment(translation)
    return words.shape[1], words.shape[0]


def swapped_sides(src_tok: Tokenizer, tgt_tok: Tokenizer, sources: list[str], targets: list[str],
                  langs: tuple[str, str]) -> str | None:
    """A warning when the source and target lines look swapped, else None: each side splits into fewer pieces
    per word with the other side's vocabulary than with its own (nmt.data.tokenizer.fits_other_side)."""
    source, target = fits_other_side(src_tok, tgt_tok, sources), fits_other_side(tgt_tok, src_tok, targets)
    if source and target:
        return (f"the source lines look like {langs[1]} and the target lines like {langs[0]}: with this "
                f"{langs[0]}->{langs[1]} model's vocabularies the source takes {source[0]:.2f} pieces per word as "
                f"{langs[0]} and {source[1]:.2f} as {langs[1]}, the target {target[0]:.2f} as {langs[1]} and "
                f"{target[1]:.2f} as {langs[0]}; if they are swapped, give the {langs[0]} file as src= and the "
                f"{langs[1]} file as tgt=")
    return None


def load_aligner(path: str | Path | Sequence[str | Path], device: str | torch.device = "cpu",
                 lowercase: str = "auto"):
    """A model to align with, from a checkpoint or a run folder (the model its final evaluation scored, else
    ``checkpoints/best.pt``: :func:`nmt.checkpoint.run_model`); a list of several is an ensemble
    (:func:`nmt.decoding.ensemble.load_ensemble`: one direction and subword model; its settings those of the first).

    Returns:
        ``(model, src_tok, tgt_tok, prepare, (src_lang, tgt_lang))``; ``prepare(lines)`` applies the
        token-preserving part of the checkpoint's ``data.normalize`` (nmt.data.normalize.Normalizer.keep_tokens:
        lowercasing) when ``lowercase="auto"`` and it was on, always for ``"true"``, never for ``"false"``, so
        gold word positions stay valid.
    Raises:
        FileNotFoundError / nmt.checkpoint.CheckpointError, as :func:`nmt.checkpoint.load`, and ensemble members
            of another direction or other subword models.
    """
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    if len(paths) > 1:
        model, cfg, src_tok, tgt_tok = load_ensemble(paths, device)
    else:
        model, cfg, src_tok, tgt_tok, _ = checkpoint.load(checkpoint.run_model(paths[0]), map_location=device)
    return (model, src_tok, tgt_tok, aligner_input(cfg.data, lowercase),
            (str(cfg.data.src_lang), str(cfg.data.tgt_lang)))


def aligner_input(data, lowercase: str = "auto") -> Callable[[list[str]], list[str]]:
    """How the lines to align are prepared for a model trained with the data settings ``data`` (``cfg.data``):
    the token-preserving part of ``data.normalize`` (nmt.data.normalize.Normalizer.keep_tokens: lowercasing, no
    token split or joined, so gold word positions stay valid) when ``lowercase="auto"`` and it was on, always for
    ``"true"``, never for ``"false"``. Both sides are prepared with the source language's rules.

    Returns:
        ``prepare(lines) -> lines``, one output line per input line.
    """
    lower = lowercase == "true" or (lowercase == "auto" and Normalizer.from_config(
        data.get("normalize"), data.src_lang).lowercase)
    normalizer = Normalizer(data.src_lang, lowercase=lower)
    return lambda lines: normalizer.lines(lines, keep_tokens=True)
