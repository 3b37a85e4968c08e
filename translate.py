"""Translate a text file with a trained checkpoint: ``python translate.py checkpoint=PATH input=FILE output=FILE``.

The same command as the installed ``nmt-translate`` (:mod:`nmt.translate`), run from a checkout.
"""

from nmt.translate import command

if __name__ == "__main__":
    command()
