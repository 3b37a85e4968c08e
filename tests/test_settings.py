"""nmt.settings: `override` reads any path back through Hydra's grammar unchanged; `check_added_keys` refuses a
+key that nothing reads; `differences` compares paths as the files they name."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.settings import check_added_keys, differences, override

PARSER = OverridesParser.create()
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40).filter(
    lambda t: "${" not in t)  # ${...} is OmegaConf's interpolation, on purpose


def parsed(text: str):
    return PARSER.parse_overrides([text])[0].value()


@settings(max_examples=1000, deadline=None)
@given(TEXT)
def test_any_value_reads_back_unchanged(value):
    assert parsed(override("train.resume", value)) == value


def test_a_path_spelt_otherwise_is_no_difference(tmp_path):
    """A resume names the same corpus by another spelling (``..``, a symlink): no "changed setting" warning, but a
    relative path is not resolved against a guess of its folder, and another folder is a difference."""
    corpus = tmp_path / "corpora"
    corpus.mkdir()
    (tmp_path / "link").symlink_to(corpus)
    before = {"dir": str(corpus), "extra_train": [{"paths": {"de": str(corpus / "a.de")}}]}
    for spelt in (f"{tmp_path}/x/../corpora", str(tmp_path / "link")):
        now = {"dir": spelt, "extra_train": [{"paths": {"de": f"{spelt}/a.de"}}]}
        assert differences(before, now, "data") == []
    assert differences({"dir": "corpora"}, {"dir": "./corpora"}, "data") == [("data.dir", "corpora", "./corpora")]
    assert differences(before, {**before, "dir": str(tmp_path)}, "data") == [("data.dir", str(corpus), str(tmp_path))]


def test_plain_paths_stay_bare_and_the_rest_is_quoted():
    assert override("hydra.run.dir", "/tmp/runs/de_en-1.5") == "hydra.run.dir=/tmp/runs/de_en-1.5"
    assert override("hydra.run.dir", "/tmp/a=b c") == "hydra.run.dir='/tmp/a=b c'"
    for word in ("null", "true", "inf", "1e5", ".0", "/tmp/a,b", "/tmp/é", "it's", "end\\"):
        assert parsed(override("k", word)) == word, word


@pytest.mark.parametrize("added, suggested", [("+decoder.layers=2", "model.decoder_layers"),
                                              ("+model.hiden_size=64", "model.hidden_size"),
                                              ("+train.lr_sheduler=budget", "train.lr_scheduler")])
def test_an_added_key_that_nothing_reads_is_refused_with_the_setting_meant(compose_cfg, added, suggested):
    """Hydra suggests '+key=value' for a mistyped key; the run then went on with the value silently ignored."""
    cfg = compose_cfg([added])
    with pytest.raises(ValueError, match=rf"\{added} adds a setting that nothing reads: .*{suggested}"):
        check_added_keys(cfg, [added], ["attention", "data", "decode"])


def test_keys_added_to_the_optional_nodes_are_accepted(compose_cfg):
    """attention.bias and eval.gold are read with defaults for the keys a config leaves out (their own checks
    refuse unknown keys), so +attention.bias.markov=1 on any score model and +eval.gold.KEY=V are not refused."""
    overrides = ["attention=dot", "+attention.bias.position=true", "+attention.bias.markov=1"]
    check_added_keys(compose_cfg(overrides), overrides, ["attention", "data", "decode"])
    overrides = ["+experiment=align_de_en", "+eval.gold.lowercase=true"]
    check_added_keys(compose_cfg(overrides), overrides, ["attention", "data", "decode", "experiment"])
    from nmt.settings import unknown_setting

    assert unknown_setting("train", ["+experiment=align_de_en", "eval.gold.threshold=0.2"]) is None  # in the preset


def test_added_config_groups_and_hydra_keys_are_accepted(compose_cfg):
    overrides = ["+experiment=multi30k_de_en", "+hydra.callbacks.x._target_=m.X", "decoder.style=bahdanau"]
    check_added_keys(compose_cfg(overrides[:1] + overrides[2:]), overrides, ["attention", "data", "decode", "experiment"])


def test_train_py_refuses_an_added_key_in_one_line_and_writes_nothing(repo_root, tmp_path):
    import subprocess
    import sys

    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "train.py", "+decoder.layers=2", f"hydra.run.dir={run}"], cwd=repo_root,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("train.py: error: +decoder.layers=2 adds a setting that "
                                                          "nothing reads")
    assert "Traceback" not in proc.stderr
    assert not run.exists() or not any(run.iterdir())  # a folder named with hydra.run.dir is left empty


@pytest.mark.parametrize("config, argv, message", [
    ("train", ["train.max_minuts=5"], "no setting train.max_minuts (did you mean train.max_minutes or "),
    ("train", ["threads=1", "model.hiden_size=3"], "no setting model.hiden_size (did you mean model.hidden_size "),
    ("train", ["decoder.layers=2"], "no setting decoder.layers (did you mean model.decoder_layers "),
    ("train", ["attention=multihead", "attention.head=3"], "(did you mean attention.heads "),  # the chosen group's
    ("translate", ["checkpoint=x", "input=y", "beam_sise=3"], "no setting beam_sise (did you mean beam_size "),
])
def test_a_mistyped_setting_is_named_with_the_closest_ones(config, argv, message):
    from nmt.settings import unknown_setting

    found = unknown_setting(config, argv)
    assert found is not None and message in found and found.endswith("; --help lists every setting"), found


@pytest.mark.parametrize("config, argv", [
    ("train", []),
    ("train", ["threads=1", "train.max_minutes=5", "model.hidden_size=64", "hydra.run.dir=/tmp/x"]),
    ("train", ["hydra.run.dir=/tmp/x=y", "train.max_minuts=5"]),  # not Hydra's grammar: unreadable_argument
    ("train", ["attention=multihead", "attention.heads=8", "+experiment=align_de_en", "eval.gold.shift=1"]),
    ("train", ["attention=additive,multihead", "attention.heads=8"]),  # a sweep: every job is Hydra's to check
    ("train", ["hydra.searchpath=[file:///my/conf]", "attention=mine"]),  # a choice in the user's own configs
    ("train", ["--help"]), ("train", ["-m", "train.max_minuts=5"]),
    ("train", ["+train.new_key=1"]),  # check_added_keys refuses it once Hydra has composed the config
    ("translate", ["checkpoint=x", "input=y", "output=z", "decode.beam_size=3"]),  # checkpoint: ??? in the config
])
def test_settings_that_exist_or_that_hydra_checks_pass(config, argv):
    from nmt.settings import unknown_setting

    assert unknown_setting(config, argv) is None


@pytest.mark.parametrize("config, argv, message", [
    ("train", ["attention=dott"], ("no attention named dott (did you mean dot?); the choices: additive, "
                                  "additive_biased, dot, general, local_m, local_p, location, multihead")),
    ("train", ["threads=1", "+experiment=multi30k_de_e"], ("no experiment named multi30k_de_e (did you mean "
                                                          "multi30k_de_en or ")),
    ("translate", ["checkpoint=x", "input=y", "decode=beem"], ("no decode named beem (did you mean beam?); the "
                                                              "choices: beam, greedy")),
    ("train", ["data=no_such_corpus"], "no data named no_such_corpus; the choices: bitext, files, multi30k"),
])
def test_a_mistyped_choice_of_a_config_group_is_named_with_the_choices(config, argv, message):
    """attention=dott: one line with the closest choices, where Hydra's own message spans several lines."""
    from nmt.settings import unknown_setting

    found = unknown_setting(config, argv)
    assert found is not None and found.startswith(message), found


def test_train_py_refuses_a_mistyped_setting_in_one_line(repo_root, tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(repo_root / "train.py"), "train.max_minuts=5",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 1 and not (tmp_path / "run").exists()
    expected = ("train.py: error: no setting train.max_minuts (did you mean train.max_minutes or train.max_steps or "
                "train.max_epochs?); --help lists every setting")
    assert proc.stderr.strip().splitlines() == [expected]
