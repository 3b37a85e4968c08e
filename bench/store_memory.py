"""Memory vs corpus size with the tokenised corpus store (nmt.data.store), against the in-memory path.

    NMT_DATA_DIR=../shared/corpora python bench/store_memory.py                 # 1x, 10x, 100x Multi30k de-en
    python bench/store_memory.py --scales 1 10 --list-max 10 --batch-tokens 1200 --workdir /tmp/x --keep

Writes Multi30k's training files repeated 1x, 10x, 100x (plain text) into a temporary folder (removed at the
end unless ``--keep``; never inside the repository), trains one joint SentencePiece model (8000 pieces) on the
1x files, and runs every measurement in a fresh process, so that each peak is that phase's alone:

- ``import``: the imports only (torch, numpy, sentencepiece): the floor under every other figure;
- ``build``: build_store from iter_lines over both files (max_len 100): seconds and peak RSS;
- ``store epoch``: open the store and iterate one shuffled epoch of batches (iterate_batches): peak RSS
  (VmHWM, which counts the store's memory-mapped pages that were touched: clean file pages the kernel can
  drop), the peak of anonymous memory (RssAnon, sampled every 200 batches: what the process really holds)
  and seconds;
- ``list epoch`` (scales up to ``--list-max``): read_lines + encode_pairs + the same epoch over the list.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAX_LEN = 100
LANGS = ("de", "en")


def status_kb(field: str) -> int:
    """A kB figure from /proc/self/status (VmHWM: peak resident set; RssAnon: anonymous memory now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux


def epoch(pairs, batch_tokens: int) -> dict:
    """One shuffled epoch of batches over ``pairs``: batches, target tokens, seconds, sampled peak RssAnon."""
    from nmt.data.batches import iterate_batches

    began, batches, tokens, anon = time.perf_counter(), 0, 0, status_kb("RssAnon")
    for batches, batch in enumerate(iterate_batches(pairs, batch_tokens, shuffle=True, seed=1), start=1):
        tokens += batch.num_tgt_tokens
        if batches % 200 == 0:
            anon = max(anon, status_kb("RssAnon"))
    return {"batches": batches, "tgt_tokens": tokens, "epoch_s": time.perf_counter() - began,
            "peak_anon_mb": max(anon, status_kb("RssAnon")) / 1024}


def child(phase: str, work: Path, scale: int, batch_tokens: int) -> dict:
    """Run one phase in this (fresh) process and return its figures."""
    from nmt.data.tokenizer import Tokenizer

    tok = Tokenizer.load(work / "joint.model")
    files = [work / f"{scale}x" / f"train.{lang}" for lang in LANGS]
    folder = work / f"{scale}x" / "store"
    out: dict = {}
    if phase == "build":
        from nmt.data.store import build_store
        from nmt.data.textio import iter_lines

        began = time.perf_counter()
        store = build_store(folder, iter_lines(files[0]), iter_lines(files[1]), tok, tok, MAX_LEN)
        out = {"build_s": time.perf_counter() - began, "pairs": len(store),
               "store_mb": sum(p.stat().st_size for p in folder.iterdir()) / 2**20}
    elif phase == "store":
        from nmt.data.store import TokenStore

        out = epoch(TokenStore(folder), batch_tokens)
    elif phase == "list":
        from nmt.data.batches import encode_pairs
        from nmt.data.corpus import read_parallel

        began = time.perf_counter()
        pairs = encode_pairs(read_parallel("train", *files), tok, tok, max_len=MAX_LEN)
        out = {"load_s": time.perf_counter() - began, **epoch(pairs, batch_tokens)}
    return {**out, "peak_rss_mb": status_kb("VmHWM") / 1024}


def run_child(phase: str, work: Path, scale: int, batch_tokens: int) -> dict:
    cmd = [sys.executable, __file__, "--child", phase, "--workdir", str(work), "--scales", str(scale),
           "--batch-tokens", str(batch_tokens)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode:
        sys.exit(f"{phase} {scale}x failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def prepare(work: Path, scales: list[int]) -> None:
    """The repeated training files and the joint SentencePiece model (on the 1x files)."""
    from nmt.data.textio import read_lines
    from nmt.data.tokenizer import train_spm

    source = Path(os.environ.get("NMT_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "corpora"))
    lines = {lang: read_lines(source / "multi30k" / f"train.{lang}.gz") for lang in LANGS}
    for scale in scales:
        (work / f"{scale}x").mkdir(parents=True, exist_ok=True)
        for lang in LANGS:
            text = "".join(f"{line}\n" for line in lines[lang])
            with open(work / f"{scale}x" / f"train.{lang}", "w", encoding="utf-8") as handle:
                handle.writelines(text for _ in range(scale))
    train_spm(lines["de"] + lines["en"], work / "joint.model", vocab_size=8000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--list-max", type=int, default=10,
                        help="largest scale also run through the in-memory list")
    parser.add_argument("--batch-tokens", type=int, default=1200)
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the corpora and stores")
    parser.add_argument("--child", choices=["import", "build", "store", "list"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child == "import":
            for module in ("nmt.data.batches", "nmt.data.store", "nmt.data.tokenizer"):
                importlib.import_module(module)

            print(json.dumps({"peak_rss_mb": status_kb("VmHWM") / 1024}))
        else:
            print(json.dumps(child(args.child, args.workdir, args.scales[0], args.batch_tokens)))
        return
    work = args.workdir or Path(tempfile.mkdtemp(prefix="store-memory-"))
    try:
        prepare(work, args.scales)
        floor = run_child("import", work, 1, args.batch_tokens)["peak_rss_mb"]
        print(f"imports alone: peak RSS {floor:.0f} MB")
        print(f"{'scale':>5} {'pairs':>9} {'build s':>8} {'build MB':>9} {'store MB':>9} | {'epoch MB':>9} "
              f"{'anon MB':>8} {'epoch s':>8} | {'list MB':>8} {'anon MB':>8} {'load+ep s':>9}")
        for scale in args.scales:
            build = run_child("build", work, scale, args.batch_tokens)
            store = run_child("store", work, scale, args.batch_tokens)
            row = (f"{scale:>4}x {build['pairs']:>9} {build['build_s']:>8.1f} {build['peak_rss_mb']:>9.0f} "
                   f"{build['store_mb']:>9.0f} | {store['peak_rss_mb']:>9.0f} {store['peak_anon_mb']:>8.0f} "
                   f"{store['epoch_s']:>8.1f} |")
            if scale <= args.list_max:
                ref = run_child("list", work, scale, args.batch_tokens)
                assert (ref["batches"], ref["tgt_tokens"]) == (store["batches"], store["tgt_tokens"])
                seconds = ref["load_s"] + ref["epoch_s"]
                row += f" {ref['peak_rss_mb']:>8.0f} {ref['peak_anon_mb']:>8.0f} {seconds:>9.1f}"
            print(row, flush=True)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
