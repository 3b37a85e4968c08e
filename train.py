"""Train, validate and evaluate an attention NMT model: ``python train.py [key=value ...]`` (Hydra).

The same command as the installed ``nmt-train`` (:mod:`nmt.train`), run from a checkout.
"""

from nmt.train import command

if __name__ == "__main__":
    command()
