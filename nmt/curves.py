"""Learning curves: validation BLEU, perplexity and learning rate of one or more training runs.

    python -m nmt.curves RUN [RUN ...] [--x step|minutes] [--out curves.png] [--labels A B ...]

Reads ``metrics.jsonl`` of each run folder (one record per validation, written by ``nmt.training``), prints a
table per run, a one-line summary (best validation BLEU and where, and the BLEU gained over the last validations
per 1,000 steps, which says whether more training would still help) and, with ``--out``, plots validation BLEU
and perplexity of all runs side by side (matplotlib).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

X_AXES = {"step": ("step", "training step"), "minutes": ("minutes", "training minutes (validation included)")}


@dataclass
class Curve:
    """The validation records of one run.

    Attributes:
        label: name shown in tables and legends (the run folder's name unless given).
        records: one dict per validation, in step order, with at least ``step`` and ``valid_bleu`` (BLEU, 0-100);
            usually also ``epoch``, ``valid_ppl``, ``lr``, ``tokens_per_sec`` and ``elapsed_sec`` (seconds of
            training wall time).
    """

    label: str
    records: list[dict]

    def column(self, key: str) -> list[float]:
        """The values of ``key`` over the validations (``minutes`` from ``elapsed_sec``; NaN where absent)."""
        if key == "minutes":
            return [r.get("elapsed_sec", float("nan")) / 60 for r in self.records]
        return [r.get(key, float("nan")) for r in self.records]

    def best(self) -> dict:
        """The record with the highest validation BLEU (the earliest one on ties)."""
        return max(self.records, key=lambda r: (r["valid_bleu"], -r["step"]))

    def recent_slope(self, last: int = 3) -> float | None:
        """Validation BLEU gained per 1,000 steps over the last ``last`` validations (least squares), or None
        with fewer than two records. Near zero or negative: the run has converged at its learning rate."""
        points = [(r["step"], r["valid_bleu"]) for r in self.records[-last:]]
        if len(points) < 2:
            return None
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        var = sum((x - mean_x) ** 2 for x, _ in points)
        if var == 0:
            return None
        return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in points) / var


def read_curve(run_dir: str | Path, label: str | None = None) -> Curve:
    """Read ``run_dir/metrics.jsonl``.

    Raises:
        FileNotFoundError: the folder has no metrics.jsonl (not a run folder, or no validation has run yet).
        ValueError: a line is not a JSON record with ``step`` and ``valid_bleu`` (names the file and line).
    """
    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; give a run folder of train.py (it writes metrics.jsonl "
                                "at each validation, every train.valid_every steps)")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not a JSON record ({err.msg}); was the file edited by hand?") from err
        if not isinstance(record, dict) or "step" not in record or "valid_bleu" not in record:
            raise ValueError(f"{path}:{number}: a validation record needs 'step' and 'valid_bleu'")
        records.append(record)
    if not records:
        raise ValueError(f"{path}: no validation records yet; wait for the first validation "
                         "(every train.valid_every steps)")
    records.sort(key=lambda r: r["step"])
    return Curve(label or run_dir.name, records)


def format_table(curve: Curve) -> str:
    """A text table of one run: step, epoch, minutes, validation BLEU, perplexity, learning rate, tokens/s."""
    lines = [f"# {curve.label}", f"{'step':>7} {'epoch':>5} {'min':>6} {'BLEU':>6} {'ppl':>7} {'lr':>9} {'tok/s':>6}"]
    for r, minutes in zip(curve.records, curve.column("minutes")):
        lines.append(f"{r['step']:>7} {r.get('epoch', float('nan')):>5} {minutes:>6.1f} {r['valid_bleu']:>6.2f} "
                     f"{r.get('valid_ppl', float('nan')):>7.2f} {r.get('lr', float('nan')):>9.2e} "
                     f"{r.get('tokens_per_sec', float('nan')):>6.0f}")
    return "\n".join(lines)


def summary(curve: Curve) -> str:
    """One line: best validation BLEU, its step, the last one and the recent slope in BLEU per 1,000 steps."""
    best, last = curve.best(), curve.records[-1]
    slope = curve.recent_slope()
    trend = "n/a" if slope is None else f"{slope:+.2f} BLEU per 1k steps over the last 3 validations"
    return (f"{curve.label}: best valid BLEU {best['valid_bleu']:.2f} at step {best['step']}; "
            f"last {last['valid_bleu']:.2f} at step {last['step']}; trend {trend}")


def plot_curves(curves: list[Curve], out: str | Path, x: str = "step") -> Path:
    """Plot validation BLEU and perplexity of ``curves`` against ``x`` (``step`` or ``minutes``) into ``out``.

    Raises:
        ValueError: unknown ``x``.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {sorted(X_AXES)}, got {x!r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, xlabel = X_AXES[x]
    fig, (ax_bleu, ax_ppl) = plt.subplots(1, 2, figsize=(11, 4))
    for curve in curves:
        xs = curve.column(key)
        ax_bleu.plot(xs, curve.column("valid_bleu"), marker="o", markersize=3, label=curve.label)
        ax_ppl.plot(xs, curve.column("valid_ppl"), marker="o", markersize=3, label=curve.label)
    ax_bleu.set(xlabel=xlabel, ylabel="validation BLEU (greedy)", title="validation BLEU")
    ax_ppl.set(xlabel=xlabel, ylabel="validation perplexity", title="validation perplexity", yscale="log")
    for ax in (ax_bleu, ax_ppl):
        ax.grid(alpha=0.3)
    ax_bleu.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> list[Curve]:
    """Command line: print tables and summaries of the runs, and plot them with ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m nmt.curves", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of train.py (with metrics.jsonl)")
    parser.add_argument("--labels", nargs="+", help="legend labels, one per run (default: the folder names)")
    parser.add_argument("--x", choices=sorted(X_AXES), default="step", help="x axis of the plot")
    parser.add_argument("--out", type=Path, help="write the plot here (png, pdf or svg)")
    parser.add_argument("--quiet", action="store_true", help="summaries only, no per-validation tables")
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.runs):
        parser.error(f"--labels gives {len(args.labels)} labels for {len(args.runs)} runs")
    try:
        curves = [read_curve(run, label) for run, label in zip(args.runs, args.labels or [None] * len(args.runs))]
    except (FileNotFoundError, ValueError) as err:
        parser.exit(1, f"python -m nmt.curves: error: {err}\n")
    for curve in curves:
        if not args.quiet:
            print(format_table(curve) + "\n")
    for curve in curves:
        print(summary(curve))
    if args.out:
        print(f"wrote {plot_curves(curves, args.out, args.x)}")
    return curves


if __name__ == "__main__":
    main(sys.argv[1:])
