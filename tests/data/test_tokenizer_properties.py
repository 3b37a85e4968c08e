"""Property: any Unicode text round-trips through Tokenizer.encode and decode, for SentencePiece models trained on
tiny to a few thousand lines of real Multi30k text, with and without tokenizer.restrict_vocab.

What a round trip may change is what nmt.data.tokenizer documents, and nothing else:
``decode(encode(text)) == normalize(text)``, where ``normalize`` applies the model's normalization rule and then
reads line breaks (the characters ``str.splitlines`` breaks at) and "▁" (U+2581) as spaces, collapses runs of
spaces and strips them. With ``tokenizer.normalization=identity`` that is all: a text without line breaks, "▁",
leading, trailing or repeated spaces comes back unchanged, character for character. Text is valid Unicode
(lone surrogates, which no UTF-8 file holds, are not drawn).
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt.data.tokenizer import EOS_ID, UNK_ID, WORD_START, Tokenizer, train_spm

SIZES = [1, 30, 3000]  # training pairs, joint model of 8000 pieces (conf/train.yaml's size; fewer for small texts)
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.text(
    st.sampled_from("aeinrst ÄÖÜäöüß.,-'\t\n\u2581\u00a0\u3000Ａｶﬁ\u200b\x00\x07é\u0301漢🦜"), max_size=40)
QUICK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def collapse(text: str) -> str:
    """Runs of spaces (U+0020 only) -> one, leading and trailing ones dropped."""
    return " ".join(part for part in text.split(" ") if part)


PLAIN = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=LINE_BREAKS + WORD_START),
                max_size=40).map(collapse)  # what identity normalization keeps character for character


@pytest.fixture(scope="module")
def models(small_splits, tmp_path_factory):
    """{(normalization, size, restrict_vocab): Tokenizer}, trained once for this module (the target side is
    restricted to its English lines)."""
    folder, train, out = tmp_path_factory.mktemp("props"), small_splits["train"], {}
    for rule in ("nmt_nfkc", "identity"):
        for size in SIZES:
            path = train_spm(train.src[:size] + train.tgt[:size], folder / f"{rule}{size}.model", normalization=rule)
            full = Tokenizer.load(path)
            out[rule, size, False], out[rule, size, True] = full, full.restricted(train.tgt[:size])
    return out


def documented(tok: Tokenizer, text: str) -> str:
    """The module docstring's rule, spelt out: SentencePiece's normalization rule of the model (which also writes
    spaces as "▁"), then "▁" and line breaks -> spaces, runs of spaces collapsed and stripped."""
    ruled = tok.sp.normalize(text).replace(WORD_START, " ")
    return collapse("".join(" " if c in LINE_BREAKS else c for c in ruled))


def check_round_trip(tok: Tokenizer, text: str) -> str:
    """decode(encode(text)): ids in the vocabulary, never <unk>, the documented text; and normalize() says so."""
    ids = tok.encode(text)
    assert ids[-1] == EOS_ID and UNK_ID not in ids and max(ids) < len(tok)
    decoded = tok.decode(ids)
    assert decoded == documented(tok, text), (text, tok.pieces(ids))
    assert tok.normalize(text) == decoded
    return decoded


@pytest.mark.parametrize("restrict", [False, True], ids=["full", "restricted"])
@pytest.mark.parametrize("size", SIZES)
@QUICK
@given(text=TEXT)
def test_any_text_round_trips_up_to_the_documented_normalization(models, size, restrict, text):
    decoded = check_round_trip(models["nmt_nfkc", size, restrict], text)
    assert decoded == decoded.strip(" ") and "  " not in decoded and WORD_START not in decoded
    assert not any(c in LINE_BREAKS for c in decoded)


@pytest.mark.parametrize("restrict", [False, True], ids=["full", "restricted"])
@pytest.mark.parametrize("size", SIZES)
@QUICK
@given(text=PLAIN)
def test_with_identity_normalization_text_comes_back_unchanged(models, size, restrict, text):
    """Beyond what the module docstring excludes, identity normalization changes nothing."""
    tok = models["identity", size, restrict]
    assert check_round_trip(tok, text) == text
    assert tok.normalize(text + "\n  " + text + " \u2581") == collapse(f"{text} {text}")
