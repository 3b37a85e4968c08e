"""Reading the runs to compare: run folders of ``train.py``, the run folders inside a sweep folder
(``multirun/<time>/``), or a glob of either; what each run recorded about itself.

A run folder is one with ``.hydra/config.yaml`` or ``metrics.jsonl``; it is finished when its final evaluation
wrote ``eval/test.scores.json``. ``eval/{split}.*`` holds the configured decoder's files (beam search unless
``decode.beam_size=1``) and ``eval/greedy/{split}.*`` greedy search's (design.md §2).
"""

from __future__ import annotations

import glob
import json
import re
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from nmt.analysis.curves import Curve, read_curve
from nmt.data.textio import read_lines
from nmt.models.checkpoint import load_payload, run_model

DECODERS = ("greedy", "beam")
SPLITS = ("valid", "test")


class ReportError(ValueError):
    """A run or an option the report cannot use; the message names the file or run and what to do."""


@dataclass
class Run:
    """What one finished run left behind, as the report uses it.

    Attributes:
        folder: the run folder.
        label: its name in tables and legends (the folder's name; ``parent/name`` where two runs share one).
        scores: ``{(split, decoder): eval/*.scores.json}`` for split in SPLITS and decoder in DECODERS (greedy
            from ``eval/greedy/`` when the run also decoded with beam search, else from ``eval/``).
        prefixes: ``{(split, decoder): path prefix}`` of the same files (``P.hyp``, ``P.alignments.npz``, ...).
        config: the resolved training configuration, as the checkpoint stores it (plain dicts).
        progress: the checkpoint's training progress (``step``, ``epoch``, ``train_seconds``, ...).
        parameters: number of weights of the model.
        curve: its validations (metrics.jsonl), or None when it has none.
        overrides: the command-line overrides it was started with (``.hydra/overrides.yaml``).
        finished: when its final evaluation was written (UTC).
    """

    folder: Path
    label: str
    scores: dict[tuple[str, str], dict]
    prefixes: dict[tuple[str, str], Path]
    config: dict
    progress: dict
    parameters: int
    curve: Curve | None
    overrides: list[str] = field(default_factory=list)
    finished: datetime | None = None

    def main_decoder(self) -> str:
        """The decoder of ``eval/test.*``: ``"beam"`` or ``"greedy"`` (a run with ``decode.beam_size=1``)."""
        return "beam" if ("test", "beam") in self.prefixes else "greedy"

    def hypotheses(self, split: str = "test", decoder: str | None = None) -> list[str]:
        """The lines of ``eval/{split}.hyp`` (``decoder`` None: the main decoder's; see :meth:`main_decoder`).

        Raises:
            ReportError: the file is missing or its line count is not the scores' ``num_sentences``.
        """
        key = (split, decoder or self.main_decoder())
        path = Path(f"{self.prefixes[key]}.hyp")
        if not path.is_file():
            raise ReportError(f"{path}: missing; the run's final evaluation writes it (rerun "
                              f"python train.py hydra.run.dir={self.folder} to evaluate again)")
        lines = read_lines(path)
        expected = self.scores[key].get("num_sentences")
        if expected is not None and len(lines) != expected:
            raise ReportError(f"{path}: {len(lines)} lines, but its scores.json counts {expected} sentences; "
                              f"the file was changed after the evaluation: evaluate the run again")
        return lines


def expand(paths: list[str | Path]) -> list[Path]:
    """Run folders named by ``paths``: a run folder, a sweep folder (its run folders, in the sweep's job order),
    or a glob pattern of either (for patterns the shell did not expand). Unfinished runs of a sweep or a glob
    are left out with a warning; a named unfinished run is an error.

    Raises:
        ReportError: a path that does not exist, or that is neither a run nor holds any, or an unfinished run
            named on its own, or no run at all.
    """
    found: list[Path] = []
    for given in map(str, paths):
        if not Path(given).exists() and glob.has_magic(given):
            matches = [Path(p) for p in sorted(glob.glob(given)) if Path(p).is_dir()]
            if not matches:
                raise ReportError(f"{given}: the pattern matches no folder")
            for match in matches:
                found += _runs_in(match, named=False)
            continue
        folder = Path(given)
        if not folder.is_dir():
            raise ReportError(f"{folder}: no such folder; give run folders of train.py or a sweep folder "
                              "(multirun/<time>/)")
        found += _runs_in(folder, named=True)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise ReportError(f"no finished run in {' '.join(map(str, paths))}: a run is finished once its final "
                          "evaluation wrote eval/test.scores.json")
    return unique


def _is_run(folder: Path) -> bool:
    return (folder / ".hydra" / "config.yaml").is_file() or (folder / "metrics.jsonl").is_file()


def _is_finished(folder: Path) -> bool:
    return (folder / "eval" / "test.scores.json").is_file()


def _job_order(folder: Path) -> tuple:
    """Sort key of a sweep's job folders: Hydra names them ``<job number>_...``."""
    number = re.match(r"\d+", folder.name)
    return (int(number.group()) if number else float("inf"), folder.name)


def _runs_in(folder: Path, named: bool) -> list[Path]:
    """``folder`` itself when it is a run, else its run subfolders (a sweep)."""
    if _is_run(folder):
        if _is_finished(folder):
            return [folder]
        message = (f"{folder}: no eval/test.scores.json: the run has not finished (its final evaluation writes "
                   f"eval/); wait for it, or finish it with python train.py hydra.run.dir={folder}")
        if named:
            raise ReportError(message)
        warnings.warn(f"left out {message}", stacklevel=3)
        return []
    runs = sorted((sub for sub in folder.iterdir() if sub.is_dir() and _is_run(sub)), key=_job_order)
    if not runs and named:
        raise ReportError(f"{folder}: neither a run folder (no .hydra/config.yaml, no metrics.jsonl) nor a sweep "
                          "folder holding run folders")
    for run in runs:
        if not _is_finished(run):
            warnings.warn(f"left out {run}: it has no eval/test.scores.json (not finished)", stacklevel=3)
    return [run for run in runs if _is_finished(run)]


def labels_for(folders: list[Path]) -> list[str]:
    """Short unique names: the folder names, with the parent's name before those that repeat."""
    names = [f.name for f in folders]
    return [f"{f.parent.name}/{f.name}" if names.count(f.name) > 1 else f.name for f in folders]


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ReportError(f"{path}: not a readable scores file ({err}); evaluate the run again") from None
    if not isinstance(data, dict) or "bleu" not in data:
        raise ReportError(f"{path}: not a scores file of nmt (no 'bleu'); evaluate the run again")
    return data


def _eval_files(folder: Path) -> tuple[dict, dict]:
    """``(scores, prefixes)`` keyed by ``(split, decoder)`` (see :class:`Run`)."""
    scores, prefixes = {}, {}
    for split in SPLITS:
        main = folder / "eval" / split
        if not Path(f"{main}.scores.json").is_file():
            continue
        data = _read_json(Path(f"{main}.scores.json"))
        decoder = "greedy" if data.get("decoder") == "greedy" or data.get("beam_size") == 1 else "beam"
        scores[(split, decoder)], prefixes[(split, decoder)] = data, main
        greedy = folder / "eval" / "greedy" / split
        if decoder == "beam" and Path(f"{greedy}.scores.json").is_file():
            scores[(split, "greedy")] = _read_json(Path(f"{greedy}.scores.json"))
            prefixes[(split, "greedy")] = greedy
    return scores, prefixes


def _checkpoint_facts(folder: Path) -> tuple[dict, dict, int]:
    """``(config, progress, parameters)`` from ``checkpoints/last.pt`` (the final progress), else from the
    checkpoint the evaluation scored.

    Raises:
        ReportError: the run folder holds no readable checkpoint.
    """
    last = folder / "checkpoints" / "last.pt"
    try:
        payload = load_payload(last if last.is_file() else run_model(folder))
    except (OSError, ValueError) as err:  # CheckpointError is a ValueError
        raise ReportError(f"{folder}: no readable checkpoint ({err}); the report reads the run's configuration "
                          "and progress from checkpoints/last.pt") from None
    unique = {}  # tied weights (the output layer and the target embeddings) are one tensor stored under two names
    for tensor in payload["model"].values():
        if hasattr(tensor, "untyped_storage"):
            unique[(tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))] = tensor
    parameters = sum(t.numel() for t in unique.values())
    return payload["config"], dict(payload.get("progress") or {}), parameters


def read_run(folder: str | Path, label: str | None = None) -> Run:
    """Read one finished run folder (see :class:`Run`).

    Raises:
        ReportError: no ``eval/test.scores.json`` (unfinished), an unreadable scores file or checkpoint.
    """
    folder = Path(folder)
    scores, prefixes = _eval_files(folder)
    if ("test", "greedy") not in scores and ("test", "beam") not in scores:
        raise ReportError(f"{folder}: no eval/test.scores.json: the run has not finished")
    config, progress, parameters = _checkpoint_facts(folder)
    try:
        curve = read_curve(folder, label)
    except (FileNotFoundError, ValueError):
        curve = None
    overrides_file = folder / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(overrides_file.read_text(encoding="utf-8")) if overrides_file.is_file() else []
    stamp = Path(f"{prefixes.get(('test', 'beam'), prefixes.get(('test', 'greedy')))}.scores.json").stat().st_mtime
    return Run(folder, label or folder.name, scores, prefixes, config, progress, parameters, curve, overrides,
               datetime.fromtimestamp(stamp, tz=timezone.utc))


def read_runs(paths: list[str | Path]) -> list[Run]:
    """The finished runs that ``paths`` name (:func:`expand`), read with unique labels (:func:`labels_for`).

    Raises:
        ReportError: as :func:`expand` and :func:`read_run`.
    """
    folders = expand(paths)
    return [read_run(folder, label) for folder, label in zip(folders, labels_for(folders))]
