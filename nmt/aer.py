"""``python -m nmt.aer`` (installed as ``nmt-aer``): alignment error rate of a hypothesis alignment against a gold set; the code is in
:mod:`nmt.analysis.aer`."""

import sys

from nmt.analysis.aer import main


def cli() -> int:
    """The ``nmt-aer`` command: :func:`nmt.analysis.aer.main` on the command line's arguments; its exit status."""
    status = main(sys.argv[1:])
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(cli())
