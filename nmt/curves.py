"""``python -m nmt.curves``: learning curves of runs side by side; the code is in :mod:`nmt.analysis.curves`."""

import sys

from nmt.analysis.curves import main

if __name__ == "__main__":
    main(sys.argv[1:])
