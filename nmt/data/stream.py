"""The training split as line streams, for corpora larger than memory: read anew from the files on every pass
(SentencePiece's sample, the vocabulary restriction, the token store), with the same limits, normalization and
extra training data as :func:`nmt.data.corpus.load_splits`, never held whole in memory.

The hub and the one-file ``bitext`` kinds have no such files: their (small) training text is loaded as usual and
streamed from memory. Extra training data (``data.extra_train``) is read into memory too.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nmt.data.corpus import DataError, Parallel, extra_pairs, load_splits
from nmt.data.normalize import Normalizer
from nmt.data.textio import file_named, iter_lines

CHUNK = 10_000  # lines normalized at a time


@dataclass
class TrainStream:
    """The training split as two streams of lines (``lines("src")``, ``lines("tgt")``), line i of one translating
    line i of the other. ``files`` and ``settings`` say what the lines come from (the token store's key)."""

    name: str
    files: list[Path]
    settings: dict
    read: Callable[[str], Iterator[str]]
    extra: list[Parallel] = field(default_factory=list)

    def lines(self, side: str) -> Iterator[str]:
        """The ``src`` or ``tgt`` lines, the extra training data after the corpus's."""
        yield from self.read(side)
        for more in self.extra:
            yield from (more.src if side == "src" else more.tgt)

    def pairs(self) -> Iterator[tuple[str, str]]:
        """The (source, target) pairs.

        Raises:
            DataError: at the end, when one side has more lines than the other (both counts named).
        """
        srcs, tgts = self.lines("src"), self.lines("tgt")
        for n, (src, tgt) in enumerate(itertools.zip_longest(srcs, tgts)):
            if src is None or tgt is None:
                counts = (n, n + 1 + sum(1 for _ in tgts)) if src is None else (n + 1 + sum(1 for _ in srcs), n)
                names = [str(f) for f in self.files] or ["the source side", "the target side"]
                raise DataError(f"{self.name}: {names[0]} has {counts[0]} lines but {names[1]} has {counts[1]}; "
                                "parallel files must have the same number of lines (line i of one is the "
                                "translation of line i of the other)")
            yield src, tgt

    def sample(self, limit: int | None, seed: int = 0) -> Parallel:
        """At most ``limit`` pairs drawn uniformly (reservoir sampling, seeded); every pair, in order, when the
        corpus has no more (null: all of them)."""
        pairs = self.pairs()
        if not limit:
            kept = list(pairs)
        else:
            rng, kept = random.Random(seed), []
            for n, pair in enumerate(pairs):
                if n < limit:
                    kept.append(pair)
                elif (j := rng.randrange(n + 1)) < limit:
                    kept[j] = pair
        return Parallel(self.name, [s for s, _ in kept], [t for _, t in kept])


def _normalized(lines: Iterable[str], normalizer: Normalizer) -> Iterator[str]:
    """``lines`` through ``normalizer``, a chunk at a time."""
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, CHUNK)):
        yield from normalizer.lines(chunk)


def _files(data_cfg) -> list[Path] | None:
    """The source and target training files of a ``files`` or local ``multi30k`` corpus, else None."""
    if data_cfg.kind == "files":
        if not (data_cfg.get("train_src") and data_cfg.get("train_tgt")):
            raise DataError("data=files needs data.train_src and data.train_tgt (paths to text files)")
        return [Path(data_cfg.train_src), Path(data_cfg.train_tgt)]
    if data_cfg.kind == "multi30k" and Path(data_cfg.dir).is_dir():
        stem = data_cfg.files["train"]
        paths = [Path(data_cfg.dir) / f"{stem}.{lang}.gz" for lang in (data_cfg.src_lang, data_cfg.tgt_lang)]
        if missing := [str(p) for p in paths if not p.is_file()]:
            raise DataError(f"Multi30k folder {data_cfg.dir} exists but lacks {', '.join(missing)}")
        return paths
    return None


def train_stream(data_cfg) -> TrainStream:
    """The training split of a ``conf/data`` node as a :class:`TrainStream` (``train_limit``, ``normalize`` and
    ``extra_train`` applied as :func:`nmt.data.corpus.load_splits` applies them).

    Raises:
        DataError: a corpus that cannot be used, naming the file and what to do.
        FileNotFoundError: a configured file that does not exist (raised at once).
        nmt.data.textio.TextFileError: a byte that is not UTF-8 (raised while the stream is read).
    """
    files = _files(data_cfg)
    langs = {"src": data_cfg.src_lang, "tgt": data_cfg.tgt_lang}
    norms = {side: Normalizer.from_config(data_cfg.get("normalize"), lang) for side, lang in langs.items()}
    limit = data_cfg.get("train_limit")
    if files is None:
        memory = load_splits(data_cfg)["train"]  # the hub or a bitext: small, and in memory anyway
        return TrainStream("train", [], corpus_settings(data_cfg), lambda side: iter(getattr(memory, side)))
    for path, side in zip(files, ("src", "tgt")):
        if not path.is_file():
            named = f"data.train_{side}=" if data_cfg.kind == "files" else ""
            raise FileNotFoundError(f"{named}{path}: training file not found")

    def read(side: str) -> Iterator[str]:
        lines = iter_lines(files[0 if side == "src" else 1], key=f"data.train_{side}")
        return _normalized(itertools.islice(lines, limit), norms[side])

    extra = []
    for entry in data_cfg.get("extra_train") or []:
        extra.append(extra_pairs(entry, data_cfg))
    return TrainStream("train", files, corpus_settings(data_cfg), read, extra)


def corpus_settings(data_cfg) -> dict:
    """What besides the files shapes the training lines (part of the token store's key)."""
    keys = ("kind", "src_lang", "tgt_lang", "train_limit", "normalize", "extra_train", "hub_id", "file", "columns")
    return {key: _plain(data_cfg.get(key)) for key in keys}


def _plain(value):
    """A config value as plain data (lists and dicts of scalars), absolute paths resolved (``/a/../b`` and a
    link name the file they lead to, so a file spelt otherwise keys the same token store)."""
    if isinstance(value, str):
        return file_named(value)
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (hasattr(value, "__iter__") and not isinstance(value, str)):
        return [_plain(v) for v in value]
    return value
