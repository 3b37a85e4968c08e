"""nmt-train and nmt-translate: an argument that Hydra's override grammar cannot read gets a one-line message
saying how to write it."""

import shlex
import subprocess
import sys

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from nmt.commandline import shortcut_conflict, unreadable_argument
from nmt.settings import refuse_unknown_settings
from tests.conftest import REPO_ROOT

PARSER = OverridesParser.create()


@pytest.mark.parametrize("value", ["../news(1).de", "runs/a=b.de", "it's.de", "x)y", 'say "hi".de', 'it\'s "x".de'])
def test_a_value_hydra_cannot_read_gets_a_quoted_form_that_reads_back_as_the_value(value):
    message = unreadable_argument(["checkpoint=runs/x", f"input={value}", "threads=1"], PARSER.parse_override)
    assert message.startswith(f"cannot read {f'input={value}'!r}")
    suggestion = message.rsplit(": ", 1)[1]
    (argument,) = shlex.split(suggestion)  # what the shell passes on
    assert PARSER.parse_override(argument).value() == value  # and what Hydra then reads


@pytest.mark.parametrize("argv", [
    ["checkpoint=runs/x", "input=news v2.de", "decode.beam_size=5"],  # spaces are fine
    ["checkpoint=[a.pt,b.pt]", "~eval.gold"],  # a list, a deletion
    ["input=../news(1).de", "--help"],  # flags: Hydra's own handling
    [],
])
def test_arguments_hydra_reads_are_left_alone(argv):
    assert unreadable_argument(argv, PARSER.parse_override) is None


def test_an_argument_without_its_key_is_named_with_the_keys_it_may_need():
    message = unreadable_argument(["outputs/RUN", "news.de"], PARSER.parse_override)
    assert message.startswith("'outputs/RUN' is not a setting")
    assert "checkpoint=outputs/RUN" in message and "input=outputs/RUN" in message


def test_train_and_translate_stop_with_the_message_before_hydra_runs(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["translate.py", "checkpoint=runs/x", "input=news(1).de"])
    with pytest.raises(SystemExit) as stop:
        refuse_unknown_settings("translate", "nmt-translate")
    assert str(stop.value).startswith("nmt-translate: error: cannot read 'input=news(1).de'")


@pytest.mark.parametrize(("argv", "clash"), [
    (["beam_size=1", "decode.beam_size=7"], True),
    (["decode.beam_size=7", "+beam_size=1"], True),
    (["beam_size=4", "decode.beam_size=4"], False),
    (["beam_size=1", "decode.n_best=1"], False),
    (["decode.beam_size=7"], False),
])
def test_a_shortcut_and_its_full_key_with_other_values_are_named(argv, clash):
    message = shortcut_conflict(argv, "beam_size", "decode.beam_size")
    if clash:
        assert "beam_size=1 and decode.beam_size=7 disagree" in message and "give one of them" in message
    else:
        assert message is None


def test_nmt_translate_refuses_both_beam_sizes_before_loading_anything(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "translate.py"), "checkpoint=missing.pt",
                           "input=missing.de", "beam_size=1", "decode.beam_size=7"],
                          check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == ("translate.py: error: beam_size=1 and decode.beam_size=7 "
                                                    "disagree: beam_size is the shortcut for decode.beam_size, "
                                                    "so give one of them")
