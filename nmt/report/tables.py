"""The report's tables as plain rows (one dict per run), shared by the HTML page and the Markdown summary: what
each run is and how it trained, its scores as its own ``eval/*.scores.json`` record them, and its attention.
"""

from __future__ import annotations

import math
import re
import statistics

from nmt.report.runs import DECODERS, SPLITS, Run

SCORE_KEYS = (("bleu", "BLEU"), ("bleu_lowercase", "BLEU lc"), ("chrf", "chrF"))

# the columns of the scores table: (key in a score row, header)
SCORE_COLUMNS = [(f"{split}_{decoder}_{key}", f"{split} {decoder} {name}")
                 for split in SPLITS for decoder in DECODERS for key, name in SCORE_KEYS]


def fmt(value, digits: int = 2) -> str:
    """A number for a table cell: ``digits`` decimals, thousands separated; ``–`` for None or NaN; other values
    as text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,.{digits}f}"


def _decoder_name(run: Run) -> str:
    """The configured decoder in words: ``beam 5, length penalty 0.6`` or ``greedy``."""
    scores = run.scores.get(("test", "beam"))
    if scores is None:
        return "greedy"
    extra = [f"length penalty {scores['length_penalty']:g}"] if scores.get("length_penalty") else []
    extra += [f"coverage penalty {scores['coverage_penalty']:g}"] if scores.get("coverage_penalty") else []
    extra += [f"MBR {scores['mbr']}"] if scores.get("mbr") else []
    return ", ".join([f"beam {scores.get('beam_size')}", *extra])


def decoding_speed(scores: dict) -> float | None:
    """Decoding sentences per second where the evaluation recorded it (``sentences_per_sec``, or
    ``decode_seconds`` with ``num_sentences``); None otherwise."""
    if isinstance(scores.get("sentences_per_sec"), (int, float)):
        return float(scores["sentences_per_sec"])
    seconds = scores.get("decode_seconds")
    if isinstance(seconds, (int, float)) and seconds > 0 and scores.get("num_sentences"):
        return scores["num_sentences"] / seconds
    return None


def run_row(run: Run) -> dict:
    """What the run is and how it trained: score model (with local-p's window D), decoder style, parameters, steps, epochs, training
    minutes (validation included), training tokens/s (mean over its validation intervals), test decoding
    sentences/s (where recorded), the decoder and when its evaluation was written."""
    test = run.scores[("test", run.main_decoder())]
    model = run.config.get("model") or {}
    attention = run.config.get("attention") or {}
    style = test.get("decoder_style") or (run.config.get("decoder") or {}).get("style")
    feeding = test.get("input_feeding")
    speeds = [r["tokens_per_sec"] for r in (run.curve.records if run.curve else [])
              if isinstance(r.get("tokens_per_sec"), (int, float))]
    seconds = run.progress.get("train_seconds")
    return {
        "label": run.label, "folder": str(run.folder),
        "attention": (test.get("attention") or str(attention.get("_target_", "")).rsplit(".", 1)[-1])
        + (f", D={attention['window']}" if attention.get("window") is not None else ""),
        "decoder_style": f"{style}{' without input feeding' if feeding is False else ''}",
        "hidden_size": model.get("hidden_size"), "parameters": run.parameters,
        "steps": run.progress.get("step"), "epochs": run.progress.get("epoch"),
        "train_minutes": seconds / 60 if isinstance(seconds, (int, float)) else None,
        "tokens_per_sec": statistics.fmean(speeds) if speeds else None,
        "sentences_per_sec": decoding_speed(test), "decoder": _decoder_name(run),
        "finished": run.finished.strftime("%Y-%m-%d %H:%M UTC") if run.finished else None,
        "overrides": " ".join(run.overrides),
    }


def score_row(run: Run) -> dict:
    """The run's BLEU (cased and lowercased) and chrF on valid and test, greedy and beam, exactly as its
    ``eval/*.scores.json`` record them (None where a file is missing: a run without beam search)."""
    row = {"label": run.label}
    for split in SPLITS:
        for decoder in DECODERS:
            scores = run.scores.get((split, decoder)) or {}
            for key, _ in SCORE_KEYS:
                row[f"{split}_{decoder}_{key}"] = scores.get(key)
    return row


def signatures(runs: list[Run]) -> dict[str, list[str]]:
    """sacreBLEU's signatures of the runs' test scores, once: ``{"BLEU": [...], "BLEU lc": [...], "chrF": [...]}``,
    each list holding the distinct signatures (one when all runs agree; those differing only in sacreBLEU's
    version are listed each)."""
    out: dict[str, list[str]] = {}
    for key, name in (("bleu_signature", "BLEU"), ("bleu_lowercase_signature", "BLEU lc"),
                      ("chrf_signature", "chrF")):
        seen = [run.scores[("test", run.main_decoder())].get(key) for run in runs]
        out[name] = [s for s in dict.fromkeys(seen) if s]
    return out


def attention_row(label: str, summary: dict) -> dict:
    """How sharp a run's attention is (mean row entropy in bits) and how far it strays from the diagonal, over
    its test sentences."""
    return {"label": label, "entropy": summary["entropy"], "diagonal": summary["diagonal"],
            "sentences": summary["sentences"]}


def tokenizer_of(run: Run) -> str:
    """The BLEU tokenizer of the run's test scores (``tok:`` of the signature; ``13a`` when absent)."""
    match = re.search(r"tok:([^|]+)", str(run.scores[("test", run.main_decoder())].get("bleu_signature", "")))
    return match.group(1) if match else "13a"
