"""Where a training step's time goes: torch.profiler over real training steps, grouped into what the step does.

    NMT_DATA_DIR=../shared/corpora python bench/step_profile.py                  # default model, fp32
    NMT_DATA_DIR=../shared/corpora python bench/step_profile.py +experiment=multi30k_de_en train.precision=bf16
    python bench/step_profile.py --steps 40 model.decoder_layers=2               # any train.yaml override

Trains ``--warmup`` untimed steps, then profiles ``--steps`` steps of the real update (label-smoothed loss,
backward, clipping, Adam, in ``train.precision``) on Multi30k batches, and prints:
- the wall time per step and the share of it in each group of operators (self time, summed over calls):
  matrix products (with the FLOP rate they ran at, from their shapes), element-wise gate and attention arithmetic,
  softmax and loss, dropout masks, memory traffic (copies, concatenation, zero-fill, casts, embedding lookups),
  the encoder's fused GRU, the optimizer and clipping, and the rest;
- "Python, dispatcher and autograd engine": the wall time that no operator accounts for (on CPU the backward runs
  on the calling thread, so this is the interpreter and the framework between the operators);
- the ten most expensive operators with their shapes.
Writes everything to ``--json`` (default bench/runs/profile-<time>.json). Run it alone: 2 cores are easily
disturbed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from datetime import datetime
from math import prod
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from speed import (  # bench/ is the script's folder, so on sys.path
    ROOT,
    gemm_rate,
    load_corpus,
    run_precision,
    training_setup,
)
from torch.profiler import ProfilerActivity, profile

from nmt.data.batches import iterate_batches
from nmt.training.run import training_memory
from nmt.training.step import train_step

PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmv", "aten::addmv_", "aten::mv",
            "aten::dot", "aten::addbmm"}
GROUPS = {  # operator name -> group; a name not listed here goes to "other"
    "element-wise (gates, attention energies, residual sums)": (
        "add", "add_", "mul", "mul_", "sub", "sub_", "rsub", "div", "sigmoid", "sigmoid_", "tanh", "tanh_",
        "sigmoid_backward", "tanh_backward", "neg", "exp", "clamp", "clamp_min", "where", "masked_fill",
        "masked_fill_", "addcmul_", "addcdiv_", "sum", "lerp_", "abs", "pow", "sqrt"),
    "softmax and loss": ("_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data",
                         "logsumexp", "nll_loss_forward", "nll_loss_backward", "gather", "scatter_", "scatter_add_",
                         "max", "amax"),
    "dropout masks": ("uniform_", "bernoulli_", "ge_", "native_dropout", "native_dropout_backward"),
    "memory traffic (copies, cat, fill, casts, lookups)": (
        "copy_", "cat", "stack", "fill_", "zero_", "zeros", "zeros_like", "empty", "empty_like", "empty_strided",
        "clone", "_to_copy", "index_select", "index", "index_add_", "embedding_dense_backward", "embedding",
        "_embedding_bag", "new_zeros", "contiguous", "resize_", "as_strided_"),
    "encoder GRU (fused)": ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward", "_thnn_fused_gru_cell", "gru",
                            "_cudnn_rnn", "_cudnn_rnn_backward"),
    "optimizer and clipping": ("_fused_adam_", "_foreach_norm", "_foreach_mul_", "_foreach_add_", "linalg_vector_norm",
                               "_foreach_div_", "_foreach_lerp_", "_foreach_sqrt"),
}
GROUP_OF = {f"aten::{name}": group for group, names in GROUPS.items() for name in names}


def product_flops(name: str, shapes: list) -> float:
    """FLOPs (2 per multiply-add) of one call of a product operator from its recorded input shapes (``mm``:
    ``[m, k], [k, n]``; ``addmm``: ``bias, [m, k], [k, n]``; ``bmm``: ``[b, m, k], [b, k, n]``; ``baddbmm``: ``bias``
    first; ``addmv``: ``bias, [n, k], [k]``; ``mv``: ``[n, k], [k]``); 0 for a call recorded without shapes."""
    first = {"aten::mm": 0, "aten::bmm": 0, "aten::mv": 0, "aten::dot": 0}.get(name, 1)  # the others take a bias first
    if len(shapes) <= first or not shapes[first]:
        return 0.0
    matrix = shapes[first]
    if name in ("aten::addmv", "aten::addmv_", "aten::mv", "aten::dot"):
        return 2.0 * prod(matrix)
    return 2.0 * prod(matrix) * shapes[first + 1][-1]  # (b) m k  x  n


def breakdown(events, wall: float, steps: int) -> dict:
    """Group the profiler's per-(name, shape) averages: ms per step and share of the wall time per group."""
    groups: dict[str, float] = defaultdict(float)
    flops = 0.0
    rows = []
    for ev in events:
        self_s = ev.self_cpu_time_total / 1e6
        if ev.key in PRODUCTS:
            group = "matrix products"
            flops += ev.count * product_flops(ev.key, ev.input_shapes)
        else:
            group = GROUP_OF.get(ev.key, "other")
        groups[group] += self_s
        rows.append((self_s, ev.key, ev.count, str(ev.input_shapes)[:70]))
    groups["Python, dispatcher and autograd engine"] = max(0.0, wall - sum(groups.values()))
    products = groups["matrix products"]
    return {
        "ms_per_step": 1000 * wall / steps,
        "groups": {g: {"ms_per_step": 1000 * s / steps, "share": s / wall}
                   for g, s in sorted(groups.items(), key=lambda kv: -kv[1])},
        "products_gflops": flops / products / 1e9 if products else 0.0,
        "top": [{"ms_per_step": 1000 * s / steps, "op": k, "calls_per_step": c / steps, "shapes": sh}
                for s, k, c, sh in sorted(rows, reverse=True)[:10]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="profiled training steps (default 20)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--work", default="/tmp/nmt_speed", help="scratch folder (sentencepiece models)")
    parser.add_argument("--json", help="write the report here (default bench/runs/profile-<time>.json)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of conf/train.yaml")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"threads={args.threads}", "device=cpu", *args.overrides])
    allocator = training_memory(run_precision(cfg).name, torch.device("cpu"))  # as train.py does
    torch.manual_seed(cfg.seed)
    splits = load_corpus(cfg, "multi30k")
    _, _, pairs, model, optimizer = training_setup(cfg, splits, Path(args.work) / "spm_multi30k")
    batches = list(iterate_batches(pairs, cfg.train.batch_tokens, shuffle=True, seed=cfg.seed))
    batches = batches[: args.warmup + args.steps]
    run = run_precision(cfg)  # train.precision, auto resolved for this CPU
    for batch in batches[: args.warmup]:
        train_step(model, optimizer, batch, cfg.train, precision=run)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        for batch in batches[args.warmup:]:
            train_step(model, optimizer, batch, cfg.train, precision=run)
        wall = time.perf_counter() - start
    report = {"overrides": args.overrides, "threads": args.threads, "precision": run.name, "torch": torch.__version__,
              "allocator": allocator,
              "gemm_gflops_fp32": gemm_rate(1200, 512, 8000),
              **breakdown(prof.key_averages(group_by_input_shape=True), wall, args.steps)}
    print(f"{args.steps} training steps ({run.name}, {args.threads} threads): {report['ms_per_step']:.0f} ms per step "
          f"(wall time, the profiler's own cost included); memory: {allocator}")
    for group, figures in report["groups"].items():
        print(f"  {group:<52} {figures['ms_per_step']:7.1f} ms  {100 * figures['share']:5.1f}%")
    print(f"matrix products ran at {report['products_gflops']:.1f} GFLOP/s; one large fp32 product "
          f"([1200,512]x[512,8000]) at {report['gemm_gflops_fp32']:.1f}")
    print("most expensive operators (self time per step):")
    for row in report["top"]:
        print(f"  {row['ms_per_step']:6.1f} ms  {row['op']:<22} {row['calls_per_step']:6.1f} calls  {row['shapes']}")
    out = Path(args.json or ROOT / "bench" / "runs" / f"profile-{datetime.now():%Y%m%d-%H%M%S}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
