"""The installed commands (pyproject.toml [project.scripts]): every one is registered, and each runs from another
folder than the repository, with its usage on --help (or on missing arguments): a ``key=value`` setting each."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess

import pytest

COMMANDS = {"nmt-aer": "gold=", "nmt-align": "checkpoint=", "nmt-average": "best=", "nmt-curves": "labels=",
            "nmt-plot": "index=", "nmt-report": "baseline="}
WITHOUT_HELP = {"nmt-align"}  # prints its usage on missing arguments (exit 2); the others on --help (exit 0)
HYDRA_APPS = {"nmt-train": "max_minutes:", "nmt-translate": "checkpoint:"}  # --help lists every setting as key: value


def test_every_command_is_registered_and_loads():
    scripts = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")
               if ep.name.startswith("nmt-")}
    assert set(scripts) == set(COMMANDS) | set(HYDRA_APPS), "pip install -e . registers the commands of pyproject.toml"
    for ep in scripts.values():
        assert callable(ep.load())


@pytest.mark.parametrize("command, usage", sorted(COMMANDS.items()))
def test_a_command_runs_from_another_folder(command, usage, tmp_path):
    path = shutil.which(command)
    if path is None:
        pytest.skip(f"{command} is not on PATH (pip install -e . puts it there)")
    help_ = command not in WITHOUT_HELP
    proc = subprocess.run([path, "--help"] if help_ else [path], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert usage in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert proc.returncode == (0 if help_ else 2)
    if help_:  # the installed command names itself, not python -m nmt.X
        assert proc.stdout.startswith(f"usage: {command} "), proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command, setting", sorted(HYDRA_APPS.items()))
def test_the_hydra_apps_list_their_settings_from_another_folder(command, setting, tmp_path):
    path = shutil.which(command)
    if path is None:
        pytest.skip(f"{command} is not on PATH (pip install -e . puts it there)")
    proc = subprocess.run([path, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{command} (also python " in proc.stdout and setting in proc.stdout
    # nmt-train lists the groups it composes from; nmt-translate has none to choose (the checkpoint holds the model)
    assert ("attention: additive" in proc.stdout) == (command == "nmt-train")
