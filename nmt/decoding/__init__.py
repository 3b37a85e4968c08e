"""Search and scores: greedy and beam search, MBR, translating sentences, sacreBLEU scores, the eval/ files.

May import: nmt.data, nmt.models.
"""
