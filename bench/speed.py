"""Speed benchmark: training throughput, memory, decoding speed, FLOPs and the machine's GEMM limit.

    NMT_DATA_DIR=../shared/corpora python bench/speed.py                       # default model, Multi30k de-en
    NMT_DATA_DIR=../shared/corpora python bench/speed.py --checkpoint RUN/checkpoints/best.pt   # decode a trained model
    NMT_DATA_DIR=../shared/corpora python bench/speed.py --scaling             # + cost vs data size and length
    NMT_DATA_DIR=../shared/corpora python bench/speed.py --peer opennmt --rounds 2   # interleaved with OpenNMT-py
    NMT_DATA_DIR=../shared/corpora python bench/speed.py --peer opennmt --rounds 3 --decode-only --checkpoint CKPT
                                             # decoding alone, alternating with the peer's last checkpoint
    python bench/speed.py model.tie_embeddings=false tokenizer.restrict_vocab=false   # any train.yaml override

Prints (see bench/README.md for the FLOP count):
- training target tokens/s over a steady window (``--steps``, default 300, after ``--warmup`` steps), with a fixed
  seed, ``torch.set_num_threads(--threads)`` and the real training step (label smoothing, clipping, Adam);
- peak resident memory of this process (the whole benchmark: data, model, optimizer, decoding);
- test_2016_flickr translation sentences/s, greedy and beam 5 (batch ``decode.batch_size``, in ``train.precision``),
  with the model just trained for the window (or ``--checkpoint``), after one warm-up batch;
- the model's FLOPs per target token (forward + backward, from the layer sizes and the corpus' mean lengths), the
  measured fp32 GEMM rate of this machine (a large and a decoder-sized product), and the fraction of the large-GEMM
  rate that training reaches;
- with ``--scaling``: seconds per epoch on 25/50/100% of the training set, and ms per target token for batches of
  sentences bucketed by length (1-10, 11-20, ... subwords), to show cost is linear in data and in length;
- with ``--corpus tatoeba``: the same on ../shared/corpora/tatoeba_deu_eng (about 170k pairs), for memory growth;
- with ``--peer opennmt|joeynmt``: the peer's steady-window tokens/s and decoding speed from
  ../shared/bench/peers (its own log parser), run alternately with ours ``--rounds`` times, and the ratios.
Writes everything to ``--json`` (default bench/runs/speed-<time>.json).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nmt.data.batches import encode_pairs, iterate_batches
from nmt.data.corpus import Parallel, load_splits
from nmt.decoding.translation import translate
from nmt.models import checkpoint
from nmt.models.allocator import reuse_freed_memory
from nmt.models.build import build_model
from nmt.models.precision import Precision, check_precision
from nmt.training.run import training_memory
from nmt.training.schedule import make_optimizer
from nmt.training.step import train_step
from nmt.training.subwords import prepare_tokenizers

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "bench" / "peers"


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, GB (Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def gemm_rate(m: int, k: int, n: int, seconds: float = 2.0) -> float:
    """Measured fp32 matrix-product rate in GFLOP/s for ``[m, k] x [k, n]`` (2mkn FLOPs per product), into one
    preallocated output: the product alone, not the allocator's cost of a fresh ``[m, n]`` block each time."""
    a, b, c = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    for _ in range(3):
        torch.mm(a, b, out=c)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b, out=c)
        count += 1
    return 2 * m * k * n * count / (time.perf_counter() - start) / 1e9


def flops_per_target_token(cfg, src_vocab: int, tgt_vocab: int, src_per_tgt: float, mean_src_len: float) -> dict:
    """Forward multiply-adds of the model per target token, from the layer sizes (bench/README.md), and the
    training FLOPs (2 FLOPs per multiply-add, backward = 2x forward)."""
    m = cfg.model
    E, H, h = m.emb_size, m.hidden_size, m.hidden_size // 2
    R = E if m.get("tie_embeddings") else H
    kind = cfg.attention._target_.rsplit(".", 1)[-1]
    inner = cfg.attention.get("score", "general") if kind == "LocalP" else kind.lower()
    A = cfg.attention.get("hidden_size") or H
    S = mean_src_len if kind != "LocalP" else min(mean_src_len, 2 * cfg.attention.window + 1)
    enc = sum(2 * 3 * h * ((E if layer == 0 else 2 * h) + h) for layer in range(m.encoder_layers))
    prepare = {"additive": H * A, "general": H * H, "dot": 0}[inner]
    style = cfg.decoder.style
    feed = {"luong": R if cfg.decoder.get("input_feeding", True) else 0, "bahdanau": H, "conditional": 0}[style]
    second = 3 * H * 2 * H if style == "conditional" else 0  # the conditional GRU's GRU_2(c_t, s'_t)
    gru = 3 * H * (E + feed + H) + second + (m.decoder_layers - 1) * 3 * H * 2 * H
    score = {"additive": H * A + S * A, "general": S * H, "dot": S * H}[inner]
    if kind == "LocalP":
        score += H * H + H
    attention = score + S * H  # + context vector
    combine = 2 * H * R if style == "luong" else (2 * H + E) * R
    generator = R * tgt_vocab
    parts = {"encoder (per target token)": src_per_tgt * (enc + prepare), "decoder GRU": gru,
             "attention": attention, "readout": combine, "output layer": generator}
    forward = sum(parts.values())
    return {"macs_forward": {k: round(v) for k, v in parts.items()}, "train_flops": 2 * 3 * forward}


def load_corpus(cfg, corpus: str) -> dict[str, Parallel]:
    """Multi30k through the config, or the Tatoeba German-English tsv from NMT_DATA_DIR."""
    if corpus == "multi30k":
        return load_splits(cfg.data)
    folder = Path(os.environ.get("NMT_DATA_DIR", ROOT.parent / "shared" / "corpora")) / "tatoeba_deu_eng"
    path = folder / "deu.txt.gz"  # manythings.org deu-eng: "English<TAB>German" per line (see its SOURCE.md)
    if not path.is_file():
        raise SystemExit(f"Tatoeba German-English not found: {path}")
    src, tgt = [], []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 2 and cols[0].strip() and cols[1].strip():
                # tatoeba tsv: English first (see its SOURCE.md); we translate German -> English
                tgt.append(cols[0]), src.append(cols[1])
    multi = load_splits(cfg.data)
    return {"train": Parallel("train", src, tgt), "valid": multi["valid"], "test": multi["test"]}


def training_setup(cfg, splits: dict[str, Parallel], spm_dir: Path) -> tuple:
    """What the benchmarks train: the subword models (trained once into ``spm_dir``, reused after), the encoded
    training pairs, the model in training mode and its optimizer, as ``(src_tok, tgt_tok, pairs, model,
    optimizer)``."""
    src_tok, tgt_tok = prepare_tokenizers(cfg.tokenizer, splits["train"], spm_dir)
    pairs = encode_pairs(splits["train"], src_tok, tgt_tok, cfg.data.max_len)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(src_tok), len(tgt_tok)).train()
    optimizer, _ = make_optimizer(model, cfg)
    return src_tok, tgt_tok, pairs, model, optimizer


def run_precision(cfg) -> Precision:
    """The precision the benchmark trains and decodes in: ``train.precision`` (``auto`` resolved for this CPU)."""
    cpu = torch.device("cpu")
    return Precision(check_precision(cfg.train.get("precision") or "fp32", cpu), cpu)


def time_steps(model, optimizer, batches, cfg) -> tuple[float, int]:
    """Seconds and target tokens for training on ``batches`` (in ``train.precision``)."""
    precision = run_precision(cfg)
    tokens, start = 0, time.perf_counter()
    for batch in batches:
        tokens += train_step(model, optimizer, batch, cfg.train, precision=precision)[1]
    return time.perf_counter() - start, tokens


def decode_speed(model, src_tok, tgt_tok, sentences, cfg, beam_size: int) -> float:
    """Sentences/s translating ``sentences`` in ``train.precision`` (one warm-up batch first)."""
    with run_precision(cfg).autocast():
        translate(model, src_tok, tgt_tok, sentences[:32], cfg.decode, torch.device("cpu"), beam_size=beam_size)
        start = time.perf_counter()
        translate(model, src_tok, tgt_tok, sentences, cfg.decode, torch.device("cpu"), beam_size=beam_size)
    return len(sentences) / (time.perf_counter() - start)


def ours(args, cfg) -> dict:
    """One measurement of this toolkit: training window, memory, decoding (decoding only with --decode-only)."""
    torch.manual_seed(cfg.seed)
    splits = load_corpus(cfg, args.corpus)
    if args.decode_only:
        model, _, src_tok, tgt_tok, _ = checkpoint.load(args.checkpoint)
        model.eval()
        return {"test_greedy_sent_per_sec": decode_speed(model, src_tok, tgt_tok, splits["test"].src, cfg, 1),
                "test_beam5_sent_per_sec": decode_speed(model, src_tok, tgt_tok, splits["test"].src, cfg, 5),
                "peak_rss_gb": peak_rss_gb()}
    src_tok, tgt_tok, pairs, model, optimizer = training_setup(cfg, splits, Path(args.work) / f"spm_{args.corpus}")
    need = args.warmup + args.steps
    batches, epoch = [], 0
    while len(batches) < need:
        batches += list(iterate_batches(pairs, cfg.train.batch_tokens, shuffle=True, seed=cfg.seed + epoch))
        epoch += 1
    time_steps(model, optimizer, batches[: args.warmup], cfg)
    seconds, tokens = time_steps(model, optimizer, batches[args.warmup:need], cfg)
    src_tokens = sum(len(s) for s, _ in pairs)
    tgt_tokens = sum(len(t) for _, t in pairs)
    flops = flops_per_target_token(cfg, len(src_tok), len(tgt_tok), src_tokens / tgt_tokens, src_tokens / len(pairs))
    result = {
        "train_tgt_tokens_per_sec": tokens / seconds, "train_steps_timed": args.steps,
        "train_sec_per_step": seconds / args.steps, "mean_tgt_tokens_per_batch": tokens / args.steps,
        "peak_rss_train_gb": peak_rss_gb(), "parameters_m": sum(p.numel() for p in model.parameters()) / 1e6,
        "vocab": [len(src_tok), len(tgt_tok)], "training_pairs": len(pairs), **flops,
    }
    if args.scaling:
        result["scaling"] = scaling(model, optimizer, pairs, cfg)
    if args.checkpoint:
        model, _, src_tok, tgt_tok, _ = checkpoint.load(args.checkpoint)
    model.eval()
    test = splits["test"].src
    result["test_greedy_sent_per_sec"] = decode_speed(model, src_tok, tgt_tok, test, cfg, 1)
    result["test_beam5_sent_per_sec"] = decode_speed(model, src_tok, tgt_tok, test, cfg, 5)
    result["peak_rss_gb"] = peak_rss_gb()
    return result


def scaling(model, optimizer, pairs, cfg) -> dict:
    """Seconds per epoch at 25/50/100% of the pairs; ms per target token by source/target length bucket."""
    out: dict = {"sec_per_epoch": {}, "ms_per_tgt_token_by_length": {}}
    for share in (0.25, 0.5, 1.0):
        subset = pairs[: int(len(pairs) * share)]
        seconds, _ = time_steps(model, optimizer, iterate_batches(subset, cfg.train.batch_tokens, True, 7), cfg)
        out["sec_per_epoch"][f"{int(share * 100)}%"] = round(seconds, 1)
    for low in range(1, 60, 10):
        bucket = [p for p in pairs if low <= max(len(p[0]), len(p[1])) < low + 10]
        if len(bucket) < 200:
            continue
        batches = list(iterate_batches(bucket, cfg.train.batch_tokens, True, 7))[:20]
        seconds, tokens = time_steps(model, optimizer, batches, cfg)
        out["ms_per_tgt_token_by_length"][f"{low}-{low + 9}"] = round(1000 * seconds / tokens, 3)
    return out


def peer(name: str, budget_s: int, decode_only: bool = False) -> dict:
    """Run a peer's train (fixed budget) and eval scripts, or with ``decode_only`` its eval script alone on the
    checkpoint its last training left; parse its steady-window throughput and decoding speed.

    Raises:
        FileNotFoundError: with ``decode_only`` when the peer has no checkpoint yet (run a round without it).
    """
    folder = PEERS / name
    # OpenNMT-py 3.5.1 pickles argparse objects into its checkpoints: torch >= 2.6 loads them only with this
    env = {**os.environ, "TRAIN_BUDGET_S": str(budget_s), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    work = Path(env.get("PEERS_ROOT", "/tmp/peers")) / name
    if decode_only and not any((work / "run").glob("*.pt")):
        raise FileNotFoundError(f"--decode-only: {work / 'run'} holds no {name} checkpoint; run one round "
                                "without --decode-only first (the peer trains for --peer-budget seconds)")
    subprocess.run(["bash", str(folder / "run.sh"), *(["eval"] if decode_only else ["train", "eval"])],
                   check=True, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return parse_peer_results(work / "results", decode_only)


def parse_peer_results(results: Path, decode_only: bool = False) -> dict:
    """Figures from a peer's ``results/`` folder: ``throughput.txt`` (steady window 50-350), ``eval.txt``
    (decoding sentences/s) and ``train.time`` (``/usr/bin/time -v`` peak memory); missing figures are left out.
    ``decode_only`` reads ``eval.txt`` alone (the training files are from an earlier run)."""
    text = (results / "eval.txt").read_text()
    if not decode_only:
        text = (results / "throughput.txt").read_text() + "\n" + text
    found: dict = {"raw": text}
    if match := re.search(r"steady 50-350: tgt\s+(\d+) tok/s", text):
        found["train_tgt_tokens_per_sec"] = float(match.group(1))
    for beam in (1, 5):
        if match := re.search(rf"beam{beam} decode:.*=> ([\d.]+) sent/s", text):
            found[f"test_{'greedy' if beam == 1 else 'beam5'}_sent_per_sec"] = float(match.group(1))
    if not decode_only and (match := re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                                                (results / "train.time").read_text())):
        found["peak_rss_train_gb"] = int(match.group(1)) / 1024**2
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="timed training steps (default 300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first (default 30)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--checkpoint", help="decode with this trained checkpoint instead of the benchmark model")
    parser.add_argument("--decode-only", action="store_true",
                        help="with --checkpoint: no training window, decoding only; with --peer, the peer decodes "
                             "the checkpoint of its last training again (rounds of decoding, A, B, A, B)")
    parser.add_argument("--scaling", action="store_true", help="also time epochs by data share and length bucket")
    parser.add_argument("--corpus", choices=["multi30k", "tatoeba"], default="multi30k")
    parser.add_argument("--peer", choices=["opennmt", "joeynmt"], help="also run this peer, alternating with ours")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds with --peer (A, B, A, B ...)")
    parser.add_argument("--peer-budget", type=int, default=600, help="peer training seconds per round")
    parser.add_argument("--work", default="/tmp/nmt_speed", help="scratch folder (sentencepiece models)")
    parser.add_argument("--json", help="write the report here (default bench/runs/speed-<time>.json)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of conf/train.yaml")
    args = parser.parse_args()
    if args.decode_only and (not args.checkpoint or args.scaling):
        parser.error("--decode-only needs --checkpoint (the model to decode) and excludes --scaling")
    torch.set_num_threads(args.threads)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"threads={args.threads}", "device=cpu", *args.overrides])
    # memory as translate.py (--decode-only) or train.py treats it (NMT_MALLOC= and the kernel cache's variable)
    if args.decode_only:
        allocator = reuse_freed_memory(default="reuse")
    else:
        allocator = training_memory(run_precision(cfg).name, torch.device("cpu"))
    report: dict = {"overrides": args.overrides, "threads": args.threads, "torch": torch.__version__,
                    "allocator": allocator,
                    "precision": run_precision(cfg).name,
                    "gemm_gflops": {"1200x512x8000": gemm_rate(1200, 512, 8000), "64x512x1536": gemm_rate(64, 512, 1536)},
                    "config": OmegaConf.to_container(cfg.model), "rounds": []}
    for _ in range(args.rounds):
        round_ = {"ours": ours(args, cfg)}
        if args.peer:
            round_[args.peer] = peer(args.peer, args.peer_budget, args.decode_only)
        report["rounds"].append(round_)
        print(json.dumps(round_, indent=1, default=float), flush=True)
    summarize(report, args.peer)
    out = Path(args.json or ROOT / "bench" / "runs" / f"speed-{datetime.now():%Y%m%d-%H%M%S}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=float) + "\n")
    print(f"wrote {out}")


def summarize(report: dict, peer_name: str | None) -> None:
    """Print the figures of the last round (means over rounds for the rates) and the ours/peer ratios."""
    rounds = report["rounds"]
    mean = lambda who, key: sum(r[who][key] for r in rounds if key in r.get(who, {})) / max(
        1, sum(key in r.get(who, {}) for r in rounds))
    last = rounds[-1]["ours"]
    gemm = report["gemm_gflops"]["1200x512x8000"]
    print(f"\nmemory: {report['allocator']}")
    print(f"GEMM fp32: {gemm:.1f} GFLOP/s (1200x512x8000), "
          f"{report['gemm_gflops']['64x512x1536']:.1f} GFLOP/s (64x512x1536)")
    if "train_tgt_tokens_per_sec" in last:  # not with --decode-only
        rate = mean("ours", "train_tgt_tokens_per_sec")
        achieved = rate * last["train_flops"] / 1e9
        print(f"model: {last['parameters_m']:.2f}M parameters, vocab {last['vocab']}, "
              f"{last['train_flops'] / 1e6:.1f} MFLOP per target token (forward+backward)")
        for part, macs in last["macs_forward"].items():
            print(f"  {part:<28} {macs / 1e6:6.2f} M multiply-adds forward")
        print(f"training ({report['precision']}): {rate:,.0f} target tokens/s ({last['train_sec_per_step']:.3f} s/step, "
              f"{last['mean_tgt_tokens_per_batch']:.0f} tokens/batch) = {achieved:.1f} GFLOP/s = "
              f"{100 * achieved / gemm:.0f}% of the GEMM rate (ceiling {gemm * 1e9 / last['train_flops']:,.0f} tok/s)")
        print(f"peak memory: {last['peak_rss_train_gb']:.2f} GB after training, {last['peak_rss_gb']:.2f} GB in all")
    print(f"translation ({report['precision']}): {mean('ours', 'test_greedy_sent_per_sec'):.1f} sent/s greedy, "
          f"{mean('ours', 'test_beam5_sent_per_sec'):.1f} sent/s beam 5")
    if "scaling" in last:
        print(f"seconds per epoch by data share: {last['scaling']['sec_per_epoch']}")
        print(f"ms per target token by length: {last['scaling']['ms_per_tgt_token_by_length']}")
    if peer_name:
        for key in ("train_tgt_tokens_per_sec", "test_greedy_sent_per_sec", "test_beam5_sent_per_sec"):
            theirs = mean(peer_name, key)
            if theirs:
                print(f"{key}: ours {mean('ours', key):,.1f} / {peer_name} {theirs:,.1f} = "
                      f"{mean('ours', key) / theirs:.2f}x")
        theirs = mean(peer_name, "peak_rss_train_gb")
        if theirs and "peak_rss_train_gb" in last:
            print(f"peak training memory: ours {last['peak_rss_train_gb']:.2f} GB / {peer_name} {theirs:.2f} GB")


if __name__ == "__main__":
    sys.exit(main())
