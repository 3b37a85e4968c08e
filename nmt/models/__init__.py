"""The network: attention score models, encoder, decoder, seq2seq, building them from settings, checkpoint files.

May import: nmt.data, nmt.settings.
"""
