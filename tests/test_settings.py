"""nmt.settings.override: any path, as a command-line override, reads back through Hydra's grammar unchanged."""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.settings import override

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
