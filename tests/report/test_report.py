"""The comparison report of real runs (tests/report/conftest.py): its rows are the runs' own scores, its
significance figures are sacreBLEU's, runs of another test set are refused, and its analyses add up."""

from __future__ import annotations

import json
import math
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from nmt.report import attention
from nmt.report.build import build_report
from nmt.report.cli import main
from nmt.report.runs import ReportError, expand, read_runs
from nmt.report.significance import paired_test
from nmt.report.tables import SCORE_COLUMNS, fmt


def scores_of(run: Path, split: str, decoder: str) -> dict:
    folder = run / "eval" / ("greedy" if decoder == "greedy" else "")
    return json.loads((folder / f"{split}.scores.json").read_text(encoding="utf-8"))


def test_a_row_per_run_holding_the_runs_own_scores(tiny_runs, written_report):
    _, runs = tiny_runs
    page, report = written_report
    assert [row["label"] for row in report.score_rows] == [run.name for run in runs]
    for run, row in zip(runs, report.score_rows):
        for split in ("valid", "test"):
            for decoder in ("greedy", "beam"):
                scores = scores_of(run, split, decoder)
                for key in ("bleu", "bleu_lowercase", "chrf"):
                    assert row[f"{split}_{decoder}_{key}"] == scores[key], (run.name, split, decoder, key)
    assert [row["attention"] for row in report.run_rows] == ["Additive", "Dot"]
    assert all(row["steps"] == 4 and row["decoder_style"] == "luong" for row in report.run_rows)
    assert report.signatures["BLEU"] == [scores_of(runs[0], "test", "beam")["bleu_signature"]]
    summary = (page.parent / "summary.md").read_text(encoding="utf-8")
    html = page.read_text(encoding="utf-8")
    for row in report.score_rows:  # the same figures on the page and in the summary
        line = next(text for text in summary.splitlines() if text.startswith(f"| {row['label']} | ") and "|" in text
                    and fmt(row["test_beam_bleu"]) in text and text.count("|") == len(SCORE_COLUMNS) + 2)
        assert all(f" {fmt(row[key])} |" in line for key, _ in SCORE_COLUMNS)
        assert row["label"] in html
    assert (page.parent / "plotly.min.js").stat().st_size > 1_000_000
    assert "<script src=\"plotly.min.js\">" in html and "https://" not in html.split("<body>")[0]


def test_parameters_are_the_models_own_count(tiny_runs, written_report):
    from nmt.models import checkpoint

    _, runs = tiny_runs
    model = checkpoint.load(runs[0] / "checkpoints" / "best.pt")[0]
    assert written_report[1].run_rows[0]["parameters"] == sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def test_split(compose_cfg, tiny_overrides):
    """The 12 test pairs the tiny runs were scored on, as training read them."""
    from nmt.data.corpus import load_splits

    return load_splits(compose_cfg(tiny_overrides).data, train=False)["test"]


def hypotheses(run: Path) -> list[str]:
    return (run / "eval" / "test.hyp").read_text(encoding="utf-8").splitlines()


def test_significance_equals_sacrebleus_own_paired_test(tiny_runs, written_report, test_split):
    _, runs = tiny_runs
    refs = [unicodedata.normalize("NFC", r) for r in test_split.tgt]
    systems = [(run.name, hypotheses(run)) for run in runs]
    _, theirs = PairedTest(systems, {"BLEU": BLEU(), "chrF": CHRF()}, [refs], test_type="bs")()
    ours = written_report[1].significance
    assert ours.test == "bs" and ours.samples == 1000
    for metric in ("BLEU", "chrF2"):
        for mine, result in zip(ours.rows[metric], theirs[metric]):
            assert (mine.score, mine.mean, mine.ci) == pytest.approx((result.score, result.mean, result.ci))
            assert mine.p_value == (None if result.p_value is None else pytest.approx(result.p_value))
        assert ours.rows[metric][1].distinguishable == (theirs[metric][1].p_value < 0.05)
    ar = paired_test(systems, refs, test="ar", samples=300)
    _, theirs = PairedTest(systems, {"BLEU": BLEU(), "chrF": CHRF()}, [refs], test_type="ar", n_samples=300,
                           n_ar_confidence=0)()
    assert ar.rows["BLEU"][1].p_value == pytest.approx(theirs["BLEU"][1].p_value)
    assert ar.rows["BLEU"][1].ci == pytest.approx(theirs["BLEU"][1].ci)


def test_a_run_scored_on_another_test_set_is_refused(tiny_runs, other_test_set_run, tmp_path, capsys):
    _, runs = tiny_runs
    with pytest.raises(ReportError, match=r"refused to compare valid_as_test with 0_additive_luong: .*other "
                                          r"test sources .* one report per test set"):
        build_report([runs[0], other_test_set_run])
    assert main([str(runs[0]), str(other_test_set_run), f"out={tmp_path / 'out'}"]) == 1
    assert "error: refused to compare" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written


def test_other_references_are_refused(tiny_runs, test_split, tmp_path):
    from nmt.report.testset import check_comparable, read_test_set

    _, runs = tiny_runs
    sources, refs = tmp_path / "test.de", tmp_path / "test.en"
    sources.write_text("".join(line + "\n" for line in test_split.src), encoding="utf-8")
    changed = list(test_split.tgt)
    changed[3] = "Something else entirely."
    refs.write_text("".join(line + "\n" for line in changed), encoding="utf-8")
    read = read_runs([runs[0], runs[1]])
    sets = [read_test_set(read[0]), read_test_set(read[1], sources, refs)]
    with pytest.raises(ReportError, match=r"other references \(line 4: 'Something else entirely.'"):
        check_comparable(read, sets)


def test_analyses_add_up(tiny_runs, written_report, test_split):
    _, runs = tiny_runs
    report = written_report[1]
    assert sum(report.by_length.counts) == 12
    total_words = sum(len(BLEU().tokenizer(r).split()) for r in test_split.tgt)
    assert sum(report.by_frequency.counts) == total_words
    assert all(0 <= v <= 100 or math.isnan(v) for values in report.by_frequency.values.values() for v in values)
    spreads = [d.spread for d in report.disagreements]
    assert len(spreads) == 5 and spreads == sorted(spreads, reverse=True)
    first = report.disagreements[0]
    assert first.reference == unicodedata.normalize("NFC", test_split.tgt[first.index])
    assert [h for _, h, _ in first.hypotheses] == [hypotheses(run)[first.index] for run in runs]
    assert [len(curve.records) for curve in report.curves] == [2, 2]


def test_attention_panels_are_the_saved_matrices(tiny_runs, written_report):
    _, runs = tiny_runs
    report = written_report[1]
    chosen = attention.choose_sentences(attention.read_saved(runs[0] / "eval" / "test.alignments.npz"))
    assert list(report.sentences) == chosen and len(set(chosen)) == 3
    for index, panels in report.sentences.items():
        for run, panel in zip(runs, panels):
            with np.load(run / "eval" / "test.alignments.npz") as npz:
                np.testing.assert_array_equal(panel.matrix, npz[str(index)])
            assert len(panel.x) == panel.matrix.shape[1] and len(panel.y) == panel.matrix.shape[0]
    for row in report.attention_rows:
        assert 0 <= row["entropy"] and 0 <= row["diagonal"] <= 1 and row["sentences"] == 12


def test_attention_measures_and_labels():
    assert attention.row_entropy(np.eye(4)) == 0
    assert attention.row_entropy(np.full((2, 8), 1 / 8)) == pytest.approx(3.0)
    assert attention.diagonal_distance(np.eye(5)) == 0
    assert attention.diagonal_distance(np.fliplr(np.eye(5))) == pytest.approx(0.6)
    assert attention.display_tokens(["▁H", "<0xC3>", "<0xB6>", "hle", "<0x0A>", "</s>"]) == \
        ["H", "ö 1/2", "ö 2/2", "·hle", "U+000A", "</s>"]


def test_sweeps_globs_and_unfinished_runs(tiny_runs, tmp_path):
    sweep, runs = tiny_runs
    assert expand([sweep]) == [r.resolve() for r in runs]
    assert expand([str(sweep / "*_luong")]) == [r.resolve() for r in runs]
    unfinished = tmp_path / "2_general_luong"
    unfinished.mkdir()
    (unfinished / "metrics.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ReportError, match="has not finished"):
        expand([unfinished])
    with pytest.raises(ReportError, match="no such folder"):
        expand([tmp_path / "missing"])


def test_baseline_and_command_line(tiny_runs, tmp_path, capsys):
    sweep, runs = tiny_runs
    out = tmp_path / "out"
    code = main([str(sweep), f"out={out}", f"baseline={runs[1].name}", "sentences=1", "disagreements=2",
                 "samples=100"])
    assert code == 0 and capsys.readouterr().out.strip() == str(out / "index.html")
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert f"Baseline: **{runs[1].name}**" in summary and "(100 resamples)" in summary
    with pytest.raises(SystemExit) as info:
        main([str(sweep), f"out={out}", "sources=x"])
    assert info.value.code == 2 and "error: sources= and references= go together" in capsys.readouterr().err
    assert main([str(sweep), f"out={out}", "baseline=nope"]) == 1
    assert "baseline=nope: no such run; give one of 0_additive_luong, 1_dot_luong" in capsys.readouterr().err


def test_gold_alignment_scores_are_nmt_aer(tiny_runs, tmp_path):
    from nmt.analysis.aer import aer
    from nmt.analysis.forced import force_align, links, load_aligner
    from nmt.report.gold import GoldOptions, read_gold, score_gold

    gold_dir = Path(os.environ["NMT_DATA_DIR"]) / "align_deen_bicici100"
    _, runs = tiny_runs
    options = GoldOptions(gold_dir / "de-en.wa.gz", src=gold_dir / "test.de.gz", tgt=gold_dir / "test.en.gz")
    scores = score_gold(read_runs([runs[0]]), options, [0, 1])
    sources, targets, gold, _ = read_gold(options)
    model, src_tok, tgt_tok, prepare, _ = load_aligner(runs[0])
    hyp = [links(t) for t in force_align(model, src_tok, tgt_tok, prepare(sources), prepare(targets))]
    assert scores.results[runs[0].name] == aer(gold.sure, gold.possible, hyp)
    assert "argmax_target, shift 0" in scores.method
    panel = scores.panels[0][0]
    assert panel.sure == gold.sure[0] and panel.matrix.shape == (len(targets[0].split()), len(sources[0].split()))


def test_gold_threads_and_device_settings(tiny_runs, tmp_path, capsys):
    """With gold= the report runs the models: threads=1 device=cpu are taken (and threads= sets torch's CPU
    threads); threads=0, a negative count and an unknown device are usage errors before any work."""
    import torch

    gold_dir = Path(os.environ["NMT_DATA_DIR"]) / "align_deen_bicici100"
    sweep, runs = tiny_runs
    gold = [f"gold={gold_dir / 'de-en.wa.gz'}", f"src={gold_dir / 'test.de.gz'}", f"tgt={gold_dir / 'test.en.gz'}"]
    for bad, message in (("threads=0", "threads=0: give a whole number of CPU threads >= 1"),
                         ("threads=-2", "threads=-2: give a whole number of CPU threads >= 1"),
                         ("threads=two", "threads=: invalid int value: 'two'"),
                         ("device=tpu", "device=tpu is not a device")):
        with pytest.raises(SystemExit) as info:
            main([str(sweep), f"out={tmp_path / 'bad'}", *gold, bad])
        err = capsys.readouterr().err
        assert info.value.code == 2 and message in err, err
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "out"
    torch.set_num_threads(2)
    try:
        code = main([str(runs[0]), f"out={out}", *gold, "threads=1", "device=cpu", "gold_sentences=[0]",
                     "sentences=[1]", "disagreements=1"])
        assert code == 0 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    assert "AER" in (out / "summary.md").read_text(encoding="utf-8")
