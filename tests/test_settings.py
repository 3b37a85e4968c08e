"""nmt.settings: `override` reads any path back through Hydra's grammar unchanged; `check_added_keys` refuses a
+key that nothing reads."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.settings import check_added_keys, override

PARSER = OverridesParser.create()
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40).filter(
    lambda t: "${" not in t)  # ${...} is OmegaConf's interpolation, on purpose


def parsed(text: str):
    return PARSER.parse_overrides([text])[0].value()


@settings(max_examples=1000, deadline=None)
@given(TEXT)
def test_any_value_reads_back_unchanged(value):
    assert parsed(override("train.resume", value)) == value


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
