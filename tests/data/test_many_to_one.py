"""Many-to-one training data: a ``data.extra_train`` entry whose source side is another language than the
run's (``src_lang``), on the real Multi30k captions (the ``multi30k_en_de_many_to_one`` preset)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from nmt.data.corpus import DataError, load_splits, read_extra
from nmt.data.normalize import Normalizer
from nmt.data.stream import train_stream
from nmt.data.textio import read_lines


def test_the_preset_is_the_en_de_recipe_with_the_french_captions_as_more_sources(compose_cfg):
    more = OmegaConf.to_container(compose_cfg(["+experiment=multi30k_en_de_many_to_one"]))
    plain = OmegaConf.to_container(compose_cfg(["+experiment=multi30k_en_de"]))
    [entry] = more["data"].pop("extra_train")
    assert entry["src_lang"] == "fr" and entry["paths"]["fr"].endswith("multi30k/train.fr.gz")
    assert plain["data"].pop("extra_train") == []
    more["hydra"] = plain["hydra"] = None
    assert more == plain


@pytest.mark.parametrize("normalize", [[], ["data.normalize.tokenize=true", "data.normalize.lowercase=true",
                                            "data.normalize.french_decontract=true"]])
def test_french_sources_join_the_english_ones_with_the_same_german_targets(compose_cfg, multi30k_dir, normalize):
    cfg = compose_cfg(["+experiment=multi30k_en_de_many_to_one", "data.train_limit=40", "data.eval_limit=3",
                       *normalize])
    train = load_splits(cfg.data)["train"]
    french, german = read_lines(multi30k_dir / "train.fr.gz"), read_lines(multi30k_dir / "train.de.gz")
    fr, de, en = (Normalizer.from_config(cfg.data.normalize, lang) for lang in ("fr", "de", "en"))
    assert len(train) == 40 + len(french) == 40 + 29_000
    assert train.src[:40] == en.lines(read_lines(multi30k_dir / "train.en.gz")[:40])
    assert train.src[40:] == fr.lines(french)  # French normalized as French
    assert train.tgt[40:] == de.lines(german) and train.tgt[:40] == train.tgt[40:80]
    if normalize:  # the French convention applies to the French side only: l'homme -> le homme
        elided = next(i for i, line in enumerate(french) if " l'" in line)
        assert " l'" not in train.src[40 + elided] and " le " in train.src[40 + elided]
    stream = train_stream(cfg.data)
    assert list(stream.lines("src")) == train.src and list(stream.lines("tgt")) == train.tgt


def test_a_source_language_that_is_the_target_or_no_language_is_refused(multi30k_dir):
    entry = {"paths": {"fr": str(multi30k_dir / "val.fr.gz"), "de": str(multi30k_dir / "val.de.gz")}}
    pairs = read_extra({**entry, "src_lang": "fr"}, "en", "de")
    assert pairs.src == read_lines(multi30k_dir / "val.fr.gz") and len(pairs) == 1014
    with pytest.raises(DataError, match=r"has no file for \['en'\]"):
        read_extra(entry, "en", "de")  # without src_lang the entry is read as the run's en -> de
    for bad in ("de", 7, ""):
        with pytest.raises(DataError, match=rf"src_lang must name the language of its source side, another than "
                                            rf"the target language de, got {bad!r}"):
            read_extra({**entry, "src_lang": bad}, "en", "de")


def test_a_mistyped_entry_key_is_refused_with_the_close_one(multi30k_dir):
    entry = {"paths": {"fr": str(multi30k_dir / "val.fr.gz"), "de": str(multi30k_dir / "val.de.gz")}}
    with pytest.raises(DataError, match=r"unknown key\(s\) src_lng \(src_lng: did you mean src_lang\?\); an entry "
                                        r"takes paths, tsv, columns, separator, repeat, src_lang, pretokenized"):
        read_extra({**entry, "src_lng": "fr"}, "en", "de")  # read as en -> de before: "no file for ['en']"
    with pytest.raises(DataError, match=r"unknown key\(s\) repeats, xyz \(repeats: did you mean repeat\?\); an"):
        read_extra({**entry, "repeats": 2, "xyz": 1}, "fr", "de")


def test_the_log_names_the_source_language_and_a_missing_file_its_setting(multi30k_dir, compose_cfg, caplog,
                                                                          tmp_path):
    cfg = compose_cfg(["+experiment=multi30k_en_de_many_to_one", "data.train_limit=40", "data.eval_limit=3"])
    with caplog.at_level("INFO", logger="nmt.data.corpus"):
        load_splits(cfg.data)
    expected = (f"training data + {multi30k_dir / 'train.fr.gz'}: 29000 pairs x 1 (data.extra_train, source "
                "language fr; data.train_limit=40 limits the corpus only)")
    assert [r.getMessage() for r in caplog.records if "training data +" in r.getMessage()] == [expected]
    missing = {"paths": {"fr": str(tmp_path / "nope.fr"), "de": str(multi30k_dir / "val.de.gz")}, "src_lang": "fr"}
    with pytest.raises(FileNotFoundError, match=r"^data.extra_train paths.fr=.*nope.fr: file not found$"):
        read_extra(missing, "en", "de")
    with pytest.raises(FileNotFoundError, match=r"^data.extra_train tsv=.*nope.tsv: file not found$"):
        read_extra({"tsv": str(tmp_path / "nope.tsv"), "columns": ["en", "de"]}, "en", "de")


def test_a_file_of_a_third_language_is_named_as_not_read(multi30k_dir, caplog):
    entry = {"paths": {lang: str(multi30k_dir / f"val.{lang}.gz") for lang in ("en", "fr", "de")}}
    for src_lang, unused in (("en", "fr"), ("fr", "en")):  # without src_lang the entry is read as the run's en -> de
        caplog.clear()
        with caplog.at_level("WARNING", logger="nmt.data.corpus"):
            pairs = read_extra({**entry, "src_lang": src_lang} if src_lang == "fr" else entry, "en", "de")
        assert pairs.src == read_lines(multi30k_dir / f"val.{src_lang}.gz")
        expected = (f"data.extra_train paths.{unused}={multi30k_dir / f'val.{unused}.gz'} is not read: the entry "
                    f"reads {src_lang} -> de (src_lang: {unused} reads it as the source side)")
        assert [r.getMessage() for r in caplog.records] == [expected]
