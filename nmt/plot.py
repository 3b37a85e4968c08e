"""``python -m nmt.plot``: alignment heatmaps from a saved alignments.npz; the code is in :mod:`nmt.analysis.plot`."""

from nmt.analysis.plot import main

if __name__ == "__main__":
    main()
