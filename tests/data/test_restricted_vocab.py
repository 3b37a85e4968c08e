"""tokenizer.restrict_vocab on training corpora of every size (real Multi30k slices): the kept vocabulary can still
segment any text, so texts round-trip, known words are spelt with kept pieces rather than bytes, and the word-level
alignments (nmt.decoding.word_alignment) count the words of the decoded text."""

import unicodedata

import pytest

from nmt.data.tokenizer import EOS_ID, UNK_ID, WORD_START, Tokenizer, train_spm
from nmt.decoding.word_alignment import words_from_pieces

SIZES = [1, 5, 20, 200, 3000]  # training pairs; conf/train.yaml's 8000 pieces, so the small ones get fewer
NEW_TEXTS = ["A dog 🦜 runs .", "Two men play Fußball in Dvořák street.", "Übergrößenträger 中文 ok",
             "An unseen word: Zyzzyva!"]


def normalized(text: str) -> str:
    """What the default nmt_nfkc normalization and decode make of real text: NFKC, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


@pytest.fixture(scope="module")
def joint_models(small_splits, tmp_path_factory):
    """A joint model of conf/train.yaml's settings for each training size, trained once for this module."""
    folder, train = tmp_path_factory.mktemp("sizes"), small_splits["train"]
    return {n: Tokenizer.load(train_spm(train.src[:n] + train.tgt[:n], folder / f"{n}.model")) for n in SIZES}


@pytest.mark.parametrize("size", SIZES)
def test_restricted_vocabularies_round_trip_and_count_words_for_every_corpus_size(joint_models, small_splits, size):
    """The target side restricted to its first ``size`` English lines: new text (unseen characters, German words,
    unseen English words) and the validation sentences decode to themselves, without a literal "▁", and have as
    many alignment words as the text has words. Before, the bare "▁" piece was dropped on small corpora and
    "A dog 🦜 runs ." came back as "A dog▁🦜▁runs▁." with two words."""
    english = small_splits["train"].tgt[:size]
    target = joint_models[size].restricted(english)
    assert target.piece_to_id(WORD_START) != UNK_ID
    for text in NEW_TEXTS + small_splits["valid"].tgt[:100] + small_splits["valid"].src[:50]:
        ids = target.encode(text)
        assert max(ids) < len(target) and UNK_ID not in ids
        assert target.decode(ids) == normalized(text), text
        words = words_from_pieces(target.pieces(ids))
        assert max(words) + 1 == len(normalized(text).split()), (text, target.pieces(ids))


@pytest.mark.parametrize("size", SIZES)
def test_words_of_known_characters_are_never_spelt_in_bytes(joint_models, small_splits, size):
    """A word whose characters all occur in the side's training text is spelt with kept pieces, as the whole model
    spells it, never with byte pieces (before, "runs" became <0x72><0x75><0x6E><0x73> after 20 lines)."""
    english = small_splits["train"].tgt[:size]
    target = joint_models[size].restricted(english)
    known = set("".join(english))
    for text in small_splits["valid"].tgt[:200]:
        for word in text.split():
            pieces = target.pieces(target.encode(word))
            if set(word) <= known:
                assert not any(p.startswith("<0x") for p in pieces), (word, pieces)


def test_restricted_vocabularies_stay_small(joint_models, small_splits):
    """The kept characters cost a few pieces, not the whole model: the English side of 3000 pairs stays well below
    the joint model's size, and every piece the English text uses is in it."""
    english = small_splits["train"].tgt
    full, target = joint_models[3000], joint_models[3000].restricted(english)
    assert len(target) < 0.6 * len(full)
    assert target.encode_batch(english[:300]) == [
        [target.piece_to_id(p) for p in full.pieces(ids)] for ids in full.encode_batch(english[:300])]


def test_a_word_boundary_spelt_in_bytes_reads_as_a_space(tokenizer):
    """A vocabulary without the bare "▁" piece (one restricted before it was always kept, carried by an older
    checkpoint) or a model that generates the three bytes of U+2581: decode gives a space, not a literal "▁", and
    the word alignment starts a new word there, as it counts the words of the decoded text."""
    pieces = ["\u2581A", "<0xE2>", "<0x96>", "<0x81>", "d", "o", "g", "<0xE2>", "<0x96>", "<0x81>", "</s>"]
    ids = [tokenizer.piece_to_id(p) for p in pieces]
    assert UNK_ID not in ids
    assert tokenizer.decode(ids) == "A dog"
    assert words_from_pieces(pieces) == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, -1]


def test_an_older_restricted_vocabulary_without_the_word_boundary_piece_still_reads_right(joint_models, small_splits):
    """The vocabulary list an older checkpoint stores (the used pieces, the special and byte pieces, no bare "▁")
    still loads with the same ids, and its translations read as words, not "A dog▁🦜▁runs▁."."""
    full, english = joint_models[5], small_splits["train"].tgt[:5]
    old = {0, 1, 2, 3} | {i for i in range(len(full)) if full.sp.is_byte(i)}
    old.update(i for ids in full.sp.encode(english) for i in ids)
    old.discard(full.sp.piece_to_id(WORD_START))
    target = Tokenizer(full.model_proto, vocab=old)
    assert target.vocab == sorted(old)
    ids = target.encode("A dog 🦜 runs .")
    assert "<0x81>" in target.pieces(ids) and ids[-1] == EOS_ID
    assert target.decode(ids) == "A dog 🦜 runs ."
    assert max(words_from_pieces(target.pieces(ids))) + 1 == 5
