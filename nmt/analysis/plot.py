"""Attention heatmaps drawn from saved alignment files, never from a model (imports only nmt.analysis.gold and nmt.decoding.word_alignment).

Reads the artifact contract of docs/design.md §2:

* ``X.alignments.npz``: one float32 array per sentence, key = 0-based line index as a string, shape
  ``[len(hypothesis_tokens), len(source_tokens)]``; an empty input line has a ``[0, 0]`` array.
* ``X.alignments.jsonl`` (same path, ``.npz`` -> ``.jsonl``): one JSON object per line,
  ``{"index": int, "source_tokens": [...], "hypothesis_tokens": [...]}`` with sentencepiece pieces.

Token display: :mod:`nmt.analysis.labels` (``"▁Mann"`` -> ``"Mann"``, ``"s"`` -> ``"·s"``, byte pieces as the
characters they spell). A sentence longer than ``FULL_SIZE_TOKENS`` pieces on either axis is drawn smaller
(cells and labels scaled down together, with a warning) so that the image stays under about 2,200 pixels.

With ``gold=FILE`` (a word alignment gold set, the format options of nmt.analysis.gold) the pieces are merged into
words (nmt.decoding.word_alignment.merge_to_words, optionally ``shift=1``) and the gold links of each sentence are drawn over
the word-level attention: sure links as red squares, possible-only links as small red dots.

Usage: ``python -m nmt.plot outputs/RUN/eval/test.alignments.npz index=[0,3,7] out=plots/``
       ``python -m nmt.plot gold.npz index=[0,1] gold=enfr.gold.gz one_based=true``
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import matplotlib
import numpy as np

# matplotlib.figure.Figure directly, never pyplot: no GUI backend is touched, the process-wide backend is
# left alone, and there is no global figure registry to leak when plotting hundreds of sentences.
from matplotlib.figure import Figure

from nmt.analysis.fonts import FONT_HINT, families_for
from nmt.analysis.gold import FORMATS, read_alignments
from nmt.analysis.labels import display_token, display_tokens  # noqa: F401 (display_token: public here too)
from nmt.analysis.saved import NPZ_ERRORS, checked_indices, jsonl_of, read_records, unreadable
from nmt.commandline import SettingsParser
from nmt.data.textio import check_writable
from nmt.decoding.word_alignment import merge_to_words

INCH_PER_TOKEN = 0.28


FULL_SIZE_TOKENS = 70  # longer sentences are drawn scaled down to this many tokens' size


def plot_alignment(
    matrix: np.ndarray,
    source_tokens: list[str],
    hypothesis_tokens: list[str],
    path: str | Path,
    title: str | None = None,
    sure: set[tuple[int, int]] | None = None,
    possible: set[tuple[int, int]] | None = None,
    words: bool = False,
) -> Path:
    """Write one heatmap PNG of a soft alignment, optionally with gold links drawn over it.

    Source tokens go along the top (x axis, rotated 90°), hypothesis tokens down the side (y axis); colour
    scale "Greys" fixed to 0..1 (dark = high weight) with a colorbar. The figure grows with the token counts
    (about 0.28 inch per token) so sentences of 60 tokens stay readable.

    Args:
        matrix: ``[len(hypothesis_tokens), len(source_tokens)]`` attention weights ``A[t, s] = a_t(s)``.
        source_tokens: ``[src_len]`` source pieces.
        hypothesis_tokens: ``[hyp_len]`` hypothesis pieces.
        path: where to write the PNG (parent folders are created).
        title: optional figure title.
        sure: gold sure links ``(source_index, hypothesis_index)``, 0-based, drawn as red squares; links
            outside the matrix raise ValueError.
        possible: gold possible links, as ``sure``, drawn as small red dots where they are not sure links.
        words: the tokens are words (shown as they are), not sentencepiece pieces.
    Returns:
        the path written.
    Raises:
        ValueError: if the matrix is not 2-D, is empty, or its shape does not match the token counts.
    """
    a = np.asarray(matrix, dtype=np.float32)
    expected = (len(hypothesis_tokens), len(source_tokens))
    if a.shape != expected:
        raise ValueError(
            f"alignment matrix has shape {a.shape}, but the tokens give "
            f"[len(hypothesis_tokens), len(source_tokens)] = {expected}"
        )
    if a.size == 0:
        raise ValueError(f"nothing to plot: empty alignment matrix of shape {a.shape}")
    hyp_len, src_len = expected
    sure, possible = set(sure or ()), set(possible or ()) - set(sure or ())
    outside = sorted(link for link in sure | possible if not (0 <= link[0] < src_len and 0 <= link[1] < hyp_len))
    if outside:
        raise ValueError(f"gold links {outside[:5]} (0-based) fall outside the {src_len} source x {hyp_len} "
                         "hypothesis tokens: is the gold file 1-based (one_based=true), target-first (target_first=true), "
                         "or for other sentences?")
    show = list if words else display_tokens
    path = Path(path)
    _draw_heatmap(a, show(source_tokens), show(hypothesis_tokens), path, title, sure, possible)
    return path


def _draw_heatmap(a: np.ndarray, x_labels: list[str], y_labels: list[str], path: Path, title: str | None,
                  sure: set[tuple[int, int]], possible: set[tuple[int, int]]) -> None:
    """Draw and write the PNG of :func:`plot_alignment` (checked arguments, the axis labels of the tokens)."""
    hyp_len, src_len = a.shape
    scale = min(1.0, FULL_SIZE_TOKENS / max(src_len, hyp_len))
    if scale < 1.0:
        warnings.warn(f"{path}: {hyp_len} x {src_len} tokens, drawn at {scale:.0%} of full size (smaller cells and "
                      "labels); plot a shorter sentence, or read the matrix from the .npz, for every label at full size",
                      stacklevel=3)
    width = max(4.0, INCH_PER_TOKEN * scale * src_len + 2.5)
    height = max(3.0, INCH_PER_TOKEN * scale * hyp_len + 2.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    families, missing = families_for([*x_labels, *y_labels, title or ""])
    if missing:  # one warning for the figure instead of matplotlib's one per glyph
        warnings.warn(f"{path}: no installed font covers {missing!r} (drawn as boxes): {FONT_HINT}", stacklevel=3)
    with matplotlib.rc_context({"font.family": families, "font.size": max(3.0, 10 * scale)}), \
            warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        fig = Figure(figsize=(width, height), layout="constrained")
        ax = fig.add_subplot()
        image = ax.imshow(a, cmap="Greys", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
        ax.set_xticks(range(src_len), x_labels, rotation=90)
        ax.set_yticks(range(hyp_len), y_labels)
        for links, marker, size, label in ((sure, "s", 160, "gold sure"), (possible, "o", 20, "gold possible")):
            if links:
                xs, ys = zip(*sorted(links))
                ax.scatter(xs, ys, marker=marker, s=size, facecolors="none" if marker == "s" else "red",
                           edgecolors="red", linewidths=1.5, label=label)
        if sure or possible:
            fig.legend(loc="outside lower center", ncols=2, fontsize=9, frameon=False)
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position("top")
        ax.set_xlabel("source")
        ax.set_ylabel("hypothesis")
        fig.colorbar(image, ax=ax, shrink=min(1.0, 0.3 + 0.05 * hyp_len), label="attention weight")
        if title:
            fig.suptitle(title)
        fig.savefig(path, format="png", dpi=100)
        fig.clear()


def _plot_sentence(matrix: np.ndarray, rec: dict, npz_path: Path, index: int, out: Path, gold,
                   shift: int, head: str | int = "mean") -> Path:
    """One sentence's heatmap: of its pieces, or (``gold``) of its words with the gold links drawn over; one
    head's (``head`` an index: ``_head{h}`` in the file name and the title) or the combined matrix."""
    one = "" if head == "mean" else f"_head{head}"
    stem = f"{npz_path.name.removesuffix('.npz').removesuffix('.alignments')}_{index}{one}"
    name = npz_path.name + ("" if head == "mean" else f" head {head}")
    if gold is None:
        return plot_alignment(matrix, rec["source_tokens"], rec["hypothesis_tokens"],
                              out / f"{stem}.png", title=f"{name} #{index}")
    word_matrix, src_words, hyp_words = merge_to_words(matrix, rec["source_tokens"],
                                                       rec["hypothesis_tokens"], shift=shift)
    try:
        return plot_alignment(word_matrix, src_words, hyp_words, out / f"{stem}_gold.png",
                              title=f"{name} #{index} (words, shift {shift}) + gold",
                              sure=gold.sure[index], possible=gold.possible[index], words=True)
    except ValueError as err:
        raise ValueError(f"{gold.path}, sentence {index + 1}: {err}") from None


def _tokens_file(npz_path: Path) -> Path:
    """The ``.jsonl`` beside an alignments file that exists (see :func:`plot_npz` for what it raises)."""
    if npz_path.suffix != ".npz":  # (a translation or source file given instead: its .jsonl would be looked for)
        raise ValueError(f"{npz_path} is not an alignments file: give the .npz that translate.py writes with "
                         "alignments=X.alignments.npz (its tokens are in the .jsonl beside it)")
    if not npz_path.is_file():
        raise FileNotFoundError(f"{npz_path} not found")
    if not (jsonl_path := jsonl_of(npz_path)).is_file():
        raise FileNotFoundError(f"{jsonl_path} not found (tokens for {npz_path})")
    return jsonl_path


def plot_npz(npz_path: str | Path, indices: list[int], out_dir: str | Path | None = None,
             gold=None, shift: int = 0, head: str | int = "mean") -> list[Path]:
    """Draw the heatmaps of some sentences of a saved ``X.alignments.npz`` (+ its sibling ``.jsonl``).

    Writes ``out_dir/{stem}_{index}.png`` where ``stem`` is the file name without ``.alignments.npz``
    (e.g. ``test_0.png`` for ``test.alignments.npz``). Each array is ``[len(hypothesis_tokens), len(source_tokens)]``. Empty
    sentences (``[0, 0]`` arrays) are skipped with a warning.

    Args:
        npz_path: the ``.alignments.npz`` file.
        indices: 0-based line indices to plot.
        out_dir: output folder; default the npz's folder.
        gold: optional :class:`nmt.aer.Alignments` whose sentence k belongs to npz index k: the matrix is then
            merged into words (with ``shift``) and its gold links are drawn (``{stem}_{index}_gold.png``).
        shift: rows to read ahead when merging (nmt.decoding.word_alignment.merge_to_words).
        head: ``"mean"`` (the combined matrix), or a 0-based head index of a multi-head model: that head's
            matrices, from the ``X.alignments.heads.npz`` beside the file (:func:`nmt.analysis.heads.read_heads`),
            drawn as ``{stem}_{index}_head{h}.png``.
    Returns:
        the PNG paths written, in the order of ``indices``.
    Raises:
        FileNotFoundError: if the npz or the jsonl is missing.
        KeyError: if an index is not in the npz or the jsonl (the message names the file and the range).
        ValueError: if ``npz_path`` does not end in ``.npz`` (a translation given instead of its alignments), an
            array does not match its tokens, or a line of the jsonl is not a token record (file and line named).
    """
    npz_path = Path(npz_path)
    jsonl_path = _tokens_file(npz_path)
    out = Path(out_dir) if out_dir is not None else npz_path.parent
    records = read_records(jsonl_path)
    written = []
    try:
        npz = np.load(npz_path, allow_pickle=False)
    except NPZ_ERRORS as err:
        raise unreadable(npz_path, err) from err
    heads = None
    if head != "mean":  # torch comes with nmt.analysis.heads: imported only for a multi-head model's files
        from nmt.analysis.heads import read_heads

        heads = read_heads(npz_path)
    with npz:
        indices = checked_indices(npz, npz_path, jsonl_path, records, indices, gold)
        for index in indices:
            try:
                matrix = npz[str(index)]
            except NPZ_ERRORS as err:  # a damaged matrix shows only when it is read (CRC, zlib, npy header)
                raise unreadable(npz_path, err) from err
            if matrix.size == 0:
                warnings.warn(f"{npz_path}: sentence {index} is empty, skipped", stacklevel=2)
                continue
            if heads is not None:
                if not 0 <= head < heads[index].shape[0]:
                    raise ValueError(f"head={head}: {npz_path} has {heads[index].shape[0]} heads, numbered "
                                     f"0..{heads[index].shape[0] - 1}")
                matrix = heads[index][head]
            written.append(_plot_sentence(matrix, records[index], npz_path, index, out, gold, shift, head))
    return written


def _chosen_head(text: str, npz_path: Path, gold, shift: int) -> str | int:
    """``head=`` of the command line as plot_npz takes it; ``best`` is chosen here on the first half of the gold
    lines (:func:`nmt.analysis.heads.best_head`, links extracted with ``shift``), and the choice printed."""
    if text == "mean":
        return text
    from nmt.analysis.forced import links
    from nmt.analysis.heads import best_head, load_saved, parse_head

    head = parse_head(text)
    if head != "best":
        return head
    if gold is None:
        raise ValueError("head=best chooses the head with the lowest AER on the first half of a gold set: add gold=FILE")
    if not Path(npz_path).is_file():
        raise FileNotFoundError(f"{npz_path} not found")
    choice = best_head(load_saved(npz_path), gold, extract=lambda t: links(t, "argmax_target", shift=shift))
    print(f"head=best: head {choice.head}, AER {choice.selection.aer:.4f} on gold lines 1-{len(choice.chosen_on)} "
          f"(heads: {' '.join(f'{r.aer:.4f}' for r in choice.per_head)}), {choice.held_out.aer:.4f} on the rest",
          file=sys.stderr)
    return choice.head


def main(argv: list[str] | None = None) -> list[Path]:
    """Command line: ``python -m nmt.plot FILE.alignments.npz [index=[0,3,7]] [out=DIR] [gold=FILE
    [gold_format=pharaoh|naacl] [one_based=true] [target_first=true] [shift=1]] [head=mean|INDEX|best]``."""
    parser = SettingsParser("nmt.plot", description="Draw attention heatmaps from a saved alignments.npz file.")
    parser.add_argument(
        "npz", type=Path, help="X.alignments.npz (the sibling X.alignments.jsonl is read too)"
    )
    parser.add_argument(
        "--index", type=int, nargs="+", default=[0], help="0-based sentence indices (default 0)"
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: the npz's folder)")
    parser.add_argument("--gold", type=Path, help="gold word alignments to draw over the word-level attention")
    parser.add_argument("--gold-format", choices=FORMATS, default="pharaoh", help="pharaoh: i-j sure, i?j / ipj "
                        "possible; naacl: 'sent i j [S|P] [conf]'")
    parser.add_argument("--one-based", action="store_true", help="gold positions count from 1")
    parser.add_argument("--target-first", action="store_true", help="gold links give the target position first")
    parser.add_argument("--shift", type=int, default=0, help="read target word t from attention row t+shift")
    parser.add_argument("--head", default="mean", help="mean (the combined matrix), a 0-based head index of a "
                        "multi-head model, or best (with gold=: the head with the lowest AER on the first half of "
                        "the gold lines)")
    args = parser.parse_args(argv)
    try:
        if args.out is not None:  # before any work: a part of the path that is a file is named, not [Errno 20]
            check_writable(args.out, "out", folder=True)
        gold = (read_alignments(args.gold, args.gold_format, one_based=args.one_based,
                                target_first=args.target_first) if args.gold else None)
        head = _chosen_head(args.head, args.npz, gold, args.shift)
        with warnings.catch_warnings(record=True) as caught:  # one line each on stderr, not Python's two
            warnings.simplefilter("always")
            paths = plot_npz(args.npz, args.index, args.out, gold=gold, shift=args.shift, head=head)
    except (KeyError, ValueError, OSError) as err:  # OSError: a folder that cannot be written, a missing file
        parser.error(str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err))
    for warning in caught:
        print(f"{parser.prog}: warning: {warning.message}", file=sys.stderr)
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    main()
