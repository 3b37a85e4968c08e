"""The test set a run was scored on (its sources and references, read from the corpus its configuration names,
as its final evaluation read them), the check that runs share one before they are compared, and the target
side of a run's training data (for word frequencies).
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from nmt.data.corpus import DataError, load_splits
from nmt.data.textio import TextFileError, read_lines
from nmt.report.runs import ReportError, Run
from nmt.settings import from_plain

_VERSION = re.compile(r"\|?version:[^|]*")


@dataclass
class ScoredSet:
    """The test sentences of a run.

    Attributes:
        sources: ``[N]`` source lines, as the run translated them.
        references: ``[N]`` reference lines in Unicode NFC, as the run's scores compared them (normalized as
            its training data when ``data.normalize`` was on).
        origin: where they come from, for messages (``multi30k de-en test_2016_flickr``, or file paths).
    """

    sources: list[str]
    references: list[str]
    origin: str

    def digest(self) -> str:
        """A SHA-256 of sources and references (two test sets are the same when their digests are)."""
        return hashlib.sha256(json.dumps([self.sources, self.references]).encode("utf-8")).hexdigest()


def _origin(data: dict) -> str:
    """A short description of a run's test split from its ``data`` settings."""
    langs = f"{data.get('src_lang')}-{data.get('tgt_lang')}"
    if data.get("kind") == "multi30k":
        where = f"multi30k {langs} {(data.get('files') or {}).get('test')} in {data.get('dir')}"
    elif data.get("kind") == "files":
        where = f"{data.get('test_src')} / {data.get('test_tgt')}"
    else:
        where = f"{data.get('kind')} {langs} {data.get('file', '')}"
    limit = data.get("eval_limit")
    return where + (f" (first {limit} lines)" if limit else "")


def read_test_set(run: Run, sources: str | Path | None = None, references: str | Path | None = None,
                  cache: dict | None = None) -> ScoredSet:
    """The test set ``run`` was scored on: from the corpus named by its stored ``data`` settings (local files,
    or the hub for a run that read Multi30k from it), or from the given files (``sources``, ``references``:
    one line per hypothesis; then the run's ``data.normalize`` is not applied again). ``cache``: a dict that
    keeps the sets read by data settings, so that runs of one corpus read it once.

    Raises:
        ReportError: the corpus cannot be read here (naming the run and the ``sources=``/``references=``
            settings), the run has no test split, or the line counts differ from the run's hypotheses.
    """
    data = dict(run.config.get("data") or {})
    if sources and references:
        src, ref = _read(sources), _read(references)
        origin = f"{sources} / {references}"
    else:
        key = json.dumps(data, sort_keys=True, default=str)
        cache = {} if cache is None else cache
        if key not in cache:
            cache[key] = _from_corpus(run, data)
        src, ref, origin = cache[key].sources, cache[key].references, cache[key].origin
    if len(src) != len(ref):
        raise ReportError(f"{sources}: {len(src)} lines, but {references} has {len(ref)}")
    expected = run.scores[("test", run.main_decoder())].get("num_sentences", len(ref))
    if len(ref) != expected:
        raise ReportError(f"{run.label}: its test scores count {expected} sentences, but {origin} has {len(ref)} "
                          "lines: give the files it was scored on with sources= and references=")
    return ScoredSet(list(src), [unicodedata.normalize("NFC", line) for line in ref], origin)


def _read(path: str | Path) -> list[str]:
    try:
        return read_lines(path)
    except (OSError, TextFileError) as err:
        raise ReportError(f"{path}: cannot be read ({err})") from None


def _from_corpus(run: Run, data: dict) -> ScoredSet:
    """The test split of ``data`` (as nmt.data.corpus.load_splits reads it for training)."""
    try:
        splits = load_splits(from_plain(data), train=False)
    except (DataError, OSError, TextFileError, KeyError, AttributeError) as err:
        raise ReportError(f"{run.label}: cannot read the test set its settings name ({_origin(data)}): {err}; "
                          "give the files with sources= and references= (NMT_DATA_DIR does not apply: the "
                          "run stores its corpus paths)") from None
    if "test" not in splits:
        raise ReportError(f"{run.label}: its corpus has no test split (data.test_src/test_tgt unset)")
    return ScoredSet(splits["test"].src, splits["test"].tgt, _origin(data))


def training_targets(run: Run) -> list[str]:
    """The target side of ``run``'s training data as training read it (limit, normalization, extra pairs).

    Raises:
        ReportError: the corpus cannot be read here.
    """
    try:
        return load_splits(from_plain(dict(run.config.get("data") or {})), train=True)["train"].tgt
    except (DataError, OSError, TextFileError, KeyError, AttributeError) as err:
        raise ReportError(f"{run.label}: cannot read its training data ({err})") from None


def _signature(run: Run, key: str) -> str:
    """A scores signature without sacreBLEU's version (the version does not change the figures)."""
    return _VERSION.sub("", str(run.scores[("test", run.main_decoder())].get(key, "")))


def check_comparable(runs: list[Run], sets: list[ScoredSet]) -> None:
    """Refuse runs that were not scored on one test set with one set of references and one scoring.

    Raises:
        ReportError: naming the first run that differs from the first one, what differs and where each test
            set comes from; it says to make one report per test set.
    """
    first, first_set = runs[0], sets[0]
    for run, test in zip(runs[1:], sets[1:]):
        what = None
        if len(test.references) != len(first_set.references):
            what = f"{len(test.references)} test sentences against {len(first_set.references)}"
        elif test.sources != first_set.sources:
            line = next(i for i, (a, b) in enumerate(zip(test.sources, first_set.sources)) if a != b)
            what = f"other test sources (line {line + 1} differs)"
        elif test.references != first_set.references:
            line = next(i for i, (a, b) in enumerate(zip(test.references, first_set.references)) if a != b)
            what = f"other references (line {line + 1}: {test.references[line]!r} against " \
                   f"{first_set.references[line]!r})"
        else:
            for key in ("bleu_signature", "chrf_signature"):
                if _signature(run, key) != _signature(first, key):
                    what = f"another scoring ({key} {_signature(run, key)} against {_signature(first, key)})"
        if what:
            raise ReportError(f"refused to compare {run.label} with {first.label}: {run.label} was scored on "
                              f"{what} ({test.origin}; {first.label}: {first_set.origin}); a report compares "
                              "runs of one test set: make one report per test set")
