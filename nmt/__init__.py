"""nmt: an RNN encoder-decoder translation toolkit with pluggable attention (alignment) models.

``from nmt import Translator`` gives the Python API (:mod:`nmt.api`); it is imported on first use, so that
``import nmt`` stays light.
"""

__version__ = "0.1.0"
__all__ = ["Translator", "__version__"]


def __getattr__(name: str):
    """Lazy access to :class:`nmt.api.Translator` (imports torch and the model code on first use).

    Raises:
        AttributeError: for any other name.
    """
    if name == "Translator":
        from nmt.api import Translator

        return Translator
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
