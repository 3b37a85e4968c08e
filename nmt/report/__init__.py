"""The side-by-side comparison report of runs: reading run folders, significance, compare-mt style analyses,
learning curves and attention maps, written as one HTML page and a Markdown summary.

    python -m nmt.report RUN_OR_SWEEP_FOLDER... out=DIR
    write_report(folders, out)          # the same from Python (e.g. at the end of a sweep)

``train.py -m`` writes the report of its sweep through :class:`nmt.report.sweep.SweepReport` (a Hydra callback).
``write_report`` is imported on first use, so that loading the callback at every ``train.py`` start stays cheap.

May import: nmt.data, nmt.settings, nmt.models, nmt.decoding, nmt.analysis. Nothing in nmt imports it.
"""

__all__ = ["write_report"]


def __getattr__(name: str):
    """Lazy ``nmt.report.write_report`` (jinja2, plotly and the analyses load on first use).

    Raises:
        AttributeError: for any other name.
    """
    if name == "write_report":
        from nmt.report.page import write_report

        return write_report
    raise AttributeError(f"module 'nmt.report' has no attribute {name!r}")
