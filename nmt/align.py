"""``python -m nmt.align``: forced alignment of a parallel text with a trained model; the code is in :mod:`nmt.analysis.align`."""

import sys

from nmt.analysis.align import main

if __name__ == "__main__":
    sys.exit(main())
