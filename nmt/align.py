"""Forced alignment: the attention of a trained model over *given* target sentences, and Pharaoh export.

Teacher forcing feeds the reference target ``y_1..y_T`` (ids from the target tokenizer, ending in ``</s>``) to
the decoder instead of its own predictions, and keeps the attention weights ``A[t, s] = a_t(s)`` of every step,
the soft alignment of docs/attention.md ("Alignments as an output"), shape ``[T, S]`` in pieces with ``</s>`` on
both sides. The decoder's state at step t depends only on the source and ``y_<t``, so forcing a model's own
greedy or beam output reproduces the matrix saved when that output was produced. This is how attention is
scored as a word aligner (Luong et al. 2015, §5.4, AER on gold alignments; Bahdanau et al. 2015, Fig. 3).

Word-level links (nmt.alignment): pieces are merged into words (sum over a word's source columns, mean over its
target rows), then linked per target word (``argmax_target``, Luong's), per source word (``argmax_source``) or
by a probability ``threshold``; ``shift=1`` reads target word t from attention row t+1; ``temperature`` < 1
sharpens the attention before merging (:func:`sharpen`). ``lowercase=auto`` lowercases the input lines when the
checkpoint was trained on lowercased text (``data.normalize``; word positions do not move). Given a second model
trained in the opposite direction (``reverse_checkpoint``), both directions are extracted and symmetrized
(``intersection``, ``union``, ``grow-diag``, ``grow-diag-final``, ``grow-diag-final-and``; Koehn et al. 2005).
Words are the whitespace tokens of the input files: SentencePiece starts a piece with "▁" at every whitespace,
so pre-tokenized gold sets keep their word indices (a line where the counts differ is reported on stderr).

Command line (key=value, like translate.py, but parsed here without Hydra)::

    python -m nmt.align checkpoint=PATH|RUN_DIR src=FILE tgt=FILE out=FILE.align [matrices=FILE.npz]
                        [method=argmax_target|argmax_source|threshold] [threshold=0.3] [shift=0]
                        [temperature=1.0] [lowercase=auto|true|false]
                        [reverse_checkpoint=PATH [method=grow-diag-final-and|intersection|union|...]
                         [direction_method=argmax_target]
                         | reverse_checkpoint=PATH combine=product|mean [method=argmax_target|...]]
                        [batch_size=64] [device=auto]

``out`` gets one Pharaoh line ``i-j`` (source word, target word, 0-based) per input line (empty lines stay
empty); ``matrices`` gets the forward model's soft alignments in the evaluation format (``FILE.npz`` with one
float32 ``[len(target pieces), len(source pieces)]`` array per line, key = 0-based line index, and
``FILE.jsonl`` with the pieces: design.md §2). With ``reverse_checkpoint``, ``method`` is the symmetrization
(default ``grow-diag-final-and``) and ``direction_method`` extracts each direction (default
``argmax_target``: each target word of that model links to its argmax source word). With ``combine=product``
(or ``mean``) the two directions' word-level soft alignments are combined before extraction
(:func:`combined_links`) and ``method`` is one of the one-direction methods applied to the combined matrix.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from nmt import checkpoint
from nmt.alignment import (
    COMBINATIONS,
    METHODS,
    SYMMETRIZATIONS,
    combine_directions,
    hard_alignment,
    merge_to_words,
    symmetrize,
    to_pharaoh,
)
from nmt.data import collate
from nmt.evaluate import EMPTY, Translation, check_npz_path, save_alignments
from nmt.normalize import Normalizer
from nmt.search import log_probs
from nmt.textio import atomic_write, read_lines
from nmt.tokenizer import PAD_ID, Tokenizer


def force_align(model, src_tok: Tokenizer, tgt_tok: Tokenizer, sources: list[str], targets: list[str],
                batch_size: int = 64, device: str | torch.device = "cpu") -> list[Translation]:
    """Teacher-force each target sentence under ``model`` and return its soft alignment, in input order.

    Sentences are batched (``batch_size`` per batch) after sorting by source length; the model runs in eval
    mode under ``torch.inference_mode``. Sources are not cut (unlike ``translate``'s ``max_src_len``), so the
    columns always cover every source word.

    Args:
        model: a :class:`nmt.model.Seq2Seq` (already on ``device``).
        src_tok, tgt_tok: its tokenizers; ``tgt_tok.encode`` gives the forced ids ``[T]`` ending in ``</s>``.
        sources, targets: parallel lines (detokenized or pre-tokenized text).
    Returns:
        one :class:`nmt.evaluate.Translation` per line: ``text`` = the target line, ``src_pieces`` ``[S]`` and
        ``hyp_pieces`` ``[T]`` (both ending in ``</s>``), ``alignment`` ``[T, S]`` float32 (row t = attention
        while emitting target piece t), ``score`` = Σ_t log p(y_t | y_<t, x) in nats (PAD/BOS excluded from the
        softmax as in search). A line whose source or target is empty or whitespace gives ``EMPTY``.
    Raises:
        ValueError: if the line counts differ (both counts in the message), or ``batch_size < 1``.
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source lines but {len(targets)} target lines: forced alignment needs "
                         "one target line per source line")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    model.eval()
    results: list[Translation] = [EMPTY] * len(sources)
    todo = [i for i in range(len(sources)) if sources[i].strip() and targets[i].strip()]
    src_ids = src_tok.encode_batch([sources[i] for i in todo])
    tgt_ids = tgt_tok.encode_batch([targets[i] for i in todo])
    order = sorted(range(len(todo)), key=lambda k: (len(src_ids[k]), len(tgt_ids[k])))
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = collate([src_ids[k] for k in chunk], [tgt_ids[k] for k in chunk], chunk).to(device)
            logits, weights = model(batch.src, batch.src_mask, batch.tgt_in)  # [B, T, V], [B, T, S]
            logp = log_probs(logits).gather(2, batch.tgt_out.unsqueeze(2)).squeeze(2)  # [B, T]
            logp = logp.masked_fill(batch.tgt_out == PAD_ID, 0.0).sum(dim=1).cpu()  # [B]
            weights = weights.float().cpu()
            for b, k in enumerate(chunk):
                n_tgt, n_src = len(tgt_ids[k]), len(src_ids[k])
                results[todo[k]] = Translation(targets[todo[k]], src_tok.pieces(src_ids[k]),
                                               tgt_tok.pieces(tgt_ids[k]),
                                               weights[b, :n_tgt, :n_src].numpy().astype(np.float32),
                                               float(logp[b]))
    return results


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
    (:func:`sharpen` with ``temperature``, then nmt.alignment.merge_to_words with ``shift``); ``[0, 0]`` for
    an empty line."""
    if not translation.hyp_pieces:
        return np.zeros((0, 0), np.float32)
    matrix = sharpen(translation.alignment, temperature)
    return merge_to_words(matrix, translation.src_pieces, translation.hyp_pieces, shift)[0]


def links(translation: Translation, method: str = "argmax_target", threshold: float = 0.3,
          shift: int = 0, temperature: float = 1.0) -> list[tuple[int, int]]:
    """Word-level links ``(source_word, target_word)`` of one forced alignment (:func:`word_alignment`, then
    :func:`nmt.alignment.hard_alignment`); ``[]`` for an empty line."""
    return hard_alignment(word_alignment(translation, shift, temperature), method=method, threshold=threshold)


def combined_links(forward: Translation, backward: Translation, how: str = "product", method: str = "argmax_target",
                   threshold: float = 0.3, shift: int = 0, temperature: float = 1.0) -> list[tuple[int, int]]:
    """Soft symmetrization: links ``(source_word, target_word)`` extracted by ``method`` from the combination
    (nmt.alignment.combine_directions, ``how`` = product | mean) of the forward model's word alignment and the
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


# ----------------------------------------------------------------------------------------------- command line

USAGE = ("usage: python -m nmt.align checkpoint=PATH src=FILE tgt=FILE out=FILE.align [matrices=FILE.npz] "
         "[method=argmax_target|argmax_source|threshold] [threshold=0.3] [shift=0] [temperature=1.0] "
         "[lowercase=auto|true|false] [reverse_checkpoint=PATH method=grow-diag-final-and|intersection|union|"
         "grow-diag|grow-diag-final direction_method=argmax_target | reverse_checkpoint=PATH combine=product|mean] "
         "[batch_size=64] [device=auto]")
REQUIRED = ("checkpoint", "src", "tgt", "out")
DEFAULTS = {"matrices": None, "method": None, "threshold": "0.3", "shift": "0", "temperature": "1.0",
            "lowercase": "auto", "reverse_checkpoint": None, "combine": None,
            "direction_method": "argmax_target", "batch_size": "64", "device": "auto"}
KEYS = REQUIRED + tuple(DEFAULTS)


class UsageError(ValueError):
    """A bad command line; the message says what is wrong and the valid keys or values."""


def parse_args(argv: Sequence[str]) -> dict:
    """``key=value`` arguments -> a dict of typed options (``threshold`` float, ``shift``/``batch_size`` int,
    ``method`` resolved: ``argmax_target`` alone, ``grow-diag-final-and`` with ``reverse_checkpoint``).

    Raises:
        UsageError: an argument without ``=``, an unknown or repeated key (listing the valid keys), a missing
            required key, a bad number, or a method that does not fit (listing the valid methods).
    """
    given: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+")
        if not sep or not key:
            raise UsageError(f"argument {arg!r} is not key=value; valid keys: {', '.join(KEYS)}")
        if key not in KEYS:
            raise UsageError(f"unknown key {key!r}; valid keys: {', '.join(KEYS)}")
        if key in given:
            raise UsageError(f"key {key!r} given twice")
        given[key] = value
    missing = [k for k in REQUIRED if not given.get(k)]
    if missing:
        raise UsageError(f"missing {', '.join(k + '=' for k in missing)}; required keys: {', '.join(REQUIRED)}")
    opts = {**DEFAULTS, **given}
    try:
        opts["threshold"] = float(opts["threshold"])
        opts["temperature"] = float(opts["temperature"])
        opts["shift"] = int(opts["shift"])
        opts["batch_size"] = int(opts["batch_size"])
    except ValueError as err:
        raise UsageError(f"threshold and temperature must be numbers, shift and batch_size integers: {err}") from None
    if opts["shift"] < 0 or opts["batch_size"] < 1 or opts["temperature"] <= 0:
        raise UsageError(f"need shift >= 0, batch_size >= 1 and temperature > 0, got shift={opts['shift']}, "
                         f"batch_size={opts['batch_size']}, temperature={opts['temperature']}")
    if opts["lowercase"] not in ("auto", "true", "false"):
        raise UsageError(f"lowercase={opts['lowercase']}; valid: auto (as the checkpoint's training data), true, false")
    if opts["direction_method"] not in METHODS:
        raise UsageError(f"direction_method={opts['direction_method']}; valid: {', '.join(METHODS)}")
    if opts["matrices"]:
        try:
            check_npz_path(opts["matrices"], key="matrices")
        except ValueError as err:
            raise UsageError(str(err)) from None
    reverse = opts["reverse_checkpoint"]
    if opts["combine"] is not None:
        if opts["combine"] not in COMBINATIONS or not reverse:
            problem = (f"valid values are {', '.join(COMBINATIONS)}" if opts["combine"] not in COMBINATIONS
                       else "it combines two directions, so it needs reverse_checkpoint=PATH (a model trained "
                       "target -> source)")
            raise UsageError(f"combine={opts['combine']}: {problem}")
        opts["method"] = opts["method"] or METHODS[0]
        if opts["method"] not in METHODS:
            raise UsageError(f"method={opts['method']}; with combine= the method extracts links from the "
                             f"combined matrix: {', '.join(METHODS)}")
        return opts
    valid = SYMMETRIZATIONS if reverse else METHODS
    opts["method"] = opts["method"] or valid[-1 if reverse else 0]
    if opts["method"] not in valid:
        hint = ("" if reverse or opts["method"] not in SYMMETRIZATIONS
                else " (symmetrization needs reverse_checkpoint=PATH, a model trained target -> source)")
        raise UsageError(f"method={opts['method']}{hint}; valid methods "
                         f"{'with' if reverse else 'without'} reverse_checkpoint: {', '.join(valid)}")
    return opts


def load_aligner(path: str | Path, device: str | torch.device = "cpu", lowercase: str = "auto"):
    """A model to align with, from a checkpoint or a run folder (the model its final evaluation scored, else
    ``checkpoints/best.pt``: :func:`nmt.checkpoint.run_model`).

    Returns:
        ``(model, src_tok, tgt_tok, prepare, (src_lang, tgt_lang))``; ``prepare(lines)`` applies the
        token-preserving part of the checkpoint's ``data.normalize`` (nmt.normalize.Normalizer.keep_tokens:
        lowercasing) when ``lowercase="auto"`` and it was on, always for ``"true"``, never for ``"false"``, so
        gold word positions stay valid.
    Raises:
        FileNotFoundError / nmt.checkpoint.CheckpointError, as :func:`nmt.checkpoint.load`.
    """
    model, cfg, src_tok, tgt_tok, _ = checkpoint.load(checkpoint.run_model(path), map_location=device)
    lower = lowercase == "true" or (lowercase == "auto" and Normalizer.from_config(
        cfg.data.get("normalize"), cfg.data.src_lang).lowercase)
    normalizer = Normalizer(cfg.data.src_lang, lowercase=lower)
    return (model, src_tok, tgt_tok, lambda lines: normalizer.lines(lines, keep_tokens=True),
            (str(cfg.data.src_lang), str(cfg.data.tgt_lang)))


def run(opts: dict) -> tuple[list[str], list[str]]:
    """Align ``opts["src"]``/``opts["tgt"]`` as :func:`parse_args` describes; write ``out`` (and
    ``matrices``); return the Pharaoh lines written and warnings (lines whose merged word counts differ from
    their whitespace tokens).

    Raises:
        ValueError: source and target files with different line counts, a reverse checkpoint that does not
            translate the other way, or an unusable ``device``; FileNotFoundError, nmt.checkpoint.CheckpointError
            and nmt.textio.TextFileError name the file that is missing or unusable.
    """
    device = checkpoint.pick_device(opts["device"])
    sources, targets = read_lines(opts["src"]), read_lines(opts["tgt"])
    if len(sources) != len(targets):
        raise ValueError(f"{opts['src']} has {len(sources)} lines but {opts['tgt']} has {len(targets)}")
    model, src_tok, tgt_tok, prepare, langs = load_aligner(opts["checkpoint"], device, opts["lowercase"])
    forward = force_align(model, src_tok, tgt_tok, prepare(sources), prepare(targets), opts["batch_size"], device)
    del model
    extract = {"threshold": opts["threshold"], "shift": opts["shift"], "temperature": opts["temperature"]}
    if opts["reverse_checkpoint"]:
        r_model, r_src_tok, r_tgt_tok, r_prepare, r_langs = load_aligner(opts["reverse_checkpoint"], device,
                                                                          opts["lowercase"])
        if r_langs != langs[::-1]:
            raise ValueError(f"reverse_checkpoint={opts['reverse_checkpoint']} translates {r_langs[0]}->{r_langs[1]}, "
                             f"but checkpoint={opts['checkpoint']} translates {langs[0]}->{langs[1]}: the reverse "
                             f"model must translate {langs[1]}->{langs[0]}")
        backward = force_align(r_model, r_src_tok, r_tgt_tok, r_prepare(targets), r_prepare(sources),
                               opts["batch_size"], device)
        del r_model
        lines = []
        for fwd, bwd in zip(forward, backward):
            if opts["combine"]:
                lines.append(to_pharaoh(combined_links(fwd, bwd, opts["combine"], opts["method"], **extract)))
                continue
            f_links = links(fwd, opts["direction_method"], **extract)
            b_links = [(s, t) for t, s in links(bwd, opts["direction_method"], **extract)]  # transpose
            lines.append(to_pharaoh(symmetrize(f_links, b_links, opts["method"])))
    else:
        lines = [to_pharaoh(links(t, opts["method"], **extract)) for t in forward]
    atomic_write(opts["out"], "".join(line + "\n" for line in lines))
    if opts["matrices"]:
        save_alignments(opts["matrices"], forward)
    mismatched = [i + 1 for i, t in enumerate(forward)
                  if t.hyp_pieces and word_counts(t) != (len(sources[i].split()), len(targets[i].split()))]
    if not mismatched:
        return lines, []
    shown = ", ".join(map(str, mismatched[:10])) + (", ..." if len(mismatched) > 10 else "")
    return lines, [(f"{len(mismatched)} line(s) where the subword words differ from the whitespace tokens, so "
                    f"word indices may not match the input's: {shown}")]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nmt.align``: returns 0; 2 with ``error: ...`` and the usage for a bad command line; 1 with
    ``error: ...`` for unreadable files or checkpoints and mismatched line counts."""
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as err:
        print(f"error: {err}\n{USAGE}", file=sys.stderr)
        return 2
    try:
        lines, warnings = run(opts)
    except (OSError, ValueError) as err:  # CheckpointError and TextFileError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return 1
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {opts['out']}: {len(lines)} sentence pairs, {sum(len(line.split()) for line in lines)} links"
          + (f"; matrices in {opts['matrices']}" if opts["matrices"] else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
