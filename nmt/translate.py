"""Translate a text file with a trained checkpoint: ``nmt-translate checkpoint=PATH input=FILE output=FILE``
(Hydra), also run as ``python translate.py`` in a checkout or ``python -m nmt.translate``."""

import json
import logging
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from nmt.commandline import quiet_when_the_reader_stops, shortcut_conflict
from nmt.data.normalize import Normalizer
from nmt.data.textio import TextFileError, check_writable, counted, read_lines, write_error, write_together
from nmt.data.tokenizer import fits_other_side
from nmt.decoding.artifacts import alignment_files, check_npz_path, nbest_lines
from nmt.decoding.ensemble import load_ensemble
from nmt.decoding.options import check_decoding, decoding_settings
from nmt.decoding.scoring import score
from nmt.decoding.translation import at_length_limit, translate_nbest
from nmt.models import checkpoint
from nmt.models.allocator import reuse_freed_memory
from nmt.models.device import pick_device, set_threads
from nmt.models.precision import Precision, check_precision
from nmt.settings import (
    TRANSLATE_PATHS,
    absolute_paths,
    check_added_keys,
    command_name,
    config_dir,
    refuse_unknown_settings,
)

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
log = logging.getLogger("translate")


PROG = command_name("translate.py", "nmt-translate")  # the name in its messages
EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143}  # 128 + signal number, as a shell reports a job stopped by it
OUTPUTS = ("output", "nbest", "alignments")  # written together, or none of them


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during translation; ``name`` is the signal's (``SIGINT``)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@contextmanager
def signals_interrupt():
    """While active, SIGINT and SIGTERM raise :class:`Interrupted` where the program is, so that the temporary
    files of the outputs are removed on the way out; further signals are ignored until it ends (the clean-up
    takes no time). Outside the main thread, signals are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)
        raise Interrupted(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="translate")
def main(cfg: DictConfig) -> None:
    """Load the checkpoint, translate every input line (one output line each), save what was asked.

    A missing or unreadable checkpoint or input file, an output that cannot be written (a full disk: no output
    is replaced), or a reference with another line count, ends the run with one ``error:`` line naming the file
    (exit status 1) instead of a traceback; so does a required key left out. SIGINT (Ctrl-C) or SIGTERM end it
    with one line saying what was interrupted and what was written, and exit status 130 / 143."""
    if missing := sorted(OmegaConf.missing_keys(cfg)):
        sys.exit(f"{PROG}: error: missing {', '.join(k + '=...' for k in missing)}; usage: "
                 f"{'python translate.py' if PROG == 'translate.py' else PROG} checkpoint=PATH input=FILE output=FILE "
                 "(--help lists the settings)")
    stage = {"now": "starting", "written": False}
    try:
        hydra_cfg = HydraConfig.get()
        check_added_keys(cfg, list(hydra_cfg.overrides.task), hydra_cfg.runtime.choices.keys())
        if clash := shortcut_conflict(list(hydra_cfg.overrides.task), "beam_size", "decode.beam_size"):
            raise ValueError(clash)
        with signals_interrupt():
            run(cfg, stage)
    except Interrupted as stop:
        names = ", ".join(f"{key}={cfg[key]}" for key in OUTPUTS if cfg[key])
        done = f"{names} had been written" if stage["written"] else f"nothing was written to {names}"
        print(f"{PROG}: interrupted by {stop.name} while {stage['now']}: {done}", file=sys.stderr)
        sys.exit(EXIT_STATUS[stop.name])
    except (OSError, checkpoint.CheckpointError, TextFileError, ValueError) as err:  # OSError: not found, no access
        sys.exit(f"{PROG}: error: {err}")


def run(cfg: DictConfig, stage: dict | None = None) -> None:
    """The translation itself (see :func:`main`). ``stage["now"]`` says what it is doing (``translating``,
    ``writing``, ...) and ``stage["written"]`` whether the outputs are in place, for the line of an interruption.

    Raises:
        FileNotFoundError, nmt.checkpoint.CheckpointError, nmt.textio.TextFileError: a missing or unusable
            checkpoint, input or reference file (the message names it; a missing checkpoint is named before
            the input is read).
        ValueError: a reference with another line count than the input, a decoding or output setting that
            :func:`check_outputs` refuses, or an unusable ``device=`` or ``threads=``; all found before anything
            is translated or written.
        nmt.data.textio.WriteError: an output that cannot be written (a full disk, ...): none was replaced.
    """
    stage = {} if stage is None else stage
    stage["now"] = "loading"
    absolute_paths(cfg, TRANSLATE_PATHS)
    set_threads(cfg.threads)
    memory, device = reuse_freed_memory(default="reuse"), pick_device(cfg.device)  # reuse, unless NMT_MALLOC=default
    precision = check_precision(cfg.precision, device, "precision")  # auto -> fp32 or bf16
    beam_size, n_best = check_outputs(cfg)
    paths = checkpoint_files(cfg.checkpoint)  # a wrong checkpoint= is named before the input is read
    sentences = read_lines(cfg.input, key="input")
    references = read_lines(cfg.reference, key="reference") if cfg.reference else None
    if references is not None and len(references) != len(sentences):  # found before any translating
        raise ValueError(f"{cfg.reference} has {counted(len(references), 'line')} but {cfg.input} has "
                         f"{len(sentences)}: reference= needs one reference line per input line")
    loading = time.perf_counter()
    ensemble = cfg.ensemble if isinstance(cfg.checkpoint, ListConfig) else None  # checkpoint=[A,B,...]
    model, model_cfg, src_tok, tgt_tok, path = load_models(paths, ensemble, device)
    loading = time.perf_counter() - loading
    # a model trained on normalized text (data.normalize, e.g. the alignment presets) sees its input the same way
    sentences = Normalizer.from_config(model_cfg.data.get("normalize"), model_cfg.data.src_lang).lines(sentences)
    warn_other_language(cfg.input, model_cfg.data, src_tok, tgt_tok, sentences)
    log.info("memory: %s", memory)  # once the checkpoint and the input are found to be usable
    start, stage["now"] = time.perf_counter(), "translating"
    with Precision(precision, device).autocast():
        nbest = translate_nbest(model, src_tok, tgt_tok, sentences, cfg.decode, device, beam_size, n_best)
    results = [block[0] for block in nbest]
    seconds, stage["now"] = time.perf_counter() - start, "writing"
    files = {cfg.output: "".join(t.text + "\n" for t in results),  # all or none: output= is not replaced
             **({cfg.nbest: nbest_lines(nbest)} if cfg.nbest else {}),  # when nbest= or alignments= fail
             **(alignment_files(cfg.alignments, results) if cfg.alignments else {})}
    write_together(files)
    stage["written"] = True
    settings = decoding_settings(cfg.decode, beam_size)  # for the success line and the reference's scores
    log.info("translated %s (%s; %s in all) in %.1f s (%.1f sentences/s; %s loaded in %.1f s), beam size %d, "
             "%s%s: %s", counted(len(results), "line"),
             counted(sum(not t.src_pieces for t in results), "empty input line"),
             counted(sum(not t.text for t in results), "empty translation"), seconds, len(results) / max(seconds, 1e-9),
             path, loading, beam_size, precision,
             f" with MBR ({settings['mbr']}, temperature {settings['mbr_temperature']})" if settings["mbr"] else "",
             ", ".join("stdout" if name == "-" else str(name) for name in files))
    if cut := [i + 1 for i, t in enumerate(results) if at_length_limit(t, cfg.decode)]:
        log.warning("%d line(s) stopped at the output length limit (decode.max_len_a * source length + "
                    "decode.max_len_b) and may be cut short: lines %s%s", len(cut), ", ".join(map(str, cut[:10])),
                    " ..." if len(cut) > 10 else "")
    if cfg.plots:
        stage["now"] = "drawing the plots"
        draw_plots(cfg, results)
    if references is not None:
        stage["now"] = "scoring"
        print_scores(cfg, model_cfg, results, references, {**settings, "precision": precision}, path)


LANGUAGE_SAMPLE = 2000  # input lines that tell its language


def warn_other_language(name: str, data, src_tok, tgt_tok, sentences: list[str]) -> None:
    """Warn when the input looks like the model's target language (its first ``LANGUAGE_SAMPLE`` lines split into
    fewer pieces per word with the target vocabulary: nmt.data.tokenizer.fits_other_side); ``data`` is the
    model's ``cfg.data``."""
    if fit := fits_other_side(src_tok, tgt_tok, sentences[:LANGUAGE_SAMPLE]):
        log.warning("%s looks like %s text, not %s: %.2f subword pieces per word with the model's %s vocabulary, "
                    "%.2f with its %s one (this model translates %s->%s)", name, data.tgt_lang, data.src_lang,
                    fit[0], data.src_lang, fit[1], data.tgt_lang, data.src_lang, data.tgt_lang)


def checkpoint_files(checkpoint_setting) -> list[Path]:
    """The checkpoint files that ``checkpoint=`` names (a file or a run folder, or a list of them: an ensemble),
    each resolved by :func:`nmt.checkpoint.run_model` and checked to exist, without reading them.

    Raises:
        FileNotFoundError, nmt.checkpoint.CheckpointError: a path that is no checkpoint file (the message says
            which run folder or file it is like) or a run folder without a finished model.
    """
    return [checkpoint.existing_file(checkpoint.run_model(name)) for name in checkpoint_names(checkpoint_setting)]


def checkpoint_names(checkpoint_setting) -> list:
    """``checkpoint=`` as a list: one path, or the paths of an ensemble, as given."""
    return list(checkpoint_setting) if isinstance(checkpoint_setting, ListConfig) else [checkpoint_setting]


def load_models(paths: list[Path], ensemble: str | None, device):
    """The model of a checkpoint file (:func:`checkpoint_files`) when ``ensemble`` is None, else the ensemble of
    the files (:mod:`nmt.decoding.ensemble`, combined as ``ensemble``: prob or loglinear).

    Returns:
        ``(model, its config, src_tok, tgt_tok, what was loaded)`` (a path, or the paths joined by commas).
    Raises:
        nmt.checkpoint.CheckpointError: an unusable checkpoint, or ensemble members of other subwords or another
            direction (named).
    """
    if ensemble is None:
        model, model_cfg, src_tok, tgt_tok, _ = checkpoint.load(paths[0], device)
        return model, model_cfg, src_tok, tgt_tok, paths[0]
    model, model_cfg, src_tok, tgt_tok = load_ensemble(paths, device, ensemble)
    return model, model_cfg, src_tok, tgt_tok, ",".join(map(str, paths))


def print_scores(cfg: DictConfig, model_cfg, results: list, references: list[str], settings: dict, path) -> None:
    """BLEU and chrF of ``results`` against ``references``, with their signatures, the decoding ``settings``
    (the precision that ran among them) and the checkpoint ``path``, to stderr."""
    # the hypotheses are in the training convention (data.normalize): score them against references in it
    # too, as the final evaluation of training does
    target = Normalizer.from_config(model_cfg.data.get("normalize"), model_cfg.data.tgt_lang)
    scores = score([t.text for t in results], target.lines(references), model_cfg.data.tgt_lang)
    scores.update(**settings, checkpoint=str(path))
    if target.active:
        scores["references_normalized"] = dict(model_cfg.data.normalize)
    print(json.dumps(scores, indent=2), file=sys.stderr)


def draw_plots(cfg: DictConfig, results: list) -> None:
    """The heatmaps of the first ``plot_first`` non-empty lines into ``plots=``, from the saved ``alignments=``.

    Raises:
        nmt.data.textio.WriteError: naming the picture that could not be written (the outputs are in place).
    """
    from nmt.analysis.plot import plot_npz  # matplotlib is slow to import: only when plots= is given
    try:
        with warnings.catch_warnings(record=True) as caught:  # one log line each, not Python's two
            warnings.simplefilter("always")
            drawn = plot_npz(cfg.alignments, [i for i in range(min(cfg.plot_first, len(results))) if results[i].text],
                             cfg.plots)
        for warning in caught:
            log.warning("%s", warning.message)
        log.info("drew %s: %s", counted(len(drawn), "alignment heatmap"), ", ".join(map(str, drawn)) or "-")
    except OSError as err:
        raise write_error(err.filename or cfg.plots, err, f"{', '.join(f'{k}={cfg[k]}' for k in OUTPUTS if cfg[k])} "
                          "were written") from None


def check_outputs(cfg: DictConfig) -> tuple[int, int]:
    """The beam size and n-best size to decode with, after checking the decoding and output settings together
    (before any work).

    Raises:
        ValueError: naming the setting that is out of range or that conflicts with another.
    """
    beam_key = "beam_size" if cfg.beam_size is not None else "decode.beam_size"
    beam_size, n_best = cfg.beam_size if cfg.beam_size is not None else cfg.decode.beam_size, cfg.decode.n_best
    check_decoding(beam_size, n_best, beam_key, cfg.decode)
    if n_best > 1 and not cfg.nbest:
        raise ValueError(f"decode.n_best={n_best} needs nbest=FILE for the n-best list (output= keeps the best "
                         "translation of each line)")
    if cfg.nbest == "-" and cfg.output == "-":
        raise ValueError("nbest=- and output=- would both write to stdout: give one of them a file")
    if cfg.input == "-" and cfg.reference == "-":
        raise ValueError("input=- and reference=- would both read stdin: give the reference as a file")
    for key in ("output", "nbest"):
        if cfg[key] and cfg[key] != "-" and Path(cfg[key]).is_dir():
            raise ValueError(f"{key}={cfg[key]} is a folder: give a file name for the {key}")
    read = {Path(cfg[k]).resolve(): k for k in ("input", "reference") if cfg.get(k) and cfg[k] != "-"}
    read.update({Path(str(c)).resolve(): "checkpoint" for c in checkpoint_names(cfg.checkpoint)})
    written = [(key, Path(cfg[key])) for key in ("output", "nbest", "alignments") if cfg[key] and cfg[key] != "-"]
    if cfg.alignments:  # the tokens file (and a multi-head model's heads file) beside the matrices
        npz = Path(cfg.alignments)
        written += [("alignments", npz.with_suffix(".jsonl")), ("alignments", npz.with_name(npz.stem + ".heads.npz"))]
    for key, path in written:
        if path.resolve() in read:
            raise ValueError(f"{key}={cfg[key]} would write {path.name}, which is {read[path.resolve()]}=: it would "
                             "replace the file being read; give the output another file name")
    if cfg.alignments:
        check_npz_path(cfg.alignments)
    if cfg.plots and not cfg.alignments:
        raise ValueError(f"plots={cfg.plots} draws the alignments: add alignments=FILE.npz")
    first = cfg.get("plot_first")
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        raise ValueError(f"plot_first={first} must be a whole number >= 1 (how many of the first lines plots= draws)")
    for key in ("output", "nbest", "alignments", "plots"):  # a read-only folder fails now, not after translating
        if cfg[key]:
            check_writable(cfg[key], key, folder=key == "plots")
    return beam_size, n_best


def command() -> None:
    """The ``nmt-translate`` command (also ``python translate.py`` and ``python -m nmt.translate``): a mistyped setting is
    refused in one line with the closest settings (:func:`nmt.settings.refuse_unknown_settings`), then Hydra
    runs :func:`main`."""
    refuse_unknown_settings("translate", PROG)
    with quiet_when_the_reader_stops():
        main()


if __name__ == "__main__":
    command()
