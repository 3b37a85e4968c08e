"""Parallel corpora: the splits of a configured corpus as line-aligned sentence lists.

Corpora come from local files (``data=multi30k`` reads ``${NMT_DATA_DIR}/multi30k``, ``data=files`` reads any
parallel text files) or, when the local Multi30k folder is absent, from the HuggingFace hub through
``datasets.load_dataset``. Local files are read by :func:`nmt.data.textio.read_lines` (strict UTF-8, ``\n``
only), not by ``datasets``' text builder, whose line splitting also breaks lines at U+2028 and friends.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nmt.data.normalize import Normalizer
from nmt.data.textio import read_lines

log = logging.getLogger(__name__)


SPLITS = ("train", "valid", "test")


EXTRA_KEYS = ("paths", "tsv", "columns", "separator", "repeat", "src_lang", "pretokenized")  # a data.extra_train entry


HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}


class DataError(ValueError):
    """A corpus that cannot be used as given; the message says which file and what to do."""


@dataclass
class Parallel:
    """One split: source and target sentences, line i of one translating line i of the other."""

    name: str
    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)

    def lines(self, side: str) -> list[str]:
        """The ``src`` or ``tgt`` sentences (as :meth:`nmt.data.stream.TrainStream.lines` gives them)."""
        return self.src if side == "src" else self.tgt


def read_parallel(name: str, src_path: str | Path, tgt_path: str | Path,
                  keys: tuple[str, str] | tuple[None, None] = (None, None)) -> Parallel:
    """Read two line-aligned files (UTF-8, plain or ``.gz``) into a :class:`Parallel` called ``name``; ``keys``
    are the settings that named the files (``data.test_src``), for the messages.

    Raises:
        DataError: naming both files and their line counts, when the counts differ.
        FileNotFoundError, nmt.data.textio.TextFileError: from :func:`nmt.data.textio.read_lines` (a missing file, or
            one that is not UTF-8 text; the file and line are named).
    """
    src, tgt = read_lines(src_path, keys[0]), read_lines(tgt_path, keys[1])
    if len(src) != len(tgt):
        raise DataError(
            f"{name}: {src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; parallel files must have "
            "the same number of lines (line i of one is the translation of line i of the other)"
        )
    return Parallel(name, src, tgt)


def _multi30k_local(data_cfg, train: bool = True) -> dict[str, Parallel] | None:
    folder = Path(data_cfg.dir)
    if not folder.is_dir():
        return None
    splits = {}
    for split in SPLITS if train else SPLITS[1:]:
        stem = data_cfg.files[split]
        paths = [folder / f"{stem}.{lang}.gz" for lang in (data_cfg.src_lang, data_cfg.tgt_lang)]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise DataError(f"Multi30k folder {folder} exists but lacks {', '.join(missing)}; expected files "
                            f"{{train,val,test_2016_flickr}}.{{en,de,fr,cs}}.gz (set NMT_DATA_DIR to the folder "
                            "that holds multi30k/)")
        splits[split] = read_parallel(split, *paths)
    return splits


def hub_reachable(hub_id: str, timeout: float = 5.0) -> bool:
    """Does the HuggingFace hub (``HF_ENDPOINT``, default https://huggingface.co) describe the dataset ``hub_id``
    (HTTP 200 from its API within ``timeout`` seconds, through the environment's proxy settings)? False at once
    when ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set, and for no route, no name, a refusal, a time-out
    or any other answer (a network that intercepts requests answers too, but not with the dataset)."""
    if any(os.environ.get(k, "").lower() in ("1", "true", "yes") for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    url = f"{os.environ.get('HF_ENDPOINT', 'https://huggingface.co').rstrip('/')}/api/datasets/{hub_id}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, ValueError):  # URLError and HTTPError are OSErrors; ValueError: a malformed endpoint
        return False


def _multi30k_hub(data_cfg) -> dict[str, Parallel]:
    langs = {data_cfg.src_lang, data_cfg.tgt_lang}
    where = (f"put the raw Multi30k files {{train,val,test_2016_flickr}}.{{{data_cfg.src_lang},{data_cfg.tgt_lang}}}.gz "
             f"in {Path(data_cfg.dir).resolve()} (set NMT_DATA_DIR to the folder that holds multi30k/)")
    if not langs <= {"en", "de"}:
        raise DataError(f"the hub copy {data_cfg.hub_id} has only en and de; for {sorted(langs)} {where}")
    if not hub_reachable(data_cfg.hub_id):  # offline: only the local HuggingFace cache, at once, instead of a minute of retries
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        for module, flags in (("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")),
                              ("huggingface_hub.constants", ("HF_HUB_OFFLINE",))):
            if module in sys.modules:  # imported already: they read the environment at import
                for flag in flags:
                    setattr(sys.modules[module], flag, True)
        log.warning("the HuggingFace hub cannot be reached: looking for %s in the local cache only", data_cfg.hub_id)
    import datasets  # slow to import: only on the hub path

    try:
        ds = datasets.load_dataset(data_cfg.hub_id)
    except Exception as err:  # offline, hub down, dataset renamed: one message that says what to do
        raise DataError(f"could not load {data_cfg.hub_id} from the HuggingFace hub ({type(err).__name__}: "
                        f"{str(err).splitlines()[0] if str(err) else ''}); {where}") from err
    return {split: Parallel(split, list(ds[hub][data_cfg.src_lang]), list(ds[hub][data_cfg.tgt_lang]))
            for split, hub in HUB_SPLITS.items()}


def load_splits(data_cfg, train: bool = True) -> dict[str, Parallel]:
    """Load train/valid/test as configured by a ``conf/data/*.yaml`` node.

    ``kind: multi30k`` reads ``{dir}/{train,val,test_2016_flickr}.{lang}.gz``, or the hub when ``dir`` is absent;
    ``kind: files`` reads ``train_src``/``train_tgt``/``valid_*``/``test_*`` (test optional); ``kind: bitext``
    reads one file of pairs (``file``, ``columns``, ``separator``; :func:`read_table`) and uses it for all three
    splits (the setting of an unsupervised aligner that sees only the sentences to align). ``train_limit``
    keeps the first N training pairs, ``eval_limit`` the first N validation and test pairs (quick runs).
    ``normalize`` (nmt.data.normalize) is applied to every split, then ``extra_train`` adds training pairs
    (:func:`read_extra`, normalized the same way unless ``pretokenized``). ``train=False`` leaves out the
    training split of a local corpus (training reads it as a stream: :mod:`nmt.data.stream`).

    Raises:
        DataError: a corpus that cannot be used, naming the file and what to do.
        FileNotFoundError: a configured file that does not exist.
        nmt.data.textio.TextFileError: a file that is not valid UTF-8 text, naming the file, line and byte.
    """
    if data_cfg.kind == "multi30k":
        splits = _multi30k_local(data_cfg, train) or _multi30k_hub(data_cfg)
    elif data_cfg.kind == "files":
        splits = {}
        for split in SPLITS if train else SPLITS[1:]:
            src, tgt = data_cfg.get(f"{split}_src"), data_cfg.get(f"{split}_tgt")
            if src and tgt:
                splits[split] = read_parallel(split, src, tgt, (f"data.{split}_src", f"data.{split}_tgt"))
            elif split != "test" or src or tgt:  # a test split is optional, half of one is a mistake
                raise DataError(f"data=files needs data.{split}_src and data.{split}_tgt (paths to text files)"
                                + (f"; only data.{split}_{'src' if src else 'tgt'} is set" if src or tgt else ""))
    elif data_cfg.kind == "bitext":
        pairs = read_table(data_cfg.file, data_cfg.columns, data_cfg.src_lang, data_cfg.tgt_lang,
                           data_cfg.get("separator") or "\t")
        splits = {split: Parallel(split, pairs.src, pairs.tgt) for split in SPLITS}
    else:
        raise DataError(f"unknown data.kind {data_cfg.kind!r}: use multi30k, files or bitext")
    if data_cfg.get("train_limit") and "train" in splits:
        train = splits["train"]
        splits["train"] = Parallel("train", train.src[: data_cfg.train_limit], train.tgt[: data_cfg.train_limit])
    if data_cfg.get("eval_limit"):
        n = data_cfg.eval_limit
        for name in ("valid", "test"):
            if name in splits:
                splits[name] = Parallel(name, splits[name].src[:n], splits[name].tgt[:n])
    src_norm = Normalizer.from_config(data_cfg.get("normalize"), data_cfg.src_lang)
    tgt_norm = Normalizer.from_config(data_cfg.get("normalize"), data_cfg.tgt_lang)
    if src_norm.active or tgt_norm.active:
        splits = {name: Parallel(name, src_norm.lines(split.src), tgt_norm.lines(split.tgt))
                  for name, split in splits.items()}
    for extra in (data_cfg.get("extra_train") or []) if "train" in splits else []:
        more = extra_pairs(extra, data_cfg)
        train = splits["train"]
        splits["train"] = Parallel("train", train.src + more.src, train.tgt + more.tgt)
    return splits


def extra_pairs(extra, data_cfg) -> Parallel:
    """The pairs of one ``data.extra_train`` entry (:func:`read_extra`), normalized by ``data.normalize`` for
    the languages of its sides (an entry's own ``src_lang`` included), and logged (:func:`log_extra`).
    ``pretokenized: true`` entries are only lowercased. Raises what :func:`read_extra` raises."""
    more = read_extra(extra, data_cfg.src_lang, data_cfg.tgt_lang)
    keep = bool(extra.get("pretokenized"))  # already in the gold convention: only the token-preserving part
    src_norm = Normalizer.from_config(data_cfg.get("normalize"), extra.get("src_lang") or data_cfg.src_lang)
    tgt_norm = Normalizer.from_config(data_cfg.get("normalize"), data_cfg.tgt_lang)
    log_extra(more, extra, data_cfg.get("train_limit"))
    return Parallel(more.name, src_norm.lines(more.src, keep), tgt_norm.lines(more.tgt, keep))


def read_table(path, columns: list[str], src_lang: str, tgt_lang: str, separator: str = "\t",
               key: str | None = None) -> Parallel:
    """Pairs from a file with one pair per line, fields split on ``separator`` and stripped, ``columns`` naming
    the language of each field in order (Tatoeba's ``deu.txt``: ``[en, de]`` with tabs; the WPT 2003 Romanian
    bitext: ``[ro, en]`` with ``" ||| "``), returned in the run's source/target order. Blank (whitespace-only)
    lines hold no pair and are skipped. ``key``: the setting that named the file, for the messages.

    Raises:
        DataError: ``columns`` lacking a language of the run, or a line with too few fields (file and line
            named); FileNotFoundError / TextFileError.
    """
    columns = list(columns or [])
    if src_lang not in columns or tgt_lang not in columns:
        raise DataError(f"{path}: columns {columns} must name both {src_lang} and {tgt_lang} (the language of "
                        "each field, in order)")
    s, t = columns.index(src_lang), columns.index(tgt_lang)
    src, tgt, blank = [], [], 0
    for number, line in enumerate(read_lines(path, key), start=1):
        if not line.strip():  # no pair on it (e.g. a blank line at the end of the file)
            blank += 1
            continue
        fields = line.split(separator)
        if len(fields) <= max(s, t):
            raise DataError(f"{path}: line {number} has {len(fields)} field(s) separated by {separator!r}, "
                            f"expected at least {max(s, t) + 1} ({', '.join(columns)})")
        src.append(fields[s].strip())
        tgt.append(fields[t].strip())
    if blank:
        log.info("%s: skipped %d blank line(s)", path, blank)
    return Parallel(str(path), src, tgt)


def log_extra(more: Parallel, extra, limit: int | None) -> None:
    """Log what one ``data.extra_train`` entry added (``more``: its pairs, repeats included), and that
    ``data.train_limit`` (``limit``) did not cut it."""
    repeat, own = extra.get("repeat", 1), extra.get("src_lang")
    log.info("training data + %s: %d pairs x %d (data.extra_train%s%s)", more.name, len(more) // max(1, repeat),
             repeat, f", source language {own}" if own else "",
             f"; data.train_limit={limit} limits the corpus only" if limit else "")


def read_extra(extra, src_lang: str, tgt_lang: str) -> Parallel:
    """Extra training pairs from one ``data.extra_train`` entry, in the run's source/target order.

    Entries name their files by language, so that one preset serves both directions:
    ``{paths: {en: FILE, fr: FILE}, repeat: N}`` (line-aligned files) or
    ``{tsv: FILE, columns: [en, de], repeat: N}`` (one pair per line, tab-separated, e.g. Tatoeba's
    ``deu.txt``: English first; ``separator: " ||| "`` for other separators, :func:`read_table`).
    ``repeat`` (default 1) repeats the pairs, e.g. to weight a small in-domain set.
    ``src_lang: LANG`` reads the source side from another language than the run's (many-to-one training: e.g.
    Multi30k's French captions beside its English ones, both translated into the German captions); the
    target side is always the run's ``tgt_lang``.
    ``pretokenized: true`` (used by :func:`load_splits`) marks text already in the ``data.normalize``
    convention (gold alignment sentences): it is only lowercased, never re-tokenized. A ``paths`` file of a third
    language (neither the entry's source nor the target) is not read, with a warning.

    Raises:
        DataError: an entry without ``paths`` or ``tsv``, with a key it does not take (a close one suggested),
            without its two languages, a bad ``repeat`` or ``src_lang``, or a tsv line with too few fields (file
            and line named); FileNotFoundError / TextFileError (the setting named).
    """
    if not isinstance(extra, Mapping):
        raise DataError(f"data.extra_train entry {extra!r} is not a mapping: write {{paths: {{LANG: FILE, ...}}}} "
                        "or {tsv: FILE, columns: [LANG, LANG]}")
    unknown = sorted(str(key) for key in extra if key not in EXTRA_KEYS)
    if unknown:
        close = [difflib.get_close_matches(key, EXTRA_KEYS, n=1, cutoff=0.6) for key in unknown]
        hint = "; ".join(f"{key}: did you mean {near[0]}?" for key, near in zip(unknown, close) if near)
        raise DataError(f"data.extra_train entry {dict(extra)}: unknown key(s) {', '.join(unknown)}"
                        f"{' (' + hint + ')' if hint else ''}; an entry takes {', '.join(EXTRA_KEYS)}")
    repeat = extra.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise DataError(f"data.extra_train entry {dict(extra)}: repeat must be a whole number >= 1 (how many "
                        f"times its pairs are used), got {repeat!r}")
    own = extra.get("src_lang")
    if own is not None and (not isinstance(own, str) or not own or own == tgt_lang):
        raise DataError(f"data.extra_train entry {dict(extra)}: src_lang must name the language of its source side, "
                        f"another than the target language {tgt_lang}, got {own!r}")
    src_lang = own or src_lang
    if extra.get("paths"):
        paths = extra["paths"]
        missing = [lang for lang in (src_lang, tgt_lang) if lang not in paths]
        if missing:
            raise DataError(f"data.extra_train entry {dict(paths)} has no file for {missing}: name one file per "
                            f"language ({src_lang}: FILE, {tgt_lang}: FILE)")
        for lang in sorted(set(paths) - {src_lang, tgt_lang}):  # e.g. a many-to-one entry without its src_lang
            log.warning("data.extra_train paths.%s=%s is not read: the entry reads %s -> %s (src_lang: %s reads "
                        "it as the source side)", lang, paths[lang], src_lang, tgt_lang, lang)
        pairs = read_parallel(str(paths[src_lang]), paths[src_lang], paths[tgt_lang],
                              (f"data.extra_train paths.{src_lang}", f"data.extra_train paths.{tgt_lang}"))
    elif extra.get("tsv"):
        pairs = read_table(extra["tsv"], list(extra.get("columns") or []), src_lang, tgt_lang,
                           extra.get("separator") or "\t", key="data.extra_train tsv")
    else:
        raise DataError(f"data.extra_train entry {dict(extra)} needs paths: {{LANG: FILE, ...}} or tsv: FILE")
    return Parallel(pairs.name, pairs.src * repeat, pairs.tgt * repeat)
