"""Main-job benchmark: train for a fixed wall time on Multi30k, then print speed, memory and BLEU.

    NMT_DATA_DIR=../shared/corpora python bench/run.py --minutes 20 attention=additive

Extra arguments are Hydra overrides of ``conf/train.yaml``. Prints training target tokens/s (the mean of the
rates logged at each validation, warm-up included), peak resident memory of this process,
test BLEU/chrF (greedy and beam) with the sacreBLEU signature, and translation speed in sentences/s for the
test set (greedy and beam 5, batch 64, after one warm-up batch). Writes ``bench.json`` in the run directory.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from datetime import datetime
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from nmt.data.corpus import load_splits
from nmt.decoding.translation import translate
from nmt.models import checkpoint
from nmt.models.device import pick_device
from nmt.training.run import train

ROOT = Path(__file__).resolve().parents[1]


def decode_speed(run_dir: Path, cfg, sentences: list[str], beam_size: int) -> float:
    """Sentences per second translating ``sentences`` with the best checkpoint of ``run_dir``."""
    device = pick_device(cfg.device)
    model, _, src_tok, tgt_tok, _ = checkpoint.load(run_dir / "checkpoints" / "best.pt", device)
    translate(model, src_tok, tgt_tok, sentences[:64], cfg.decode, device, beam_size=beam_size)  # warm-up
    start = time.perf_counter()
    translate(model, src_tok, tgt_tok, sentences, cfg.decode, device, beam_size=beam_size)
    return len(sentences) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="training wall time (default 20)")
    parser.add_argument("--out", default=None, help="run directory (default bench/runs/<time>_<overrides>)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. attention=dot decoder.style=bahdanau")
    args = parser.parse_args()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"train.max_minutes={args.minutes}", "train.max_epochs=null",
                                          *args.overrides])
    tag = "_".join(o.replace("=", "-").replace("/", "-") for o in args.overrides) or "default"
    run_dir = Path(args.out or ROOT / "bench" / "runs" / f"{datetime.now():%Y%m%d-%H%M%S}_{tag}")
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    metrics = train(cfg, run_dir)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_sec"] for r in records]
    test = load_splits(cfg.data)["test"].src
    report = {
        "overrides": args.overrides, "train_minutes": round(metrics["train_minutes"], 2), "steps": metrics["steps"],
        "train_tgt_tokens_per_sec": round(sum(rates) / len(rates)), "peak_rss_gb": round(peak_gb, 2),
        **{k: v for k, v in metrics.items() if k.startswith("test_")},
        "bleu_signature": metrics["bleu_signature"],
        "test_greedy_sent_per_sec": round(decode_speed(run_dir, cfg, test, 1), 1),
        "test_beam5_sent_per_sec": round(decode_speed(run_dir, cfg, test, 5), 1),
        "parameters_m": round(sum(p.numel() for p in checkpoint.load(run_dir / "checkpoints" / "best.pt")[0]
                                  .parameters()) / 1e6, 2),
        "run_dir": str(run_dir),
    }
    (run_dir / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    width = max(len(k) for k in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
