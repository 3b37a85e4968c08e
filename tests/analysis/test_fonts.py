"""Heatmap labels in non-Latin scripts: drawn with real glyphs from installed fonts, or one clear warning.

The first test needs fonts that cover Chinese, Japanese, Korean, Devanagari and Thai (Debian: fonts-noto-core and
fonts-noto-cjk, which ``.ci/run`` installs). Without them it is skipped, unless ``NMT_REQUIRE_FONTS=1`` (set by
``.ci/run``) makes the absence a failure.
"""

import io
import os
import warnings

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

from nmt.analysis import fonts
from nmt.analysis.fonts import BASE_FAMILY, families_for
from nmt.analysis.plot import plot_alignment

SCRIPTS = {"Chinese": "一只狗在草地上奔跑", "Japanese": "犬が芝生の上を走っている", "Korean": "개가 풀밭을 달린다",
           "Devanagari": "एक कुत्ता घास पर दौड़ रहा है", "Thai": "สุนัขกำลังวิ่งบนหญ้า"}


def glyph_warnings(families, text) -> list[str]:
    """matplotlib's own 'Glyph ... missing' warnings when it draws ``text`` with ``families``."""
    with matplotlib.rc_context({"font.family": families}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = Figure()
        fig.text(0.1, 0.5, text)
        fig.savefig(io.BytesIO(), format="png")
    return [str(w.message) for w in caught if "missing from" in str(w.message)]


def test_labels_in_five_scripts_are_drawn_with_real_glyphs(tmp_path):
    families, missing = families_for(SCRIPTS.values())
    if missing:
        message = f"no installed font covers {missing!r}: apt-get install fonts-noto-core fonts-noto-cjk"
        if os.environ.get("NMT_REQUIRE_FONTS"):
            pytest.fail(message)
        pytest.skip(message)
    text = " ".join(SCRIPTS.values())
    assert len(glyph_warnings([BASE_FAMILY], text)) > 20  # DejaVu Sans alone draws them as boxes
    assert glyph_warnings(families, text) == []  # the chosen fallback list has a glyph for every character
    assert families[0] == BASE_FAMILY and len(families) <= 4

    words = [w for sentence in SCRIPTS.values() for w in sentence.split()][:12]
    matrix = np.full((len(words), len(words)), 1.0 / len(words), dtype=np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = plot_alignment(matrix, words, words, tmp_path / "scripts.png", words=True)
    assert [str(w.message) for w in caught] == []
    assert path.stat().st_size > 2000


def test_latin_labels_load_no_fallback_font():
    assert families_for(["▁Größe", "Řeka", "été", "Straße"]) == ([BASE_FAMILY], "")


def test_characters_no_font_covers_give_one_warning_naming_them(tmp_path, monkeypatch):
    only_dejavu = tuple(entry for entry in fonts._installed() if entry[0] == BASE_FAMILY)
    monkeypatch.setattr(fonts, "_installed", lambda: only_dejavu)
    monkeypatch.setattr(fonts, "_add_unlisted_system_fonts", lambda: 0)
    source, hypothesis = ["▁一只", "狗", "</s>"], ["▁A", "▁dog", "</s>"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_alignment(np.eye(3, dtype=np.float32), source, hypothesis, tmp_path / "zh.png")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages  # not one per glyph
    assert "'一只狗'" in messages[0] and "zh.png" in messages[0] and "fonts-noto-cjk" in messages[0]


def test_fonts_installed_after_matplotlibs_cache_was_built_are_found(monkeypatch):
    """A font cache built before the fonts were installed lists only DejaVu Sans: the system's other font files
    are added once, so Chinese is still drawn with real glyphs."""
    import copy

    from matplotlib import font_manager

    if not any(ord("狗") in fonts._charmap(path) for path in font_manager.findSystemFonts()):
        pytest.skip("no system font covers Chinese: apt-get install fonts-noto-cjk")
    stale = copy.copy(font_manager.fontManager)
    stale.ttflist = [entry for entry in font_manager.fontManager.ttflist if entry.name == BASE_FAMILY]
    monkeypatch.setattr(font_manager, "fontManager", stale)
    for cached in (fonts._installed, fonts._add_unlisted_system_fonts):
        cached.cache_clear()
    try:
        families, missing = families_for(["一只狗"])
        assert missing == "" and families[0] == BASE_FAMILY and len(families) == 2
        assert fonts._add_unlisted_system_fonts() > 0 and len(stale.ttflist) > 1
    finally:
        for cached in (fonts._installed, fonts._add_unlisted_system_fonts):
            cached.cache_clear()
