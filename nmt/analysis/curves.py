"""Learning curves of one or more training runs: validation BLEU, perplexity, learning rate, speed.

    python -m nmt.curves RUN [RUN ...] [x=step|minutes] [out=curves.png] [labels=[A,B,...]] [quiet=true]

Reads ``metrics.jsonl`` of each run folder (one record per validation, written by nmt.training; the file itself
may be given), prints a table per run, a one-line summary (best validation BLEU and where, and the BLEU gained
over the last validations per 1,000 steps, which says whether more training would still help) and, with
``out=``, plots validation BLEU and perplexity of all runs side by side (matplotlib). Runs trained with
``eval.gold`` (a gold alignment set) also have the AER of their attention at every validation: a column of the
table, the best AER in the summary, and a third panel of the plot.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from nmt.commandline import SettingsParser

X_AXES = {"step": ("step", "training step"), "minutes": ("minutes", "training minutes (validation included)")}

TREND_MIN_POINTS = 3  # validations a trend is fitted to (the last ones with a finite BLEU)
TREND_MIN_STEPS = 300  # ... and the steps they must span at least


@dataclass
class Curve:
    """The validation records of one run.

    Attributes:
        label: name shown in tables and legends (the run folder's name unless given).
        records: one dict per validation, in step order (one per step), with at least ``step`` (int) and
            ``valid_bleu`` (BLEU, 0-100; NaN when the run diverged); usually also ``epoch``, ``valid_ppl``, ``lr``,
            ``tokens_per_sec`` and ``elapsed_sec`` (seconds of wall time since training started, taken before
            this validation: earlier validations included).
    """

    label: str
    records: list[dict]

    def column(self, key: str) -> list[float]:
        """The values of ``key`` over the validations (``minutes`` from ``elapsed_sec``; NaN where absent or null)."""
        if key == "minutes":
            return [value / 60 for value in self.column("elapsed_sec")]
        return [float("nan") if r.get(key) is None else r[key] for r in self.records]

    def finite(self) -> list[dict]:
        """The records whose validation BLEU is a finite number (a diverged run logs NaN)."""
        return [r for r in self.records if math.isfinite(r["valid_bleu"])]

    def best(self) -> dict | None:
        """The record with the highest finite validation BLEU (the earliest one on ties); None if there is none."""
        finite = self.finite()
        return max(finite, key=lambda r: (r["valid_bleu"], -r["step"])) if finite else None

    def recent_slope(self, last: int = 3) -> float | None:
        """Validation BLEU gained per 1,000 steps over the last ``last`` validations with a finite BLEU (least
        squares), or None when they are fewer than ``TREND_MIN_POINTS`` or span fewer than ``TREND_MIN_STEPS``
        steps (two close validations would extrapolate noise to hundreds of BLEU per 1,000 steps). Near zero or
        negative: the run has converged at its learning rate."""
        points = [(r["step"], r["valid_bleu"]) for r in self.finite()[-max(last, TREND_MIN_POINTS):]]
        if len(points) < TREND_MIN_POINTS or points[-1][0] - points[0][0] < TREND_MIN_STEPS:
            return None
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        var = sum((x - mean_x) ** 2 for x, _ in points)
        if var == 0:
            return None
        return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in points) / var


def read_curve(run_dir: str | Path, label: str | None = None) -> Curve:
    """Read ``run_dir/metrics.jsonl`` (``run_dir`` may also be that file).

    A step logged twice (a run resumed from an earlier checkpoint validates the same step again) keeps its last
    record. A last line without its newline that is not valid JSON is being written by a running training: it is
    skipped with a warning.

    Raises:
        FileNotFoundError: no metrics.jsonl (not a run folder, or no validation has run yet).
        ValueError: a line is not a JSON record with an integer ``step`` and a numeric ``valid_bleu``, or the file
            has no record (the message names the file and line).
    """
    run_dir = Path(run_dir)
    if run_dir.name == "metrics.jsonl" and run_dir.is_file():
        run_dir = run_dir.parent
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        found = sorted(str(p.parent) for p in run_dir.glob("*/metrics.jsonl")) if run_dir.is_dir() else []
        hint = f"; run folders inside it: {' '.join(found)}" if found else ""
        raise FileNotFoundError(f"{path}: no such file; give a run folder of train.py (it writes metrics.jsonl "
                                f"at each validation, every train.valid_every steps){hint}")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    by_step: dict[int, dict] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: a training is writing this line right now
                warnings.warn(f"{path}:{number}: skipped an incomplete last line (a running training is writing it)",
                              stacklevel=2)
                continue
            raise ValueError(f"{path}:{number}: not a JSON record ({err.msg}); was the file edited by hand?") from err
        if not isinstance(record, dict) or "step" not in record or "valid_bleu" not in record:
            raise ValueError(f"{path}:{number}: a validation record needs 'step' and 'valid_bleu'")
        step, bleu = record["step"], record["valid_bleu"]
        if not isinstance(step, int) or isinstance(step, bool):
            raise ValueError(f"{path}:{number}: 'step' must be an integer, got {step!r}")  # noqa: TRY004 (bad file)
        if not isinstance(bleu, (int, float)) or isinstance(bleu, bool):
            raise ValueError(f"{path}:{number}: 'valid_bleu' must be a number, got {bleu!r}")  # noqa: TRY004
        by_step[step] = record
    if not by_step:
        raise ValueError(f"{path}: no validation records yet; wait for the first validation "
                         "(every train.valid_every steps)")
    return Curve(label or run_dir.resolve().name, [by_step[step] for step in sorted(by_step)])


def has_aer(curve: Curve, key: str = "aer") -> bool:
    """Whether the run recorded the AER of its attention on a gold set (``eval.gold``) at some validation; with
    ``key="symmetrized_aer"``, that of an agreement run's two directions soft-symmetrized (``train.agreement``)."""
    return any(r.get(key) is not None for r in curve.records)


def format_table(curve: Curve) -> str:
    """A text table of one run: step, epoch, minutes, validation BLEU, perplexity, learning rate, tokens/s, and
    the AER in % (``-`` where a validation has none) when the run recorded it (and that of the two directions
    soft-symmetrized, ``sym%``, for an agreement run)."""
    errors = [key for key in ("aer", "symmetrized_aer") if has_aer(curve, key)]
    names = {"aer": "AER%", "symmetrized_aer": "sym%"}
    lines = [f"# {curve.label}", f"{'step':>7} {'epoch':>5} {'min':>6} {'BLEU':>6} {'ppl':>7} {'lr':>9} {'tok/s':>6}"
             + "".join(f" {names[key]:>6}" for key in errors)]
    columns = [curve.column(key) for key in ("step", "epoch", "minutes", "valid_bleu", "valid_ppl", "lr",
                                             "tokens_per_sec", *errors)]
    for step, epoch, minutes, bleu, ppl, lr, speed, *error in zip(*columns):
        lines.append(f"{step:>7} {epoch:>5} {minutes:>6.1f} {bleu:>6.2f} {ppl:>7.2f} {lr:>9.2e} {speed:>6.0f}"
                     + "".join(f" {100 * e:>6.1f}" if math.isfinite(e) else f" {'-':>6}" for e in error))
    return "\n".join(lines)


def summary(curve: Curve) -> str:
    """One line: best validation BLEU, its step, the last one and the recent slope in BLEU per 1,000 steps; and
    the best AER with its step and the last one, when the run recorded it."""
    best, last = curve.best(), curve.records[-1]
    slope, used = curve.recent_slope(), min(TREND_MIN_POINTS, len(curve.finite()))
    trend = (f"n/a (needs {TREND_MIN_POINTS} validations over at least {TREND_MIN_STEPS} steps)" if slope is None
             else f"{slope:+.2f} BLEU per 1k steps over the last {used} validations")
    diverged = len(curve.records) - len(curve.finite())
    best_text = "no finite BLEU" if best is None else f"{best['valid_bleu']:.2f} at step {best['step']}"
    alignment = ""
    for key, name in (("aer", "AER"), ("symmetrized_aer", "symmetrized AER")):
        scored = [r for r in curve.records if r.get(key) is not None]
        if scored:
            lowest = min(scored, key=lambda r: (r[key], r["step"]))
            alignment += (f"; best {name} {100 * lowest[key]:.1f}% at step {lowest['step']}, last "
                          f"{100 * scored[-1][key]:.1f}% at step {scored[-1]['step']}")
    return (f"{curve.label}: best valid BLEU {best_text}; last {last['valid_bleu']:.2f} at step {last['step']}; "
            f"trend {trend}" + alignment + (f"; {diverged} validation(s) with NaN BLEU (diverged?)" if diverged
                                            else ""))


def plot_curves(curves: list[Curve], out: str | Path, x: str = "step") -> Path:
    """Plot validation BLEU and perplexity of ``curves`` (and the AER, when a run recorded it) against ``x`` (``step`` or ``minutes``) into ``out``
    (its folder is created; the format follows the suffix: any format matplotlib writes, e.g. png, pdf, svg).

    Raises:
        ValueError: unknown ``x``, a suffix matplotlib cannot write, or ``x="minutes"`` for a run whose records
            have no ``elapsed_sec``.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {sorted(X_AXES)}, got {x!r}")
    check_format(out)
    key, xlabel = X_AXES[x]
    for curve in curves:
        if not any(math.isfinite(value) for value in curve.column(key)):
            raise ValueError(f"{curve.label}: its records have no elapsed_sec; plot against steps (x=step)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    panels = [("valid_bleu", "validation BLEU (greedy)", "validation BLEU"),
              ("valid_ppl", "validation perplexity", "validation perplexity (log scale)")]
    if any(has_aer(curve) for curve in curves):
        panels.append(("aer", "AER (%) on the gold set", "alignment error rate of the attention"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5 if len(curves) <= 5 else 5.5))
    ax_bleu = axes[0]
    styles = ["-", "--", ":", "-."]
    for i, curve in enumerate(curves):
        xs, style = curve.column(key), styles[(i // 10) % len(styles)]  # colours repeat after 10 runs
        for ax, (column, _, _) in zip(axes, panels):
            ys = [100 * y for y in curve.column(column)] if column == "aer" else curve.column(column)
            line = ax.plot(xs, ys, style, marker="o", markersize=3, label=curve.label)[0]
            if column == "aer" and has_aer(curve, "symmetrized_aer"):  # an agreement run: its pair, in the same colour
                ax.plot(xs, [100 * y for y in curve.column("symmetrized_aer")], ":", marker="s", markersize=3,
                        color=line.get_color(), label=f"{curve.label}, both directions")
    for ax, (column, ylabel, title) in zip(axes, panels):
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[1].yaxis.set_major_formatter(FormatStrFormatter("%g"))
    axes[1].yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    if any(has_aer(curve, "symmetrized_aer") for curve in curves):
        axes[-1].legend(fontsize=8)  # which AER line is a model's own and which its pair's
    if len(curves) <= 5:
        ax_bleu.legend(fontsize=8)
        fig.tight_layout()
    else:  # many runs: one legend below both panels, clear of the curves
        fig.legend(*ax_bleu.get_legend_handles_labels(), loc="lower center", ncol=min(len(curves), 4), fontsize=8)
        fig.tight_layout(rect=(0, 0.06 * math.ceil(len(curves) / 4), 1, 1))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def check_format(out: str | Path) -> None:
    """Raise ValueError unless matplotlib can write the format named by ``out``'s suffix."""
    from matplotlib.figure import Figure

    supported = Figure().canvas.get_supported_filetypes()
    suffix = Path(out).suffix.lower().lstrip(".")
    if suffix not in supported:
        raise ValueError(f"{out}: {'no file suffix' if not suffix else f'unsupported format .{suffix}'}; "
                         f"end the name with one of {', '.join('.' + s for s in sorted(supported))} (e.g. .png)")


def main(argv: list[str] | None = None) -> list[Curve]:
    """Command line: print tables and summaries of the runs, and plot them with ``out=``."""
    parser = SettingsParser("nmt.curves", description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of train.py (with metrics.jsonl)")
    parser.add_argument("--labels", nargs="+", help="legend labels, one per run (default: the folder names); "
                        "one list, e.g. labels=[additive,dot]")
    parser.add_argument("--x", choices=sorted(X_AXES), default="step", help="x axis of the plot")
    parser.add_argument("--out", type=Path, help="write the plot here; the suffix picks the format (.png, .pdf, .svg, "
                        "...)")
    parser.add_argument("--quiet", action="store_true", help="summaries only, no per-validation tables")
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.runs):
        parser.error(f"labels= gives {len(args.labels)} labels for {len(args.runs)} runs")
    try:
        if args.out:
            check_format(args.out)
        curves = [read_curve(run, label) for run, label in zip(args.runs, args.labels or [None] * len(args.runs))]
    except (FileNotFoundError, ValueError) as err:
        parser.exit(1, f"{parser.prog}: error: {err}\n")
    labels = [curve.label for curve in curves]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        print(f"warning: runs share the label(s) {', '.join(repeated)}; name them with labels=[...]", file=sys.stderr)
    for curve in curves:
        if not args.quiet:
            print(format_table(curve) + "\n")
    for curve in curves:
        print(summary(curve))
    if args.out:
        try:
            print(f"wrote {plot_curves(curves, args.out, args.x)}")
        except ValueError as err:
            parser.exit(1, f"{parser.prog}: error: {err}\n")
    return curves


if __name__ == "__main__":
    main(sys.argv[1:])
