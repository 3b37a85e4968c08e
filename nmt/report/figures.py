"""The report's charts as plotly figures (offline: the page loads plotly.js from a file beside it): learning
curves of all runs, bucketed bars, and attention heatmaps of one sentence for every run side by side.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from nmt.analysis.curves import Curve
from nmt.report.analyses import Bucketed
from nmt.report.attention import Panel

PLOTLY_JS = "plotly.min.js"  # written once beside index.html
CONFIG = {"displaylogo": False, "responsive": True}
COLORS = qualitative.Plotly
CELL = 22  # pixels per token of a heatmap, down to SMALLEST_CELL for long sentences
SMALLEST_CELL = 14
HEATMAP_HEIGHT = 640  # pixels of cells a heatmap aims at (a sentence with more rows gets smaller cells)
TEMPLATE = "plotly_white"


def write_plotly_js(folder: Path) -> Path:
    """Write the plotly.js bundle that ships with the plotly package beside the page (once per folder: an
    existing file of the same size is kept)."""
    path = folder / PLOTLY_JS
    script = get_plotlyjs()
    if not (path.is_file() and path.stat().st_size == len(script.encode("utf-8"))):
        path.write_text(script, encoding="utf-8")
    return path


def to_div(fig: go.Figure, div_id: str) -> str:
    """The figure as an HTML ``<div>`` and the script that draws it (plotly.js not included)."""
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG)


def escape(text: str) -> str:
    """``text`` for plotly's labels, which read ``<...>`` as markup (``</s>`` would vanish)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def curves_figure(curves: list[Curve]) -> go.Figure:
    """Validation BLEU (top) and perplexity (bottom, log scale) against steps (left) and training minutes
    (right), one colour per run."""
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.08, vertical_spacing=0.14,
                        subplot_titles=("validation BLEU (greedy) by step", "validation BLEU (greedy) by minute",
                                        "validation perplexity by step", "validation perplexity by minute"))
    for i, curve in enumerate(curves):
        color = COLORS[i % len(COLORS)]
        for row, key, name in ((1, "valid_bleu", "BLEU"), (2, "valid_ppl", "perplexity")):
            for col, x, xname in ((1, "step", "step"), (2, "minutes", "minute")):
                fig.add_trace(go.Scatter(
                    x=curve.column(x), y=curve.column(key), mode="lines+markers", name=escape(curve.label),
                    legendgroup=curve.label, showlegend=row == 1 and col == 1, line={"color": color},
                    marker={"size": 5},
                    hovertemplate=f"{xname} %{{x:.4g}}<br>{name} %{{y:.4g}}"
                                  f"<extra>{escape(curve.label)}</extra>"), row, col)
    for col, title in ((1, "training step"), (2, "training minutes (validation included)")):
        fig.update_xaxes(title_text=title, row=2, col=col)
    fig.update_yaxes(title_text="BLEU", row=1, col=1)
    fig.update_yaxes(title_text="perplexity", type="log", row=2, col=1)
    fig.update_yaxes(type="log", row=2, col=2)
    fig.update_layout(template=TEMPLATE, height=680, margin={"t": 40, "b": 50, "l": 60, "r": 20},
                      legend={"orientation": "h", "y": -0.12})
    return fig


def bars_figure(table: Bucketed, xtitle: str, ytitle: str, count_name: str) -> go.Figure:
    """Grouped bars of a bucketed table: one group per bucket (its count under the name), one bar per run."""
    ticks = [f"{name}<br>({count} {count_name})" for name, count in zip(table.buckets, table.counts)]
    fig = go.Figure()
    for i, (label, values) in enumerate(table.values.items()):
        fig.add_trace(go.Bar(x=ticks, y=values, name=escape(label), marker={"color": COLORS[i % len(COLORS)]},
                             hovertemplate=f"%{{x}}<br>{ytitle} %{{y:.2f}}<extra>{escape(label)}</extra>"))
    fig.update_layout(template=TEMPLATE, barmode="group", height=380, xaxis_title=xtitle, yaxis_title=ytitle,
                      margin={"t": 20, "b": 60, "l": 60, "r": 20}, legend={"orientation": "h", "y": -0.3})
    return fig


def _hover(panel: Panel) -> list[list[list[str]]]:
    """``[T][S][2]`` hover texts: the source and hypothesis token of each cell (a byte piece with its raw name)."""
    def text(label: str, raw: str) -> str:
        """One token's hover text."""
        return escape(f"{label} ({raw})" if raw.startswith("<0x") else label)

    xs = [text(label, raw) for label, raw in zip(panel.x, panel.x_raw)]
    ys = [text(label, raw) for label, raw in zip(panel.y, panel.y_raw)]
    return [[[x, y] for x in xs] for y in ys]


def _links(fig: go.Figure, panel: Panel, col: int, first: bool, cell: int) -> None:
    """Draw a panel's gold links: sure ones as open red squares, possible-only ones as red dots."""
    for links, name, symbol, size in ((panel.sure, "gold sure link", "square-open", cell - 4),
                                      (panel.possible, "gold possible link", "circle", 6)):
        if links:
            xs, ys = zip(*sorted(links))
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=name, legendgroup=name, showlegend=first,
                                     marker={"symbol": symbol, "size": size, "color": "red",
                                             "line": {"width": 2, "color": "red"}}, hoverinfo="skip"), 1, col)


def _text_px(labels: list[str], font: int = 12) -> int:
    """About how many pixels the longest of ``labels`` takes at font size ``font``."""
    return round(0.6 * font * max((len(label) for label in labels), default=1)) + 12


def heatmaps_figure(panels: list[Panel]) -> go.Figure:
    """One sentence's attention for every run side by side: source tokens along the top, hypothesis tokens down
    the side, square cells of one size and one colour scale (0..1) for all; hovering a cell shows its tokens
    and weight. Gold links, where a panel has them, are drawn over the cells. Cells are CELL pixels, smaller
    (down to SMALLEST_CELL) for sentences of more than HEATMAP_HEIGHT / CELL rows; margins are sized from the
    tokens (plotly's automatic margins would shrink the cells)."""
    sources = [max(1, p.matrix.shape[1]) for p in panels]
    rows = max(max(1, p.matrix.shape[0]) for p in panels)
    cell = max(SMALLEST_CELL, min(CELL, HEATMAP_HEIGHT // rows))
    font = min(12, cell - 3)
    gap = max([_text_px(p.y, font) for p in panels[1:]], default=0) + 20  # room for the next panel's tokens
    top = max(_text_px(p.x, font) for p in panels)
    width = sum(sources) * cell + gap * (len(panels) - 1)
    fig = make_subplots(rows=1, cols=len(panels), column_widths=sources, horizontal_spacing=gap / width,
                        subplot_titles=[f"{escape(p.label)}<br>entropy {p.entropy:.2f} bits, "
                                        f"off-diagonal {p.diagonal:.2f}" for p in panels])
    for col, panel in enumerate(panels, start=1):
        fig.add_trace(go.Heatmap(
            z=panel.matrix, x=list(range(panel.matrix.shape[1])), y=list(range(panel.matrix.shape[0])), zmin=0,
            zmax=1, colorscale="Blues", showscale=col == 1, customdata=_hover(panel), name=panel.label,
            colorbar={"title": {"text": "weight"}, "x": 1.0, "xpad": 20,
                      "len": max(0.3, min(1.0, 150 / (rows * cell)))},
            hovertemplate="source: %{customdata[0]}<br>hypothesis: %{customdata[1]}<br>weight: %{z:.3f}"
                          f"<extra>{escape(panel.label)}</extra>"), 1, col)
        _links(fig, panel, col, col == 1, cell)
        axes = {"tickfont": {"size": font}, "showgrid": False, "zeroline": False, "automargin": False,
                "constrain": "domain", "row": 1, "col": col}
        fig.update_xaxes(tickvals=list(range(len(panel.x))), ticktext=[escape(t) for t in panel.x], side="top",
                         tickangle=-90, **axes)
        fig.update_yaxes(tickvals=list(range(len(panel.y))), ticktext=[escape(t) for t in panel.y],
                         autorange="reversed", scaleanchor="x" if col == 1 else f"x{col}", **axes)
    fig.update_annotations(yshift=top, font={"size": 12})
    legend = any(p.sure or p.possible for p in panels)
    left = _text_px(panels[0].y, font)
    fig.update_layout(template=TEMPLATE, width=width + left + 120,
                      height=rows * cell + top + 55 + (40 if legend else 0), showlegend=legend,
                      margin={"t": top + 45, "b": 10 + (40 if legend else 0), "l": left, "r": 120},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 0, "yref": "container", "x": 0})
    return fig
