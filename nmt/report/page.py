"""Writing the report: ``DIR/index.html`` (one page from the jinja2 template ``templates/report.html.j2``, its
charts drawn by plotly.js from ``DIR/plotly.min.js``, so it opens without a network) and ``DIR/summary.md``
(the same tables, from ``templates/summary.md.j2``).
"""

from __future__ import annotations

import datetime
import platform
import subprocess
import sys
from pathlib import Path

import jinja2

from nmt.data.textio import atomic_write
from nmt.report import figures
from nmt.report.build import Report, ReportOptions, build_report
from nmt.report.runs import ReportError
from nmt.report.significance import TESTS
from nmt.report.tables import SCORE_COLUMNS, fmt

RUN_COLUMNS = [("attention", "score model"), ("decoder_style", "decoder style"), ("parameters", "parameters"),
               ("steps", "steps"), ("epochs", "epochs"), ("train_minutes", "training minutes"),
               ("tokens_per_sec", "training tokens/s"), ("sentences_per_sec", "decoding sentences/s"),
               ("decoder", "decoder"), ("finished", "evaluated")]
DIGITS = {"parameters": 0, "steps": 0, "epochs": 0, "tokens_per_sec": 0, "train_minutes": 1, "sentences_per_sec": 1}


def _environment() -> jinja2.Environment:
    """The templates of this package, HTML autoescaped, with the ``fmt`` and ``md`` filters."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("nmt.report", "templates"),
                             autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",),
                                                                 default_for_string=False),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    env.filters["md"] = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    return env


def _commit() -> str | None:
    """The git commit of the nmt package's checkout (with ``+`` when it has local changes), or None."""
    folder = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "") if head else None


def provenance(command: str | None) -> dict:
    """When, where and how the report was made: date (UTC), machine, command, nmt's commit."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.node()} ({platform.system()} {platform.machine()}, Python "
                       f"{platform.python_version()})",
            "command": command or " ".join(["python -m nmt.report", *sys.argv[1:]]), "commit": _commit() or "unknown"}


def _significance_rows(report: Report) -> dict[str, list[dict]]:
    """``{metric: [row per run]}`` with the score, the 95% interval, the p-value and the mark."""
    if report.significance is None:
        return {}
    out = {}
    for metric, rows in report.significance.rows.items():
        out[metric] = [{"label": r.label, "score": r.score, "mean": r.mean, "ci": r.ci, "p_value": r.p_value,
                        "mark": "baseline" if r.p_value is None else
                        ("different" if r.distinguishable else "not distinguishable")} for r in rows]
    return out


def _figures(report: Report) -> dict:
    """The plotly ``<div>``s of the page."""
    divs = {"curves": figures.to_div(figures.curves_figure(report.curves), "curves-figure") if report.curves
            else None,
            "length": figures.to_div(figures.bars_figure(report.by_length, "source length (words)", "BLEU",
                                                         "sentences"), "length-figure")}
    divs["frequency"] = figures.to_div(figures.bars_figure(
        report.by_frequency, "frequency of the word in the training targets", "word F-measure (%)",
        "reference words"), "frequency-figure") if report.by_frequency else None
    divs["sentences"] = {i: figures.to_div(figures.heatmaps_figure(panels), f"sentence-{i}")
                         for i, panels in report.sentences.items()}
    divs["gold"] = {i: figures.to_div(figures.heatmaps_figure(panels), f"gold-{i}")
                    for i, panels in (report.gold.panels.items() if report.gold else []) if panels}
    return divs


def context(report: Report, command: str | None = None) -> dict:
    """The variables of both templates."""
    sets = report.runs[0]
    return {"r": report, "runs": report.runs, "run_columns": RUN_COLUMNS, "digits": DIGITS,
            "score_columns": SCORE_COLUMNS, "significance": _significance_rows(report),
            "test_name": TESTS[report.significance.test] if report.significance else None,
            "provenance": provenance(command), "first_test": sets.scores[("test", sets.main_decoder())]}


def render_report(report: Report, out: str | Path, command: str | None = None) -> Path:
    """Write ``out/index.html``, ``out/summary.md`` and ``out/plotly.min.js`` for a built report (``out`` is
    created); returns the path of index.html.

    Raises:
        ReportError: ``out`` cannot be written (naming it).
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        figures.write_plotly_js(out)
    except OSError as err:
        raise ReportError(f"{out}: cannot write the report there ({err.strerror}); choose another out=") from None
    env, variables = _environment(), context(report, command)
    atomic_write(out / "summary.md", env.get_template("summary.md.j2").render(**variables))
    variables["figures"] = _figures(report)
    page = out / "index.html"
    atomic_write(page, env.get_template("report.html.j2").render(**variables, plotly_js=figures.PLOTLY_JS))
    return page


def write_report(folders: list[str | Path], out: str | Path, options: ReportOptions | None = None,
                 command: str | None = None) -> Path:
    """Compare the runs that ``folders`` name (run folders, sweep folders or globs) and write ``out/index.html``,
    ``out/summary.md`` and ``out/plotly.min.js`` (``out`` is created). One call at the end of a sweep:
    ``write_report([sweep_dir], sweep_dir / "report")``.

    Args:
        options: what to compare and how (default: the first run as baseline, paired bootstrap, no gold set).
        command: the command line shown on the page (default: this process's).
    Returns:
        the path of index.html.
    Raises:
        ReportError: see :func:`nmt.report.build.build_report`, or ``out`` cannot be written; nothing is
            written then.
    """
    return render_report(build_report(folders, options), out, command)
