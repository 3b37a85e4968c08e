"""``python -m nmt.average``: average the weights of checkpoints; the code is in :mod:`nmt.training.average`."""

import sys

from nmt.training.average import main

if __name__ == "__main__":
    sys.exit(main())
