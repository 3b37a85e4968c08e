"""Train on the ranks of a torchrun launch and save each rank's final weights (used by test_distributed.py).

``torchrun --nproc_per_node N tests/training/ddp_worker.py OUT RUN_DIR key=value ...`` runs
:func:`nmt.training.run.train` on every rank and writes ``OUT/rank{r}.pt`` (the raw weights each rank ended
with) and ``OUT/rank{r}.ended`` (the time its training call returned), so the tests can compare the ranks
with each other and with one process.
"""

import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from nmt.training import run
from nmt.training.distributed import init_distributed

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    out, run_dir, overrides = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    dist, device = init_distributed(cfg.device, cfg.train.dist_timeout)
    original = run.train_loop

    def keep_weights(cfg, model, *args, **kwargs):
        stop = original(cfg, model, *args, **kwargs)
        torch.save(model.state_dict(), out / f"rank{dist.rank}.pt")
        return stop

    run.train_loop = keep_weights
    try:
        run.train(cfg, run_dir, overrides, dist, device)
        (out / f"rank{dist.rank}.ended").write_text(repr(time.time()))
    finally:
        dist.close()


if __name__ == "__main__":
    main()
