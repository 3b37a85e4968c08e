"""Train, validate and evaluate an attention NMT model: ``python train.py [key=value ...]`` (Hydra)."""

import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from nmt.checkpoint import TRAIN_PATHS, CheckpointError, absolute_paths
from nmt.data import DataError
from nmt.textio import TextFileError
from nmt.training import train

EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143}  # 128 + signal number, as a shell reports a job stopped by it


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    """Run one training job in Hydra's output directory; returns the best validation BLEU (for sweeps).

    A bad setting or file (missing corpus, unusable checkpoint, invalid value) ends the run with one ``error:``
    line and exit status 1; a run stopped by SIGINT/SIGTERM (after saving ``last.pt``) exits with 130/143, so a
    script or scheduler can tell it from a finished one. ``HYDRA_FULL_ERROR=1`` shows the traceback instead."""
    absolute_paths(cfg, TRAIN_PATHS)
    try:
        metrics = train(cfg, HydraConfig.get().runtime.output_dir, list(HydraConfig.get().overrides.task))
    except (FileNotFoundError, CheckpointError, DataError, TextFileError, ValueError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the traceback, for debugging
            raise
        sys.exit(f"train.py: error: {err}")
    if metrics.get("interrupted"):
        sys.exit(EXIT_STATUS.get(metrics["stopped"].rsplit(" ", 1)[-1], 1))
    return metrics["valid_bleu"]


if __name__ == "__main__":
    main()
