"""Corpus to batches: UTF-8 text files, normalization, SentencePiece subwords, parallel corpora, length-bucketed batches.

May import: nothing else of nmt (the first stage).
"""
