"""Train, validate and evaluate an attention NMT model: ``python train.py [key=value ...]`` (Hydra)."""

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from nmt.checkpoint import TRAIN_PATHS, absolute_paths
from nmt.training import train


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    """Run one training job in Hydra's output directory; returns the best validation BLEU (for sweeps)."""
    absolute_paths(cfg, TRAIN_PATHS)
    metrics = train(cfg, HydraConfig.get().runtime.output_dir, list(HydraConfig.get().overrides.task))
    return metrics["valid_bleu"]


if __name__ == "__main__":
    main()
