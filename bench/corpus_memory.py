"""Memory of training on corpora larger than Multi30k: peak resident memory of one ``train.py`` process on the
Multi30k de-en training set repeated 1, 10 and 100 times (written to a temporary folder, never kept), twice per
size: the first run builds the token store, the second reuses it.

    NMT_DATA_DIR=../shared/corpora python bench/corpus_memory.py [--scales 1 10 100] [--steps 100] [key=value ...]

Each run trains ``--steps`` updates of the default model with ``threads=1``, validates once on 100 sentences and
evaluates greedily; the printed peak is the process's maximum resident set (``wait4``'s ru_maxrss), which counts
the memory-mapped store pages it touched as well as its own memory.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def corpus(folder: Path, scale: int, data: Path) -> list[str]:
    """Write train.{de,en} (Multi30k repeated ``scale`` times) and return the data=files settings."""
    for lang in ("de", "en"):
        with gzip.open(data / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as gz:
            text = gz.read()
        with open(folder / f"train.{lang}", "w", encoding="utf-8") as out:
            out.writelines(text for _ in range(scale))
    return ["data=files", f"data.train_src={folder}/train.de", f"data.train_tgt={folder}/train.en",
            f"data.valid_src={data}/multi30k/val.de.gz", f"data.valid_tgt={data}/multi30k/val.en.gz",
            f"data.test_src={data}/multi30k/test_2016_flickr.de.gz",
            f"data.test_tgt={data}/multi30k/test_2016_flickr.en.gz"]


def run(settings: list[str], run_dir: Path, cache: Path) -> tuple[float, float, str]:
    """Peak RSS (GiB), seconds and the store line of one training run."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "train.py", *settings, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                            env={**os.environ, "NMT_CACHE_DIR": str(cache)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"train.py failed: see {run_dir}/train.log")
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    store = re.findall(r"(building|reusing) the token store", log)
    return usage.ru_maxrss / 2**20, time.monotonic() - start, store[0] if store else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--steps", type=int, default=100)
    args, overrides = parser.parse_known_args()
    data = Path(os.environ.get("NMT_DATA_DIR", ROOT.parent / "shared" / "corpora")).resolve()
    work = Path(tempfile.mkdtemp(prefix="nmt-corpus-memory-"))
    try:
        print(f"{'corpus':<8} {'pairs':>10} {'run':<8} {'store':<9} {'peak RSS GiB':>12} {'seconds':>8}")
        for scale in args.scales:
            folder = work / f"x{scale}"
            folder.mkdir()
            settings = [*corpus(folder, scale, data), f"train.max_steps={args.steps}",
                        f"train.valid_every={args.steps}", "data.eval_limit=100", "decode=greedy", "eval.plots=0",
                        "train.keep_best=0", "threads=1", "device=cpu", *overrides]
            for attempt in ("first", "second"):
                rss, seconds, store = run(settings, folder / attempt, work / "cache")
                print(f"{scale:>3}x     {29000 * scale:>10,} {attempt:<8} {store:<9} {rss:>12.2f} {seconds:>8.0f}",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
