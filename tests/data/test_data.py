"""Corpus loading, encoding, batching and padding (nmt.data), on the real Multi30k files and small files."""

import gzip
import sys
import time

import pytest
import torch

from nmt.data.batches import batch_indices, collate, encode_pairs
from nmt.data.corpus import DataError, Parallel, load_splits, read_parallel

MULTI30K_LINES = {"train": 29000, "valid": 1014, "test": 1000}
STEMS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def first_line(path):
    with gzip.open(path, "rb") as handle:
        return handle.readline().decode("utf-8").rstrip("\n")


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --- read_parallel ---------------------------------------------------------------------------------------------


def test_read_parallel_mismatch_names_both_files_and_counts(tmp_path):
    src = write_lines(tmp_path / "a.src", ["x", "y", "z"])
    tgt = write_lines(tmp_path / "a.tgt", ["x", "y"])
    with pytest.raises(DataError) as info:
        read_parallel("train", src, tgt)
    message = str(info.value)
    assert str(src) in message and str(tgt) in message
    assert "3" in message and "2" in message


def test_read_parallel_keeps_lines_aligned(tmp_path):
    """A U+2028 inside a line must not shift the source against the target."""
    src = write_lines(tmp_path / "a.src", ["eins\u2028zwei", "", "drei"])
    tgt = write_lines(tmp_path / "a.tgt", ["one two", "", "three"])
    pair = read_parallel("train", src, tgt)
    assert len(pair) == 3 and pair.src[2] == "drei" and pair.tgt[2] == "three"


# --- load_splits: Multi30k -------------------------------------------------------------------------------------


def test_multi30k_de_en_sizes_and_first_lines(multi30k_dir, compose_cfg):
    splits = load_splits(compose_cfg(["data.src_lang=de", "data.tgt_lang=en"]).data)
    assert {name: len(split) for name, split in splits.items()} == MULTI30K_LINES
    for name, split in splits.items():
        assert len(split.src) == len(split.tgt)
        assert split.src[0] == first_line(multi30k_dir / f"{STEMS[name]}.de.gz")
        assert split.tgt[0] == first_line(multi30k_dir / f"{STEMS[name]}.en.gz")
    assert splits["train"].src[0] != splits["train"].tgt[0]


def test_multi30k_en_fr_and_limits(multi30k_dir, compose_cfg):
    cfg = compose_cfg(["data.src_lang=en", "data.tgt_lang=fr", "data.train_limit=123", "data.eval_limit=45"])
    splits = load_splits(cfg.data)
    assert {name: len(split) for name, split in splits.items()} == {"train": 123, "valid": 45, "test": 45}
    assert splits["train"].src[0] == first_line(multi30k_dir / "train.en.gz")
    assert splits["test"].tgt[0] == first_line(multi30k_dir / "test_2016_flickr.fr.gz")


def test_train_limit_only_cuts_train(multi30k_dir, compose_cfg):
    splits = load_splits(compose_cfg(["data.train_limit=10"]).data)
    assert (len(splits["train"]), len(splits["valid"]), len(splits["test"])) == (10, 1014, 1000)


def fake_multi30k(folder, langs=("de", "en"), skip=()):
    folder.mkdir(parents=True)
    for stem in STEMS.values():
        for lang in langs:
            if f"{stem}.{lang}.gz" not in skip:
                (folder / f"{stem}.{lang}.gz").write_bytes(gzip.compress(f"{stem} {lang}\n".encode()))
    return folder


def test_missing_file_in_existing_multi30k_dir(tmp_path, compose_cfg):
    folder = fake_multi30k(tmp_path / "multi30k", skip={"test_2016_flickr.en.gz"})
    with pytest.raises(DataError) as info:
        load_splits(compose_cfg([f"data.dir={folder}"]).data)
    assert str(folder / "test_2016_flickr.en.gz") in str(info.value)
    assert "NMT_DATA_DIR" in str(info.value)


def test_fake_multi30k_dir_is_read(tmp_path, compose_cfg):
    folder = fake_multi30k(tmp_path / "multi30k")
    splits = load_splits(compose_cfg([f"data.dir={folder}"]).data)
    assert splits["valid"].src == ["val de"] and splits["test"].tgt == ["test_2016_flickr en"]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No local Multi30k folder and the hub switched off (also if ``datasets`` was imported already)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    if "datasets" in sys.modules:
        monkeypatch.setattr(sys.modules["datasets"].config, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(sys.modules["datasets"].config, "HF_DATASETS_OFFLINE", True)
    if "huggingface_hub" in sys.modules:
        monkeypatch.setattr(sys.modules["huggingface_hub"].constants, "HF_HUB_OFFLINE", True)
    return tmp_path / "no-such-dir" / "multi30k"


def test_no_local_dir_offline_hub_fails_fast(offline, compose_cfg):
    cfg = compose_cfg([f"data.dir={offline}"])
    start = time.monotonic()
    with pytest.raises(DataError) as info:
        load_splits(cfg.data)
    assert time.monotonic() - start < 30  # importing datasets is most of it; no network retries
    message = str(info.value)
    assert "NMT_DATA_DIR" in message and "bentrevett/multi30k" in message


def test_an_unreachable_hub_fails_fast_without_offline_settings(monkeypatch, tmp_path, compose_cfg):
    """No local corpus, no offline setting, and a hub whose name does not resolve: one quick probe, then the
    local cache only, instead of the hub client's retries (about 25 s of them)."""
    import datasets
    import huggingface_hub

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(datasets.config, name, False)  # restored after the test, like the environment
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # .invalid never resolves
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    cfg = compose_cfg([f"data.dir={tmp_path / 'no-such-dir' / 'multi30k'}"])
    start = time.monotonic()
    with pytest.raises(DataError, match="NMT_DATA_DIR"):
        load_splits(cfg.data)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("pair", [("en", "fr"), ("cs", "en")])
def test_no_local_dir_fr_cs_not_on_hub(offline, compose_cfg, pair):
    cfg = compose_cfg([f"data.dir={offline}", f"data.src_lang={pair[0]}", f"data.tgt_lang={pair[1]}"])
    with pytest.raises(DataError) as info:
        load_splits(cfg.data)
    message = str(info.value)
    assert "only en and de" in message and "NMT_DATA_DIR" in message
    assert f"{{{pair[0]},{pair[1]}}}" in message  # which files to put where


# --- load_splits: data=files -----------------------------------------------------------------------------------


def test_data_files(tmp_path, compose_cfg):
    paths = {}
    for split, n in (("train", 5), ("valid", 3), ("test", 2)):
        for side in ("src", "tgt"):
            paths[f"{split}_{side}"] = write_lines(tmp_path / f"{split}.{side}", [f"{split} {side} {i}" for i in range(n)])
    overrides = ["data=files"] + [f"data.{key}={path}" for key, path in paths.items()]
    splits = load_splits(compose_cfg(overrides + ["data.train_limit=4"]).data)
    assert {name: len(split) for name, split in splits.items()} == {"train": 4, "valid": 3, "test": 2}
    assert splits["valid"].tgt[2] == "valid tgt 2"
    no_test = [o for o in overrides if not o.startswith("data.test_")]
    assert set(load_splits(compose_cfg(no_test).data)) == {"train", "valid"}  # test files are optional
    no_valid = [o for o in overrides if not o.startswith("data.valid_src")]
    with pytest.raises(DataError, match="data.valid_src"):
        load_splits(compose_cfg(no_valid).data)
    half_test = [o for o in overrides if not o.startswith("data.test_tgt")]  # a test split is optional, half is not
    with pytest.raises(DataError, match="data.test_src and data.test_tgt.*only data.test_src is set"):
        load_splits(compose_cfg(half_test).data)


def test_data_files_missing_file_named(tmp_path, compose_cfg):
    train = write_lines(tmp_path / "train.src", ["a"])
    cfg = compose_cfg(["data=files", f"data.train_src={train}", f"data.train_tgt={train}",
                       f"data.valid_src={tmp_path / 'missing.src'}", f"data.valid_tgt={train}"])
    with pytest.raises(FileNotFoundError, match=r"^data.valid_src=.*missing.src: file not found$"):
        load_splits(cfg.data)
    from nmt.data.stream import train_stream

    # the training split is read as a stream, its files checked when it is opened
    cfg.data.train_tgt = str(tmp_path / "missing.tgt")
    with pytest.raises(FileNotFoundError, match=r"^data.train_tgt=.*missing.tgt: training file not found$"):
        train_stream(cfg.data)


def test_unknown_kind(compose_cfg):
    cfg = compose_cfg()
    cfg.data.kind = "tsv"
    with pytest.raises(DataError, match="tsv"):
        load_splits(cfg.data)


# --- encode_pairs ----------------------------------------------------------------------------------------------


def test_encode_pairs_drops_empty_and_long(tokenizer):
    split = Parallel(
        "train",
        ["Ein Hund.", "", "   ", "Eine Katze.", "Ein sehr sehr sehr sehr sehr sehr langer Satz.", "Kurz.", "Zwei."],
        ["A dog.", "Empty source.", "Blank source.", "\t", "A short one.", "A very very very very long one.", "Two."],
    )
    pairs = encode_pairs(split, tokenizer, tokenizer, max_len=8)
    assert pairs == [
        (tokenizer.encode("Ein Hund."), tokenizer.encode("A dog.")),
        (tokenizer.encode("Zwei."), tokenizer.encode("Two.")),
    ]
    # dropped for their length (a long source, a long target), not by accident
    assert len(tokenizer.encode(split.src[4])) > 8 and len(tokenizer.encode(split.tgt[5])) > 8
    assert all(s[-1] == 3 and t[-1] == 3 for s, t in pairs)
    assert len(encode_pairs(split, tokenizer, tokenizer)) == 4  # no max_len: only the empty-side pairs go
    with pytest.raises(DataError, match="no usable"):
        encode_pairs(Parallel("x", ["", "a"], ["b", " "]), tokenizer, tokenizer)


# --- batch_indices / collate -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lengths(small_splits, tokenizer):
    pairs = encode_pairs(small_splits["train"], tokenizer, tokenizer)[:1500]
    return [max(len(s), len(t)) for s, t in pairs] + [300, 1]  # one example longer than a batch, one tiny


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("batch_tokens", [100, 250])
def test_batch_indices_cover_and_fit(lengths, shuffle, batch_tokens):
    batches = batch_indices(lengths, batch_tokens, shuffle=shuffle, seed=3)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(len(lengths)))  # every index exactly once
    for batch in batches:
        assert batch
        padded = max(lengths[i] for i in batch) * len(batch)
        assert padded <= batch_tokens or len(batch) == 1
    assert [len(lengths) - 2] in batches  # the 300-token example: a batch of its own
    # bucketing: batches are fuller than random grouping would make them
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert real / padded > 0.8


def test_batch_indices_max_sentences(lengths):
    batches = batch_indices(lengths, 10_000, shuffle=True, seed=0, max_sentences=7)
    assert max(len(b) for b in batches) == 7
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))


def test_batch_indices_order(lengths):
    """Sorted by length inside a pool; with shuffle the batch order is shuffled too (one pool here)."""
    longest = [max(lengths[i] for i in b) for b in batch_indices(lengths, 2000, shuffle=False)]
    assert longest == sorted(longest)
    longest = [max(lengths[i] for i in b) for b in batch_indices(lengths, 2000, shuffle=True, seed=0)]
    assert longest != sorted(longest)


def test_batch_indices_seeds(lengths):
    a = batch_indices(lengths, 400, shuffle=True, seed=1)
    assert a == batch_indices(lengths, 400, shuffle=True, seed=1)
    b = batch_indices(lengths, 400, shuffle=True, seed=2)
    assert a != b and sorted(map(tuple, a)) != sorted(map(tuple, b))  # other order and other batches
    assert batch_indices(lengths, 400, shuffle=False, seed=1) == batch_indices(lengths, 400, shuffle=False, seed=2)


@pytest.mark.parametrize("group", [2, 3, 4])
def test_batches_of_one_update_are_neighbours_of_similar_length(lengths, group):
    """group > 1: the same batches, in shuffled runs of `group` neighbours of the sorted order (the ranks of an
    update get batches of similar lengths); the left-over batches last; group=1 is the plain shuffle."""
    plain = batch_indices(lengths, 250, shuffle=True, seed=4)
    assert batch_indices(lengths, 250, shuffle=True, seed=4, group=1) == plain
    runs = batch_indices(lengths, 250, shuffle=True, seed=4, group=group)
    assert sorted(map(tuple, runs)) == sorted(map(tuple, plain)) and runs != plain
    full = len(runs) - len(runs) % group
    longest = [max(lengths[i] for i in b) for b in runs]

    def spread(order):  # mean range of the longest lengths within the updates' groups
        return sum(max(order[i:i + group]) - min(order[i:i + group]) for i in range(0, full, group)) / (full // group)

    plain_longest = [max(lengths[i] for i in b) for b in plain]
    assert spread(plain_longest) > 3 * spread(longest)
    assert runs[:full] != sorted(runs[:full], key=lambda b: max(lengths[i] for i in b))  # the runs are shuffled
    assert batch_indices(lengths, 250, shuffle=True, seed=5, group=group)[full:] != runs[full:] or len(runs) % group == 0


def test_collate():
    src = [[5, 6, 3], [7, 3], [8, 9, 10, 11, 3]]
    tgt = [[12, 3], [13, 14, 15, 3], [3]]
    batch = collate(src, tgt, [4, 0, 9])
    assert batch.src.tolist() == [[5, 6, 3, 0, 0], [7, 3, 0, 0, 0], [8, 9, 10, 11, 3]]
    assert batch.src_mask.tolist() == [[True] * 3 + [False] * 2, [True] * 2 + [False] * 3, [True] * 5]
    assert batch.src_mask.dtype == torch.bool
    assert batch.tgt_in.tolist() == [[2, 12, 0, 0], [2, 13, 14, 15], [2, 0, 0, 0]]
    assert batch.tgt_out.tolist() == [[12, 3, 0, 0], [13, 14, 15, 3], [3, 0, 0, 0]]
    assert (batch.tgt_in[:, 0] == 2).all()
    for row, t in zip(batch.tgt_out.tolist(), tgt):
        assert row[len(t) - 1] == 3 and all(x == 0 for x in row[len(t):])
    assert batch.num_tgt_tokens == 2 + 4 + 1
    assert batch.index.tolist() == [4, 0, 9]
    inference = collate(src, None, [0, 1, 2])
    assert inference.tgt_in is None and inference.tgt_out is None and inference.num_tgt_tokens == 0
