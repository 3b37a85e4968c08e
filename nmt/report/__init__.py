"""The side-by-side comparison report of runs: reading run folders, significance, compare-mt style analyses,
learning curves and attention maps, written as one HTML page and a Markdown summary.

    python -m nmt.report RUN_OR_SWEEP_FOLDER... --out DIR
    write_report(folders, out)          # the same from Python (e.g. at the end of a sweep)

May import: nmt.data, nmt.settings, nmt.models, nmt.decoding, nmt.analysis. Nothing in nmt imports it.
"""

from nmt.report.page import write_report

__all__ = ["write_report"]
