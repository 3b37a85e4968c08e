"""``python -m nmt.plot`` (installed as ``nmt-plot``): alignment heatmaps from a saved alignments.npz; the code is in
:mod:`nmt.analysis.plot`."""

import sys

from nmt.analysis.plot import main


def cli() -> int:
    """The ``nmt-plot`` command: :func:`nmt.analysis.plot.main` on the command line's arguments; its exit status."""
    status = main(sys.argv[1:])
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(cli())
