"""``python -m nmt.aer``: alignment error rate of a hypothesis alignment against a gold set; the code is in :mod:`nmt.analysis.aer`."""

import sys

from nmt.analysis.aer import main

if __name__ == "__main__":
    sys.exit(main())
