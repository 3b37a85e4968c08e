"""``python -m nmt.report``: the comparison report of runs; the code is in :mod:`nmt.report.cli`."""

import sys

from nmt.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
