"""The package as users install it: the wheel holds every module and every Hydra config (conf/ is installed as
nmt/conf/), the installed package finds its configs from any folder, and ``nmt-train``/``nmt-translate`` train and
translate from a folder that is not the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
TINY = ["data.train_limit=400", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", "train.max_steps=3", "train.valid_every=3",
        "decode.beam_size=2", "eval.plots=0", "device=cpu", "threads=1"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the sources (setuptools writes build/ where it builds)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("nmt", "conf"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           str(source), "-w", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("nmt-*.whl")
    return built


def test_the_wheel_holds_every_module_config_and_command(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(REPO)) for p in (REPO / "nmt").rglob("*.py")}
    configs = {"nmt/" + str(p.relative_to(REPO)) for p in (REPO / "conf").rglob("*.yaml")}
    templates = {str(p.relative_to(REPO)) for p in (REPO / "nmt" / "report" / "templates").glob("*.j2")}
    assert "nmt/conf/train.yaml" in configs and "nmt/conf/attention/additive.yaml" in configs
    assert not (modules | configs | templates) - names, "add the new folder to pyproject.toml [tool.setuptools]"
    (entry_points,) = [n for n in names if n.endswith("entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    for command in ("nmt-train = nmt.train:command", "nmt-translate = nmt.translate:command", "nmt-align", "nmt-report"):
        assert command in scripts


def test_the_installed_package_finds_its_own_configs_from_any_folder(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**ENV, "PYTHONPATH": str(site)}
    found = subprocess.run([sys.executable, "-c", "import nmt.settings as s; print(s.__file__); print(s.config_dir())"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True)
    module, folder = found.stdout.split()
    assert Path(module).is_relative_to(site) and Path(folder) == site / "nmt" / "conf"
    helped = subprocess.run([sys.executable, "-m", "nmt.train", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert helped.returncode == 0, helped.stderr
    assert "nmt-train" in helped.stdout and "attention: additive" in helped.stdout and "max_minutes" in helped.stdout


def test_nmt_train_and_nmt_translate_run_outside_the_repository(tmp_path):
    train, translate = shutil.which("nmt-train"), shutil.which("nmt-translate")
    if train is None or translate is None:
        pytest.skip("nmt-train / nmt-translate are not on PATH (pip install -e . puts them there)")
    proc = subprocess.run([train, *TINY, "hydra.run.dir=run"], cwd=tmp_path, env=ENV, capture_output=True,
                          text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "best.pt").is_file() and (tmp_path / "run" / "train.log").is_file()
    (tmp_path / "in.de").write_text("Ein Mann fährt Fahrrad .\n\nZwei Hunde spielen im Schnee .\n", encoding="utf-8")
    proc = subprocess.run([translate, "checkpoint=run", "input=in.de", "output=out.en", "threads=1"], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len((tmp_path / "out.en").read_text(encoding="utf-8").split("\n")) == 4  # 3 lines, the empty one kept
    refused = subprocess.run([translate, "checkpoint=run"], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                             timeout=300, check=False)
    assert refused.returncode == 1 and "nmt-translate: error: missing input=" in refused.stderr
