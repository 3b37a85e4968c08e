"""Sentence pairs -> subword ids -> padded, length-bucketed batches of about ``batch_tokens`` tokens.

Batches are batch-first: ``src`` ``[B, S]``, ``tgt_in``/``tgt_out`` ``[B, T]`` (target shifted by BOS/EOS),
``src_mask`` ``[B, S]`` bool, True on real tokens.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import torch

from nmt.data.corpus import DataError, Parallel

log = logging.getLogger(__name__)


def encode_pairs(split: Parallel, src_tok, tgt_tok, max_len: int | None = None, sample_alpha: float = 0.0,
                 quiet: bool = False) -> list[tuple[list[int], list[int]]]:
    """Encode a training split to (src_ids, tgt_ids) pairs, both ending in EOS.

    Pairs with an empty (or whitespace-only) side are dropped as pairs, and so are pairs with either side
    longer than ``max_len`` subwords; both counts are logged (unless ``quiet``). ``sample_alpha > 0`` samples
    the segmentations (subword regularization, see :meth:`nmt.data.tokenizer.Tokenizer.encode_batch`).

    Raises:
        DataError: if no pair is left.
    """
    keep = [i for i, (s, t) in enumerate(zip(split.src, split.tgt)) if s.strip() and t.strip()]
    if len(keep) < len(split) and not quiet:
        log.info("%s: dropped %d pairs with an empty side", split.name, len(split) - len(keep))
    src = src_tok.encode_batch([split.src[i] for i in keep], sample_alpha=sample_alpha)
    tgt = tgt_tok.encode_batch([split.tgt[i] for i in keep], sample_alpha=sample_alpha)
    pairs = [(s, t) for s, t in zip(src, tgt) if max_len is None or max(len(s), len(t)) <= max_len]
    if len(pairs) < len(src) and not quiet:
        log.info("%s: dropped %d pairs longer than max_len=%s subwords", split.name, len(src) - len(pairs), max_len)
    if not pairs:
        raise DataError(f"{split.name}: no usable sentence pairs left (all empty or longer than max_len={max_len})")
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


def collate(src: list[list[int]], tgt: list[list[int]] | None, index: list[int], pad_id: int = 0,
            bos_id: int = 2) -> Batch:
    """Pad id lists into a :class:`Batch`. ``src`` and ``tgt`` lists end in EOS; tgt may be None (inference)."""
    src_t = _pad(src, pad_id)
    tgt_in = tgt_out = None
    if tgt is not None:
        tgt_out = _pad(tgt, pad_id)
        tgt_in = _pad([[bos_id] + t[:-1] for t in tgt], pad_id)
    return Batch(src_t, src_t != pad_id, tgt_in, tgt_out, torch.tensor(index, dtype=torch.long))


def batch_indices(lengths: list[int], batch_tokens: int, shuffle: bool, seed: int = 0,
                  max_sentences: int | None = None) -> list[list[int]]:
    """Group example indices into batches of at most ``batch_tokens`` padded tokens (longest side x count).

    Length bucketing: examples are sorted by length (within shuffled pools of ~100 batches when ``shuffle``),
    cut into batches, and the batch order is shuffled with ``random.Random(seed)``, so one seed per epoch
    gives one reproducible order. A single example longer than ``batch_tokens`` gets a batch of its own.
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)
    pool = max(1, 100 * batch_tokens // max(1, sum(lengths) // max(1, len(lengths))))
    batches: list[list[int]] = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
        current: list[int] = []
        longest = 0
        for i in chunk:
            longest_if = max(longest, lengths[i])
            full = max_sentences is not None and len(current) >= max_sentences
            if current and (longest_if * (len(current) + 1) > batch_tokens or full):
                batches.append(current)
                current, longest_if = [], lengths[i]
            current.append(i)
            longest = longest_if
        if current:
            batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def iterate_batches(pairs: list[tuple[list[int], list[int]]], batch_tokens: int, shuffle: bool, seed: int = 0,
                    pad_id: int = 0, max_sentences: int | None = None, skip: int = 0):
    """Yield training :class:`Batch` es over ``pairs`` for one epoch (see :func:`batch_indices`), leaving out
    the first ``skip`` batches (a resumed epoch)."""
    lengths = [max(len(s), len(t)) for s, t in pairs]
    for idx in batch_indices(lengths, batch_tokens, shuffle, seed, max_sentences)[skip:]:
        yield collate([pairs[i][0] for i in idx], [pairs[i][1] for i in idx], idx, pad_id)
