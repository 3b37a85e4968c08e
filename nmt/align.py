"""``python -m nmt.align`` (installed as ``nmt-align``): forced alignment of a parallel text with a trained model; the code is in
:mod:`nmt.analysis.align`."""

import sys

from nmt.analysis.align import main


def cli() -> int:
    """The ``nmt-align`` command: :func:`nmt.analysis.align.main` on the command line's arguments; its exit status."""
    status = main(sys.argv[1:])
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(cli())
