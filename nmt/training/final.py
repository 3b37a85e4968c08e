"""The end of a run: pick the checkpoint to evaluate (``best.pt``, or the average of the best step checkpoints
when it does not lose validation BLEU), decode valid and test with greedy search and the configured decoder,
and write ``eval/`` (hypotheses, scores with signatures, alignments) and ``plots/``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from nmt.data.corpus import Parallel
from nmt.data.textio import write_error
from nmt.decoding.artifacts import save_results
from nmt.decoding.options import decoding_settings
from nmt.decoding.scoring import greedy_bleu, score
from nmt.decoding.translation import translate
from nmt.models import checkpoint
from nmt.training.average import average_checkpoints, select_checkpoints
from nmt.training.tensorboard import Board

log = logging.getLogger(__name__)


def final_checkpoint(cfg, valid: Parallel, run_dir: Path, device, best_bleu: float) -> tuple[Path, dict]:
    """The checkpoint to evaluate: ``best.pt``, or with ``train.average`` the mean of the kept step checkpoints
    (``averaged.pt``) when its greedy validation BLEU is at least best.pt's. Without ``best.pt`` (a run resumed
    from a ``last.pt`` copied without it, whose validations since never beat the best it records) ``last.pt``
    is evaluated, with a warning. Returns (path, facts to report)."""
    best = run_dir / "checkpoints" / "best.pt"
    if not best.is_file():
        log.warning("%s is missing (the checkpoint this run resumed from was copied without it, and no validation "
                    "since beat the best BLEU it records): evaluating last.pt", best)
        return run_dir / "checkpoints" / "last.pt", {}
    if not (cfg.train.get("average") and (cfg.train.get("keep_best") or 0) > 1):
        return best, {}
    paths = select_checkpoints(run_dir, best=cfg.train.keep_best)
    if len(paths) < 2:
        log.info("only %d step checkpoint: nothing to average, evaluating best.pt", len(paths))
        return best, {}
    averaged = run_dir / "checkpoints" / "averaged.pt"
    average_checkpoints(paths, averaged)
    model, _, src_tok, tgt_tok, _ = checkpoint.load(averaged, device)
    bleu = greedy_bleu(model, src_tok, tgt_tok, valid.src, valid.tgt, cfg.decode, device, cfg.data.tgt_lang)
    use = bleu >= best_bleu
    log.info("average of %d checkpoints (%s): valid BLEU %.2f vs best.pt %.2f: evaluating %s", len(paths),
             ", ".join(p.stem for p in paths), bleu, best_bleu, averaged.name if use else best.name)
    return (averaged if use else best), {"averaged_valid_bleu": bleu, "averaged_steps": [p.stem for p in paths]}


def final_evaluation(cfg, splits: dict[str, Parallel], run_dir: Path, device, best_bleu: float = -1.0) -> dict:
    """Decode valid and test with the final checkpoint (best or averaged), greedy and the configured decoder;
    write eval/ (the files of each split and decoder together: an interruption leaves the earlier ones or the new
    ones, never a mix) and plots/.

    Raises:
        nmt.data.textio.WriteError: naming a file of eval/, plots/ or ``averaged.pt`` that could not be written
            (a full disk, ...); the same command then goes straight to the final evaluation again.
    """
    path, results = final_checkpoint(cfg, splits["valid"], run_dir, device, best_bleu)
    results["final_checkpoint"] = path.name
    model, _, src_tok, tgt_tok, _ = checkpoint.load(path, device)
    normalize = cfg.data.get("normalize")
    normalized = {k: v for k, v in dict(normalize).items() if v} if normalize else {}
    decoders = {"greedy": 1} if cfg.decode.beam_size == 1 else {"greedy": 1, f"beam{cfg.decode.beam_size}": None}
    for split in ("valid", "test"):
        if split not in splits:
            continue
        for name, beam_size in decoders.items():
            began = time.perf_counter()
            hyps = translate(model, src_tok, tgt_tok, splits[split].src, cfg.decode, device, beam_size=beam_size)
            speed = round(len(hyps) / max(time.perf_counter() - began, 1e-9), 1)  # sentences/s, this machine
            scores = score([h.text for h in hyps], splits[split].tgt, cfg.data.tgt_lang)
            if normalized:  # hypotheses and references are both in the training convention (data.normalize)
                scores["references_normalized"] = normalized
            scores.update(**decoding_settings(cfg.decode, beam_size or cfg.decode.beam_size),
                          attention=cfg.attention._target_.rsplit(".", 1)[-1], decoder_style=cfg.decoder.style,
                          input_feeding=model.decoder.input_feeding, precision="fp32", checkpoint=str(path), split=split,
                          decoder=name, sentences_per_sec=speed)
            main = name != "greedy" or len(decoders) == 1
            out = run_dir / "eval" / ("" if main else "greedy") / split
            save_results(out, hyps, scores)
            results[f"{split}_{name}_bleu"], results[f"{split}_{name}_chrf"] = scores["bleu"], scores["chrf"]
            results[f"{split}_{name}_bleu_lowercase"] = scores["bleu_lowercase"]
            results.setdefault("bleu_signature", scores["bleu_signature"])
            log.info("%s %s: %s; chrF2 = %.2f", split, name, scores["bleu_detail"], scores["chrf"])
    if results.get("bleu_signature"):  # the same for every split and decoder: once, from the last scores
        log.info("sacreBLEU signatures: BLEU %s; chrF %s", scores["bleu_signature"], scores["chrf_signature"])
    if cfg.eval.plots and "test" in splits:
        from nmt.analysis.plot import plot_npz  # matplotlib is slow to import: only for a run that draws
        try:
            plot_npz(run_dir / "eval" / "test.alignments.npz", range(min(cfg.eval.plots, len(splits["test"]))),
                     run_dir / "plots")
        except OSError as err:  # a full disk: the file, not a traceback (eval/ is complete)
            raise write_error(err.filename or run_dir / "plots", err, "eval/ was written") from None
    Board(run_dir, bool(cfg.train.get("tensorboard"))).final(cfg, results)  # train.tensorboard: settings + scores
    return results
