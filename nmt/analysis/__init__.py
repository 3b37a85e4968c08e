"""Looking inside: forced alignment, symmetrization, gold alignments and AER, the heads of multi-head attention,
heatmaps, learning curves.

May import: nmt.data, nmt.models, nmt.decoding (never nmt.training).
"""
