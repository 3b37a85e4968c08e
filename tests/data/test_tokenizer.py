"""SentencePiece training and the Tokenizer wrapper (nmt.data.tokenizer) on real Multi30k text."""

import re
import unicodedata

import pytest
import sentencepiece as spm

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_spm

UNSEEN = ["漢字", "ř", "Dvořák spielt Geige 🎻", "Ein Mann ∮ auf der Straße"]


def normalized(text: str) -> str:
    """What SentencePiece's default nmt_nfkc normalization makes of real text: NFKC, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def test_special_ids(tokenizer):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tokenizer.pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    sp = tokenizer.sp
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert len(tokenizer) == 500


def test_round_trip_real_sentences(tokenizer, small_splits):
    """Valid sentences (not seen in training), both languages: decode(encode(x)) is x, normalized."""
    sentences = small_splits["valid"].src + small_splits["valid"].tgt
    unchanged = 0
    for text in sentences:
        ids = tokenizer.encode(text)
        assert ids[-1] == EOS_ID and EOS_ID not in ids[:-1] and BOS_ID not in ids
        decoded = tokenizer.decode(ids)
        assert decoded == normalized(text), text
        unchanged += decoded == text
    assert unchanged >= 0.99 * len(sentences)  # raw Multi30k is (almost) normalized already


def test_encode_batch_and_bos(tokenizer, small_splits):
    sentences = small_splits["test"].src[:50]
    assert tokenizer.encode_batch(sentences) == [tokenizer.encode(s) for s in sentences]
    with_bos = tokenizer.encode_batch(sentences, add_bos=True)
    assert all(ids[0] == BOS_ID and ids[1:] == tokenizer.encode(s) for ids, s in zip(with_bos, sentences))
    assert tokenizer.encode(sentences[0], add_bos=True) == with_bos[0]
    assert tokenizer.encode("") == [EOS_ID]


@pytest.mark.parametrize("text", UNSEEN)
def test_byte_fallback_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    pieces = tokenizer.pieces(ids)
    assert any(p.startswith("<0x") for p in pieces), pieces  # the characters really are unseen
    assert UNK_ID not in ids
    assert tokenizer.decode(ids) == text


def test_decode_never_emits_byte_pieces(tokenizer):
    """Every single id, and broken byte sequences a model might generate, decode without "<0x"."""
    for i in range(len(tokenizer)):
        assert "<0x" not in tokenizer.decode([i])
    lead, cont = tokenizer.sp.piece_to_id("<0xC3>"), tokenizer.sp.piece_to_id("<0xA4>")
    assert tokenizer.decode([lead, cont]) == "ä"
    word = tokenizer.encode("Mann")[:-1]
    for ids in ([lead], [cont, lead], word + [lead] + word, [lead, EOS_ID, cont]):
        assert "<0x" not in tokenizer.decode(ids)
    assert tokenizer.decode([BOS_ID] + tokenizer.encode("Ein Hund") + [PAD_ID, PAD_ID]) == "Ein Hund"


def test_without_byte_fallback_unknown_is_marked(small_splits, tmp_path):
    train = small_splits["train"]
    tok = Tokenizer.load(train_spm(train.src[:1000], tmp_path / "nofb.model", vocab_size=300, byte_fallback=False))
    ids = tok.encode("Ein 漢字")
    assert UNK_ID in ids
    assert "\u2047" in tok.decode(ids)  # " ⁇ ", SentencePiece's surface form of <unk>
    assert (tmp_path / "nofb.vocab").is_file()


def test_other_special_ids_refused(small_splits, tmp_path):
    """A model trained with SentencePiece's defaults (unk=0, bos=1, eos=2, no pad) is not ours."""
    spm.SentencePieceTrainer.train(sentence_iterator=iter(small_splits["train"].src[:1000]),
                                   model_prefix=str(tmp_path / "foreign"), vocab_size=200, minloglevel=2)
    with pytest.raises(ValueError, match="special ids") as info:
        Tokenizer.load(tmp_path / "foreign.model")
    assert "foreign.model" in str(info.value)


def test_train_spm_errors(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        train_spm(["a b"], tmp_path / "x.model", model_type="word")
    with pytest.raises(ValueError, match="no sentences"):
        train_spm(["", "  "], tmp_path / "x.model")
    with pytest.raises(FileNotFoundError, match="y.model"):
        Tokenizer.load(tmp_path / "y.model")


def test_a_file_that_is_not_a_sentencepiece_model_is_named(tmp_path):
    """A damaged .model file: a ValueError naming it and the fix (it was SentencePiece's bare RuntimeError)."""
    bad = tmp_path / "joint.model"
    bad.write_bytes(b"not a model\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(bad))} is not a readable SentencePiece model .*train_spm"):
        Tokenizer.load(bad)


def test_model_bytes_round_trip(tokenizer, spm_model):
    """Checkpoints carry the model as bytes: a Tokenizer from bytes behaves like the one from the file."""
    copy = Tokenizer(spm_model.read_bytes())
    text = "Zwei junge Männer spielen Fußball."
    assert copy.encode(text) == tokenizer.encode(text)
    assert copy.model_proto == tokenizer.model_proto


def test_subword_sampling_round_trips_varies_and_is_seeded(tokenizer, small_splits):
    """Subword regularization (tokenizer.sample_alpha): other segmentations of the same text, reproducible
    with SentencePiece's seed."""
    texts = small_splits["train"].src[:200]
    best = tokenizer.encode_batch(texts)
    spm.set_random_generator_seed(7)
    first = tokenizer.encode_batch(texts, sample_alpha=0.1)
    spm.set_random_generator_seed(7)
    again = tokenizer.encode_batch(texts, sample_alpha=0.1)
    assert first == again
    assert [tokenizer.decode(ids) for ids in first] == [" ".join(t.split()) for t in texts]
    assert all(ids[-1] == EOS_ID for ids in first)
    changed = sum(a != b for a, b in zip(first, best))
    assert changed > 50, f"only {changed} of 200 sentences got another segmentation"
    assert sum(map(len, first)) > sum(map(len, best))


@pytest.mark.parametrize("side", ["source", "target", "both"])
def test_subword_sampling_of_one_side_keeps_the_best_segmentation_of_the_other(tokenizer, small_splits, side):
    """tokenizer.sample_side: the side named is segmented anew, the other side of every pair is its best
    segmentation (one tokenizer serves both sides of this joint model)."""
    from nmt.data.batches import encode_pairs
    from nmt.data.corpus import Parallel

    train = small_splits["train"]
    split = Parallel("train", train.src[:200], train.tgt[:200])
    best = encode_pairs(split, tokenizer, tokenizer)
    spm.set_random_generator_seed(3)
    sampled = encode_pairs(split, tokenizer, tokenizer, sample_alpha=0.1, sample_side=side)
    for index, name in enumerate(("source", "target")):
        changed = sum(s[index] != b[index] for s, b in zip(sampled, best))
        if side in (name, "both"):
            assert changed > 50, f"{name}: only {changed} of 200 sentences got another segmentation"
        else:
            assert changed == 0, f"{name} was sampled with tokenizer.sample_side={side}"


def test_subword_sampling_stays_inside_a_restricted_vocabulary(tokenizer, small_splits):
    """Sampling (tokenizer.sample_alpha) with tokenizer.restrict_vocab: the English side's sampled segmentations of
    English and of German text (the pieces German needs are the ones most often outside it) use kept pieces only,
    never <unk>, round-trip, and still differ from the best segmentation."""
    english, german = small_splits["train"].tgt, small_splits["train"].src
    target = tokenizer.restricted(english)
    for texts in (english[:300], german[:300]):
        spm.set_random_generator_seed(11)
        sampled = target.encode_batch(texts, sample_alpha=0.3)
        assert all(max(ids) < len(target) and UNK_ID not in ids for ids in sampled)
        assert [target.decode(ids) for ids in sampled] == [" ".join(t.split()) for t in texts]
        assert sum(a != b for a, b in zip(sampled, target.encode_batch(texts))) > 100

    class OutsideSampler:  # a sampler that returns a piece outside the vocabulary for the first sentence
        def __init__(self, sp):
            self.sp = sp

        def encode(self, texts, **options):
            encoded = self.sp.encode(texts, **options)
            if options.get("enable_sampling"):
                encoded[0] = [next(i for i in range(4, 8000) if i not in target.vocab)]
            return encoded

    target.sp = OutsideSampler(target.sp)
    sampled = target.encode_batch(english[:2], sample_alpha=0.3)
    assert sampled[0] == target.encode(english[0]) and UNK_ID not in sampled[0]  # the best segmentation instead


def test_restricted_vocabulary_keeps_round_trips_and_only_used_pieces(tokenizer, small_splits):
    """tokenizer.restrict_vocab: the target side of a joint model keeps the pieces English uses; German text then
    segments into kept pieces only, decodes back unchanged, and unseen characters still use byte pieces."""
    english, german = small_splits["train"].tgt, small_splits["train"].src
    target = tokenizer.restricted(english)
    assert 300 < len(target) < len(tokenizer)
    assert target.encode_batch(english[:500]) == [
        [target.piece_to_id(p) for p in tokenizer.pieces(ids)] for ids in tokenizer.encode_batch(english[:500])
    ]
    for text in german[:200] + ["Übergrößenträger 中文 ok"]:
        ids = target.encode(text)
        assert max(ids) < len(target) and UNK_ID not in ids
        assert target.decode(ids) == " ".join(text.split())
    assert target.pieces(target.encode("a dog")) == tokenizer.pieces(tokenizer.encode("a dog"))
    assert target.piece_to_id("<0xC3>") != UNK_ID
    with pytest.raises(ValueError, match="special ids"):
        Tokenizer(tokenizer.model_proto, vocab=[0, 1, 2, 10])


def test_restricted_vocabulary_travels_in_checkpoints(tokenizer, small_splits, compose_cfg, tmp_path):
    from nmt.models import checkpoint
    from nmt.models.build import build_model

    src_tok, tgt_tok = tokenizer.restricted(small_splits["train"].src), tokenizer.restricted(small_splits["train"].tgt)
    cfg = compose_cfg(["model.emb_size=8", "model.hidden_size=12", "device=cpu"])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(src_tok), len(tgt_tok))
    checkpoint.save(tmp_path / "m.pt", model, cfg, src_tok, tgt_tok)
    _, _, src2, tgt2, _ = checkpoint.load(tmp_path / "m.pt")
    assert (src2.vocab, tgt2.vocab) == (src_tok.vocab, tgt_tok.vocab)
    assert tgt2.encode("Two dogs play.") == tgt_tok.encode("Two dogs play.")


def test_bare_word_marker_pieces_decode_to_the_words_alignment_counts(tokenizer):
    """A model can generate a bare "▁" that nothing continues; its text has no stray spaces and as many words as
    the word-level alignment rows (nmt.decoding.word_alignment.words_from_pieces), so eval/*.align indices match the .hyp."""
    from nmt.decoding.word_alignment import words_from_pieces

    space, ein, mann = (tokenizer.piece_to_id(p) for p in ("\u2581", "\u2581Ein", "\u2581Mann"))
    assert UNK_ID not in (space, ein, mann)
    for ids in ([ein, mann, space, EOS_ID], [ein, space, space, mann], [space, ein, mann], [space, mann, space]):
        text = tokenizer.decode(ids)
        assert text == " ".join(text.split()) and text.split() in (["Ein", "Mann"], ["Mann"])
        assert max(words_from_pieces(tokenizer.pieces(ids))) + 1 == len(text.split())
    # a hypothesis of bare markers only decodes to "" and has no word (no phantom link in eval/*.align)
    assert tokenizer.decode([space, EOS_ID]) == "" and set(words_from_pieces(tokenizer.pieces([space, EOS_ID]))) == {-1}


def test_a_generated_line_break_is_a_space(tokenizer):
    """Byte fallback keeps <0x0A> in every vocabulary; a translation that generates it stays one line."""
    newline, cr = tokenizer.piece_to_id("<0x0A>"), tokenizer.piece_to_id("<0x0D>")
    ein, mann = tokenizer.piece_to_id("\u2581Ein"), tokenizer.piece_to_id("\u2581Mann")
    assert UNK_ID not in (newline, cr, ein, mann)
    assert tokenizer.decode([ein, newline, mann, EOS_ID]) == "Ein Mann"
    assert tokenizer.decode([ein, cr, newline, mann, newline]) == "Ein Mann"


@pytest.mark.parametrize("char", ["\v", "\f", "\x1c", "\x85", "\u2028", "\u2029"])
def test_every_character_that_splitlines_breaks_at_is_a_space(tokenizer, char):
    """Not only \\n: tools that read with str.splitlines() break lines at these too (from byte pieces)."""
    pieces = [tokenizer.piece_to_id(f"<0x{b:02X}>") for b in char.encode("utf-8")]
    ein, mann = tokenizer.piece_to_id("\u2581Ein"), tokenizer.piece_to_id("\u2581Mann")
    assert UNK_ID not in (*pieces, ein, mann)
    text = tokenizer.decode([ein, *pieces, mann, EOS_ID])
    assert text == "Ein Mann" and len(text.splitlines()) == 1
