"""Scaling benchmark: training target tokens/s of one process x 1 thread, 2 processes x 1 thread (torchrun, gloo)
and one process x 2 threads, measured alternately, with the peak resident memory of each rank.

    NMT_DATA_DIR=../shared/corpora python bench/scale.py                 # default model, Multi30k de-en
    NMT_DATA_DIR=../shared/corpora python bench/scale.py --rounds 3 --steps 150 model.hidden_size=256

Each measurement is a fresh launch of this file with ``--worker``: every rank builds the same length-bucketed
batches (its share of each update, as training does), runs ``--warmup`` updates, then times ``--steps`` updates
of the real training step (label smoothing, clipping, Adam; DDP under torchrun) and reports the global target
tokens/s (all ranks' tokens over rank 0's wall time) and each rank's peak RSS. The configurations alternate
within each round so that a drift of the machine's speed hits all of them alike. Prints a table and writes
``--json`` (default bench/runs/scale-<time>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"1 proc x 1 thread": (1, 1), "2 procs x 1 thread": (2, 1), "1 proc x 2 threads": (1, 2)}


def worker(args, overrides: list[str]) -> None:
    """One measurement on this rank (see the module docstring); rank 0 prints one JSON line."""
    import torch
    from hydra import compose, initialize_config_dir

    from nmt.data.batches import encode_pairs
    from nmt.data.corpus import load_splits
    from nmt.models.build import build_model
    from nmt.training.distributed import init_distributed
    from nmt.training.run import data_parallel
    from nmt.training.schedule import make_optimizer
    from nmt.training.shards import UpdateBatches
    from nmt.training.step import train_step
    from nmt.training.subwords import prepare_tokenizers

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["device=cpu", *overrides])
    torch.set_num_threads(args.threads)
    dist, _ = init_distributed("cpu", 600)
    splits = load_splits(cfg.data)
    if not dist.is_main:
        dist.barrier()
    toks = prepare_tokenizers(cfg.tokenizer, splits["train"], Path(args.work) / "spm")
    if dist.is_main:
        dist.barrier()
    pairs = encode_pairs(splits["train"], *toks, cfg.data.max_len)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(toks[0]), len(toks[1]))
    optimizer, _ = make_optimizer(model, cfg)
    forward = data_parallel(model, dist, torch.device("cpu"))
    updates = UpdateBatches(cfg.train.batch_tokens, cfg.train.accum_steps, dist)
    batches, epoch = [], 0
    while len(batches) < args.warmup + args.steps:
        batches += list(updates.epoch(pairs, cfg.seed + epoch, 0))
        epoch += 1
    params = list(model.parameters())
    for update in batches[: args.warmup]:
        train_step(forward, optimizer, update, cfg.train, dist, parameters=params)
    dist.barrier()
    tokens, start = 0, time.perf_counter()
    for update in batches[args.warmup: args.warmup + args.steps]:
        tokens += train_step(forward, optimizer, update, cfg.train, dist, parameters=params)[1]
    seconds = time.perf_counter() - start
    rss = dist.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)  # KiB -> GiB
    if dist.is_main:
        print(json.dumps({"tokens_per_sec": tokens / seconds, "seconds": seconds, "steps": args.steps,
                          "peak_rss_gb_per_rank": rss, "training_pairs": len(pairs)}), flush=True)
    dist.close()


def measure(name: str, args, overrides: list[str]) -> dict:
    """Launch one configuration and return its JSON line."""
    procs, threads = CONFIGS[name]
    script = [str(Path(__file__).resolve()), "--worker", "--threads", str(threads), "--warmup", str(args.warmup),
              "--steps", str(args.steps), "--work", args.work, *overrides]
    command = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}", *script]
               if procs > 1 else [sys.executable, *script])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the three configurations")
    parser.add_argument("--warmup", type=int, default=20, help="untimed updates first")
    parser.add_argument("--steps", type=int, default=150, help="timed updates")
    parser.add_argument("--work", default=str(ROOT / "bench" / "runs" / "scale_work"), help="SentencePiece cache")
    parser.add_argument("--json", default=None, help="output file")
    args, overrides = parser.parse_known_args()
    if args.worker:
        return worker(args, overrides)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    results = {name: [] for name in CONFIGS}
    for round_ in range(args.rounds):
        for name in CONFIGS:
            results[name].append(measure(name, args, overrides))
            print(f"round {round_ + 1} {name}: {results[name][-1]['tokens_per_sec']:.0f} target tok/s, peak RSS "
                  f"{', '.join(f'{g:.2f}' for g in results[name][-1]['peak_rss_gb_per_rank'])} GiB", flush=True)
    mean = {name: sum(r["tokens_per_sec"] for r in runs) / len(runs) for name, runs in results.items()}
    base = mean["1 proc x 1 thread"]
    print(f"\n{'configuration':<20} {'tok/s':>8} {'vs 1x1':>7}")
    for name, value in mean.items():
        print(f"{name:<20} {value:>8.0f} {value / base:>6.2f}x")
    print(f"parallel efficiency of 2 processes: {mean['2 procs x 1 thread'] / base / 2:.0%}")
    out = Path(args.json or ROOT / "bench" / "runs" / f"scale-{datetime.now():%Y%m%d-%H%M%S}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"overrides": overrides, "results": results, "mean_tokens_per_sec": mean}, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
