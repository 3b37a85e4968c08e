"""The training split as a stream (nmt.data.stream) gives exactly the lines load_splits gives, and its sample."""

from __future__ import annotations

import pytest

from nmt.data.corpus import DataError, load_splits
from nmt.data.stream import corpus_settings, train_stream


@pytest.mark.parametrize("overrides", [
    ["data.train_limit=500"],
    ["data.train_limit=300", "data.src_lang=en", "data.tgt_lang=fr", "data.normalize.lowercase=true",
     "data.normalize.tokenize=true"],
])
def test_the_stream_holds_the_lines_of_load_splits(compose_cfg, multi30k_dir, overrides):
    cfg = compose_cfg(overrides)
    train = load_splits(cfg.data)["train"]
    stream = train_stream(cfg.data)
    assert list(stream.lines("src")) == train.src and list(stream.lines("tgt")) == train.tgt
    assert [p.name for p in stream.files] == [f"train.{cfg.data.src_lang}.gz", f"train.{cfg.data.tgt_lang}.gz"]
    assert "train" not in load_splits(cfg.data, train=False)
    sample = stream.sample(None)
    assert (sample.src, sample.tgt) == (train.src, train.tgt)
    assert stream.sample(10_000).src == train.src  # a corpus smaller than the sample: every pair, in order


def test_extra_training_data_is_logged_beside_the_limited_corpus(compose_cfg, multi30k_dir, caplog):
    cfg = compose_cfg(["+experiment=align_en_fr", "data.train_limit=50", "data.eval_limit=5"])
    gold = multi30k_dir.parent / "align_enfr_hansards"
    expected = [f"training data + {gold / name}: {n} pairs x 10 (data.extra_train; data.train_limit=50 limits the "
                "corpus only)" for name, n in (("test.e.gz", 447), ("dev.e.gz", 37))]
    with caplog.at_level("INFO", logger="nmt.data.corpus"):
        stream = train_stream(cfg.data)
    assert [r.getMessage() for r in caplog.records if "training data +" in r.getMessage()] == expected
    assert sum(1 for _ in stream.lines("src")) == 50 + 4470 + 370
    caplog.clear()
    with caplog.at_level("INFO", logger="nmt.data.corpus"):
        load_splits(cfg.data)
    assert [r.getMessage() for r in caplog.records if "training data +" in r.getMessage()] == expected


def test_a_sample_is_uniform_and_keeps_pairs_together(compose_cfg, multi30k_dir):
    stream = train_stream(compose_cfg(["data.train_limit=2000"]).data)
    pairs = set(zip(stream.lines("src"), stream.lines("tgt")))
    sample = stream.sample(100, seed=3)
    assert len(sample) == 100 and set(zip(sample.src, sample.tgt)) <= pairs
    assert sample.src != list(stream.lines("src"))[:100]  # not simply the first lines
    assert stream.sample(100, seed=3).src == sample.src  # seeded


def test_files_with_other_line_counts_are_named(compose_cfg, tmp_path):
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("one\ntwo\n", encoding="utf-8")
    cfg = compose_cfg(["data=files", f"data.train_src={tmp_path}/a.de", f"data.train_tgt={tmp_path}/a.en",
                       f"data.valid_src={tmp_path}/a.de", f"data.valid_tgt={tmp_path}/a.de"])
    with pytest.raises(DataError, match=r"a\.de has 3 lines but .*a\.en has 2"):
        train_stream(cfg.data).sample(None)


def test_the_token_store_settings_name_files_not_spellings(compose_cfg, multi30k_dir, monkeypatch, tmp_path):
    """The same extra training files named through ``..`` or a link give the same store settings (one store)."""
    root = multi30k_dir.parent.resolve()
    (tmp_path / "link").symlink_to(root)
    found = []
    for spelt in (str(root), f"{root}/multi30k/..", str(tmp_path / "link")):
        monkeypatch.setenv("NMT_DATA_DIR", spelt)
        found.append(corpus_settings(compose_cfg(["+experiment=align_en_fr"]).data))
    assert found[0] == found[1] == found[2]
    assert found[0]["extra_train"][0]["paths"]["en"] == str(root / "align_enfr_hansards" / "test.e.gz")
