"""The report page in a real headless browser (the system's Chromium driven by playwright, offline): it loads
without console errors, its tables and one heatmap per run are visible in a 1400x1000 screenshot, and hovering
a heatmap cell shows that cell's tokens and weight.

Skipped when no browser is found, except under ``NMT_REQUIRE_BROWSER=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import io
import os
import shutil

import numpy as np
import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIEWPORT = {"width": 1400, "height": 1000}


def _missing(reason: str):
    if os.environ.get("NMT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}, and NMT_REQUIRE_BROWSER=1: install it (apt-get install chromium; "
                    "pip install -e '.[dev]' for playwright)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def page(request):
    """The report opened in headless Chromium; console errors and page errors are collected in
    ``page.errors``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    executable = os.environ.get("NMT_BROWSER") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if executable is None:
        _missing(f"no browser found (looked for {', '.join(BROWSERS)} on PATH, and NMT_BROWSER)")
    index, _ = request.getfixturevalue("written_report")  # after the browser check: no runs trained to skip
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        tab = browser.new_page(viewport=VIEWPORT)
        tab.errors = []
        tab.on("console", lambda message: tab.errors.append(message.text) if message.type == "error" else None)
        tab.on("pageerror", lambda error: tab.errors.append(str(error)))
        tab.route("http*://**", lambda route: (tab.errors.append(f"network request: {route.request.url}"),
                                               route.abort()))
        tab.goto(index.as_uri())
        tab.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4", timeout=20_000)
        yield tab
        browser.close()


def _crop(tab, box) -> np.ndarray:
    """The pixels ``[h, w, 3]`` inside ``box`` of a screenshot of the viewport."""
    from PIL import Image

    shot = Image.open(io.BytesIO(tab.screenshot())).convert("RGB")
    assert shot.size == (VIEWPORT["width"], VIEWPORT["height"])
    return np.asarray(shot.crop((box["x"], box["y"], box["x"] + box["width"], box["y"] + box["height"])))


def _has_text(tab, box) -> bool:
    """Whether the screenshot shows something inside ``box`` (more than one colour)."""
    return _crop(tab, box).std() > 1


def _is_coloured(tab, box) -> bool:
    """Whether most of ``box`` is painted (not the white page): a heatmap's cells, even of weights near 0."""
    pixels = _crop(tab, box)
    return (pixels.min(axis=2) < 250).mean() > 0.9


def _inside(box) -> bool:
    return (box is not None and box["width"] > 5 and box["height"] > 5 and box["x"] >= 0 and box["y"] >= 0
            and box["x"] + box["width"] <= VIEWPORT["width"] and box["y"] + box["height"] <= VIEWPORT["height"])


def test_the_page_loads_without_errors(page):
    assert page.errors == []
    assert page.title().startswith("Attention models compared")


def test_tables_are_visible(page, tiny_runs):
    _, runs = tiny_runs
    page.evaluate("window.scrollTo(0, 0)")
    for table in ("#runs-table", "#scores-table"):
        box = page.locator(table).bounding_box()
        assert _inside(box), (table, box)
        assert _has_text(page, box)
        assert page.locator(f"{table} tr").count() == 1 + len(runs)
        assert page.locator(f"{table}").inner_text().count(runs[1].name) == 1
    page.locator("#significance-BLEU").scroll_into_view_if_needed()
    assert page.locator("#significance-BLEU").is_visible()
    assert page.locator("#significance-BLEU tr").count() == 1 + len(runs)


def test_one_heatmap_per_run_is_visible(page, tiny_runs, written_report):
    _, runs = tiny_runs
    figure = page.locator(f"#sentence-{next(iter(written_report[1].sentences))}")  # the shortest one drawn
    figure.scroll_into_view_if_needed()
    assert figure.locator(".heatmaplayer image").count() == len(runs)  # one heatmap trace per run ...
    areas = figure.locator(".draglayer .nsewdrag")  # ... each in its own plot area (the image is clipped to it)
    assert areas.count() == len(runs)
    for k in range(len(runs)):
        box = areas.nth(k).bounding_box()
        assert _inside(box), box
        assert _is_coloured(page, box)
    titles = figure.locator(".annotation-text").all_text_contents()  # SVG text: no inner text
    assert [t.split("entropy")[0].strip() for t in titles] == [run.name for run in runs]


def test_hovering_a_cell_shows_its_tokens_and_weight(page, tiny_runs, written_report):
    from nmt.report.attention import display_tokens, read_saved

    _, runs = tiny_runs
    index = next(iter(written_report[1].sentences))
    saved = read_saved(runs[1] / "eval" / "test.alignments.npz")
    matrix, record = saved.matrices[index], saved.records[index]
    row, col = matrix.shape[0] - 1, 1  # the </s> row: its token needs escaping to be shown
    figure = page.locator(f"#sentence-{index}")
    figure.scroll_into_view_if_needed()
    x, y = page.evaluate("""([id, row, col]) => {  // the centre of the cell in the second run's panel
        const gd = document.getElementById(id), L = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + L.xaxis2._offset + L.xaxis2.d2p(col), box.top + L.yaxis2._offset + L.yaxis2.d2p(row)];
    }""", [f"sentence-{index}", row, col])
    page.mouse.move(x, y)
    hover = figure.locator(".hoverlayer .hovertext")
    hover.first.wait_for(timeout=5_000)
    text = hover.first.text_content()
    assert f"source: {display_tokens(record['source_tokens'])[col]}" in text
    assert f"hypothesis: {display_tokens(record['hypothesis_tokens'])[row]}" in text
    assert record["hypothesis_tokens"][row] == "</s>" and "hypothesis: </s>" in text
    assert f"weight: {matrix[row, col]:.3f}" in text
    assert runs[1].name in figure.locator(".hoverlayer").text_content()  # the run's name beside the box
