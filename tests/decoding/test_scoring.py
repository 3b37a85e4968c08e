"""Scores say what they measured: BLEU tokenized for the target language, references compared in NFC, empty
references counted; real Multi30k lines and hand-made cases with known answers."""

from __future__ import annotations

import gzip
import logging
import unicodedata

import pytest
import sacrebleu

from nmt.decoding.scoring import bleu_tokenizer, score

CHINESE = ["一只狗在草地上奔跑。", "一个男人在骑自行车。", "两个孩子在海边玩沙子。", "一位女士正在厨房里做饭。"]


def test_chinese_is_scored_with_the_chinese_tokenizer():
    """A perfect Chinese translation scored 0.00 with 13a (each sentence one 'word'); tok:zh gives 100, and a
    sentence with one character wrong loses some points, not all."""
    assert score(CHINESE, CHINESE)["bleu"] == 0.0  # what the default tokenizer does to unspaced text
    perfect = score(CHINESE, CHINESE, "zh")
    assert perfect["bleu"] == 100.0 and "tok:zh" in perfect["bleu_signature"]
    one_wrong = score(["一只猫在草地上奔跑。", *CHINESE[1:]], CHINESE, "zh-CN")["bleu"]
    assert 60 < one_wrong < 100
    assert one_wrong == pytest.approx(sacrebleu.corpus_bleu(["一只猫在草地上奔跑。", *CHINESE[1:]], [CHINESE],
                                                            tokenize="zh").score, abs=0.01)


@pytest.mark.parametrize("lang, expected", [("de", "13a"), ("en", "13a"), (None, "13a"), ("zh", "zh"),
                                            ("th", "char"), ("my", "char")])
def test_the_tokenizer_follows_the_target_language(lang, expected):
    assert bleu_tokenizer(lang) == expected


def test_japanese_uses_mecab_when_installed_else_characters():
    try:
        sacrebleu.BLEU(tokenize="ja-mecab")
        expected = "ja-mecab"
    except (ImportError, RuntimeError, OSError):
        expected = "char"
    assert bleu_tokenizer("ja") == expected
    assert f"tok:{expected}" in score(["犬が走る。"], ["犬が走る。"], "ja")["bleu_signature"]


def test_a_decomposed_reference_scores_as_the_same_text(multi30k_dir, caplog):
    """Translations come out NFC; the same text as an NFD reference scored 63.30 instead of 100."""
    with gzip.open(multi30k_dir / "val.de.gz", "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for _, line in zip(range(200), f)]
    decomposed = [unicodedata.normalize("NFD", line) for line in lines]
    assert decomposed != lines  # umlauts and ß are there to decompose
    caplog.set_level("WARNING", logger="nmt")
    scores = score(lines, decomposed, "de")
    assert scores["bleu"] == 100.0 and scores["chrf"] == 100.0 and scores["unicode"] == "NFC"
    assert "were not in Unicode NFC" in caplog.text


def test_empty_references_are_counted_and_warned(caplog):
    caplog.set_level("WARNING", logger="nmt")
    scores = score(["a dog runs .", "a cat sleeps ."], ["a dog runs .", ""], "en")
    assert scores["empty_references"] == 1 and "1 reference line(s) are empty" in caplog.text


def forget_sacrebleu_warnings():
    """sacreBLEU's warnings pass once per process: forget those an earlier test caused."""
    for once in logging.getLogger("sacrebleu").filters:
        once.seen.clear()


def test_validation_scoring_leaves_out_sacrebleus_tokenized_text_warning(caplog):
    """Text tokenized on purpose (data.normalize, the alignment presets) makes sacreBLEU warn at every scoring; the
    final evaluation (warn) still says it once, validation (warn=False) does not repeat it; the scores agree."""
    hyps = [f"a dog runs number {i} ." for i in range(120)]
    refs = [f"a dog runs to number {i} ." for i in range(120)]
    caplog.set_level("WARNING")
    forget_sacrebleu_warnings()
    loud = score(hyps, refs, "en")
    assert caplog.text.count("forgot to detokenize") == 1  # once, not for both casings
    score(hyps, refs, "en")
    assert caplog.text.count("forgot to detokenize") == 1  # nor again for the next split or decoder
    caplog.clear()
    quiet = score(hyps, refs, "en", warn=False)
    assert "detokenize" not in caplog.text
    assert (quiet["bleu"], quiet["bleu_lowercase"], quiet["bleu_signature"]) == (
        loud["bleu"], loud["bleu_lowercase"], loud["bleu_signature"])
