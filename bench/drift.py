"""Does a run's training speed drift, and is it validation that slows the steps after it?

    NMT_DATA_DIR=../shared/corpora python bench/drift.py                     # plan TTTVTTVTTT, en->de preset
    NMT_DATA_DIR=../shared/corpora python bench/drift.py --plan TTVTT +experiment=multi30k_de_en

Trains the same ``--block`` batches once per ``T`` of ``--plan`` (so every block does identical work and only the
process's state differs) and runs a validation like train.py's (teacher-forced loss, then greedy BLEU on the
validation set) at each ``V``. After each block it prints target tokens/s, user and kernel CPU seconds, minor page
faults, resident memory, and the share of subnormal numbers (below 1.2e-38, slow on x86 unless flushed to zero) in
Adam's moment estimates. ``--flush`` sets ``torch.set_flush_denormal(True)`` for comparison. Run it alone: 2 cores
are easily disturbed, and the machine's own speed drifts over minutes, so repeat the plan before reading a trend.

Is a late model slower to train than a new one, in a new process? ``--checkpoint RUN/checkpoints/last.pt`` starts
from a run's weights and Adam state (its learning rate reset to ``train.lr``, as at the full rate) and encodes the
corpus with its subword models; ``--reinit`` keeps those subword models and sizes but starts from new weights and
a new optimizer, so the two do the same work on the same batches. The overrides must give the checkpoint's
language pair (its preset, or ``data.src_lang`` and ``data.tgt_lang``); the precision is ``train.precision``'s:

    python bench/drift.py --plan TTT --checkpoint RUN/checkpoints/last.pt [--reinit] +experiment=multi30k_en_de
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from speed import (  # bench/ is the script's folder, so on sys.path
    ROOT,
    load_corpus,
    run_precision,
    training_setup,
)

from nmt.data.batches import encode_pairs, iterate_batches
from nmt.decoding.scoring import greedy_bleu
from nmt.models import checkpoint
from nmt.models.build import build_model
from nmt.training.run import training_memory
from nmt.training.schedule import make_optimizer
from nmt.training.step import train_step
from nmt.training.validation import validation_loss


def resident_gb() -> float:
    """This process's resident memory now (VmRSS), GB."""
    with open("/proc/self/status", encoding="ascii") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) / 1e6


def subnormal_share(optimizer: torch.optim.Optimizer) -> float:
    """Share of Adam's ``exp_avg`` and ``exp_avg_sq`` entries that are nonzero and below float32's smallest
    normal number."""
    total = subnormal = 0
    smallest_normal = torch.finfo(torch.float32).tiny
    for state in optimizer.state.values():
        for key in ("exp_avg", "exp_avg_sq"):
            moment = state[key]
            total += moment.numel()
            subnormal += int(((moment != 0) & (moment.abs() < smallest_normal)).sum())
    return subnormal / max(total, 1)


def load_run(path: str, cfg) -> tuple:
    """``checkpoint.load(path)``, for a checkpoint of the language pair of ``cfg.data``.

    Raises:
        SystemExit: one line, for a missing file, a file that is not a checkpoint, or another language pair.
    """
    try:
        loaded = checkpoint.load(path)
    except (FileNotFoundError, checkpoint.CheckpointError) as err:
        raise SystemExit(f"drift.py: error: {err}") from None
    ckpt, data = loaded[1].data, cfg.data
    if (ckpt.src_lang, ckpt.tgt_lang) != (data.src_lang, data.tgt_lang):
        raise SystemExit(f"drift.py: error: {path} translates {ckpt.src_lang}->{ckpt.tgt_lang}, the benchmark is set "
                         f"for {data.src_lang}->{data.tgt_lang}: give data.src_lang={ckpt.src_lang} "
                         f"data.tgt_lang={ckpt.tgt_lang} (or the run's preset)")
    return loaded


def checkpoint_setup(cfg, splits: dict, loaded: tuple, reinit: bool) -> tuple:
    """``training_setup``'s ``(src_tok, tgt_tok, pairs, model, optimizer)`` from a training checkpoint
    (``loaded``: :func:`load_run`'s tuple): its subword models, and its weights and Adam state (learning rate
    ``cfg.train.lr``) unless ``reinit``, which builds new ones of the sizes in the checkpoint's config.

    Raises:
        SystemExit: a checkpoint without optimizer state (``step_N.pt``, ``averaged.pt``) and no ``reinit``.
    """
    model, ckpt_cfg, src_tok, tgt_tok, payload = loaded
    if reinit:
        model = build_model(ckpt_cfg.model, ckpt_cfg.decoder, ckpt_cfg.attention, len(src_tok), len(tgt_tok))
    optimizer, _ = make_optimizer(model.train(), cfg)
    if not reinit:
        if "optimizer" not in payload:
            raise SystemExit("drift.py: error: the checkpoint holds weights only (no optimizer state): give the run's "
                             "checkpoints/last.pt (or best.pt), or --reinit for new weights with its subwords")
        optimizer.load_state_dict(payload["optimizer"])
        for group in optimizer.param_groups:
            group["lr"] = cfg.train.lr
    return src_tok, tgt_tok, encode_pairs(splits["train"], src_tok, tgt_tok, cfg.data.max_len), model, optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", default="TTTVTTVTTT", help="T: train the block of batches; V: validate")
    parser.add_argument("--block", type=int, default=150, help="batches per T (default 150)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--flush", action="store_true", help="flush subnormal numbers to zero")
    parser.add_argument("--work", default="/tmp/nmt_speed", help="scratch folder (sentencepiece models)")
    parser.add_argument("--checkpoint", help="start from this training checkpoint (last.pt, best.pt): its weights, "
                        "Adam state and subword models")
    parser.add_argument("--reinit", action="store_true", help="with --checkpoint: its subword models and sizes, "
                        "new weights and optimizer")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of conf/train.yaml (default: the en->de preset)")
    args = parser.parse_args()
    if not args.plan or set(args.plan) - set("TV"):
        parser.error(f"--plan {args.plan!r}: write T (train a block) and V (validate), e.g. TTVTT")
    if args.block < 1 or args.warmup < 0:
        parser.error("--block must be at least 1 and --warmup at least 0")
    if args.reinit and not args.checkpoint:
        parser.error("--reinit needs --checkpoint (whose subword models and sizes it keeps)")
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(args.flush)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"threads={args.threads}", "device=cpu",
                                          *(args.overrides or ["+experiment=multi30k_en_de"])])
    allocator = training_memory(run_precision(cfg).name, torch.device("cpu"))  # as train.py does
    loaded = load_run(args.checkpoint, cfg) if args.checkpoint else None
    torch.manual_seed(cfg.seed)
    splits = load_corpus(cfg, "multi30k")
    if loaded:
        src_tok, tgt_tok, pairs, model, optimizer = checkpoint_setup(cfg, splits, loaded, args.reinit)
    else:
        src_tok, tgt_tok, pairs, model, optimizer = training_setup(
            cfg, splits, Path(args.work) / f"spm_{cfg.data.src_lang}{cfg.data.tgt_lang}")
    valid_pairs = encode_pairs(splits["valid"], src_tok, tgt_tok, cfg.data.max_len)
    batches = list(iterate_batches(pairs, cfg.train.batch_tokens, shuffle=True, seed=cfg.seed))
    block, precision = batches[:args.block], run_precision(cfg)
    tokens = sum(batch.num_tgt_tokens for batch in block)
    for batch in batches[args.block:args.block + args.warmup]:
        train_step(model, optimizer, batch, cfg.train, precision=precision)
    print(f"{precision.name}, {args.threads} threads, flush to zero {args.flush}; memory: {allocator}; "
          f"{len(block)} batches, {tokens} target tokens a block")
    for number, what in enumerate(args.plan):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        if what == "T":
            for batch in block:
                train_step(model, optimizer, batch, cfg.train, precision=precision)
        else:
            validation_loss(model, valid_pairs, cfg.train.batch_tokens, "cpu")
            greedy_bleu(model, src_tok, tgt_tok, splits["valid"].src, splits["valid"].tgt, cfg.decode, "cpu",
                        cfg.data.tgt_lang)
            model.train()
        seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        rate = f"{tokens / seconds:6.0f} tok/s" if what == "T" else "validation  "
        print(f"{number:2d} {what} {seconds:6.1f} s {rate}  user {after.ru_utime - before.ru_utime:5.1f} s  "
              f"kernel {after.ru_stime - before.ru_stime:4.1f} s  faults {after.ru_minflt - before.ru_minflt:8d}  "
              f"resident {resident_gb():.2f} GB  subnormal {subnormal_share(optimizer):.3%}", flush=True)


if __name__ == "__main__":
    main()
