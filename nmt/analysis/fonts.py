"""Fonts for plot labels in any script: DejaVu Sans first, then the installed fonts that cover what it lacks.

matplotlib (3.6 and later) falls back glyph by glyph along the ``font.family`` list. DejaVu Sans, shipped with
matplotlib, covers Latin, Greek and Cyrillic but not Chinese, Japanese, Korean, Devanagari or Thai, which it
would draw as boxes with one warning per glyph. :func:`families_for` looks at the characters of the labels,
and adds to the list only the installed fonts (matplotlib's font cache) whose character maps cover the missing
ones, so a plot of German text loads one font and a plot of Chinese loads two. Characters that no installed
font covers are returned, so the caller can warn once, by name, instead of once per glyph.

On Debian or Ubuntu, ``apt-get install fonts-noto-core fonts-noto-cjk`` adds Devanagari, Thai, Arabic,
Hebrew and most other scripts (Noto) and Chinese, Japanese and Korean (Noto Sans CJK). matplotlib's font cache
(``~/.cache/matplotlib``) does not list fonts installed after it was built; when characters are missing, the
system's font files that the cache does not list are added once per process (``FontManager.addfont``).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache, lru_cache

from matplotlib import font_manager, ft2font

BASE_FAMILY = "DejaVu Sans"  # shipped with matplotlib

# tried first, in this order, before any other installed font: sans-serif faces of wide coverage
PREFERRED = ("Noto Sans", "Noto Sans CJK JP", "Noto Sans CJK SC", "Droid Sans Fallback", "Noto Sans Devanagari",
             "Noto Sans Thai", "Noto Sans Arabic", "Noto Sans Hebrew", "Noto Sans Symbols", "Noto Sans Symbols2")

FONT_HINT = "install a font that covers them (Debian/Ubuntu: apt-get install fonts-noto-core fonts-noto-cjk)"


@cache
def _charmap(path: str) -> frozenset[int]:
    """The code points a font file maps to glyphs (empty for a file FreeType cannot read)."""
    try:
        return frozenset(ft2font.FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


@lru_cache(maxsize=1)
def _installed() -> tuple[tuple[str, str], ...]:
    """``(family, file)`` of the regular upright fonts matplotlib knows, DejaVu Sans and PREFERRED first."""
    regular = {}
    for entry in font_manager.fontManager.ttflist:
        if (entry.style == "normal" and entry.weight in (400, "normal", "regular") and entry.name not in regular
                and not entry.name.startswith("Last Resort")):  # its glyphs are the boxes we want to avoid
            regular[entry.name] = entry.fname
    rank = {family: i for i, family in enumerate((BASE_FAMILY, *PREFERRED))}
    ordered = sorted(regular.items(), key=lambda item: (rank.get(item[0], len(rank)), "Serif" in item[0],
                                                        "Mono" in item[0], item[0]))
    return tuple(ordered)


@lru_cache(maxsize=1)
def _add_unlisted_system_fonts() -> int:
    """Add to matplotlib's font manager the system font files its cache does not list (fonts installed after the
    cache was built); once per process. Returns how many were added."""
    listed = {entry.fname for entry in font_manager.fontManager.ttflist}
    added = 0
    for path in font_manager.findSystemFonts():
        if path not in listed:
            try:
                font_manager.fontManager.addfont(path)
                added += 1
            except (OSError, RuntimeError, ValueError):  # a file FreeType cannot read
                continue
    if added:
        _installed.cache_clear()
    return added


def _drawable(char: str) -> bool:
    """A character that needs a glyph: not white space, not a control, format or unassigned code point."""
    return not char.isspace() and unicodedata.category(char)[0] not in ("C", "Z")


def families_for(labels: Iterable[str]) -> tuple[list[str], str]:
    """The ``font.family`` list that draws ``labels``, and the characters no installed font covers.

    Args:
        labels: the strings a figure will show (tick labels, titles).
    Returns:
        ``(families, missing)``: DejaVu Sans followed by the fewest installed families (in the order of
        PREFERRED, then by name) whose character maps cover the labels' characters; ``missing`` holds, sorted
        and once each, the characters that none of them covers (they would be drawn as boxes).
    """
    wanted = {ord(c) for label in labels for c in label if _drawable(c)}
    families, missing = _cover(wanted)
    if missing and _add_unlisted_system_fonts():
        families, missing = _cover(wanted)
    return families, "".join(chr(c) for c in sorted(missing))


def _cover(wanted: set[int]) -> tuple[list[str], set[int]]:
    """DejaVu Sans and the fewest installed families that cover the code points ``wanted``, and those none
    covers."""
    fonts = _installed()
    families, missing = [BASE_FAMILY], set(wanted)
    base = dict(fonts).get(BASE_FAMILY)
    if base is not None:
        missing -= _charmap(base)
    for family, path in fonts:
        if not missing:
            break
        if family == BASE_FAMILY:
            continue
        covered = missing & _charmap(path)
        if covered:
            families.append(family)
            missing -= covered
    return families, missing
