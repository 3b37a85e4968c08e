"""Memory of training on corpora larger than Multi30k: peak resident memory of one ``train.py`` process on the
Multi30k de-en training set repeated 1, 10 and 100 times (written to a temporary folder, never kept), twice per
size: the first run builds the token store, the second reuses it.

    NMT_DATA_DIR=../shared/corpora python bench/corpus_memory.py [--scales 1 10 100] [--steps 100] [key=value ...]

Each run trains ``--steps`` updates of the default model with ``threads=1``, validates once on 100 sentences and
evaluates greedily. Printed: the peaks of the process's anonymous resident memory (its own: tensors, Python objects,
SentencePiece) and of its file-backed resident pages (the libraries and the memory-mapped token store, which the
kernel can drop and read again), sampled from /proc every 50 ms.
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


def rss(pid: int) -> tuple[int, int]:
    """The process's current anonymous and file-backed resident memory (KiB), from /proc; (0, 0) once it ended."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["RssAnon"].split()[0]), int(fields["RssFile"].split()[0])
    except (OSError, KeyError, ValueError):
        return 0, 0


def run(settings: list[str], run_dir: Path, cache: Path) -> dict:
    """Peak memory (GiB: anonymous, file-backed), seconds and the store line of one training run."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "train.py", *settings, f"hydra.run.dir={run_dir}"], cwd=ROOT,
                            env={**os.environ, "NMT_CACHE_DIR": str(cache)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    anon = file = 0
    while proc.poll() is None:  # sampled every 50 ms: the peak of a short spike may be missed by that much
        now = rss(proc.pid)
        anon, file = max(anon, now[0]), max(file, now[1])
        time.sleep(0.05)
    if proc.returncode:
        raise SystemExit(f"train.py failed: see {run_dir}/train.log")
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    store = re.findall(r"(building|reusing) the token store", log)
    return {"anon": anon / 2**20, "file": file / 2**20,
            "seconds": time.monotonic() - start, "store": store[0] if store else "?"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--steps", type=int, default=100)
    args, overrides = parser.parse_known_args()
    data = Path(os.environ.get("NMT_DATA_DIR", ROOT.parent / "shared" / "corpora")).resolve()
    work = Path(tempfile.mkdtemp(prefix="nmt-corpus-memory-"))
    try:
        print(f"{'corpus':<8} {'pairs':>10} {'run':<8} {'store':<9} {'anon GiB':>9} {'file GiB':>9} {'seconds':>8}")
        for scale in args.scales:
            folder = work / f"x{scale}"
            folder.mkdir()
            settings = [*corpus(folder, scale, data), f"train.max_steps={args.steps}",
                        f"train.valid_every={args.steps}", "data.eval_limit=100", "decode=greedy", "eval.plots=0",
                        "train.keep_best=0", "threads=1", "device=cpu", *overrides]
            for attempt in ("first", "second"):
                got = run(settings, folder / attempt, work / "cache")
                print(f"{scale:>3}x     {29000 * scale:>10,} {attempt:<8} {got['store']:<9} {got['anon']:>9.2f} "
                      f"{got['file']:>9.2f} {got['seconds']:>8.0f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
