"""nmt: an RNN encoder-decoder translation toolkit with pluggable attention (alignment) models."""

__version__ = "0.1.0"
