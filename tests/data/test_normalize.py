"""Text normalization (nmt.data.normalize), extra training data (nmt.data.read_extra) and the alignment presets.

The real-data check: the Hansards gold sentences are already in the convention the normalizer produces
(tokenized, hyphens split, elisions and du/des/au/aux undone), so normalizing their raw-looking counterpart
(Multi30k French) must leave no elided or contracted token, and re-normalizing the gold lines themselves must
change almost none of them.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from nmt.data.corpus import DataError, load_splits, read_extra, read_table
from nmt.data.normalize import Normalizer
from nmt.data.textio import read_lines

FR = Normalizer("fr", tokenize=True, split_hyphens=True, lowercase=True, french_decontract=True)
EN = Normalizer("en", tokenize=True, split_hyphens=True, lowercase=True)
CONTRACTED = {"du", "des", "au", "aux"}


def test_french_decontractions_by_hand():
    assert FR("L'homme d'affaires n'est pas au marché du village.") == \
        "le homme de affaires ne est pas à le marché de le village ."
    assert FR("Qu'il vienne aux réunions des députés, c'est peut-être jusqu'à demain.") == \
        "que il vienne à les réunions de les députés , ce est peut - être jusque à demain ."
    assert FR("Quelqu'un s'en va aujourd'hui.") == "quelque un se en va aujourd' hui ."
    assert EN("The minister's well-known report.") == "the minister 's well - known report ."


def test_steps_are_independent_and_off_by_default():
    line = "Un Homme au-dessus du lac."
    assert Normalizer("fr")(line) == line and not Normalizer("fr").active
    assert Normalizer("fr", lowercase=True)(line) == "un homme au-dessus du lac."
    assert Normalizer("fr", tokenize=True)(line) == "Un Homme au-dessus du lac ."
    assert Normalizer("fr", split_hyphens=True)(line) == "Un Homme au - dessus du lac."
    with pytest.raises(ValueError, match="French only"):
        Normalizer("en", french_decontract=True)
    # from a config node: french_decontract is ignored for the non-French side of a run
    node = {"tokenize": True, "lowercase": True, "french_decontract": True}
    assert Normalizer.from_config(node, "en") == Normalizer("en", tokenize=True, lowercase=True)
    assert Normalizer.from_config(None, "fr") == Normalizer("fr")


def test_keep_tokens_only_lowercases():
    line = "Monsieur le Orateur , je ai signalé à le chef de le opposition . "
    assert FR.keep_tokens(line) == line.lower()
    assert len(FR.keep_tokens(line).split()) == len(line.split())
    assert Normalizer("fr").keep_tokens(line) == line


def test_multi30k_french_has_no_contractions_left(multi30k_dir):
    raw = read_lines(multi30k_dir / "train.fr.gz")[:3000]
    assert sum(len(CONTRACTED & set(line.lower().split())) for line in raw) > 300  # they are there before
    tokens = [token for line in FR.lines(raw) for token in line.split()]
    assert not CONTRACTED & set(tokens)
    elided = {"l'", "d'", "n'", "j'", "c'", "qu'", "s'", "m'", "t'", "jusqu'", "lorsqu'", "puisqu'"}
    moses_only = Normalizer("fr", tokenize=True, lowercase=True)
    assert sum(len(elided & set(moses_only(line).split())) for line in raw) > 300  # there before
    assert not elided & set(tokens)
    assert all(t == t.lower() for t in tokens)


def test_hansards_gold_lines_are_nearly_fixed_points(multi30k_dir):
    """The convention matches the gold set's: re-normalizing its (already normalized) lines changes < 3%."""
    gold = multi30k_dir.parent / "align_enfr_hansards"
    for normalizer, name in ((FR, "test.f.gz"), (EN, "test.e.gz")):
        lines = [line.strip() for line in read_lines(gold / name)]
        changed = [line for line in lines if normalizer(line) != line.lower()]
        assert len(lines) == 447 and len(changed) < 0.03 * len(lines), changed[:5]
    # without the de-contractions the raw-text convention differs on most French lines
    plain = Normalizer("fr", tokenize=True, split_hyphens=True, lowercase=True)
    raw = read_lines(multi30k_dir / "train.fr.gz")[:300]
    assert sum(plain(line) != FR(line) for line in raw) > 100


def _write(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode("utf-8")))
    return path


def test_read_extra_by_language_both_directions_and_repeat(tmp_path):
    en = _write(tmp_path / "x.en.gz", ["a cat .", "a dog ."])
    fr = _write(tmp_path / "x.fr.gz", ["un chat .", "un chien ."])
    entry = {"paths": {"en": str(en), "fr": str(fr)}, "repeat": 2}
    forward = read_extra(entry, "en", "fr")
    assert forward.src == ["a cat .", "a dog ."] * 2 and forward.tgt == ["un chat .", "un chien ."] * 2
    backward = read_extra(entry, "fr", "en")
    assert backward.src == forward.tgt and backward.tgt == forward.src
    with pytest.raises(DataError, match="no file for \\['de'\\]"):
        read_extra(entry, "en", "de")
    for bad in (0, "two", None, 1.5, True):  # a traceback (ValueError, TypeError) for all but 0 before
        with pytest.raises(DataError, match=r"repeat must be a whole number >= 1 \(how many times its pairs are "
                                            rf"used\), got {re.escape(repr(bad))}"):
            read_extra({**entry, "repeat": bad}, "en", "fr")
    with pytest.raises(DataError, match=r"entry 'x.tsv' is not a mapping: write \{paths"):
        read_extra("x.tsv", "en", "fr")  # data.extra_train=[x.tsv]: an AttributeError before
    with pytest.raises(DataError, match="needs paths"):
        read_extra({"repeat": 1}, "en", "fr")


def test_read_extra_tsv_columns_and_bad_line(tmp_path):
    tsv = tmp_path / "deu.txt"
    tsv.write_text("Hi.\tHallo!\nRun!\tLauf!\tCC-BY\n", encoding="utf-8")
    pairs = read_extra({"tsv": str(tsv), "columns": ["en", "de"]}, "de", "en")
    assert pairs.src == ["Hallo!", "Lauf!"] and pairs.tgt == ["Hi.", "Run!"]
    with pytest.raises(DataError, match="must name both fr and de"):
        read_extra({"tsv": str(tsv), "columns": ["en", "de"]}, "fr", "de")
    tsv.write_text("Hi.\tHallo!\nno tab here\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"deu.txt: line 2 has 1 field\(s\) separated by '\\t'"):
        read_extra({"tsv": str(tsv), "columns": ["en", "de"]}, "de", "en")


def test_bitext_kind_reads_the_romanian_gold_sentences_for_every_split(multi30k_dir, compose_cfg):
    cfg = compose_cfg(["+experiment=align_ro_en"])
    splits = load_splits(cfg.data)
    assert {name: len(split) for name, split in splits.items()} == {"train": 248, "valid": 248, "test": 248}
    assert (splits["train"].src[0], splits["train"].tgt[0]) == ("ajunge !", "that 's enough !")  # stripped
    assert splits["valid"].src == splits["train"].src
    reverse = load_splits(compose_cfg(["+experiment=align_ro_en", "data.src_lang=en", "data.tgt_lang=ro"]).data)
    assert reverse["train"].src == splits["train"].tgt


def test_read_table_other_separator(tmp_path):
    table = tmp_path / "x.txt"
    table.write_text("a b   ||| c d  \ne ||| f\n", encoding="utf-8")
    pairs = read_table(table, ["ro", "en"], "en", "ro", " ||| ")
    assert (pairs.src, pairs.tgt) == (["c d", "f"], ["a b", "e"])
    table.write_text("a ||| b\n\n  \nc ||| d\n\n", encoding="utf-8")  # blank lines, one at the end: no pairs
    pairs = read_table(table, ["ro", "en"], "ro", "en", " ||| ")
    assert (pairs.src, pairs.tgt) == (["a", "c"], ["b", "d"])
    table.write_text("a b c\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"x.txt: line 1 has 1 field\(s\) separated by ' \|\|\| '"):
        read_table(table, ["ro", "en"], "ro", "en", " ||| ")


def test_load_splits_normalizes_and_keeps_pretokenized_extras(multi30k_dir, compose_cfg):
    cfg = compose_cfg(["+experiment=align_en_fr", "data.train_limit=50", "data.eval_limit=5"])
    splits = load_splits(cfg.data)
    gold = multi30k_dir.parent / "align_enfr_hansards"
    gold_en = [line.lower() for line in read_lines(gold / "test.e.gz")]
    gold_fr = [line.lower() for line in read_lines(gold / "test.f.gz")]
    train = splits["train"]
    assert len(train) == 50 + 10 * 447 + 10 * 37
    assert train.src[50:50 + 447] == gold_en and train.tgt[50:50 + 447] == gold_fr  # only lowercased
    assert train.src[50 + 447:50 + 2 * 447] == gold_en  # repeated
    assert train.tgt[0] == FR(read_lines(multi30k_dir / "train.fr.gz")[0])
    assert splits["test"].tgt[0] == FR(read_lines(multi30k_dir / "test_2016_flickr.fr.gz")[0])
    # the reverse direction of the same preset
    reverse = load_splits(compose_cfg(["+experiment=align_en_fr", "data.src_lang=fr", "data.tgt_lang=en",
                                       "data.train_limit=50", "data.eval_limit=5"]).data)
    assert reverse["train"].src[50:50 + 447] == gold_fr and reverse["train"].tgt == train.src


def test_align_de_en_preset_reads_tatoeba_and_gold(multi30k_dir, compose_cfg):
    cfg = compose_cfg(["+experiment=align_de_en", "data.train_limit=10", "data.eval_limit=5"])
    assert cfg.data.normalize.lowercase and cfg.train.max_steps == 6500
    splits = load_splits(cfg.data)
    assert len(splits["train"]) == 10 + 169_813 + 20 * 100
    assert splits["train"].src[10:12] == ["hallo !", "grüß gott !"]  # Tatoeba: English first in the file
    assert splits["train"].tgt[10:12] == ["hi .", "hi ."]
    gold = [line.lower() for line in read_lines(multi30k_dir.parent / "align_deen_bicici100" / "test.de.gz")]
    assert splits["train"].src[-100:] == gold and not gold[0].startswith("\ufeff")  # BOM dropped
