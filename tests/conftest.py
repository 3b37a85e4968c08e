"""Shared fixtures: the local Multi30k corpus, a small real slice of it, a tiny SentencePiece model, and
``compose_cfg`` (the real ``conf/`` tree composed through Hydra's compose API).

``NMT_DATA_DIR`` defaults to ``<repo>/../shared/corpora`` (the team machines' layout, design.md §1) when it is
not set; it is set here at import so that subprocesses (``python train.py``) inherit it too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("NMT_DATA_DIR", str((REPO_ROOT.parent / "shared" / "corpora").resolve()))
# token stores of the runs the tests train go to a fresh folder (subprocesses inherit it), not ~/.cache/nmt
os.environ.setdefault("NMT_CACHE_DIR", tempfile.mkdtemp(prefix="nmt-cache-"))

SLICE_PAIRS = 3000  # first N training pairs of Multi30k de-en used by the small-data fixtures
SPM_VOCAB = 500


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """The tests use tiny tensors: one intra-op thread is faster for them and does not thrash when another
    job shares the cores (with two threads, small-op tests slowed down 20-60x under load)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


def load_bench_script(name: str):
    """The module of ``bench/<name>.py``, loaded from its file (bench/ is not a package; its scripts import their
    neighbour speed.py, so bench/ is on ``sys.path`` while it loads)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO_ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO_ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO_ROOT / "bench"))
    return module


@pytest.fixture(scope="session")
def bench_script():
    """``bench_script("speed")``: the module of a benchmark script (:func:`load_bench_script`)."""
    return load_bench_script


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """``$NMT_DATA_DIR/multi30k``; fails with a usage message when the raw Multi30k files are not there."""
    folder = Path(os.environ["NMT_DATA_DIR"]) / "multi30k"
    if not (folder / "train.de.gz").is_file():
        pytest.fail(
            f"Multi30k not found: {folder / 'train.de.gz'} does not exist.\n"
            "These tests read the raw Multi30k files {train,val,test_2016_flickr}.{en,de,fr,cs}.gz from "
            "$NMT_DATA_DIR/multi30k (default: <repo>/../shared/corpora). Run for example\n"
            "    NMT_DATA_DIR=/path/to/corpora python -m pytest",
            pytrace=False,
        )
    return folder


@pytest.fixture(scope="session")
def compose_cfg():
    """``compose_cfg(overrides, config_name="train")`` -> the composed (struct) DictConfig from ``conf/``."""
    from hydra import compose, initialize_config_dir

    def _compose(overrides=(), config_name: str = "train"):
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            return compose(config_name, overrides=list(overrides))

    return _compose


@pytest.fixture(scope="session")
def small_splits(multi30k_dir, compose_cfg):
    """Multi30k de-en through :func:`nmt.data.load_splits`: the first 3000 training pairs, full valid/test."""
    from nmt.data.corpus import load_splits

    cfg = compose_cfg([f"data.train_limit={SLICE_PAIRS}", "data.src_lang=de", "data.tgt_lang=en"])
    return load_splits(cfg.data)


@pytest.fixture(scope="session")
def spm_model(small_splits, tmp_path_factory) -> Path:
    """A joint BPE SentencePiece model (500 pieces, byte fallback) trained on the small slice."""
    from nmt.data.tokenizer import train_spm

    train = small_splits["train"]
    return train_spm(train.src + train.tgt, tmp_path_factory.mktemp("spm") / "joint.model", vocab_size=SPM_VOCAB)


@pytest.fixture(scope="session")
def tokenizer(spm_model):
    from nmt.data.tokenizer import Tokenizer

    return Tokenizer.load(spm_model)
