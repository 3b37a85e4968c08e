"""The forced-alignment command: read a parallel text, align it with a trained model (:mod:`nmt.analysis.forced`),
write Pharaoh links and, optionally, the soft alignments.

``lowercase=auto`` lowercases the input lines when the checkpoint was trained on lowercased text
(``data.normalize``; word positions do not move). Given a second model trained in the opposite direction
(``reverse_checkpoint``), both directions are extracted and symmetrized (:mod:`nmt.analysis.symmetrize`).
``checkpoint=[A,B,...]`` (and ``reverse_checkpoint=[...]``) is an ensemble of models of one subword model and
direction: each aligns the text and their attention matrices are averaged before links are extracted.
Words are the whitespace tokens of the input files: SentencePiece starts a piece with "▁" at every whitespace,
so pre-tokenized gold sets keep their word indices (a line where the counts differ is reported on stderr).

Command line (key=value, like translate.py, but parsed here without Hydra)::

    python -m nmt.align checkpoint=PATH|RUN_DIR|[PATH,...] src=FILE tgt=FILE out=FILE.align [matrices=FILE.npz]
                        [method=argmax_target|argmax_source|threshold|mutual_argmax] [threshold=0.3] [shift=0]
                        [temperature=1.0] [lowercase=auto|true|false]
                        [reverse_checkpoint=PATH [method=grow-diag-final-and|intersection|union|...]
                         [direction_method=argmax_target]
                         | reverse_checkpoint=PATH combine=product|mean [method=argmax_target|...]]
                        [head=mean|INDEX|best] [gold=FILE [gold_one_based=false] [max_dropped=0.05]]
                        [batch_size=64] [device=auto]

``out`` gets one Pharaoh line ``i-j`` (source word, target word, 0-based) per input line (empty lines stay
empty); ``matrices`` gets the forward model's soft alignments in the evaluation format (``FILE.npz`` with one
float32 ``[len(target pieces), len(source pieces)]`` array per line, key = 0-based line index, and
``FILE.jsonl`` with the pieces: design.md §2). With ``reverse_checkpoint``, ``method`` is the symmetrization
(default ``grow-diag-final-and``) and ``direction_method`` extracts each direction (default
``argmax_target``: each target word of that model links to its argmax source word). With ``combine=product``
(or ``mean``) the two directions' word-level soft alignments are combined before extraction
(:func:`combined_links`) and ``method`` is one of the one-direction methods applied to the combined matrix;
``method=mutual_argmax`` keeps the links that are the argmax of both their row and their column
(nmt.decoding.word_alignment.hard_alignment): at most one link per word, so precision is high.

``head`` chooses the matrix that links are extracted from for a multi-head attention model
(:mod:`nmt.analysis.heads`): ``mean`` (the default, the heads' mean: the matrix every model saves), a 0-based
head index, or ``best``: the head with the lowest AER on the first half of the gold lines (``gold=FILE``, Pharaoh,
0-based unless ``gold_one_based=true``, one line per sentence pair), which is then scored on the other half too;
both AERs and the chosen head are printed. ``matrices`` always holds the model's combined matrices, plus every
head's in ``FILE.heads.npz`` for a multi-head model. With ``gold`` the AER of the written links on all gold lines is
printed as well; when more than ``max_dropped`` (default 0.05) of the gold links lie outside the sentences (a
wrong ``gold_one_based=``, or ``src=`` and ``tgt=`` swapped), the command refuses instead of printing a misleading
AER. ``head`` other than ``mean`` works on one model, without ``reverse_checkpoint``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from nmt.analysis.aer import aer, check_dropped, dropped_summary, position_warning
from nmt.analysis.align_args import REQUIRED, USAGE, UsageError, help_text, parse_args  # noqa: F401 (public here)
from nmt.analysis.forced import combined_links, force_align, links, load_aligner, swapped_sides, word_counts
from nmt.analysis.gold import Alignments, AlignmentWarning, read_pharaoh
from nmt.analysis.heads import best_head, with_head
from nmt.analysis.symmetrize import symmetrize
from nmt.commandline import prog_name
from nmt.data.textio import atomic_write, counted, read_lines
from nmt.decoding.artifacts import save_alignments
from nmt.decoding.word_alignment import to_pharaoh
from nmt.models.allocator import reuse_freed_memory
from nmt.models.checkpoint import CheckpointError
from nmt.models.device import pick_device, set_threads


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
    reuse_freed_memory()
    device = pick_device(opts["device"])
    sources, targets = read_lines(opts["src"]), read_lines(opts["tgt"])
    if len(sources) != len(targets):
        raise ValueError(f"{opts['src']} has {len(sources)} lines but {opts['tgt']} has {len(targets)}")
    gold, problems = _read_gold(opts, sources, targets)
    model, src_tok, tgt_tok, prepare, langs = _load(opts, "checkpoint", device)
    prepared = prepare(sources), prepare(targets)
    if swapped := swapped_sides(src_tok, tgt_tok, *prepared, langs):
        problems.append(swapped)
    forward = force_align(model, src_tok, tgt_tok, *prepared, opts["batch_size"], device)
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


def _load(opts: dict, key: str, device):
    """:func:`nmt.analysis.forced.load_aligner` for the model(s) of setting ``key`` (``checkpoint`` or
    ``reverse_checkpoint``); a checkpoint refused (e.g. an ensemble member of another direction) is named with
    its setting, so the message says which list to fix."""
    try:
        return load_aligner(opts[key + "s"], device, opts["lowercase"])
    except CheckpointError as error:
        raise CheckpointError(f"{key}={opts[key]}: {error}") from None


def _read_gold(opts: dict, sources: list[str], targets: list[str]) -> tuple[Alignments | None, list[str]]:
    """The ``gold`` links (None without ``gold``), their positions checked against the whitespace words of the
    input, and a warning per gold link dropped as out of range."""
    if not opts["gold"]:
        return None, []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AlignmentWarning)
        gold = read_pharaoh(opts["gold"], one_based=opts["gold_one_based"],
                            lengths=[(len(s.split()), len(t.split())) for s, t in zip(sources, targets)])
    check = "a wrong origin (gold_one_based=) or src= and tgt= swapped"
    check_dropped(opts["gold"], gold.possible, gold.dropped, opts["max_dropped"], check,
                  ("gold_one_based", opts["gold_one_based"]))
    found = dropped_summary([str(w.message) for w in caught if issubclass(w.category, AlignmentWarning)], check)
    origin = position_warning(f"gold={opts['gold']}", gold.possible, gold.null_links, opts["gold_one_based"],
                              "gold_one_based")
    return gold, found + ([origin] if origin else [])


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
    r_model, r_src_tok, r_tgt_tok, r_prepare, r_langs = _load(opts, "reverse_checkpoint", device)
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
    argv, prog = (sys.argv[1:] if argv is None else argv), prog_name("nmt.align")
    if "-h" in argv or "--help" in argv:
        print(help_text(), end="")
        return 0
    try:
        opts = parse_args(argv)
    except UsageError as err:
        usage = USAGE.replace("python -m nmt.align", prog, 1)
        print(f"{prog}: error: {err}\n{usage}\n({prog} --help lists the settings)", file=sys.stderr)
        return 2
    for ignored in opts["ignored"] + repeated_members(opts):
        print(f"warning: {ignored}", file=sys.stderr)
    try:
        lines, warnings, notes = run(opts)
    except (OSError, ValueError) as err:  # CheckpointError, TextFileError and AlignmentFormatError are ValueErrors
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for note in notes:
        print(note, file=sys.stderr)
    print(f"wrote {opts['out']}: {counted(len(lines), 'sentence pair')}, "
          f"{counted(sum(len(line.split()) for line in lines), 'link')}{members(opts)}"
          + (f"; matrices in {opts['matrices']}" if opts["matrices"] else ""), file=sys.stderr)
    return 0


def members(opts: dict) -> str:
    """``" by an ensemble of 2 models and one reverse model"`` and the like, or ``""`` for single models."""
    forward, reverse = len(opts["checkpoints"]), len(opts["reverse_checkpoints"])
    if max(forward, reverse) < 2:
        return ""
    said = [f"an ensemble of {n} {kind}s" if n > 1 else f"one {kind}"
            for n, kind in ((forward, "model"), (reverse, "reverse model")) if n]
    return " by " + " and ".join(said)


def repeated_members(opts: dict) -> list[str]:
    """A warning for each model an ensemble names more than once (it weighs that many times in the average)."""
    said = []
    for key in ("checkpoint", "reverse_checkpoint"):
        paths = [Path(member).resolve() for member in opts[key + "s"]]
        for i, (member, path) in enumerate(zip(opts[key + "s"], paths)):
            times = paths.count(path)
            if times > 1 and paths.index(path) == i:  # once per repeated model
                said.append(f"{key}= names {member} {times} times: it weighs {times}x in the average")
    return said


if __name__ == "__main__":
    sys.exit(main())
