"""Train, validate and evaluate an attention NMT model: ``python train.py [key=value ...]`` (Hydra)."""

import logging
import os
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from nmt.data.corpus import DataError
from nmt.data.textio import TextFileError
from nmt.models.checkpoint import CheckpointError
from nmt.settings import TRAIN_PATHS, absolute_paths
from nmt.training.distributed import Distributed, DistributedError, init_distributed, reports_shared_errors
from nmt.training.run import train

EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143}  # 128 + signal number, as a shell reports a job stopped by it
HYDRA_ONLY = {".hydra", "train.log"}  # what Hydra puts in a run folder before train() does anything


def remove_unused_run_dir(run_dir: Path, named: bool) -> None:
    """After a refusal: remove what Hydra made for this command when nothing else is in the run folder
    (``.hydra/`` and an empty ``train.log``), so that a mistyped setting leaves no stray folder in ``outputs/``.
    The folder itself goes too unless the command named it (``named``: ``hydra.run.dir=`` or a sweep folder
    setting), since a named folder may be one the user made. A folder with anything else in it (checkpoints, an
    earlier run's files, a log with lines in it) is kept as it is."""
    log_file = run_dir / "train.log"
    if not run_dir.is_dir() or not {p.name for p in run_dir.iterdir()} <= HYDRA_ONLY:
        return
    if log_file.exists() and log_file.stat().st_size > 0:
        return
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    log_file.unlink(missing_ok=True)
    if not named:
        try:
            run_dir.rmdir()  # only if empty
        except OSError:
            pass


def shared_run_dir(dist: Distributed, own: Path) -> Path:
    """Under torchrun: rank 0's run folder, for every rank (each resolved ``${now:...}`` on its own, so theirs may
    differ). The other ranks write nothing there: their log goes to stderr only, errors alone, and the folder
    Hydra made for them, when it is not rank 0's, is removed."""
    if not dist.active:
        return own
    chosen = Path(dist.share(str(own.resolve()), what="agreeing on the run folder"))
    if not dist.is_main:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(logging.ERROR)
        if chosen != own.resolve() and own.is_dir() and {p.name for p in own.iterdir()} <= HYDRA_ONLY:
            shutil.rmtree(own, ignore_errors=True)  # only what Hydra made for this rank's command
    return chosen


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    """Run one training job in Hydra's output directory; returns the best validation BLEU (for sweeps).

    A bad setting or file (missing corpus, unusable checkpoint, invalid value) or a diverged training (a nan
    gradient) ends the run with one ``error:`` line and exit status 1 (and removes Hydra's files from the run
    folder when nothing else is in it); a run stopped by SIGINT/SIGTERM (after saving ``last.pt``) exits with
    130/143, so a script or scheduler can tell it from a finished one. ``HYDRA_FULL_ERROR=1`` shows the traceback
    instead."""
    absolute_paths(cfg, TRAIN_PATHS)
    dist = Distributed(int(os.environ.get("RANK") or 0), int(os.environ.get("WORLD_SIZE") or 1))  # until joined
    try:
        dist, device = init_distributed(cfg.device, cfg.train.get("dist_timeout") or 1800)
        run_dir = shared_run_dir(dist, Path(HydraConfig.get().runtime.output_dir))
        metrics = train(cfg, run_dir, list(HydraConfig.get().overrides.task), dist, device)
    except (FileNotFoundError, CheckpointError, DataError, TextFileError, ValueError, FloatingPointError,
            DistributedError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the traceback, for debugging
            raise
        hydra_cfg = HydraConfig.get()
        sweep = hydra_cfg.mode == RunMode.MULTIRUN  # a job's folder is Hydra's own subfolder of the sweep's
        named = not sweep and any(o.startswith("hydra.run.dir=") for o in hydra_cfg.overrides.hydra)
        remove_unused_run_dir(Path(hydra_cfg.runtime.output_dir), named)  # every rank: its Hydra files may come last
        rank = f" (rank {dist.rank} of {dist.world_size})" if dist.active else ""
        if sweep:  # one failed job of a sweep: Hydra records it, the others go on
            raise RuntimeError(f"train.py: error{rank}: {err}") from None
        if not isinstance(err, DistributedError) and not reports_shared_errors(dist.rank):
            sys.exit(1)  # the same setting or file error as another rank's, which says it
        sys.exit(f"train.py: error{rank}: {err}")
    finally:
        dist.close()
    if metrics.get("interrupted"):
        sys.exit(EXIT_STATUS.get(metrics["stopped"].rsplit(" ", 1)[-1], 1))
    return metrics["valid_bleu"]


if __name__ == "__main__":
    main()
