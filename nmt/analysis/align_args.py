"""The command line of ``python -m nmt.align`` (:mod:`nmt.analysis.align`): its ``key=value`` settings, their
checks, and ``--help``.

Command line (key=value, like train.py and every other tool)::

    python -m nmt.align checkpoint=PATH|RUN_DIR src=FILE tgt=FILE out=FILE.align [key=value ...]
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from nmt.analysis.heads import parse_head
from nmt.analysis.symmetrize import COMBINATIONS, SYMMETRIZATIONS
from nmt.commandline import SettingsParser
from nmt.decoding.artifacts import check_npz_path
from nmt.decoding.word_alignment import METHODS

USAGE = ("usage: python -m nmt.align checkpoint=PATH|[PATH,...] src=FILE tgt=FILE out=FILE.align [matrices=FILE.npz] "
         "[method=argmax_target|argmax_source|threshold|mutual_argmax] [threshold=0.3] [shift=0] [temperature=1.0] "
         "[lowercase=auto|true|false] [reverse_checkpoint=PATH|[PATH,...] method=grow-diag-final-and|intersection|union|"
         "grow-diag|grow-diag-final direction_method=argmax_target | reverse_checkpoint=PATH|[PATH,...] combine=product|mean] "
         "[head=mean|INDEX|best] [gold=FILE.pharaoh [gold_one_based=false] [max_dropped=0.05]] [batch_size=64] [device=auto] "
         "[threads=N]")


REQUIRED = ("checkpoint", "src", "tgt", "out")


DEFAULTS = {"matrices": None, "method": None, "threshold": "0.3", "shift": "0", "temperature": "1.0",
            "lowercase": "auto", "reverse_checkpoint": None, "combine": None,
            "direction_method": "argmax_target", "head": "mean", "gold": None, "gold_one_based": "false",
            "max_dropped": "0.05", "batch_size": "64", "device": "auto", "threads": None}


KEYS = REQUIRED + tuple(DEFAULTS)


SETTINGS = {  # key -> what it is, for --help (the values are checked by parse_args)
    "checkpoint": "the model: a .pt file or a run folder (the model its final evaluation scored, else its best.pt); "
                  "[A,B,...]: an ensemble of one subword model, its members' attention averaged",
    "src": "source sentences, one per line (whitespace words: the gold set's word positions)",
    "tgt": "target sentences, parallel to src",
    "out": "the Pharaoh links to write, one line per sentence pair",
    "matrices": "also save the (forward) soft alignments: FILE.npz (and FILE.jsonl with the pieces)",
    "method": "link extraction (argmax_target, the default|argmax_source|threshold|mutual_argmax), also with "
              "reverse_checkpoint and combine=; with reverse_checkpoint alone, the symmetrization "
              "(grow-diag-final-and, the default|intersection|union|grow-diag|grow-diag-final)",
    "threshold": "of method=threshold",
    "shift": "read target word t from attention row t+shift",
    "temperature": "< 1 sharpens the attention before extraction",
    "lowercase": "auto|true|false: lowercase the lines (auto: as the checkpoint's training data)",
    "reverse_checkpoint": "a model trained target -> source (or [A,B,...]): align both directions and symmetrize",
    "combine": "product|mean: combine the two directions' soft alignments before extracting (needs "
               "reverse_checkpoint)",
    "direction_method": "with reverse_checkpoint: the extraction of each direction before symmetrizing",
    "head": "mean|INDEX|best: which head of a multi-head model (best: the lowest AER on the first half of gold=); "
            "one model only",
    "gold": "gold Pharaoh links: prints the AER of the written links (and chooses head=best)",
    "gold_one_based": "true|false: the gold positions count from 1",
    "max_dropped": "the share of gold links out of range beyond which no AER is printed (default 0.05; 1: always)",
    "batch_size": "sentence pairs per batch",
    "device": "auto|cpu|cuda|cuda:N",
    "threads": "CPU threads (a whole number >= 1; null: all cores)",
}


def help_text() -> str:
    """``python -m nmt.align --help``: the settings as every tool lists them (:mod:`nmt.commandline`)."""
    parser = SettingsParser("nmt.align", description="Forced alignment of a parallel text with a trained model: Pharaoh links, "
                            "optionally symmetrized with a reverse model, and the soft alignments.")
    for key, text in SETTINGS.items():
        parser.add_argument(f"--{key}", required=key in REQUIRED, default=DEFAULTS.get(key), help=text)
    return parser.format_help()


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
        opts["max_dropped"] = float(opts["max_dropped"])
        opts["shift"] = int(opts["shift"])
        opts["batch_size"] = int(opts["batch_size"])
        opts["threads"] = None if opts["threads"] in (None, "null") else int(opts["threads"])
    except ValueError as err:
        raise UsageError(f"threshold, temperature and max_dropped must be numbers, shift, batch_size and threads "
                         f"integers: {err}") from None
    if opts["threads"] is not None and opts["threads"] < 1:
        raise UsageError(f"threads={opts['threads']} must be a whole number of CPU threads >= 1 (or null: all cores)")
    if opts["shift"] < 0 or opts["batch_size"] < 1 or opts["temperature"] <= 0:
        raise UsageError(f"need shift >= 0, batch_size >= 1 and temperature > 0, got shift={opts['shift']}, "
                         f"batch_size={opts['batch_size']}, temperature={opts['temperature']}")
    if not 0 <= opts["max_dropped"] <= 1:
        raise UsageError(f"max_dropped={opts['max_dropped']:g}: a share between 0 and 1")
    if opts["lowercase"] not in ("auto", "true", "false"):
        raise UsageError(f"lowercase={opts['lowercase']}; valid: auto (as the checkpoint's training data), true, false")
    if opts["direction_method"] not in METHODS and not (opts["combine"] and opts["reverse_checkpoint"]):
        raise UsageError(f"direction_method={opts['direction_method']}; valid: {', '.join(METHODS)}")
    if opts["matrices"]:
        try:
            check_npz_path(opts["matrices"], key="matrices")
        except ValueError as err:
            raise UsageError(str(err)) from None
    if not 0 < opts["threshold"] <= 1:
        raise UsageError(f"threshold={opts['threshold']}: give an attention mass in (0, 1] (method=threshold links "
                         "the word pairs with at least that mass)")
    opts["checkpoints"] = checkpoint_list("checkpoint", opts["checkpoint"])
    opts["reverse_checkpoints"] = (checkpoint_list("reverse_checkpoint", opts["reverse_checkpoint"])
                                   if opts["reverse_checkpoint"] else [])
    _resolve_method(opts)
    _check_head(opts)
    _check_outputs(opts)
    opts["ignored"] = ignored_settings(given, opts)
    return opts


def checkpoint_list(key: str, text: str) -> list[str]:
    """The models of ``key=text``: one path, or a bracketed list ``[A,B,...]`` (an ensemble, as translate.py takes
    it). A path, or a member, in single or double quotes is taken as it is inside them (commas, ``=`` and spaces
    included).

    Raises:
        UsageError: an unclosed bracket or quote, or an empty member.
    """
    if not text.startswith("["):
        return [_unquoted(text)]
    if not text.endswith("]"):
        raise UsageError(f"{key}={text}: the list is not closed; write {key}=[RUN_A,RUN_B] as one argument (quote "
                         "it if a path has spaces)")
    members = _split_members(text[1:-1])
    if members is None or not all(members):
        raise UsageError(f"{key}={text}: write one model, or an ensemble as {key}=[RUN_A,RUN_B] (no empty member, "
                         "quotes closed)")
    return members


def _split_members(inner: str) -> list[str] | None:
    """The comma-separated members of a list's inside, quotes removed (a quoted member keeps its commas); None
    for an unclosed quote."""
    members, current, quote = [], "", None
    for char in inner + ",":
        if quote:
            quote, current = (None, current) if char == quote else (quote, current + char)
        elif char in "'\"" and not current.strip():
            quote, current = char, ""
        elif char == ",":
            members.append(current.strip())
            current = ""
        else:
            current += char
    return None if quote else members


def _unquoted(path: str) -> str:
    """``path`` without one pair of matching outer quotes."""
    path = path.strip()
    return path[1:-1] if len(path) >= 2 and path[0] == path[-1] and path[0] in "'\"" else path


def ignored_settings(given: dict[str, str], opts: dict) -> list[str]:
    """What the command line sets but the resolved options do not use (``threshold=`` without a thresholding
    method, ``direction_method=`` outside a symmetrization, ``gold_one_based=`` without ``gold=``), each as a
    sentence for a warning."""
    symmetrizing = bool(opts["reverse_checkpoint"]) and opts["combine"] is None
    extraction = opts["direction_method"] if symmetrizing else opts["method"]
    unused = {"threshold": (extraction != "threshold", f"only method=threshold uses it (here {extraction})"),
              "direction_method": (not symmetrizing, ("it extracts each direction's links before a hard "
                                                     "symmetrization (reverse_checkpoint= without combine=); with "
                                                     "combine= method= extracts them from the combined matrix")),
              "gold_one_based": (not opts["gold"], "it reads gold=, which is not given"),
              "max_dropped": (not opts["gold"], "it reads gold=, which is not given")}
    return [f"{key}={given[key]} is ignored: {why}" for key, (ignored, why) in unused.items()
            if key in given and ignored]


def combine_defaults() -> dict:
    """The extraction settings (``method``, ``threshold``, ``shift``, ``temperature``) that ``nmt.align`` uses
    with ``reverse_checkpoint=`` and ``combine=`` when the command line does not set them, typed as
    :func:`parse_args` returns them."""
    opts = parse_args(["checkpoint=model.pt", "reverse_checkpoint=reverse.pt", "combine=product", "src=source.txt",
                       "tgt=target.txt", "out=links.align"])
    return {key: opts[key] for key in ("method", "threshold", "shift", "temperature")}


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
    if opts["head"] != "mean" and (opts["reverse_checkpoint"] or len(opts["checkpoints"]) > 1):
        raise UsageError(f"head={opts['head']} chooses among one model's heads; with reverse_checkpoint or an "
                         "ensemble use head=mean")


def _key_values(argv: Sequence[str]) -> dict[str, str]:
    """``key=value`` arguments -> ``{key: value}`` (a leading ``+`` dropped), checking each key."""
    given: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+")
        if arg.startswith("--") and key.lstrip("-").replace("-", "_") in KEYS:
            name = key.lstrip("-").replace("-", "_")
            raise UsageError(f"argument {arg!r}: settings are written key=value, here {name}=...")
        if not sep or not key:
            open_list = [k for k, v in given.items() if v.startswith("[") and not v.endswith("]")]
            if open_list:  # checkpoint=[A, B] unquoted: the shell made two arguments of it
                raise UsageError(f"argument {arg!r} is the rest of {open_list[-1]}=: write the list without spaces, "
                                 f"{open_list[-1]}=[RUN_A,RUN_B], or quote it")
            raise UsageError(f"argument {arg!r} is not key=value; valid keys: {', '.join(KEYS)}")
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=2, cutoff=0.7)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise UsageError(f"unknown key {key!r}; {hint}valid keys: {', '.join(KEYS)}")
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
        if not reverse and opts["method"] in SYMMETRIZATIONS:
            hint = " (symmetrization needs reverse_checkpoint=PATH, a model trained target -> source)"
        elif reverse and opts["method"] in METHODS:
            hint = (f" is a one-direction method: with reverse_checkpoint add combine=product (or mean) to extract it "
                    f"from the combined matrix, or give direction_method={opts['method']} with a symmetrization")
        else:
            hint = ""
        raise UsageError(f"method={opts['method']}{hint}; valid methods "
                         f"{'with' if reverse else 'without'} reverse_checkpoint: {', '.join(valid)}")


def _check_outputs(opts: dict) -> None:
    """Refuse an ``out=`` or ``matrices=`` (with the ``.jsonl`` and ``.heads.npz`` written beside it) that is a
    file this command reads, or each other: writing it would replace that file."""
    read = {Path(opts[k]).resolve(): k for k in ("src", "tgt", "gold") if opts[k]}
    read.update({Path(path).resolve(): key for key in ("checkpoint", "reverse_checkpoint")
                 for path in opts[key + "s"]})
    written = {Path(opts["out"]).resolve(): "out"}
    if opts["matrices"]:
        npz = Path(opts["matrices"])
        for path in (npz, npz.with_suffix(".jsonl"), npz.with_name(npz.stem + ".heads.npz")):
            if path.resolve() in written:
                raise UsageError(f"out={opts['out']} and matrices={opts['matrices']} would write one file "
                                 f"({path.name}; matrices=FILE.npz also writes FILE.jsonl and FILE.heads.npz): give "
                                 "them different names")
            written[path.resolve()] = "matrices"
    for path, key in written.items():
        if path in read:
            raise UsageError(f"{key}={opts[key]} would write {path.name}, which is {read[path]}={opts[read[path]]}: "
                             "give the output another file name (the file being read would be replaced)")
