"""Learning curves (nmt.curves) on hand-made metrics.jsonl files with known answers; the real run is in
test_pipeline."""

import json
import math
import re

import numpy as np
import pytest

from nmt.analysis import curves


def write_run(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


def record(step, bleu, ppl=10.0, elapsed=60.0):
    return {"step": step, "epoch": step // 1000, "valid_bleu": bleu, "valid_ppl": ppl, "lr": 1e-3,
            "tokens_per_sec": 1500.0, "elapsed_sec": elapsed}


def test_best_and_slope_known_values(tmp_path):
    # BLEU rises 2 per 400 steps over the last three validations: +5 per 1,000 steps
    run = write_run(tmp_path / "run", [record(400, 10.0), record(800, 20.0), record(1200, 22.0), record(1600, 24.0)])
    curve = curves.read_curve(run)
    assert curve.label == "run"
    assert curve.best()["step"] == 1600
    assert curve.recent_slope() == pytest.approx(5.0)
    assert curve.recent_slope(last=2) == pytest.approx(5.0)  # a trend uses at least three validations
    assert curve.recent_slope(last=4) == pytest.approx(11.0)  # least squares over all four points
    assert "+5.00 BLEU per 1k steps" in curves.summary(curve)


def test_flat_curve_and_ties(tmp_path):
    run = write_run(tmp_path / "flat", [record(400, 30.0), record(800, 31.0), record(1200, 31.0), record(1600, 30.0)])
    curve = curves.read_curve(run, label="mine")
    assert curve.label == "mine"
    assert curve.best()["step"] == 800  # earliest of the tied best
    assert curve.recent_slope() == pytest.approx(-1.25)


def test_records_sorted_minutes_and_single_record(tmp_path):
    run = write_run(tmp_path / "r", [record(800, 5.0, elapsed=120.0), record(400, 3.0, elapsed=60.0)])
    curve = curves.read_curve(run)
    assert curve.column("step") == [400, 800]
    assert curve.column("minutes") == [1.0, 2.0]
    one = curves.read_curve(write_run(tmp_path / "one", [record(400, 3.0)]))
    assert one.recent_slope() is None
    assert "trend n/a" in curves.summary(one)


@pytest.mark.parametrize("steps", [[400, 404], [400, 404, 408], [100, 200, 300]])
def test_no_trend_from_few_or_close_validations(tmp_path, steps):
    """Two validations 4 steps apart once gave '+702.50 BLEU per 1k steps': a trend needs three validations
    over at least 300 steps."""
    run = write_run(tmp_path / "close", [record(step, 5.0 + i * 2.81) for i, step in enumerate(steps)])
    curve = curves.read_curve(run)
    assert curve.recent_slope() is None
    assert "trend n/a (needs 3 validations over at least 300 steps)" in curves.summary(curve)


def test_table_has_one_row_per_validation(tmp_path):
    run = write_run(tmp_path / "r", [record(400, 12.34), record(800, 23.45)])
    table = curves.format_table(curves.read_curve(run)).splitlines()
    assert len(table) == 4  # title, header, two rows
    assert "12.34" in table[2] and "23.45" in table[3]


def test_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        curves.read_curve(tmp_path)
    run = write_run(tmp_path / "bad", [record(400, 1.0)])
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON record"):
        curves.read_curve(run)
    (run / "metrics.jsonl").write_text('{"step": 400}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: .*valid_bleu"):
        curves.read_curve(run)
    (run / "metrics.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no validation records"):
        curves.read_curve(run)


def test_cli_plots_two_runs(tmp_path, capsys):
    from PIL import Image

    a = write_run(tmp_path / "a", [record(400, 10.0, 30.0, 60), record(800, 20.0, 20.0, 120)])
    b = write_run(tmp_path / "b", [record(400, 5.0, 40.0, 50), record(800, 8.0, 35.0, 100)])
    out = tmp_path / "plots" / "curves.png"
    found = curves.main([str(a), str(b), "labels=[additive,dot]", "x=minutes", f"out={out}"])
    assert [c.label for c in found] == ["additive", "dot"]
    printed = capsys.readouterr().out
    assert "additive: best valid BLEU 20.00 at step 800" in printed and "dot: best valid BLEU 8.00" in printed
    with Image.open(out) as image:
        assert image.size[0] > image.size[1] > 200


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        curves.main([str(tmp_path)])
    assert exit_info.value.code == 1
    assert "no such file" in capsys.readouterr().err
    run = write_run(tmp_path / "r", [record(400, 1.0)])
    with pytest.raises(SystemExit):
        curves.main([str(run), "labels=[a,b]"])
    assert "labels= gives 2 labels for 1 runs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="x must be one of"):
        curves.plot_curves([curves.read_curve(run)], tmp_path / "x.png", x="epoch")


def test_nan_validation_is_never_best(tmp_path):
    """A diverged validation logs NaN: it must not win max() by coming first, nor poison the trend."""
    run = write_run(tmp_path / "nan", [record(400, 19.0), record(800, float("nan")), record(1200, 20.0),
                                       record(1600, 21.0)])
    curve = curves.read_curve(run)
    assert curve.best()["step"] == 1600
    assert curve.recent_slope() == pytest.approx(1000 * np.polyfit([400, 1200, 1600], [19, 20, 21], 1)[0])
    text = curves.summary(curve)
    assert "best valid BLEU 21.00 at step 1600" in text and "over the last 3 validations" in text
    assert "1 validation(s) with NaN BLEU" in text
    all_nan = curves.read_curve(write_run(tmp_path / "all", [record(400, float("nan"))]))
    assert all_nan.best() is None and "no finite BLEU" in curves.summary(all_nan)


@pytest.mark.parametrize("line, message", [
    ('{"step": 400, "valid_bleu": "26.7"}', "'valid_bleu' must be a number, got '26.7'"),
    ('{"step": 400, "valid_bleu": null}', "'valid_bleu' must be a number, got None"),
    ('{"step": "400", "valid_bleu": 1.0}', "'step' must be an integer, got '400'"),
    ('[1, 2]', "a validation record needs 'step' and 'valid_bleu'"),
])
def test_wrong_types_name_the_line(tmp_path, line, message):
    run = write_run(tmp_path / "r", [record(200, 1.0)])
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    with pytest.raises(ValueError, match=re.escape("metrics.jsonl:2: " + message)):
        curves.read_curve(run)


def test_null_optional_values_and_missing_elapsed(tmp_path):
    run = write_run(tmp_path / "r", [{"step": 400, "valid_bleu": 3.0, "elapsed_sec": None, "valid_ppl": None}])
    curve = curves.read_curve(run)
    assert all(math.isnan(v) for v in curve.column("minutes") + curve.column("valid_ppl"))  # NaN, not a crash
    assert "400" in curves.format_table(curve)
    with pytest.raises(ValueError, match="no elapsed_sec; plot against steps"):
        curves.plot_curves([curve], tmp_path / "m.png", x="minutes")
    assert curves.plot_curves([curve], tmp_path / "s.png").is_file()


def test_partial_last_line_repeated_steps_and_file_path(tmp_path):
    run = write_run(tmp_path / "r", [record(400, 1.0), record(800, 2.0), record(400, 5.0)])  # resumed at 400
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"step": 1200, "valid_b')  # a training is writing this line
    with pytest.warns(UserWarning, match=r"metrics.jsonl:4: skipped an incomplete last line"):
        curve = curves.read_curve(run / "metrics.jsonl")  # the file itself works too
    assert curve.label == "r"
    assert curve.column("step") == [400, 800] and curve.column("valid_bleu") == [5.0, 2.0]  # the later 400 wins


def test_parent_folder_lists_the_runs_inside(tmp_path):
    write_run(tmp_path / "sweep" / "0", [record(400, 1.0)])
    write_run(tmp_path / "sweep" / "1", [record(400, 1.0)])
    with pytest.raises(FileNotFoundError, match=r"run folders inside it: .*sweep/0 .*sweep/1"):
        curves.read_curve(tmp_path / "sweep")


def test_bad_output_suffix_fails_before_anything_is_written(tmp_path, capsys):
    run = write_run(tmp_path / "r", [record(400, 1.0)])
    for out, message in ((tmp_path / "new" / "x.jpgg", "unsupported format .jpgg"), (tmp_path / "x", "no file suffix")):
        with pytest.raises(SystemExit):
            curves.main([str(run), f"out={out}"])
        err = capsys.readouterr()
        assert message in err.err and ".png" in err.err and "best valid BLEU" not in err.out
    assert not (tmp_path / "new").exists()


def test_many_runs_and_repeated_labels(tmp_path, capsys):
    runs = [str(write_run(tmp_path / f"run{i}", [record(400, i), record(800, i + 1.0)])) for i in range(11)]
    out = tmp_path / "many.svg"
    curves.main([*runs, runs[0], "quiet=true", f"out={out}"])
    captured = capsys.readouterr()
    assert "runs share the label(s) run0; name them with labels=[...]" in captured.err and "# run0" not in captured.out
    assert out.read_text(encoding="utf-8").count("run10") >= 1  # the eleventh run is in the legend


def test_aer_column_summary_and_panel_for_runs_with_a_gold_set(tmp_path, capsys):
    aers = [0.62, 0.48, None, 0.51]  # the third validation has no AER: shown as "-", never the best
    with_gold = write_run(tmp_path / "gold", [{**record(step, bleu), "aer": aer} for step, bleu, aer in
                                              zip((250, 500, 750, 1000), (10.0, 14.0, 15.0, 15.5), aers)])
    plain = write_run(tmp_path / "plain", [record(500, 12.0), record(1000, 16.0)])
    curve = curves.read_curve(with_gold)
    rows = curves.format_table(curve).splitlines()
    assert rows[1].split()[-1] == "AER%" and [row.split()[-1] for row in rows[2:]] == ["62.0", "48.0", "-", "51.0"]
    assert "best AER 48.0% at step 500, last 51.0% at step 1000" in curves.summary(curve)
    assert "AER" not in curves.format_table(curves.read_curve(plain)) + curves.summary(curves.read_curve(plain))
    import matplotlib.image

    two = curves.plot_curves([curves.read_curve(plain)], tmp_path / "two.png")
    three = curves.plot_curves([curves.read_curve(plain), curve], tmp_path / "three.png")
    width = {name: matplotlib.image.imread(path).shape[1] for name, path in (("two", two), ("three", three))}
    assert width["three"] == pytest.approx(1.5 * width["two"], rel=0.01)  # a third panel, as wide as the others


def test_an_agreement_run_shows_its_symmetrized_aer_beside_its_own(tmp_path):
    aers, pairs = [0.62, 0.48, 0.50], [0.55, None, 0.31]  # the pair's AER, missing at one validation
    run = write_run(tmp_path / "agree", [{**record(step, bleu), "aer": aer, "symmetrized_aer": pair} for
                                         step, bleu, aer, pair in zip((250, 500, 750), (10.0, 14.0, 15.0), aers, pairs)])
    curve = curves.read_curve(run)
    rows = curves.format_table(curve).splitlines()
    assert rows[1].split()[-2:] == ["AER%", "sym%"]
    assert [row.split()[-2:] for row in rows[2:]] == [["62.0", "55.0"], ["48.0", "-"], ["50.0", "31.0"]]
    text = curves.summary(curve)
    assert "best AER 48.0% at step 500" in text and "best symmetrized AER 31.0% at step 750, last 31.0%" in text
    out = curves.plot_curves([curve], tmp_path / "agree.svg")
    assert "agree, both directions" in out.read_text(encoding="utf-8")  # the pair's line is in the legend
