"""``python -m nmt.average`` (installed as ``nmt-average``): average the weights of checkpoints; the code is in
:mod:`nmt.training.average`."""

import sys

from nmt.training.average import main


def cli() -> int:
    """The ``nmt-average`` command: :func:`nmt.training.average.main` on the command line's arguments; its exit status."""
    status = main(sys.argv[1:])
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(cli())
