"""The learning curve of AER (``eval.gold``): every validation of a real run records the AER, precision and recall
that ``nmt.align`` and ``nmt.aer`` give for the checkpoint of that step; the alignment presets set a gold set that
reads in both directions; a bad gold setting is refused before any work."""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path

import pytest

from nmt.analysis.aer import aer
from nmt.analysis.align import main as align_main
from nmt.analysis.gold import AlignmentWarning, read_lengths, read_pharaoh
from nmt.training.checks import check_settings
from nmt.training.gold import RECORD_KEYS, load_gold
from nmt.training.run import train
from nmt.training.tensorboard import Board

GOLD = Path(os.environ["NMT_DATA_DIR"]) / "align_deen_bicici100"
LINKS, SRC, TGT = GOLD / "de-en.wa.gz", GOLD / "test.de.gz", GOLD / "test.en.gz"
GOLD_SETTING = (f"eval.gold={{links: '{LINKS}', link_langs: [de, en], paths: {{de: '{SRC}', en: '{TGT}'}}}}")
TINY = ["data.train_limit=400", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", "train.max_steps=20", "train.valid_every=10",
        "decode.beam_size=1", "eval.plots=0", "device=cpu", "threads=1", "train.average=false"]


def aer_of_nmt_align(checkpoint: Path, out: Path):
    """AER of ``python -m nmt.align`` on the German-English gold set with ``checkpoint`` (:func:`aer_on_gold`)."""
    assert align_main([f"checkpoint={checkpoint}", f"src={SRC}", f"tgt={TGT}", f"out={out}", "threads=1"]) == 0
    return aer_on_gold(out)


def aer_on_gold(out: Path):
    """AER of the Pharaoh file ``out`` on the German-English gold set, scored as ``python -m nmt.aer`` scores it
    given ``src=`` and ``tgt=`` (links outside the sentences dropped on both sides)."""
    lengths = read_lengths(SRC, TGT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AlignmentWarning)  # the gold set's one out-of-range link
        gold, hyp = read_pharaoh(LINKS, lengths=lengths), read_pharaoh(out, lengths=lengths)
    return aer(gold.sure, gold.possible, hyp.links)


def test_every_validation_records_the_aer_of_nmt_align_and_nmt_aer(compose_cfg, tmp_path, caplog):
    run = tmp_path / "run"
    cfg = compose_cfg([*TINY, GOLD_SETTING, "data.normalize.lowercase=true", "train.keep_best=5"])
    with caplog.at_level(logging.INFO, logger="nmt.training.validation"):
        train(cfg, run)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [10, 20]
    for record in records:
        expected = aer_of_nmt_align(run / "checkpoints" / f"step_{record['step']}.pt", tmp_path / "hyp.align")
        assert [record[key] for key in RECORD_KEYS] == [expected.aer, expected.precision, expected.recall]
        assert 0.0 < record["aer"] < 1.0
    assert sum("AER " in message for message in caplog.messages) == len(records)


def test_the_figures_go_to_tensorboard_under_alignment(tmp_path):
    board, scalars = Board(tmp_path, False), []

    class Writer:
        def add_scalar(self, tag, value, step):
            scalars.append((tag, value, step))

        def flush(self):
            pass

    board.writer = Writer()
    board.validation({"step": 7, "valid_bleu": 1.5, "aer": 0.6, "alignment_precision": 0.3,
                      "alignment_recall": 0.5, "reverse_aer": 0.7, "symmetrized_aer": 0.4,
                      "symmetrized_alignment_precision": 0.55})
    assert ("alignment/aer", 0.6, 7) in scalars and ("alignment/recall", 0.5, 7) in scalars
    assert ("alignment/reverse_aer", 0.7, 7) in scalars and ("alignment/symmetrized_aer", 0.4, 7) in scalars
    assert ("alignment/symmetrized_precision", 0.55, 7) in scalars
    assert ("valid/bleu", 1.5, 7) in scalars


@pytest.mark.parametrize("preset, pair, sentences, sure, possible", [
    ("align_de_en", ("de", "en"), 100, 1232, 1232),  # one gold link is outside its sentence (SOURCE.md)
    ("align_en_fr", ("en", "fr"), 447, 4038, 4038 + 13400),  # P includes S
    ("align_ro_en", ("ro", "en"), 248, 6198, 6198),
])
def test_alignment_presets_score_their_whole_gold_set_in_both_directions(compose_cfg, preset, pair, sentences,
                                                                        sure, possible):
    forward = load_gold(compose_cfg([f"+experiment={preset}"]))
    assert len(forward.sources) == len(forward.gold) == sentences
    assert sum(map(len, forward.gold.sure)) == sure and sum(map(len, forward.gold.possible)) == possible
    assert forward.extract == {"method": "argmax_target", "threshold": 0.3, "shift": 0, "temperature": 1.0}
    backward = load_gold(compose_cfg([f"+experiment={preset}", f"data.src_lang={pair[1]}", f"data.tgt_lang={pair[0]}"]))
    assert backward.sources == forward.targets and backward.targets == forward.sources
    assert backward.gold.sure == [{(t, s) for s, t in links} for links in forward.gold.sure]
    assert backward.lengths == [(t, s) for s, t in forward.lengths]


def test_off_by_default(compose_cfg):
    assert compose_cfg([]).eval.gold is None and load_gold(compose_cfg([])) is None


@pytest.mark.parametrize("override, message", [
    ("+eval.gold.lnks=x.wa", "unknown key"),
    ("data.src_lang=fr", r"link_langs=\['de', 'en'\] but the model translates fr->en"),
    ("+eval.gold.shift=-1", r"eval.gold.shift=-1; valid: a whole number >= 0"),
    ("+eval.gold.method=argmax", "eval.gold.method='argmax'; valid: argmax_target"),
    ("eval.gold.paths.en=/nonexistent/test.en", "eval.gold.paths.en"),
    ("eval.gold.links=/nonexistent/de-en.wa", "eval.gold.links=/nonexistent/de-en.wa: no such file"),
    ("+eval.gold.one_based=yes", "eval.gold.one_based='yes'; valid: true, false"),
])
def test_a_bad_gold_setting_is_refused_before_any_work(compose_cfg, override, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        check_settings(compose_cfg([GOLD_SETTING, override]))


def test_a_gold_set_read_with_the_wrong_origin_is_logged(compose_cfg, caplog):
    with caplog.at_level("WARNING"):
        gold = load_gold(compose_cfg(["+experiment=align_de_en", "eval.gold.one_based=true"]))
    assert gold.gold.null_links == 110
    assert "110 link(s) use position 0, which a 1-based file reserves for NULL" in caplog.text
    assert "is the file 0-based (eval.gold.one_based=false)?" in caplog.text


def test_the_pair_figure_comes_from_the_product_of_the_two_directions():
    """One pair of two words a b / x y with the diagonal as gold: the forward model puts both target words on
    source word 0 (one link wrong), the reverse model is sure of the diagonal; their geometric mean picks the
    diagonal (x: sqrt(.6*.9) > sqrt(.4*.1); y: sqrt(.4*.9) > sqrt(.6*.1)), so the pair scores AER 0."""
    import numpy as np

    from nmt.analysis.gold import Alignments
    from nmt.decoding.translation import Translation
    from nmt.training.gold import GoldSet

    diagonal = {(0, 0), (1, 1)}
    gold = GoldSet(["a b"], ["x y"], Alignments([diagonal], [diagonal]), [(2, 2)],
                   {"method": "argmax_target", "threshold": 0.3, "shift": 0, "temperature": 1.0}, 8)
    pieces = (["▁a", "▁b", "</s>"], ["▁x", "▁y", "</s>"])
    forward = Translation("x y", *pieces, np.array([[.6, .4, 0], [.6, .4, 0], [0, 0, 1]], np.float32), 0.0)
    backward = Translation("a b", *pieces[::-1], np.array([[.9, .1, 0], [.1, .9, 0], [0, 0, 1]], np.float32), 0.0)
    alone, pair = gold.score_forced([forward]), gold.score_forced([forward], [backward])
    assert alone["aer"] == pytest.approx(0.5) and alone["alignment_precision"] == pytest.approx(0.5)
    assert [pair[key] for key in RECORD_KEYS] == [0.0, 1.0, 1.0]
