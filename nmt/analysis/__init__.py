"""Looking inside: forced alignment, symmetrization, gold alignments and AER, heatmaps, learning curves.

May import: nmt.data, nmt.models, nmt.decoding (never nmt.training).
"""
