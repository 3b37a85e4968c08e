"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one training run.

Averaging the parameters of the last or best few checkpoints (Junczys-Dowmunt et al. 2016, "The AMU-UEDIN
submission to the WMT16 news translation task", §2; Vaswani et al. 2017, §6.1) smooths out the noise of the
last updates and usually gains a little BLEU at no training cost.

    python -m nmt.average RUN/checkpoints/step_*.pt out=RUN/checkpoints/averaged.pt
    python -m nmt.average RUN best=5 out=averaged.pt      # the 5 best by validation BLEU (train.keep_best)
    python -m nmt.average RUN last=5 out=averaged.pt      # the 5 most recent step checkpoints

The averaged checkpoint carries the first input's configuration and SentencePiece models, so it loads, translates
and aligns like any other (``translate.py checkpoint=averaged.pt``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch

from nmt.analysis.curves import read_curve
from nmt.commandline import SettingsParser
from nmt.data.textio import check_writable
from nmt.models.checkpoint import CheckpointError, load_payload, write_payload

log = logging.getLogger(__name__)


def average_state_dicts(states: list[dict[str, torch.Tensor]], names: list[str]) -> dict[str, torch.Tensor]:
    """Element-wise mean of model state dicts with the same keys and shapes (floating tensors are averaged in
    float64 and cast back; integer tensors must be equal and are kept).

    Raises:
        CheckpointError: naming the checkpoint whose keys or shapes differ from the first one's.
    """
    if not states:
        raise CheckpointError("nothing to average: no checkpoints given")
    first = states[0]
    for state, name in zip(states[1:], names[1:]):
        if state.keys() != first.keys():
            missing = sorted(set(first) ^ set(state))[:3]
            raise CheckpointError(f"{name}: parameters differ from {names[0]} ({missing} ...): only checkpoints "
                                  "of one model (same configuration) can be averaged")
        for key, value in state.items():
            if value.shape != first[key].shape:
                raise CheckpointError(f"{name}: {key} has shape {tuple(value.shape)}, {names[0]} has "
                                      f"{tuple(first[key].shape)}: only checkpoints of one model can be averaged")
    averaged = {}
    for key, value in first.items():
        if value.is_floating_point():
            total = sum(state[key].to(torch.float64) for state in states)
            averaged[key] = (total / len(states)).to(value.dtype)
        else:
            for state, name in zip(states[1:], names[1:]):
                if not torch.equal(state[key], value):
                    raise CheckpointError(f"{name}: {key} differs from {names[0]}'s (integer values cannot be "
                                          "averaged): only checkpoints of one model can be averaged")
            averaged[key] = value.clone()
    return averaged


SAME_MODEL = ("model", "attention", "decoder", "tokenizer")  # config sections that must agree to average


def _same(a, b) -> bool:
    """Equal plain data, tensors compared by value (the SentencePiece models are stored as byte tensors)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


RUN_KEYS = ("seed", "data")  # settings that make two trainings of one model different runs


def check_same_run(payloads: list[dict], names: list[str]) -> None:
    """Check that checkpoints come from one training run (the same ``seed`` and ``data`` settings): the weights of
    independently trained models sit in different places of weight space, and their mean is a worse model than
    either (the hidden units of two RNNs need not correspond).

    Raises:
        CheckpointError: naming the checkpoint and the setting that differs, and the one that allows it
            (``other_runs=true``).
    """
    first = payloads[0].get("config") or {}
    for payload, name in zip(payloads[1:], names[1:]):
        config = payload.get("config") or {}
        if differ := [key for key in RUN_KEYS if not _same(first.get(key), config.get(key))]:
            raise CheckpointError(f"{name}: comes from another training run than {names[0]} ({', '.join(differ)} "
                                  f"differ{'s' if len(differ) == 1 else ''}; seed {config.get('seed')} vs "
                                  f"{first.get('seed')}): the average of independently trained models is worse than "
                                  "either; pass other_runs=true to average them anyway")


def check_same_model(payloads: list[dict], names: list[str]) -> None:
    """Check that checkpoints can be averaged: every payload must have the first one's architecture and subword
    settings (config sections ``SAME_MODEL``) and the same SentencePiece models and vocabularies, since weights
    of the same shapes can still belong to models that read them differently (scaled vs unscaled dot attention,
    another corpus' subwords). ``names`` label the payloads in the message.

    Raises:
        CheckpointError: naming the checkpoint and the setting that differs.
    """
    first = payloads[0]
    for payload, name in zip(payloads[1:], names[1:]):
        for section in SAME_MODEL:
            ours, theirs = (first.get("config") or {}).get(section), (payload.get("config") or {}).get(section)
            if not _same(ours, theirs):
                keys = ({*ours, *theirs} if isinstance(ours, dict) and isinstance(theirs, dict) else set())
                differ = sorted(k for k in keys if not _same(ours.get(k), theirs.get(k))) or [section]
                raise CheckpointError(f"{name}: {section} settings differ from {names[0]}'s ({', '.join(differ)}): "
                                      "only checkpoints of one model can be averaged")
        if not _same(payload.get("spm"), first.get("spm")):
            raise CheckpointError(f"{name}: its SentencePiece models or vocabularies differ from {names[0]}'s: only "
                                  "checkpoints of one model can be averaged")


def average_checkpoints(paths: list[str | Path], out: str | Path, other_runs: bool = False) -> dict:
    """Average the weights of ``paths`` into ``out`` (written atomically; weights, config and SentencePiece
    models only, no optimizer state; ``averaged`` records the checkpoints and their steps). Returns the written
    payload.

    Raises:
        CheckpointError / FileNotFoundError: for unreadable, foreign or mismatched checkpoints (named), also for
            checkpoints of another configuration or other subwords (:func:`check_same_model`), or of another
            training run unless ``other_runs`` (:func:`check_same_run`).
    """
    payloads = [load_payload(p) for p in paths]
    names = [str(p) for p in paths]
    state = average_state_dicts([p["model"] for p in payloads], names)
    check_same_model(payloads, names)
    if not other_runs:
        check_same_run(payloads, names)
    first = payloads[0]
    payload = {"model": state, "config": first["config"], "spm": first["spm"],
               "averaged": {"checkpoints": names, "steps": [p.get("progress", {}).get("step") for p in payloads]}}
    write_payload(out, payload)
    log.info("averaged %d checkpoint%s into %s", len(paths), "s" if len(paths) > 1 else "", out)
    return payload


def select_checkpoints(run_dir: str | Path, best: int | None = None, last: int | None = None) -> list[Path]:
    """The ``best`` k step checkpoints of ``run_dir`` by validation BLEU (from ``metrics.jsonl``) or the ``last`` k
    by step, among the ``checkpoints/step_N.pt`` files that exist (``train.keep_best`` keeps them).

    Raises:
        FileNotFoundError: if the run has no step checkpoints (train with ``train.keep_best=K``).
        ValueError: a line of ``metrics.jsonl`` that is not a validation record (naming the file and line; an
            incomplete last line that a running training is writing is skipped with a warning).
    """
    ckpt_dir = Path(run_dir) / "checkpoints"
    steps = {int(p.stem.split("_")[1]): p for p in ckpt_dir.glob("step_*.pt") if p.stem.split("_")[1].isdigit()}
    if not steps:
        raise FileNotFoundError(f"no checkpoints/step_N.pt in {run_dir}: they are kept by training with "
                                "train.keep_best=K (K > 0)")
    if last:
        return [steps[s] for s in sorted(steps)[-last:]]
    metrics = Path(run_dir) / "metrics.jsonl"
    has_records = metrics.is_file() and metrics.read_text(encoding="utf-8").strip()
    bleu = {r["step"]: r["valid_bleu"] for r in read_curve(run_dir).records} if has_records else {}
    ranked = sorted(steps, key=lambda s: (bleu.get(s, float("-inf")), s), reverse=True)
    return [steps[s] for s in ranked[: best or len(ranked)]]


def main(argv: list[str] | None = None) -> int:
    """Command line: average explicit checkpoints, or the best/last k of a run directory."""
    parser = SettingsParser("nmt.average", description=__doc__)
    parser.add_argument("inputs", nargs="+", help="checkpoints to average, or one run directory with best= or last=")
    parser.add_argument("--out", required=True, help="the averaged checkpoint to write")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--best", type=int, help="average the K best step checkpoints of a run (validation BLEU)")
    group.add_argument("--last", type=int, help="average the K most recent step checkpoints of a run")
    parser.add_argument("--other-runs", action="store_true",
                        help="allow checkpoints of different training runs (another seed or corpus): refused by "
                             "default, since their average is usually worse than either")
    args = parser.parse_args(argv)
    for name in ("best", "last"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"{name}= takes a number of checkpoints, at least 1 (got {getattr(args, name)})")
    # Warnings only: the result is the one "wrote ..." line on stdout (average_checkpoints' info line would repeat it)
    logging.basicConfig(level=logging.WARNING, format=f"{parser.prog}: warning: %(message)s")
    try:
        check_writable(args.out, "out")  # before loading anything
        if args.best or args.last:
            if len(args.inputs) != 1 or not Path(args.inputs[0]).is_dir():
                parser.error("best= and last= take one run directory")
            paths = select_checkpoints(args.inputs[0], best=args.best, last=args.last)
        else:
            paths = [Path(p) for p in args.inputs]
            for path in paths:  # before any warning: a folder or a missing file is the one thing to say
                if path.is_dir():
                    raise ValueError(f"{path} is a folder: give best=K or last=K to average a run's step "
                                     "checkpoints, or the checkpoint files themselves")
                if not path.is_file():
                    raise FileNotFoundError(f"checkpoint not found: {path}")
        asked = args.best or args.last or len(paths)
        if len(paths) < asked:  # one warning, also when only one is left (not a second "only one" line)
            log.warning("%s has %d step checkpoint%s, fewer than the %d asked for: %s", args.inputs[0],
                        len(paths), "" if len(paths) == 1 else "s", asked,
                        "the output is a weights-only copy of it" if len(paths) == 1 else "averaging all of them")
        elif len(paths) == 1:
            log.warning("only one checkpoint (%s): the output is a weights-only copy of it", paths[0])
        if Path(args.out).resolve() in {Path(p).resolve() for p in paths}:
            raise ValueError(f"out={args.out} is one of the checkpoints being averaged: write the average to a "
                             "new file (averaging would replace that checkpoint)")
        average_checkpoints(paths, args.out, other_runs=args.other_runs)
    except (CheckpointError, OSError, ValueError) as error:  # OSError: not found, no permission
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} (mean of {', '.join(str(p) for p in paths)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
