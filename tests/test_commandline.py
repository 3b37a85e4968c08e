"""The ``key=value`` command lines of nmt.aer, nmt.plot, nmt.curves, nmt.average and nmt.report
(:mod:`nmt.commandline`): on a small parser of the same shape, and on the real tools, in process and as programs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.analysis import aer, curves, plot
from nmt.commandline import SettingsParser, prog_name
from nmt.report import cli as report_cli
from nmt.training import average

REPO = Path(__file__).resolve().parent.parent

# every setting of every tool, as --help lists them
SETTINGS = {
    "nmt.aer": {"gold", "hyp", "gold_format", "one_based", "target_first", "hyp_one_based", "hyp_target_first",
                "src", "tgt", "bitext", "max_dropped"},
    "nmt.plot": {"index", "out", "gold", "gold_format", "one_based", "target_first", "shift", "head"},
    "nmt.curves": {"labels", "x", "out", "quiet"},
    "nmt.average": {"out", "best", "last", "other_runs"},
    "nmt.report": {"out", "baseline", "sentences", "test", "samples", "alpha", "sources", "references",
                   "disagreements", "sentence_metric", "gold", "gold_format", "one_based", "target_first", "src",
                   "tgt", "bitext", "gold_sentences", "method", "threshold", "shift", "temperature", "lowercase",
                   "device", "threads"},
}
MAINS = {"nmt.aer": aer.main, "nmt.plot": plot.main, "nmt.curves": curves.main, "nmt.average": average.main,
         "nmt.report": report_cli.main}


def small_parser() -> SettingsParser:
    """A parser shaped like the tools': a positional file, a choice, a switch, a list, a path and a number."""
    parser = SettingsParser("nmt.demo", description="A demonstration.")
    parser.add_argument("path", help="a file")
    parser.add_argument("--gold-format", choices=("pharaoh", "naacl"), default="pharaoh")
    parser.add_argument("--one-based", action="store_true", help="positions count from 1")
    parser.add_argument("--index", type=int, nargs="+", default=[0], help="0-based sentence indices")
    parser.add_argument("--labels", nargs="+", help="names")
    parser.add_argument("--out", default=None, help="where to write, next to --index")
    parser.add_argument("--threshold", type=float, default=0.3)
    return parser


def parse_error(parser: SettingsParser, argv: list[str], capsys) -> str:
    """The usage error ``argv`` gives (exit status 2 asserted): what went to stderr."""
    with pytest.raises(SystemExit) as info:
        parser.parse_args(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_plain_setting_and_defaults():
    args = small_parser().parse_args(["f.txt", "gold_format=naacl"])
    assert (args.path, args.gold_format, args.one_based, args.index, args.out, args.threshold) == (
        "f.txt", "naacl", False, [0], None, 0.3)
    # dashes as well as underscores, a value holding '=' and a negative number
    args = small_parser().parse_args(["gold-format=naacl", "out=a=b.txt", "threshold=-0.5", "f.txt"])
    assert (args.gold_format, args.out, args.threshold, args.path) == ("naacl", "a=b.txt", -0.5, "f.txt")


@pytest.mark.parametrize("value, expected", [("true", True), ("false", False), ("True", True), ("yes", True),
                                             ("0", False), ("off", False)])
def test_switch_takes_true_or_false(value, expected):
    assert small_parser().parse_args(["f.txt", f"one_based={value}"]).one_based is expected


def test_switch_refuses_anything_else(capsys):
    err = parse_error(small_parser(), ["f.txt", "one_based=maybe"], capsys)
    assert "python -m nmt.demo: error: one_based=maybe: give true or false" in err


def test_lists_and_single_values():
    parser = small_parser()
    assert parser.parse_args(["f.txt", "index=[0,3,7]"]).index == [0, 3, 7]
    assert parser.parse_args(["f.txt", "index=[0, 3 ,7]"]).index == [0, 3, 7]
    assert parser.parse_args(["f.txt", "index=5"]).index == [5]
    assert parser.parse_args(["f.txt", "index=null"]).index == [0]  # null keeps the default; [] is refused (below)
    # quoted items keep their commas and spaces
    labels = parser.parse_args(["f.txt", """labels=["plateau, 90 min",'late decay',dot]"""]).labels
    assert labels == ["plateau, 90 min", "late decay", "dot"]


def test_a_list_before_the_positional_arguments_does_not_take_them():
    """labels=[a,b] written before the runs: the runs stay positional (argparse alone would read them as more
    labels, since --labels takes any number of values)."""
    args = small_parser().parse_args(["index=[1,2]", "f.txt", "labels=[a,b]"])
    assert (args.path, args.index, args.labels) == ("f.txt", [1, 2], ["a", "b"])


def test_unclosed_quote_is_a_usage_error(capsys):
    err = parse_error(small_parser(), ["f.txt", 'labels=["a,b]'], capsys)
    assert 'error: labels=["a,b]: a quote (") is not closed' in err


def test_null_keeps_the_default():
    args = small_parser().parse_args(["f.txt", "out=x", "out=null", "threshold=null", "index=null"])
    assert (args.out, args.threshold, args.index) == (None, 0.3, [0])


def test_a_leading_plus_is_accepted():
    args = small_parser().parse_args(["f.txt", "+gold_format=naacl", "+one_based=true"])
    assert (args.gold_format, args.one_based) == ("naacl", True)


def test_an_unknown_key_exits_2_naming_the_setting(capsys):
    err = parse_error(small_parser(), ["f.txt", "gold_fromat=naacl"], capsys)
    assert "error: unknown setting gold_fromat=...; did you mean gold_format?" in err
    assert "(a file whose name has '=' in it: write it as ./gold_fromat=...)" in err
    assert err.startswith("usage: python -m nmt.demo PATH [key=value ...]\n")


def test_threads_in_a_tool_that_runs_no_model_says_what_it_is_for(capsys):
    err = parse_error(small_parser(), ["f.txt", "threads=1"], capsys)
    assert err.splitlines()[-2] == ("python -m nmt.demo: error: unknown setting threads=...; python -m nmt.demo runs no "
                                    "model, so it has no CPU threads to set (threads= is a setting of nmt-train, "
                                    "nmt-translate, nmt-align and nmt-report)")


def test_the_old_flags_still_work_and_warn_with_the_new_spelling(capsys):
    args = small_parser().parse_args(["f.txt", "--gold-format", "naacl", "--one-based", "--index", "1", "2"])
    assert (args.gold_format, args.one_based, args.index) == ("naacl", True, [1, 2])
    err = capsys.readouterr().err.splitlines()
    assert err == ["python -m nmt.demo: warning: --gold-format is the older spelling; write gold_format=...",
                   "python -m nmt.demo: warning: --one-based is the older spelling; write one_based=...",
                   "python -m nmt.demo: warning: --index is the older spelling; write index=..."]
    args = small_parser().parse_args(["f.txt", "--out=x.txt"])
    assert args.out == "x.txt"
    assert "warning: --out is the older spelling; write out=..." in capsys.readouterr().err


def test_a_positional_path_with_an_equals_sign(capsys):
    assert small_parser().parse_args(["./a=b"]).path == "./a=b"
    assert small_parser().parse_args(["dir/a=b", "out=x"]).path == "dir/a=b"  # not a key: '/' comes before '='
    assert small_parser().parse_args(["--", "out=x"]).path == "out=x"  # after --, everything is positional
    err = parse_error(small_parser(), ["a=b"], capsys)
    assert "unknown setting a=..." in err and "write it as ./a=..." in err


def test_argparse_messages_use_key_spellings(capsys):
    parser = small_parser()
    err = parse_error(parser, ["f.txt", "gold_format=xml"], capsys)
    assert "error: setting gold_format=: invalid choice: 'xml'" in err and "--gold-format" not in err
    err = parse_error(parser, ["f.txt", "index=[1,x]"], capsys)
    assert "error: setting index=: invalid int value: 'x'" in err
    err = parse_error(parser, [], capsys)
    assert "error: the following arguments are required: path" in err
    assert err.rstrip().endswith("(python -m nmt.demo --help lists the settings)")


def test_help_of_the_small_parser(capsys):
    with pytest.raises(SystemExit) as info:
        small_parser().parse_args(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m nmt.demo PATH [key=value ...]\n")
    for entry in ("  gold_format=pharaoh|naacl", "  one_based=true|false", "  index=[INDEX,...]", "  out=OUT",
                  "  threshold=THRESHOLD"):
        assert f"\n{entry}\n" in text, text
    assert "where to write, next to index=" in text  # flags in the help texts are shown as keys
    assert "(default: 0.3)" in text


def test_prog_name_is_the_installed_command_when_it_ran(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/nmt-aer"])
    assert prog_name("nmt.aer") == "nmt-aer"
    monkeypatch.setattr(sys, "argv", ["/repo/nmt/aer.py"])
    assert prog_name("nmt.aer") == "python -m nmt.aer"


# ---------------------------------------------------------------- the real tools


@pytest.mark.parametrize("module", sorted(MAINS))
def test_help_of_every_tool_lists_every_setting_as_key(module, capsys):
    with pytest.raises(SystemExit) as info:
        MAINS[module](["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m {module} ")
    listed = set(re.findall(r"^  ([a-z_]+)=", text, flags=re.MULTILINE))
    assert listed == SETTINGS[module], text
    assert set(re.findall(r"--[a-z][a-z-]*", text)) == {"--help"}, text  # no old flag spelling anywhere


def hand_gold(tmp_path: Path) -> Path:
    gold = tmp_path / "gold.wa"
    gold.write_text("0-0 1-1\n0-1\n", encoding="utf-8")
    return gold


def test_aer_key_value_and_old_flags(tmp_path, capsys):
    gold = hand_gold(tmp_path)
    assert aer.main([f"gold={gold}", f"hyp={gold}", "gold_format=pharaoh", "one_based=false"]) == 0
    assert capsys.readouterr().out.startswith("AER 0.0000  precision 1.0000  recall 1.0000")
    assert aer.main(["--gold", str(gold), "--hyp", str(gold)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("AER 0.0000")
    assert "warning: --gold is the older spelling; write gold=..." in captured.err
    assert "warning: --hyp is the older spelling; write hyp=..." in captured.err


@pytest.mark.parametrize("argv, message", [
    (["src=a.txt"], "error: src= and tgt= go together"),
    (["bitext=b.txt", "src=a.txt", "tgt=c.txt"], "error: give either bitext= or src= and tgt="),
])
def test_aer_messages_use_key_spellings(tmp_path, capsys, argv, message):
    gold = hand_gold(tmp_path)
    with pytest.raises(SystemExit) as info:
        aer.main([f"gold={gold}", f"hyp={gold}", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and "--" not in err.replace("--help", ""), err


def test_aer_missing_settings_and_mistyped_key(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        aer.main([])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith("usage: python -m nmt.aer gold=GOLD hyp=HYP [key=value ...]\n")
    assert "error: the following arguments are required: gold=, hyp=\n" in err, err
    with pytest.raises(SystemExit) as info:
        aer.main([f"gold={hand_gold(tmp_path)}", "hyp=x", "gold_fromat=naacl"])
    assert info.value.code == 2 and "unknown setting gold_fromat=...; did you mean gold_format" in \
        capsys.readouterr().err


def test_aer_hint_for_naacl_names_the_settings(tmp_path, capsys):
    gold, hyp = tmp_path / "gold.naacl", tmp_path / "hyp.align"
    gold.write_text("1 0 0 S\n", encoding="utf-8")
    hyp.write_text("0-0\n0-0\n", encoding="utf-8")
    assert aer.main([f"gold={gold}", "gold_format=naacl", f"hyp={hyp}"]) == 1
    assert "(a NAACL file cannot show trailing sentences without links: pass src= and tgt=, or bitext=)" in \
        capsys.readouterr().err


def test_average_messages_use_key_spellings(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        average.main([str(tmp_path), f"out={tmp_path / 'a.pt'}", "best=2", "last=2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "error: setting last=: not allowed with argument best=" in err, err
    with pytest.raises(SystemExit) as info:
        average.main([str(tmp_path / "x.pt"), str(tmp_path / "y.pt"), f"out={tmp_path / 'a.pt'}", "best=2"])
    assert info.value.code == 2 and "error: best= and last= take one run directory" in capsys.readouterr().err


def write_run(folder: Path, bleu: float) -> Path:
    folder.mkdir(parents=True)
    records = [{"step": step, "epoch": 0, "valid_bleu": bleu + step / 400, "valid_ppl": 10.0, "lr": 1e-3,
                "tokens_per_sec": 1500.0, "elapsed_sec": step / 10} for step in (400, 800)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return folder


def test_curves_labels_before_or_after_the_runs(tmp_path, capsys):
    a, b = write_run(tmp_path / "a", 10.0), write_run(tmp_path / "b", 5.0)
    for argv in (["labels=[additive,dot]", str(a), str(b), "quiet=true"],
                 [str(a), "quiet=true", str(b), """labels=["additive","dot"]"""]):
        assert [c.label for c in curves.main(argv)] == ["additive", "dot"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        curves.main([str(a), "labels=[a,b,c]"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "error: labels= gives 3 labels for 1 runs" in err


def test_plot_out_under_a_file_names_the_setting(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        plot.main([str(tmp_path / "x.alignments.npz"), f"out={blocker / 'plots'}"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"error: out={blocker / 'plots'}: {blocker} is a file, not a folder" in err


@pytest.mark.parametrize("argv, message", [
    (["sources=x"], "error: sources= and references= go together"),
    (["samples=-1"], "error: samples=-1: give a number of resamples >= 0"),
    (["alpha=1.5"], "error: alpha=1.5: give a significance level between 0 and 1"),
    (["src=a", "tgt=b"], "error: src=, tgt=, bitext= and gold_sentences= belong to gold="),
    (["gold=g"], "error: gold= needs the sentences it aligns: src= and tgt=, or bitext="),
    (["gold=g", "src=a", "tgt=b", "shift=-1"], "error: shift=-1: give a number of rows >= 0"),
    (["threads=0"], "error: threads=0: give a whole number of CPU threads >= 1 (or threads=null: all cores)"),
    (["test=xx"], "error: setting test=: invalid choice: 'xx'"),
])
def test_report_messages_use_key_spellings(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        report_cli.main([str(tmp_path), f"out={tmp_path / 'out'}", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err, err
    assert not (tmp_path / "out").exists()


def test_report_threads_and_device_are_parsed():
    parser = report_cli._parser()
    args = parser.parse_args(["RUN", "out=o", "gold=g", "src=a", "tgt=b", "threads=1", "device=cpu"])
    options = report_cli._options(parser, args)
    assert (options.gold.threads, options.gold.device) == (1, "cpu")
    args = parser.parse_args(["RUN", "out=o", "gold=g", "src=a", "tgt=b", "threads=null"])
    options = report_cli._options(parser, args)
    assert (options.gold.threads, options.gold.device) == (None, "auto")


@pytest.mark.parametrize("module", sorted(MAINS))
def test_every_tool_as_a_program_refuses_a_mistyped_key(module, tmp_path):
    """``python -m nmt.X`` with a mistyped key: exit 2, one error line naming the setting meant (--help as a
    program: tests/test_commands.py)."""
    typo, meant = ("gold_fromat", "gold_format") if module == "nmt.aer" else ("outt", "out")
    proc = subprocess.run([sys.executable, "-m", module, "RUN", f"{typo}=x"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, check=False)
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert errors[0].startswith(f"python -m {module}: error: unknown setting {typo}=...; did you mean {meant}"), \
        proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_empty_list_is_refused_not_read_as_the_default(capsys):
    from nmt.analysis import plot

    with pytest.raises(SystemExit) as info:
        plot.main(["x.alignments.npz", "index=[]"])
    assert info.value.code == 2 and "index=[]: give at least one value" in capsys.readouterr().err


def test_an_old_flag_with_underscores_is_read_too(capsys):
    args = small_parser().parse_args(["f.txt", "--one_based", "--index", "2"])
    assert args.one_based and args.index == [2]
    err = capsys.readouterr().err
    assert "--one_based is the older spelling; write one_based=..." in err
    with pytest.raises(SystemExit):
        small_parser().parse_args(["f.txt", "--bogus", "3"])
    assert "unrecognized arguments: --bogus 3" in capsys.readouterr().err  # as written, not bogus= 3


def test_a_reader_that_stops_early_ends_the_command_without_a_traceback():
    """``nmt-train --help | head``: the write into a closed pipe ends the command with status 1 and nothing on
    stderr, where Python alone prints a BrokenPipeError traceback (the second run shows the difference)."""
    text = "print('settings ' * 100_000)"
    for code, quiet in ((f"from nmt.commandline import quiet_when_the_reader_stops as q\nwith q():\n    {text}", True),
                        (text, False)):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first write
        proc = subprocess.run([sys.executable, "-c", code], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60, check=False)
        os.close(write)
        assert proc.returncode == 1
        assert (proc.stderr == "") == quiet, proc.stderr
