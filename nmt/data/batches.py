"""Sentence pairs -> subword ids -> padded, length-bucketed batches of about ``batch_tokens`` tokens.

Batches are batch-first: ``src`` ``[B, S]``, ``tgt_in``/``tgt_out`` ``[B, T]`` (target shifted by BOS/EOS),
``src_mask`` ``[B, S]`` bool, True on real tokens.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from nmt.data.corpus import DataError, Parallel

log = logging.getLogger(__name__)


def encode_pairs(split: Parallel, src_tok, tgt_tok, max_len: int | None = None, sample_alpha: float = 0.0,
                 quiet: bool = False, sample_side: str = "both") -> list[tuple[list[int], list[int]]]:
    """Encode a training split to (src_ids, tgt_ids) pairs, both ending in EOS.

    Pairs with an empty (or whitespace-only) side are dropped as pairs, and so are pairs with either side
    longer than ``max_len`` subwords; both counts are logged (unless ``quiet``). ``sample_alpha > 0`` samples
    the segmentations (subword regularization, see :meth:`nmt.data.tokenizer.Tokenizer.encode_batch`) of the
    sides that ``sample_side`` names (``both``, ``source`` or ``target``); the other side keeps its best one.

    Raises:
        DataError: if no pair is left.
    """
    keep = [i for i, (s, t) in enumerate(zip(split.src, split.tgt)) if s.strip() and t.strip()]
    if len(keep) < len(split) and not quiet:
        log.info("%s: dropped %d pairs with an empty side", split.name, len(split) - len(keep))
    src_alpha = sample_alpha if sample_side in ("both", "source") else 0.0
    tgt_alpha = sample_alpha if sample_side in ("both", "target") else 0.0
    src = src_tok.encode_batch([split.src[i] for i in keep], sample_alpha=src_alpha)
    tgt = tgt_tok.encode_batch([split.tgt[i] for i in keep], sample_alpha=tgt_alpha)
    pairs = [(s, t) for s, t in zip(src, tgt) if max_len is None or max(len(s), len(t)) <= max_len]
    if len(pairs) < len(src) and not quiet:
        log.info("%s: dropped %d pairs longer than max_len=%s subwords", split.name, len(src) - len(pairs), max_len)
    if not pairs:
        raise DataError(f"{split.name}: no usable sentence pairs left (all empty or longer than max_len={max_len} "
                        "subwords): put one sentence per line, or raise data.max_len")
    return pairs


@dataclass
class Batch:
    """A padded batch: src ``[B, S]``, src_mask ``[B, S]`` bool (True on real tokens), tgt_in ``[B, T]``
    (BOS + target), tgt_out ``[B, T]`` (target + EOS; PAD where padded), index ``[B]`` positions in the input."""

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor | None
    tgt_out: torch.Tensor | None
    index: torch.Tensor

    @property
    def num_tgt_tokens(self) -> int:
        """The number of real target tokens (not PAD) in ``tgt_out``, EOS included: the unit of the per-token
        loss and of tokens/s; 0 without a target."""
        return int((self.tgt_out != 0).sum()) if self.tgt_out is not None else 0

    def to(self, device) -> Batch:
        """The same batch with every tensor on ``device`` (same shapes)."""
        move = lambda t: None if t is None else t.to(device, non_blocking=True)
        return Batch(move(self.src), move(self.src_mask), move(self.tgt_in), move(self.tgt_out), move(self.index))


def _pad(seqs: list[list[int]], pad_id: int) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def collate(src: list[list[int]], tgt: list[list[int]] | None, index: Sequence[int] | np.ndarray,
            pad_id: int = 0, bos_id: int = 2) -> Batch:
    """Pad id lists into a :class:`Batch`. ``src`` and ``tgt`` lists end in EOS; tgt may be None (inference);
    ``index`` ``[B]`` (a list or an integer array) becomes ``Batch.index``."""
    src_t = _pad(src, pad_id)
    tgt_in = tgt_out = None
    if tgt is not None:
        tgt_out = _pad(tgt, pad_id)
        tgt_in = _pad([[bos_id] + t[:-1] for t in tgt], pad_id)
    return Batch(src_t, src_t != pad_id, tgt_in, tgt_out, torch.tensor(index, dtype=torch.long))


def _cuts(sorted_lengths: list[int], batch_tokens: int, max_sentences: int | None) -> list[tuple[int, int]]:
    """(start, end) positions cutting length-sorted examples into batches (see :func:`batch_indices`)."""
    cuts: list[tuple[int, int]] = []
    start = longest = 0
    for pos, length in enumerate(sorted_lengths):
        longest_if = max(longest, length)
        count = pos - start
        full = max_sentences is not None and count >= max_sentences
        if count and (longest_if * (count + 1) > batch_tokens or full):
            cuts.append((start, pos))
            start, longest_if = pos, length
        longest = longest_if
    if start < len(sorted_lengths):
        cuts.append((start, len(sorted_lengths)))
    return cuts


def batch_indices(lengths: Sequence[int] | np.ndarray, batch_tokens: int, shuffle: bool, seed: int = 0,
                  max_sentences: int | None = None, group: int = 1) -> list[list[int]] | list[np.ndarray]:
    """Group example indices into batches of at most ``batch_tokens`` padded tokens (longest side x count).

    Length bucketing: examples are sorted by length (within shuffled pools of ~100 batches when ``shuffle``),
    cut into batches, and the batch order is shuffled with ``random.Random(seed)``, so one seed per epoch
    gives one reproducible order. A single example longer than ``batch_tokens`` gets a batch of its own.

    ``lengths`` ``[N]`` may be a list or a numpy integer array (:attr:`nmt.data.store.TokenStore.lengths`):
    an array gives the same batches, each as an int64 index array instead of a list, and no Python int per
    example (about 8 bytes per example in all).

    ``group`` > 1 (the batches of one update: accumulation steps x ranks): runs of ``group`` neighbouring batches
    of the length-sorted order are shuffled as units, so the ranks of an update get batches of similar
    lengths and take about as long (none waits for a peer's long sentences); the ``len % group`` batches that
    fill no run are drawn at random and put at the end. ``group=1`` is the plain shuffle.
    """
    rng = random.Random(seed)
    array = isinstance(lengths, np.ndarray)
    order = np.arange(len(lengths), dtype=np.int64) if array else list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)  # the same swaps for an array as for a list
    total = int(lengths.sum(dtype=np.int64)) if array else sum(lengths)
    pool = max(1, 100 * batch_tokens // max(1, total // max(1, len(lengths))))
    batches: list = []
    for start in range(0, len(order), pool):
        if array:
            part = order[start : start + pool]
            chunk = part[np.argsort(lengths[part], kind="stable")]  # stable, as sorted() is
            chunk_lengths = lengths[chunk].tolist()
        else:
            chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
            chunk_lengths = [lengths[i] for i in chunk]
        batches += [chunk[a:b] for a, b in _cuts(chunk_lengths, batch_tokens, max_sentences)]
    if shuffle and group > 1:
        return _shuffled_runs(batches, group, rng)
    if shuffle:
        rng.shuffle(batches)
    return batches


def _shuffled_runs(batches: list, group: int, rng: random.Random) -> list:
    """``batches`` in shuffled runs of ``group`` neighbours, the left-over batches (drawn at random) last."""
    spare = set(rng.sample(range(len(batches)), len(batches) % group))
    kept = [batch for i, batch in enumerate(batches) if i not in spare]
    runs = [kept[i : i + group] for i in range(0, len(kept), group)]
    rng.shuffle(runs)
    return [batch for run in runs for batch in run] + [batches[i] for i in sorted(spare)]


def iterate_batches(pairs: Sequence[tuple[list[int], list[int]]], batch_tokens: int, shuffle: bool,
                    seed: int = 0, pad_id: int = 0, max_sentences: int | None = None, skip: int = 0,
                    group: int = 1):
    """Yield training :class:`Batch` es over ``pairs`` for one epoch (see :func:`batch_indices`), leaving out
    the first ``skip`` batches (a resumed epoch); ``group``: the batches of one update, kept neighbours.

    ``pairs`` is a list of (src_ids, tgt_ids) or anything indexable with a ``lengths`` attribute ``[N]`` (max
    of both sides per pair, e.g. a :class:`nmt.data.store.TokenStore`), which is then used instead of reading
    every pair; only the pairs of the batch being built are read.
    """
    lengths = getattr(pairs, "lengths", None)
    if lengths is None:
        lengths = [max(len(s), len(t)) for s, t in pairs]
    for idx in batch_indices(lengths, batch_tokens, shuffle, seed, max_sentences, group)[skip:]:
        items = [pairs[i] for i in idx]
        yield collate([s for s, _ in items], [t for _, t in items], idx, pad_id)
