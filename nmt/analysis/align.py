"""The forced-alignment command: read a parallel text, align it with a trained model (:mod:`nmt.analysis.forced`),
write Pharaoh links and, optionally, the soft alignments.

``lowercase=auto`` lowercases the input lines when the checkpoint was trained on lowercased text
(``data.normalize``; word positions do not move). Given a second model trained in the opposite direction
(``reverse_checkpoint``), both directions are extracted and symmetrized (:mod:`nmt.analysis.symmetrize`).
Words are the whitespace tokens of the input files: SentencePiece starts a piece with "▁" at every whitespace,
so pre-tokenized gold sets keep their word indices (a line where the counts differ is reported on stderr).

Command line (key=value, like translate.py, but parsed here without Hydra)::

    python -m nmt.align checkpoint=PATH|RUN_DIR src=FILE tgt=FILE out=FILE.align [matrices=FILE.npz]
                        [method=argmax_target|argmax_source|threshold] [threshold=0.3] [shift=0]
                        [temperature=1.0] [lowercase=auto|true|false]
                        [reverse_checkpoint=PATH [method=grow-diag-final-and|intersection|union|...]
                         [direction_method=argmax_target]
                         | reverse_checkpoint=PATH combine=product|mean [method=argmax_target|...]]
                        [head=mean|INDEX|best] [gold=FILE [gold_one_based=false]]
                        [batch_size=64] [device=auto]

``out`` gets one Pharaoh line ``i-j`` (source word, target word, 0-based) per input line (empty lines stay
empty); ``matrices`` gets the forward model's soft alignments in the evaluation format (``FILE.npz`` with one
float32 ``[len(target pieces), len(source pieces)]`` array per line, key = 0-based line index, and
``FILE.jsonl`` with the pieces: design.md §2). With ``reverse_checkpoint``, ``method`` is the symmetrization
(default ``grow-diag-final-and``) and ``direction_method`` extracts each direction (default
``argmax_target``: each target word of that model links to its argmax source word). With ``combine=product``
(or ``mean``) the two directions' word-level soft alignments are combined before extraction
(:func:`combined_links`) and ``method`` is one of the one-direction methods applied to the combined matrix.

``head`` chooses the matrix that links are extracted from for a multi-head attention model
(:mod:`nmt.analysis.heads`): ``mean`` (the default, the heads' mean: the matrix every model saves), a 0-based
head index, or ``best``: the head with the lowest AER on the first half of the gold lines (``gold=FILE``, Pharaoh,
0-based unless ``gold_one_based=true``, one line per sentence pair), which is then scored on the other half too;
both AERs and the chosen head are printed. ``matrices`` always holds the model's combined matrices, plus every
head's in ``FILE.heads.npz`` for a multi-head model. With ``gold`` the AER of the written links on all gold lines is
printed as well. ``head`` other than ``mean`` works on one model, without ``reverse_checkpoint``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from nmt.analysis.aer import aer
from nmt.analysis.forced import combined_links, force_align, links, load_aligner, word_counts
from nmt.analysis.gold import Alignments, AlignmentWarning, read_pharaoh
from nmt.analysis.heads import best_head, parse_head, with_head
from nmt.analysis.symmetrize import COMBINATIONS, SYMMETRIZATIONS, symmetrize
from nmt.data.textio import atomic_write, read_lines
from nmt.decoding.artifacts import check_npz_path, save_alignments
from nmt.decoding.word_alignment import METHODS, to_pharaoh
from nmt.models.device import pick_device, set_threads

USAGE = ("usage: python -m nmt.align checkpoint=PATH src=FILE tgt=FILE out=FILE.align [matrices=FILE.npz] "
         "[method=argmax_target|argmax_source|threshold] [threshold=0.3] [shift=0] [temperature=1.0] "
         "[lowercase=auto|true|false] [reverse_checkpoint=PATH method=grow-diag-final-and|intersection|union|"
         "grow-diag|grow-diag-final direction_method=argmax_target | reverse_checkpoint=PATH combine=product|mean] "
         "[head=mean|INDEX|best] [gold=FILE.pharaoh [gold_one_based=false]] [batch_size=64] [device=auto] "
         "[threads=N]")


REQUIRED = ("checkpoint", "src", "tgt", "out")


DEFAULTS = {"matrices": None, "method": None, "threshold": "0.3", "shift": "0", "temperature": "1.0",
            "lowercase": "auto", "reverse_checkpoint": None, "combine": None,
            "direction_method": "argmax_target", "head": "mean", "gold": None, "gold_one_based": "false",
            "batch_size": "64", "device": "auto", "threads": None}


KEYS = REQUIRED + tuple(DEFAULTS)


class UsageError(ValueError):
    """A bad command line; the message says what is wrong and the valid keys or values."""


def parse_args(argv: Sequence[str]) -> dict:
    """``key=value`` arguments -> a dict of typed options (``threshold`` float, ``shift``/``batch_size`` int,
    ``method`` resolved: ``argmax_target`` alone, ``grow-diag-final-and`` with ``reverse_checkpoint``).

    Raises:
        UsageError: an argument without ``=``, an unknown or repeated key (listing the valid keys), a missing
            required key, a bad number, or a method that does not fit (listing the valid methods).
    """
    given = _key_values(argv)
    missing = [k for k in REQUIRED if not given.get(k)]
    if missing:
        raise UsageError(f"missing {', '.join(k + '=' for k in missing)}; required keys: {', '.join(REQUIRED)}")
    opts = {**DEFAULTS, **given}
    try:
        opts["threshold"] = float(opts["threshold"])
        opts["temperature"] = float(opts["temperature"])
        opts["shift"] = int(opts["shift"])
        opts["batch_size"] = int(opts["batch_size"])
        opts["threads"] = None if opts["threads"] in (None, "null") else int(opts["threads"])
    except ValueError as err:
        raise UsageError(f"threshold and temperature must be numbers, shift, batch_size and threads integers: "
                         f"{err}") from None
    if opts["threads"] is not None and opts["threads"] < 1:
        raise UsageError(f"threads={opts['threads']} must be a whole number of CPU threads >= 1 (or null: all cores)")
    if opts["shift"] < 0 or opts["batch_size"] < 1 or opts["temperature"] <= 0:
        raise UsageError(f"need shift >= 0, batch_size >= 1 and temperature > 0, got shift={opts['shift']}, "
                         f"batch_size={opts['batch_size']}, temperature={opts['temperature']}")
    if opts["lowercase"] not in ("auto", "true", "false"):
        raise UsageError(f"lowercase={opts['lowercase']}; valid: auto (as the checkpoint's training data), true, false")
    if opts["direction_method"] not in METHODS:
        raise UsageError(f"direction_method={opts['direction_method']}; valid: {', '.join(METHODS)}")
    if opts["matrices"]:
        try:
            check_npz_path(opts["matrices"], key="matrices")
        except ValueError as err:
            raise UsageError(str(err)) from None
    _resolve_method(opts)
    _check_head(opts)
    return opts


def _check_head(opts: dict) -> None:
    """Parse ``head`` and ``gold_one_based`` and check that they fit the other options."""
    try:
        opts["head"] = parse_head(opts["head"])
    except ValueError as err:
        raise UsageError(str(err)) from None
    if opts["gold_one_based"] not in ("true", "false"):
        raise UsageError(f"gold_one_based={opts['gold_one_based']}; valid: true, false")
    opts["gold_one_based"] = opts["gold_one_based"] == "true"
    if opts["head"] == "best" and not opts["gold"]:
        raise UsageError("head=best chooses the head with the lowest AER on the first half of a gold set: add "
                         "gold=FILE (Pharaoh links, one line per sentence pair)")
    if opts["head"] != "mean" and opts["reverse_checkpoint"]:
        raise UsageError(f"head={opts['head']} chooses among one model's heads; with reverse_checkpoint use head=mean")


def _key_values(argv: Sequence[str]) -> dict[str, str]:
    """``key=value`` arguments -> ``{key: value}`` (a leading ``+`` dropped), checking each key."""
    given: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+")
        if not sep or not key:
            raise UsageError(f"argument {arg!r} is not key=value; valid keys: {', '.join(KEYS)}")
        if key not in KEYS:
            raise UsageError(f"unknown key {key!r}; valid keys: {', '.join(KEYS)}")
        if key in given:
            raise UsageError(f"key {key!r} given twice")
        given[key] = value
    return given


def _resolve_method(opts: dict) -> None:
    """Check ``combine`` and set ``opts["method"]`` to the given or the default method."""
    reverse = opts["reverse_checkpoint"]
    if opts["combine"] is not None:
        if opts["combine"] not in COMBINATIONS or not reverse:
            problem = (f"valid values are {', '.join(COMBINATIONS)}" if opts["combine"] not in COMBINATIONS
                       else "it combines two directions, so it needs reverse_checkpoint=PATH (a model trained "
                       "target -> source)")
            raise UsageError(f"combine={opts['combine']}: {problem}")
        opts["method"] = opts["method"] or METHODS[0]
        if opts["method"] not in METHODS:
            raise UsageError(f"method={opts['method']}; with combine= the method extracts links from the "
                             f"combined matrix: {', '.join(METHODS)}")
        return
    valid = SYMMETRIZATIONS if reverse else METHODS
    opts["method"] = opts["method"] or valid[-1 if reverse else 0]
    if opts["method"] not in valid:
        hint = ("" if reverse or opts["method"] not in SYMMETRIZATIONS
                else " (symmetrization needs reverse_checkpoint=PATH, a model trained target -> source)")
        raise UsageError(f"method={opts['method']}{hint}; valid methods "
                         f"{'with' if reverse else 'without'} reverse_checkpoint: {', '.join(valid)}")


def run(opts: dict) -> tuple[list[str], list[str], list[str]]:
    """Align ``opts["src"]``/``opts["tgt"]`` as :func:`parse_args` describes; write ``out`` (and
    ``matrices``); return the Pharaoh lines written, warnings (gold links out of range, lines whose merged word
    counts differ from their whitespace tokens) and notes (the head ``head=best`` chose, AERs against ``gold``).

    Raises:
        ValueError: source and target files with different line counts, a gold file with another number of
            lines, a reverse checkpoint that does not translate the other way, a ``head`` index the model does not
            have, or an unusable ``device``; FileNotFoundError, nmt.checkpoint.CheckpointError,
            nmt.analysis.gold.AlignmentFormatError and nmt.data.textio.TextFileError name the file that is
            missing or unusable.
    """
    set_threads(opts.get("threads"))
    device = pick_device(opts["device"])
    sources, targets = read_lines(opts["src"]), read_lines(opts["tgt"])
    if len(sources) != len(targets):
        raise ValueError(f"{opts['src']} has {len(sources)} lines but {opts['tgt']} has {len(targets)}")
    gold, problems = _read_gold(opts, sources, targets)
    model, src_tok, tgt_tok, prepare, langs = load_aligner(opts["checkpoint"], device, opts["lowercase"])
    forward = force_align(model, src_tok, tgt_tok, prepare(sources), prepare(targets), opts["batch_size"], device)
    del model
    extract = {"threshold": opts["threshold"], "shift": opts["shift"], "temperature": opts["temperature"]}
    if opts["reverse_checkpoint"]:
        found = _symmetrized(opts, forward, sources, targets, langs, device, extract)
        notes, head = [], opts["head"]
    else:
        aligned, notes, head = _apply_head(opts["head"], forward, gold,
                                           lambda t: links(t, opts["method"], **extract))
        found = [links(t, opts["method"], **extract) for t in aligned]
    lines = [to_pharaoh(sentence) for sentence in found]
    atomic_write(opts["out"], "".join(line + "\n" for line in lines))
    if opts["matrices"]:
        save_alignments(opts["matrices"], forward)  # the combined matrices (and every head's), whatever head=
    if gold is not None:
        notes.append(f"head={head}, all {len(gold)} gold lines: {aer(gold.sure, gold.possible, found)}")
    mismatched = [i + 1 for i, t in enumerate(forward)
                  if t.hyp_pieces and word_counts(t) != (len(sources[i].split()), len(targets[i].split()))]
    if mismatched:
        shown = ", ".join(map(str, mismatched[:10])) + (", ..." if len(mismatched) > 10 else "")
        problems.append(f"{len(mismatched)} line(s) where the subword words differ from the whitespace tokens, so "
                        f"word indices may not match the input's: {shown}")
    return lines, problems, notes


def _read_gold(opts: dict, sources: list[str], targets: list[str]) -> tuple[Alignments | None, list[str]]:
    """The ``gold`` links (None without ``gold``), their positions checked against the whitespace words of the
    input, and a warning per gold link dropped as out of range."""
    if not opts["gold"]:
        return None, []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AlignmentWarning)
        gold = read_pharaoh(opts["gold"], one_based=opts["gold_one_based"],
                            lengths=[(len(s.split()), len(t.split())) for s, t in zip(sources, targets)])
    return gold, [str(w.message) for w in caught if issubclass(w.category, AlignmentWarning)]


def _apply_head(head, forward: list, gold: Alignments | None, extract) -> tuple[list, list[str], str]:
    """The forced alignments with the matrix of ``head`` (``best``: chosen on the first half of ``gold`` by the
    AER of ``extract``'s links), what to report about the choice, and the head's name for reports."""
    if head != "best":
        return with_head(forward, head), [], str(head)
    choice = best_head(forward, gold, extract)
    chosen_on, rest = choice.chosen_on, choice.held_out_lines
    count, every = len(choice.per_head), " ".join(f"{result.aer:.4f}" for result in choice.per_head)
    chosen = (f"head=best: head {choice.head} of {count}, the lowest AER on gold lines {chosen_on.start + 1}-"
              f"{chosen_on.stop} (the first half, which chose it): {choice.selection.aer:.4f} (heads 0-{count - 1}: "
              f"{every})")
    scored = (f"head {choice.head} on the other gold lines {rest.start + 1}-{rest.stop} (not used to choose it): "
              f"{choice.held_out}")
    return with_head(forward, choice.head), [chosen, scored], f"best (head {choice.head})"


def _symmetrized(opts: dict, forward: list, sources: list[str], targets: list[str], langs: tuple, device,
                 extract: dict) -> list[list[tuple[int, int]]]:
    """Links of ``forward`` combined with the reverse model's forced alignments (``reverse_checkpoint``), per
    line: hard symmetrization of each direction's links, or soft (``combine``).

    Raises:
        ValueError: when the reverse model does not translate the other way.
    """
    r_model, r_src_tok, r_tgt_tok, r_prepare, r_langs = load_aligner(opts["reverse_checkpoint"], device,
                                                                      opts["lowercase"])
    if r_langs != langs[::-1]:
        raise ValueError(f"reverse_checkpoint={opts['reverse_checkpoint']} translates {r_langs[0]}->{r_langs[1]}, "
                         f"but checkpoint={opts['checkpoint']} translates {langs[0]}->{langs[1]}: the reverse "
                         f"model must translate {langs[1]}->{langs[0]}")
    backward = force_align(r_model, r_src_tok, r_tgt_tok, r_prepare(targets), r_prepare(sources),
                           opts["batch_size"], device)
    del r_model
    found = []
    for fwd, bwd in zip(forward, backward):
        if opts["combine"]:
            found.append(combined_links(fwd, bwd, opts["combine"], opts["method"], **extract))
            continue
        f_links = links(fwd, opts["direction_method"], **extract)
        b_links = [(s, t) for t, s in links(bwd, opts["direction_method"], **extract)]  # transpose
        found.append(symmetrize(f_links, b_links, opts["method"]))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nmt.align``: returns 0; 2 with ``error: ...`` and the usage for a bad command line; 1 with
    ``error: ...`` for unreadable files or checkpoints and mismatched line counts."""
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as err:
        print(f"error: {err}\n{USAGE}", file=sys.stderr)
        return 2
    try:
        lines, warnings, notes = run(opts)
    except (OSError, ValueError) as err:  # CheckpointError, TextFileError and AlignmentFormatError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return 1
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for note in notes:
        print(note, file=sys.stderr)
    print(f"wrote {opts['out']}: {len(lines)} sentence pairs, {sum(len(line.split()) for line in lines)} links"
          + (f"; matrices in {opts['matrices']}" if opts["matrices"] else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
