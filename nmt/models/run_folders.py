"""Hints for a checkpoint path that names no checkpoint: which run folder or file was probably meant.

A run folder is one that holds ``checkpoints/`` (``train.py`` writes ``checkpoints/best.pt``, ``last.pt``,
``step_N.pt``, ``averaged.pt`` there). These helpers only read folder listings; they never load a checkpoint.
"""

from __future__ import annotations

import difflib
from pathlib import Path


def run_folders(folder: Path) -> list[Path]:
    """The run folders directly inside ``folder``, newest first (by the time of their ``checkpoints/``);
    ``[]`` for a folder that cannot be listed."""
    try:
        runs = [child for child in folder.iterdir() if (child / "checkpoints").is_dir()]
    except OSError:
        return []
    return sorted(runs, key=lambda child: (child / "checkpoints").stat().st_mtime, reverse=True)


def checkpoint_files(folder: Path) -> list[str]:
    """The names of the ``.pt`` files directly inside ``folder``, sorted; ``[]`` for a folder that cannot be
    listed."""
    try:
        return sorted(child.name for child in folder.iterdir() if child.suffix == ".pt" and child.is_file())
    except OSError:
        return []


def closest(name: str, candidates: list[str]) -> str | None:
    """The candidate most like ``name`` (a typo of it), or ``None`` when none is close (difflib ratio < 0.6)."""
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def not_found_hint(path: Path) -> str:
    """What to give instead of a checkpoint path that does not exist, as a parenthesis to append to the error.

    Looked up in the nearest folder of ``path`` that exists: a ``.pt`` file of a similar name there (or the list
    of them), else the run folder whose name is most like the missing one, else the newest run folder there, else,
    when the folder ``path`` names is missing too or holds neither checkpoints nor run folders, where ``train.py``
    writes run folders.
    """
    parent, missing = path.parent, path.name
    while parent != parent.parent and not parent.is_dir():
        parent, missing = parent.parent, parent.name  # the nearest folder of the path that exists
    files = checkpoint_files(parent) if parent == path.parent else []
    if files:
        match = closest(missing, files)
        return (f" (did you mean {parent / match}?)" if match else
                f" ({parent} holds {', '.join(files)})")
    runs = run_folders(parent)
    if runs:
        match = closest(missing, [run.name for run in runs])
        if match:
            return f" (did you mean the run folder {parent / match}?)"
        more = f"; {len(runs)} run folders there" if len(runs) > 1 else ""
        return f" (the newest run folder in {parent} is {runs[0]}{more})"
    missing_folder = (f"there is no folder {path.parent}" if parent != path.parent else
                      f"{parent} holds no checkpoint and no run folder")
    return (f" ({missing_folder}: train.py writes each run to a folder of its own under outputs/ of the folder it "
            "was started in, and prints it as 'run folder ...')")


def folder_hint(path: Path) -> str:
    """What to give instead of a folder ``path`` that was passed as a checkpoint file, as the end of the error:
    one of a run folder's checkpoints, one of the files of a folder of checkpoints, or the newest of the run
    folders inside it."""
    if (path / "checkpoints").is_dir():
        return f": a run folder; pass one of its checkpoints, e.g. {path / 'checkpoints' / 'best.pt'}"
    files = checkpoint_files(path)
    if files:
        example = "best.pt" if "best.pt" in files else files[-1]
        return f": a folder of checkpoints ({', '.join(files)}); pass one of them, e.g. {path / example}"
    runs = run_folders(path)
    if runs:
        return (f": a folder of {len(runs)} run folder{'s' if len(runs) > 1 else ''}; pass one of them, e.g. the "
                f"newest, {runs[0]}")
    return " (nor a run folder: it has no checkpoints/); give a .pt file written by train.py or its run folder"
