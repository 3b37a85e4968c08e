"""n-best lines keep their four fields whatever the hypothesis holds, and read back to the translation's text."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.decoding.artifacts import nbest_lines, unescape_nbest
from nmt.decoding.translation import Translation


def hypothesis(text: str) -> Translation:
    return Translation(text, ["▁a", "</s>"], ["▁b", "</s>"], np.full((2, 2), 0.5, np.float32), -1.25, -2.5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30),
                min_size=1, max_size=4))
def test_every_line_has_four_fields_and_reads_back(texts):
    lines = nbest_lines([[hypothesis(t) for t in texts]]).splitlines()
    assert len(lines) == len(texts)
    for line, text in zip(lines, texts):
        fields = line.split(" ||| ")
        assert len(fields) == 4 and fields[0] == "0" and fields[3] == "-1.2500"
        assert unescape_nbest(fields[1]) == text


def test_a_hypothesis_with_the_separator_is_escaped():
    line = nbest_lines([[hypothesis("a ||| b & c")]])
    assert line == "0 ||| a &#124;&#124;&#124; b &amp; c ||| log_prob= -2.5000 length= 2 ||| -1.2500\n"
