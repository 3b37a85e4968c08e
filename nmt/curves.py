"""``python -m nmt.curves`` (installed as ``nmt-curves``): learning curves of runs side by side; the code is in
:mod:`nmt.analysis.curves`."""

import sys

from nmt.analysis.curves import main


def cli() -> int:
    """The ``nmt-curves`` command: :func:`nmt.analysis.curves.main` on the command line's arguments; its exit status."""
    status = main(sys.argv[1:])
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(cli())
