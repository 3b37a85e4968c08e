"""Word-level hard alignments from subword soft alignments (nmt.decoding.word_alignment), with hand-computed answers."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.decoding.word_alignment import (
    hard_alignment,
    merge_to_words,
    pharaoh_line,
    to_pharaoh,
    words_from_pieces,
)

SRC = ["▁Ein", "▁Mann", "s", "</s>"]
HYP = ["▁A", "▁m", "an", "</s>"]
# [hyp_len=4, src_len=4]
MATRIX = np.array(
    [
        [0.7, 0.1, 0.1, 0.1],
        [0.1, 0.5, 0.3, 0.1],
        [0.0, 0.2, 0.6, 0.2],
        [0.1, 0.1, 0.1, 0.7],
    ],
    dtype=np.float32,
)


def test_words_from_pieces():
    assert words_from_pieces(SRC) == [0, 1, 1, -1]
    assert words_from_pieces(["s", "▁Mann"]) == [0, 1]  # the first piece always starts word 0
    assert words_from_pieces(["<s>", "ab", "▁c", "<pad>"]) == [-1, 0, 1, -1]
    assert words_from_pieces(["▁", "<0xC5>", "<0x99>", "eka", "▁x"]) == [0, 0, 0, 0, 1]
    assert words_from_pieces([]) == []


def test_merge_to_words_by_hand():
    words, src_words, hyp_words = merge_to_words(MATRIX, SRC, HYP)
    # word 0 "A" = row 0: [0.7, 0.1 + 0.1]; word 1 "man" = mean of rows 1, 2:
    # [mean(0.1, 0.0), mean(0.5 + 0.3, 0.2 + 0.6)] = [0.05, 0.8]; </s> row and column dropped
    expected = np.array([[0.7, 0.2], [0.05, 0.8]], dtype=np.float32)
    assert words.dtype == np.float32
    assert words.shape == (2, 2)
    np.testing.assert_allclose(words, expected, atol=1e-6)
    assert src_words == ["Ein", "Manns"]
    assert hyp_words == ["A", "man"]
    assert hard_alignment(words) == [(0, 0), (1, 1)]
    assert pharaoh_line(MATRIX, SRC, HYP) == "0-0 1-1"


def test_byte_pieces_surface_and_unicode():
    src = ["▁", "<0xC5>", "<0x99>", "eka", "▁Größe"]
    hyp = ["▁river", "</s>"]
    m = np.array([[0.1, 0.2, 0.2, 0.2, 0.3], [0.0, 0.0, 0.0, 0.0, 1.0]], dtype=np.float32)
    words, src_words, hyp_words = merge_to_words(m, src, hyp)
    assert src_words == ["řeka", "Größe"]
    assert hyp_words == ["river"]
    np.testing.assert_allclose(words, [[0.7, 0.3]], atol=1e-6)


def test_methods_differ_on_known_matrix():
    w = np.array([[0.6, 0.5], [0.3, 0.4]], dtype=np.float32)  # [hyp_words=2, src_words=2]
    assert hard_alignment(w, "argmax_target") == [(0, 0), (1, 1)]
    assert hard_alignment(w, "argmax_source") == [(0, 0), (1, 0)]
    assert hard_alignment(w, "threshold", threshold=0.45) == [(0, 0), (1, 0)]
    assert hard_alignment(w, "threshold") == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # target word 1's argmax is source word 1, but source word 1 attends most to target word 0: only 0-0 is mutual
    assert hard_alignment(w, "mutual_argmax") == [(0, 0)]


def test_mutual_argmax_recovers_a_permutation_and_drops_the_extra_target_word():
    # 4 target words over 3 source words: a permutation (target t -> source perm[t]) plus a target word (3) that
    # spreads over the sources and is nobody's argmax; argmax_target still links it, mutual_argmax does not
    perm = [2, 0, 1]
    w = np.full((4, 3), 0.05, dtype=np.float32)
    for t, s in enumerate(perm):
        w[t, s] = 0.9
    w[3] = [0.3, 0.4, 0.3]
    assert hard_alignment(w, "mutual_argmax") == sorted((s, t) for t, s in enumerate(perm))
    assert (1, 3) in hard_alignment(w, "argmax_target")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_mutual_argmax_is_the_intersection_of_both_argmaxes(n_tgt, n_src, seed):
    w = np.random.default_rng(seed).random((n_tgt, n_src)).astype(np.float32)  # ties have probability ~0
    mutual = hard_alignment(w, "mutual_argmax")
    assert mutual == sorted(set(hard_alignment(w, "argmax_target")) & set(hard_alignment(w, "argmax_source")))
    assert len({s for s, _ in mutual}) == len(mutual) == len({t for _, t in mutual}) >= 1  # one link per word


def test_pharaoh_diagonal_and_sorting():
    eye = np.eye(4, dtype=np.float32)
    assert to_pharaoh(hard_alignment(eye)) == "0-0 1-1 2-2 3-3"
    assert to_pharaoh([(2, 0), (0, 1), (0, 0), (2, 0)]) == "0-0 0-1 2-0"
    assert to_pharaoh([]) == ""


def test_rectangular_argmax_target():
    # 3 target words, 2 source words: source word 1 is aligned twice
    w = np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]], dtype=np.float32)
    assert to_pharaoh(hard_alignment(w)) == "0-0 1-1 1-2"


def test_empty_inputs():
    words, src_words, hyp_words = merge_to_words(np.zeros((0, 0), np.float32), [], [])
    assert words.shape == (0, 0) and src_words == [] and hyp_words == []
    assert hard_alignment(words) == []
    assert pharaoh_line(np.zeros((0, 0), np.float32), [], []) == ""
    # only special tokens: no words at all
    words, _, _ = merge_to_words(np.ones((1, 1), np.float32), ["</s>"], ["</s>"])
    assert words.shape == (0, 0)
    assert pharaoh_line(np.ones((1, 1), np.float32), ["</s>"], ["</s>"]) == ""


def test_errors():
    with pytest.raises(ValueError, match="argmax_target.*argmax_source.*threshold"):
        hard_alignment(np.eye(2), method="intersect")
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(4, 4\)"):
        merge_to_words(MATRIX[:3], SRC, HYP)


def test_a_bare_marker_that_nothing_continues_is_only_a_space():
    assert words_from_pieces(["▁Ein", "▁Mann", "▁", "</s>"]) == [0, 1, 1, -1]
    assert words_from_pieces(["▁Ein", "▁", "▁", "▁Mann"]) == [0, 0, 0, 1]
    assert words_from_pieces(["▁", "▁Mann", "s"]) == [0, 0, 0]
    assert words_from_pieces(["▁Ein", "▁", "(", "a", "▁b"]) == [0, 1, 1, 1, 2]  # continued: a word start
    assert words_from_pieces(["▁", "</s>"]) == words_from_pieces(["▁", "▁"]) == [-1, -1]  # no word at all
    assert pharaoh_line(np.full((2, 2), 0.5, dtype=np.float32), ["▁Hund", "</s>"], ["▁", "</s>"]) == ""


def test_byte_pieces_that_decode_to_whitespace_separate_words():
    """Tokenizer.decode makes a generated line break (or tab, U+2028) a space between words; the word count of
    .align must be the same, or the links point at the wrong target word."""
    assert words_from_pieces(["▁Ein", "<0x0A>", "an"]) == [0, 0, 1]
    assert words_from_pieces(["▁Ein", "<0xE2>", "<0x80>", "<0xA8>", "an", "</s>"]) == [0, 0, 0, 0, 1, -1]
    assert words_from_pieces(["▁Ein", "▁", "<0x09>", "an"]) == [0, 0, 0, 1]  # bare marker before a space
    assert words_from_pieces(["<0x0A>", "an", "<0x0A>"]) == [0, 0, 0]  # leading and trailing: no extra word
    assert words_from_pieces(["<0x0A>", "</s>"]) == [-1, -1]  # only a line break: no word
    assert words_from_pieces(["▁Ein", "<0xC3>", "<0xA9>", "s"]) == [0, 0, 0, 0]  # é is not a space


def test_word_count_equals_the_decoded_words(tokenizer):
    """For random piece sequences with bare markers and byte pieces (spaces, line breaks, letters), the words
    counted from the pieces are the whitespace-separated words of Tokenizer.decode."""
    import random

    rng = random.Random(0)
    ids = [tokenizer.piece_to_id(p) for p in ["▁Ein", "▁Mann", "s", "en", "▁", "<0x0A>", "<0x09>", "<0x20>",
                                               "<0xC3>", "<0xA9>", "<0xE2>", "<0x80>", "<0xA8>"]]
    assert len(set(ids)) == 13
    for _ in range(2000):
        sequence = [rng.choice(ids) for _ in range(rng.randint(1, 8))]
        pieces = tokenizer.pieces(sequence)
        words = max(words_from_pieces(pieces), default=-1) + 1
        assert words == len(tokenizer.decode(sequence).split()), pieces
