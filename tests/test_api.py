"""The Python API (nmt.Translator): the same translations and alignments as translate.py and nmt.align, from a
run trained on a real slice of Multi30k."""

from __future__ import annotations

import numpy as np
import pytest

import nmt
from nmt.analysis.forced import force_align
from nmt.decoding.translation import translate_nbest
from nmt.models import checkpoint
from nmt.models.checkpoint import CheckpointError
from nmt.training.run import train

TINY = ["data.train_limit=600", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=300", "train.max_steps=20", "train.valid_every=20",
        "decode.beam_size=3", "eval.plots=0", "device=cpu"]
SOURCES = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde spielen im Schnee mit einem roten Ball."]


@pytest.fixture(scope="module")
def run(tmp_path_factory, compose_cfg):
    run_dir = tmp_path_factory.mktemp("api") / "run"
    train(compose_cfg(TINY), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def translator(run):
    return nmt.Translator.load(run, device="cpu")


def test_translations_equal_the_search_of_translate_py(run, translator):
    model, cfg, src_tok, tgt_tok, _ = checkpoint.load(checkpoint.run_model(run))
    expected = translate_nbest(model, src_tok, tgt_tok, SOURCES, cfg.decode, "cpu", 3, 1)
    got = translator.translate(SOURCES)  # the model's own decode settings: beam 3
    assert [t.text for t in got] == [b[0].text for b in expected]
    assert got[1].text == ""  # an empty line gets an empty translation
    for t, block in zip(got, expected):
        np.testing.assert_array_equal(t.alignment, block[0].alignment)
        assert t.alignment.shape == (len(t.hyp_pieces), len(t.src_pieces))
    assert translator.source_lang == "de" and translator.target_lang == "en"
    assert translator.checkpoint.name in ("best.pt", "averaged.pt")


def test_settings_per_call_and_a_single_string(translator):
    greedy = translator.translate(SOURCES[0], beam_size=1)
    assert len(greedy) == 1 and isinstance(greedy[0].text, str)
    blocks = translator.translate(SOURCES, beam_size=4, n_best=3)
    assert [len(b) for b in blocks] == [3, 1, 3]  # an empty line has one (empty) hypothesis
    assert blocks[0][0].score >= blocks[0][1].score >= blocks[0][2].score
    assert translator.decode.beam_size == 3  # per-call settings do not stick


@pytest.mark.parametrize("kwargs, message", [({"beam": 5}, "beam: not a decoding setting; use one of .*beam_size"),
                                              ({"beam_size": 0}, "beam_size=0 must be a whole number >= 1"),
                                              ({"beam_size": 2, "n_best": 3}, "n_best=3 must be"),
                                              ({"precision": "fp16"}, "fp16")])
def test_bad_settings_are_refused_by_name(translator, kwargs, message):
    with pytest.raises(ValueError, match=message):
        translator.translate(SOURCES, **kwargs)


def test_sentences_must_be_strings(translator):
    with pytest.raises(TypeError, match="sentences must be a string or a sequence of strings"):
        translator.translate([b"bytes"])


def test_a_line_break_inside_a_sentence_is_read_as_a_space(translator):
    """One string is one sentence: its line breaks do not split it (the docstring says to split first)."""
    spaced = "Ein Mann fährt Fahrrad. Zwei Hunde spielen."
    got = translator.translate([spaced.replace(". ", ".\n"), spaced.replace(". ", ".\u2028"), spaced], beam_size=1)
    assert len(got) == 3
    assert got[0].src_pieces == got[1].src_pieces == got[2].src_pieces
    assert got[0].text == got[1].text == got[2].text


def test_forced_alignment_equals_nmt_align(run, translator):
    targets = ["A man rides a bike.", "", "Two dogs play in the snow with a red ball."]
    model, _, src_tok, tgt_tok, _ = checkpoint.load(checkpoint.run_model(run))
    expected = force_align(model, src_tok, tgt_tok, SOURCES, targets)
    got = translator.align(SOURCES, targets)
    assert len(got) == 3
    for a, b in zip(got, expected):
        assert a.hyp_pieces == b.hyp_pieces and a.src_pieces == b.src_pieces
        np.testing.assert_allclose(a.alignment, b.alignment, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[0].alignment.sum(axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="3 source lines but 2 target lines"):
        translator.align(SOURCES, targets[:2])


def test_loading_a_missing_or_unfinished_run_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        nmt.Translator.load(tmp_path / "nope.pt")
    (tmp_path / "running" / "checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="without a finished model"):
        nmt.Translator.load(tmp_path / "running")
    with pytest.raises(AttributeError, match="no attribute 'Translater'"):
        nmt.Translater  # noqa: B018


def test_a_list_of_checkpoints_is_an_ensemble(run, translator):
    best = run / "checkpoints" / "best.pt"
    twice = nmt.Translator.load([best, best], device="cpu")
    one, two = translator.translate(SOURCES), twice.translate(SOURCES)
    assert [t.text for t in two] == [t.text for t in one]  # two copies of one model: the model itself
    np.testing.assert_allclose([t.score for t in two], [t.score for t in one], rtol=1e-4, atol=1e-4)
    targets = ["A man rides a bike.", "", "Two dogs play."]
    for a, b in zip(twice.align(SOURCES, targets), translator.align(SOURCES, targets)):
        np.testing.assert_allclose(a.alignment, b.alignment, rtol=1e-6, atol=1e-7)
        assert a.score == pytest.approx(b.score, rel=1e-6, abs=1e-6)
    with pytest.raises(ValueError, match="'max' is not one of prob, loglinear"):
        nmt.Translator.load([best, best], device="cpu", combine="max")
    with pytest.raises(ValueError, match=r"needs at least one checkpoint .*: give one or more \(on the command "
                                         r"line checkpoint=RUN_DIR"):
        nmt.Translator.load([], device="cpu")


def test_load_refuses_a_path_that_is_not_one_by_type():
    with pytest.raises(TypeError, match=r"^Translator\.load: path must be a run folder or a checkpoint file .*, got "
                                        r"NoneType$"):
        nmt.Translator.load(None)
