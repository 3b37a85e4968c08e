"""The word links of a guided-alignment run (``train.guided_alignment``, :mod:`nmt.training.guided`): where they
come from and what the run folder keeps of them.

A guided run writes the training text as the model reads it (after ``data.normalize``, the corpus then each
``data.extra_train`` entry with its repeats) to ``RUN/guided/train.src`` and ``RUN/guided/train.tgt``, one pair
per line. Its links are either

- ``train.guided_alignment.links=FILE``: a Pharaoh file (``i-j``, source word i, target word j, 0-based unless
  ``one_based=true``) with one line per line of those files, from any aligner (fast_align, GIZA++, awesome-align);
  a first run without eflomal writes the two files and names them in its error, to align them elsewhere; or
- computed by eflomal (Östling and Tiedemann 2016; ``pip install eflomal``) in both directions and symmetrized with
  grow-diag-final-and (:func:`nmt.analysis.symmetrize.symmetrize`) into ``RUN/guided/train.links``, kept for a
  resumed run (recomputed when its line count no longer matches the text).

Every file is written whole or not at all (:func:`nmt.data.textio.write_together`).
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path

from nmt.analysis.aer import dropped_summary, zero_never_used
from nmt.analysis.gold import AlignmentWarning, read_pharaoh
from nmt.analysis.symmetrize import symmetrize
from nmt.data.corpus import DataError
from nmt.data.textio import read_lines, write_together
from nmt.decoding.word_alignment import to_pharaoh
from nmt.training.guided import GuidedLinks, GuidedObjective, build_links, guided_settings

log = logging.getLogger(__name__)

FOLDER = "guided"  # RUN/guided/
MAX_DROPPED = 0.05  # share of a links file's links outside their sentences that is refused (a file of other text)


def text_files(run_dir: Path) -> tuple[Path, Path, Path]:
    """``RUN/guided/train.src``, ``train.tgt`` and ``train.links`` (the eflomal links)."""
    folder = Path(run_dir) / FOLDER
    return folder / "train.src", folder / "train.tgt", folder / "train.links"


def write_text(train, run_dir: Path) -> int:
    """Write the training text (``train``: a :class:`nmt.data.stream.TrainStream`) to ``RUN/guided/train.src`` and
    ``train.tgt`` unless both are there with the same lines; returns the number of pairs."""
    src_path, tgt_path, _ = text_files(run_dir)
    pairs = list(train.pairs())
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    if not (src_path.is_file() and tgt_path.is_file() and read_lines(src_path) == src
            and read_lines(tgt_path) == tgt):
        src_path.parent.mkdir(parents=True, exist_ok=True)
        write_together({src_path: "".join(line + "\n" for line in src), tgt_path: "".join(line + "\n" for line in tgt)})
    return len(src)


def run_eflomal(src_path: Path, tgt_path: Path, out: Path) -> None:
    """Align the two text files with eflomal in both directions and write the grow-diag-final-and links to ``out``.

    Raises:
        DataError: eflomal is not installed (the message says how to install it, or to give links of another
            aligner for the two files).
    """
    try:
        import eflomal  # optional: pip install eflomal
    except ImportError:
        raise DataError(f"train.guided_alignment needs word links: pip install eflomal (then run again), or "
                        f"{align_elsewhere(src_path, tgt_path)}") from None
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    log.info("guided alignment: eflomal aligns the %d training pairs (both directions, grow-diag-final-and)", len(src))
    with tempfile.TemporaryDirectory() as tmp:
        forward, reverse = Path(tmp) / "forward", Path(tmp) / "reverse"
        eflomal.Aligner().align(src, tgt, links_filename_fwd=str(forward), links_filename_rev=str(reverse))
        pairs = zip(read_pharaoh(forward).possible, read_pharaoh(reverse).possible)
        lines = [to_pharaoh(symmetrize(f, r)) for f, r in pairs]
    if len(lines) != len(src):
        raise DataError(f"eflomal gave {len(lines)} lines of links for {len(src)} pairs ({src_path})")
    write_together({out: "".join(line + "\n" for line in lines)})


def align_elsewhere(src_path: Path, tgt_path: Path) -> str:
    """What to do with the training text when no aligner of ours makes the links."""
    return (f"align {src_path} with {tgt_path} (line i with line i) with another aligner and give "
            "train.guided_alignment.links=FILE (Pharaoh, source-target, 0-based)")


def links_file(settings: dict, run_dir: Path) -> Path:
    """The links file of the run: ``train.guided_alignment.links``, else ``RUN/guided/train.links``."""
    return Path(settings["links"]) if settings["links"] else text_files(run_dir)[2]


def prepare_links(t, train, run_dir: Path) -> Path | None:
    """Rank 0's part, with ``train.guided_alignment`` (``t`` is ``cfg.train``; else nothing is done and None
    returned): write the training text and, without ``links``, compute the eflomal links unless a complete
    ``RUN/guided/train.links`` for the same number of pairs is there; returns the links file.

    Raises:
        DataError: eflomal missing (:func:`run_eflomal`), or ``aligner=none`` without ``links`` (the text is
            written, to be aligned elsewhere).
    """
    settings = guided_settings(t)
    if settings is None:
        return None
    src_path, tgt_path, eflomal_links = text_files(run_dir)
    pairs = write_text(train, run_dir)
    if settings["links"]:
        return links_file(settings, run_dir)
    if settings["aligner"] == "none":
        raise DataError(f"train.guided_alignment.aligner=none: the training text is in {src_path} and {tgt_path}; "
                        f"{align_elsewhere(src_path, tgt_path)}")
    if not (eflomal_links.is_file() and len(read_lines(eflomal_links)) == pairs):
        run_eflomal(src_path, tgt_path, eflomal_links)
    return eflomal_links


def check_positions(read, links_path: Path, one_based: bool, text: tuple[Path, Path]) -> None:
    """Refuse a links file (``read``: :class:`nmt.analysis.gold.Alignments`) that looks 1-based but was read as
    0-based (no link at position 0 and some past the sentences' ends), or more than 5% of whose links lie outside
    the sentences of the training ``text`` files.

    Raises:
        DataError: naming the file, the counts and what to check.
    """
    dropped = len(read.dropped)
    total = sum(map(len, read.possible)) + dropped
    if dropped and not one_based and zero_never_used(read.possible):
        raise DataError(f"{links_path}: no link uses position 0 and {dropped} link(s) lie past the end of their "
                        "sentences: the file looks 1-based; give train.guided_alignment.one_based=true")
    if dropped > MAX_DROPPED * total:
        raise DataError(f"{dropped} of the {total} links of {links_path} ({dropped / total:.1%}) lie outside the "
                        f"sentences of {text[0]} and {text[1]} (line i of the links is pair i, source word first): "
                        f"links of other sentences, or of another order? (up to {MAX_DROPPED:.0%} are dropped with "
                        "a warning)")


def guided_objective(t, run_dir: Path, toks) -> GuidedObjective | None:
    """The training objective of ``train.guided_alignment`` (``t`` is ``cfg.train``), every rank's, from the files
    :func:`prepare_links` wrote; None when it is off (:func:`load_links` raises)."""
    settings = guided_settings(t)
    if settings is None:
        return None
    return GuidedObjective(load_links(settings, run_dir, links_file(settings, run_dir), toks), settings["weight"])


def load_links(settings: dict, run_dir: Path, links_path: Path, toks) -> GuidedLinks:
    """The guiding distributions of the run's training pairs (every rank), from ``RUN/guided/train.src``/``.tgt``
    and the links file, encoded with ``toks``.

    Raises:
        DataError: a links file with another number of lines than the training text, or with more than 5% of its
            links outside their sentences (naming the file and what to check); FileNotFoundError (a missing file
            is refused earlier, by :func:`nmt.training.guided.check_guided`);
            nmt.analysis.gold.AlignmentFormatError: a token that is not a Pharaoh link (file and line named).
    """
    src_path, tgt_path, _ = text_files(run_dir)
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    lengths = [(len(s.split()), len(t.split())) for s, t in zip(src, tgt)]
    try:
        with warnings.catch_warnings():  # each dropped link is one message: a summary is logged below
            warnings.simplefilter("ignore", AlignmentWarning)
            read = read_pharaoh(links_path, one_based=settings["one_based"], lengths=lengths)
    except ValueError as err:
        raise DataError(f"train.guided_alignment: {err} (the links must have one line per line of {src_path}, "
                        "source word first)") from None
    check_positions(read, links_path, settings["one_based"], (src_path, tgt_path))
    for message in dropped_summary(read.dropped, "links of other sentences"):
        log.warning("%s", message)
    table = build_links(src, tgt, read.possible, toks)
    if not table.covered:
        raise DataError(f"{links_path}: no training pair has a link, so nothing would guide the attention "
                        "(train.guided_alignment.weight=null trains without guidance)")
    log.info("guided alignment: links for %d of %d training pairs (%d distinct pairs, %d piece cells) from %s, "
             "weight %g", table.covered, len(src), len(table), table.links, links_path, settings["weight"])
    return table
