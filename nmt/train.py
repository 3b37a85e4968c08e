"""Train, validate and evaluate an attention NMT model: ``nmt-train [key=value ...]`` (Hydra), also run as
``python train.py`` in a checkout or ``python -m nmt.train``; the configs are :func:`nmt.settings.config_dir`'s."""

import copy
import logging
import os
import shlex
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from nmt.commandline import quiet_when_the_reader_stops
from nmt.data.corpus import DataError
from nmt.data.textio import TextFileError
from nmt.models.checkpoint import CheckpointError
from nmt.settings import (
    TRAIN_PATHS,
    SweepJobError,
    absolute_paths,
    check_added_keys,
    command_name,
    config_dir,
    override_keys,
    refuse_unknown_settings,
    save_hydra_record,
)
from nmt.training.distributed import (
    Distributed,
    DistributedError,
    init_distributed,
    reports_shared_errors,
    wait_for_the_reporting_rank,
)
from nmt.training.lock import RunFolderBusy, RunLock, lock_run_folder
from nmt.training.resume import RunMismatch, check_run_folder
from nmt.training.run import train

EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143}  # 128 + signal number, as a shell reports a job stopped by it
PROG = command_name("train.py", "nmt-train")  # the name in its messages
HYDRA_ONLY = {".hydra", "train.log"}  # what Hydra and train.py put in a run folder before train() does anything
DEFAULT_PARENT = Path("outputs")  # the parent of the default run folders (conf/train.yaml's hydra.run.dir)
parent_existed = True  # whether DEFAULT_PARENT was there before this command (set by command())


def log_size(run_dir: Path) -> int:
    """Bytes in the run folder's ``train.log`` (0 when there is none)."""
    try:
        return (run_dir / "train.log").stat().st_size
    except OSError:
        return 0


def remove_unused_run_dir(run_dir: Path, named: bool, logged_before: int = 0) -> None:
    """After a refusal: remove what Hydra made for this command when nothing else is in the run folder
    (``.hydra/`` and a ``train.log`` with only this command's lines, which the console showed too: a missing
    corpus's warnings), so that a refused command leaves no stray folder in ``outputs/``. The folder itself goes
    too unless the command named it (``named``: ``hydra.run.dir=`` or a sweep folder setting), since a named
    folder may be one the user made, and so does ``outputs/`` when this command made it and nothing else is in
    it. A folder with anything else in it (checkpoints, an earlier run's files, a log with lines from before this
    command: ``logged_before`` bytes) is kept as it is."""
    log_file = run_dir / "train.log"
    if not run_dir.is_dir() or not {p.name for p in run_dir.iterdir()} <= HYDRA_ONLY:
        return
    if logged_before > 0:
        return
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    log_file.unlink(missing_ok=True)
    if not named:
        try:
            run_dir.rmdir()  # only if empty
            if not parent_existed and run_dir.resolve().parent == DEFAULT_PARENT.resolve():
                DEFAULT_PARENT.rmdir()  # only if empty
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


def claim_run_folder(run_dir: Path, dist: Distributed, cfg: DictConfig, composed: DictConfig,
                     sweep: bool) -> RunLock | None:
    """Before anything is written into the run folder: take its lock (rank 0 alone, under torchrun), check that
    the run it may hold is this command's (:func:`nmt.training.resume.check_run_folder`; the command line's own
    settings on a single run, all of them in a sweep job), then write the folder's ``.hydra/`` record
    (``composed``: the config as Hydra composed it). Every rank gets rank 0's outcome, so none waits for a rank
    0 that refused.

    Raises:
        RunFolderBusy: another process trains in the folder.
        RunMismatch: the folder holds a run of other settings (or another run than ``train.resume``'s).
        FileNotFoundError / CheckpointError: the folder's ``checkpoints/last.pt`` cannot be read.
    """
    lock, refusal = None, None
    if dist.is_main:
        hydra_cfg = HydraConfig.get()
        try:
            lock = lock_run_folder(run_dir, shlex.join(["python", *sys.argv]))
            check_run_folder(cfg, run_dir, override_keys(hydra_cfg.overrides.task), sweep)
            save_hydra_record(run_dir / ".hydra", composed, hydra_cfg)
        except (RunFolderBusy, FileNotFoundError, CheckpointError, RunMismatch) as err:
            if lock is not None:
                lock.release()
            refusal = err
    refusal = dist.share(refusal, what="agreeing on the run folder's lock")
    if refusal is not None:
        raise refusal
    return lock


def report_sweep_job_error(message: str) -> None:
    """A failed job of a sweep: say so at once (naming the job's folder), then raise it for Hydra, which
    records it and runs the other jobs; the sweep exits with status 1 at its end.

    Raises:
        SweepJobError: always.
    """
    hydra_cfg = HydraConfig.get()
    message = f"{PROG}: error in job #{hydra_cfg.job.num} of the sweep ({hydra_cfg.runtime.output_dir}): {message}"
    print(message, file=sys.stderr, flush=True)
    raise SweepJobError(message + " (the sweep ran its other jobs; each failed job printed its error when it failed)")


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="train")
def main(cfg: DictConfig) -> float:
    """Run one training job in Hydra's output directory; returns the best validation BLEU (for sweeps).

    A bad setting or file (missing corpus, unusable checkpoint, invalid value), a run folder in use by another
    command or holding a run of other settings, or a diverged training (a nan gradient) ends the run with one
    ``error:`` line and exit status 1 (and removes Hydra's files from the run folder when nothing else is in
    it); in a sweep the job fails alone (:func:`report_sweep_job_error`). A run stopped by SIGINT/SIGTERM (after
    saving ``last.pt``) exits with 130/143, so a script or scheduler can tell it from a finished one (in a sweep
    this stops the sweep). ``HYDRA_FULL_ERROR=1`` shows the traceback instead."""
    composed = copy.deepcopy(cfg)  # for .hydra/config.yaml: as composed, before the paths are made absolute
    absolute_paths(cfg, TRAIN_PATHS)
    hydra_cfg = HydraConfig.get()
    sweep = hydra_cfg.mode == RunMode.MULTIRUN  # a job's folder is Hydra's own subfolder of the sweep's
    dist = Distributed(int(os.environ.get("RANK") or 0), int(os.environ.get("WORLD_SIZE") or 1))  # until joined
    lock, logged_before = None, log_size(Path(hydra_cfg.runtime.output_dir))  # an earlier command's lines
    try:
        check_added_keys(cfg, list(hydra_cfg.overrides.task), hydra_cfg.runtime.choices.keys())  # +key: unread
        dist, device = init_distributed(cfg.device, cfg.train.get("dist_timeout") or 1800)
        run_dir = shared_run_dir(dist, Path(hydra_cfg.runtime.output_dir))
        lock = claim_run_folder(run_dir, dist, cfg, composed, sweep)
        metrics = train(cfg, run_dir, list(hydra_cfg.overrides.task), dist, device)
    except (FileNotFoundError, CheckpointError, DataError, TextFileError, ValueError, FloatingPointError,
            DistributedError, RunFolderBusy) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the traceback, for debugging
            raise
        if lock is not None:
            lock.release()  # first: the lock file is no part of what this command leaves behind
        if not isinstance(err, RunFolderBusy):  # that folder is another run's: leave everything in it alone
            named = not sweep and any(o.startswith("hydra.run.dir=") for o in hydra_cfg.overrides.hydra)
            # every rank: its files may come last
            remove_unused_run_dir(Path(hydra_cfg.runtime.output_dir), named, logged_before)
        says_rank = isinstance(err, DistributedError)  # its message names the rank already
        rank = f" (rank {dist.rank} of {dist.world_size})" if dist.active and not says_rank else ""
        if sweep:
            report_sweep_job_error(f"{err}{rank}")
        if not isinstance(err, DistributedError) and not reports_shared_errors(dist.rank):
            wait_for_the_reporting_rank()  # the same setting or file error as another rank's, which says it
        sys.exit(f"{PROG}: error{rank}: {err}")
    finally:
        if lock is not None:
            lock.release()
        dist.close()
    if metrics.get("interrupted"):
        sys.exit(EXIT_STATUS.get(metrics["stopped"].rsplit(" ", 1)[-1], 1))
    return metrics["valid_bleu"]


def command() -> None:
    """The ``nmt-train`` command (also ``python train.py`` and ``python -m nmt.train``): a mistyped setting is
    refused in one line with the closest settings (:func:`nmt.settings.refuse_unknown_settings`), then Hydra
    runs :func:`main`."""
    global parent_existed
    refuse_unknown_settings("train", PROG)
    parent_existed = DEFAULT_PARENT.is_dir()
    with quiet_when_the_reader_stops():
        main()


if __name__ == "__main__":
    command()
