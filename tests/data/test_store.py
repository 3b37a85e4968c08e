"""The tokenised corpus store (nmt.data.store) and the streaming reader (nmt.data.textio.iter_lines), on a
real slice of Multi30k de-en: the same pairs and batches as the in-memory path, resumable builds, the key."""

import gzip
import logging
import os
import pickle
import threading

import numpy as np
import pytest
import torch

from nmt.data.batches import encode_pairs, iterate_batches
from nmt.data.corpus import DataError, Parallel
from nmt.data.store import FILES, META, PROGRESS, TokenStore, build_store, cached_store, store_key
from nmt.data.textio import TextFileError, iter_lines, read_lines

MAX_LEN = 40  # drops some of the slice's pairs, so that the long-pair rule is exercised


@pytest.fixture(scope="module")
def split(small_splits):
    """The 3000-pair slice with four pairs that have an empty or whitespace-only side put in the middle."""
    train = small_splits["train"]
    src = train.src[:1000] + ["", "  Ein Hund.", "\t", "Ein Mann."] + train.src[1000:]
    tgt = train.tgt[:1000] + ["A dog.", " ", "A man.", ""] + train.tgt[1000:]
    return Parallel("train", src, tgt)


@pytest.fixture(scope="module")
def reference(split, tokenizer):
    return encode_pairs(split, tokenizer, tokenizer, max_len=MAX_LEN)


@pytest.fixture(scope="module")
def store(split, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("store") / "s"
    return build_store(folder, iter(split.src), iter(split.tgt), tokenizer, tokenizer, MAX_LEN,
                       chunk_size=700)


class Counting:
    """A tokenizer that counts the sentences it encodes (same model bytes and vocabulary: the same store)."""

    def __init__(self, tok):
        self.tok, self.model_proto, self.vocab, self.encoded = tok, tok.model_proto, tok.vocab, 0

    def encode_batch(self, texts, **kwargs):
        self.encoded += len(texts)
        return self.tok.encode_batch(texts, **kwargs)


def contents(folder):
    return {name: (folder / name).read_bytes() for name in [f"{f}.npy" for f in FILES] + [META]}


def test_store_pairs_equal_encode_pairs(split, tokenizer, reference, store, caplog, tmp_path):
    assert len(store) == len(reference) < len(split) - 4  # some long pairs were dropped too
    assert list(store) == reference
    assert store[-1] == reference[-1] and store[np.int64(5)] == reference[5]
    assert all(s[-1] == t[-1] == 3 for s, t in store)  # both sides end in EOS
    assert isinstance(store.lengths, np.ndarray) and not isinstance(store.lengths, np.memmap)
    assert store.lengths.tolist() == [max(len(s), len(t)) for s, t in reference]
    with pytest.raises(IndexError):
        store[len(store)]
    assert isinstance(store._src, np.memmap)  # the ids are memory-mapped, not read
    reopened = pickle.loads(pickle.dumps(store))
    assert len(pickle.dumps(store)) < 500 and list(reopened) == reference
    with caplog.at_level(logging.INFO):  # the same drop counts logged as encode_pairs logs
        encode_pairs(split, tokenizer, tokenizer, max_len=MAX_LEN)
        build_store(tmp_path / "s", iter(split.src), iter(split.tgt), tokenizer, tokenizer, MAX_LEN)
    messages = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(messages) == 4 and messages[:2] == messages[2:], messages
    assert "dropped 4 pairs with an empty side" in messages[0]


@pytest.mark.parametrize(("shuffle", "max_sentences", "skip"),
                         [(True, None, 0), (False, None, 0), (True, 9, 3)])
def test_iterate_batches_same_over_store_and_list(reference, store, shuffle, max_sentences, skip):
    ours = list(iterate_batches(store, 600, shuffle, seed=7, max_sentences=max_sentences, skip=skip))
    theirs = list(iterate_batches(reference, 600, shuffle, seed=7, max_sentences=max_sentences, skip=skip))
    assert len(ours) == len(theirs) > 20
    for a, b in zip(ours, theirs):
        for field in ("src", "src_mask", "tgt_in", "tgt_out", "index"):
            x, y = getattr(a, field), getattr(b, field)
            assert x.dtype == y.dtype and torch.equal(x, y), field


def test_interrupted_build_resumes_to_the_same_files(split, tokenizer, store, tmp_path):
    def killed(lines, after):
        for number, line in enumerate(lines):
            if number == after:
                raise KeyboardInterrupt  # what Ctrl-C (or a failing reader) does mid-chunk
            yield line

    folder, counting = tmp_path / "s", Counting(tokenizer)
    with pytest.raises(KeyboardInterrupt):
        build_store(folder, killed(split.src, 1750), iter(split.tgt), counting, counting, MAX_LEN,
                    chunk_size=500)
    assert (folder / PROGRESS).is_file() and not (folder / META).exists()
    with pytest.raises(DataError, match="not a complete token store .its build stopped"):
        TokenStore(folder)
    with open(folder / "src.ids.npy", "ab") as handle:  # a process killed while writing a chunk
        handle.write(b"\x07" * 1000)
    counting.encoded = 0
    resumed = build_store(folder, iter(split.src), iter(split.tgt), counting, counting, MAX_LEN,
                          chunk_size=500)
    done = 1500  # three chunks completed before the interruption
    kept = sum(1 for s, t in zip(split.src[done:], split.tgt[done:]) if s.strip() and t.strip())
    assert counting.encoded == 2 * kept  # only the lines after the last completed chunk were encoded
    assert contents(folder) == contents(store.folder)  # the same bytes as the uninterrupted build (chunk 700)
    assert list(resumed) == list(store) and not (folder / PROGRESS).exists()


def test_incomplete_or_missing_folder_is_refused(tmp_path):
    with pytest.raises(DataError, match="not a complete token store .no such folder"):
        TokenStore(tmp_path / "nothing")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "src.ids.npy").write_bytes(b"")
    with pytest.raises(DataError, match=r"half is not a complete token store .no meta\.json.*build_store"):
        TokenStore(tmp_path / "half")


def test_no_pair_left_and_unequal_sides(tokenizer, tmp_path):
    with pytest.raises(DataError, match="no usable"):
        build_store(tmp_path / "a", ["", "Ein Hund."], ["A dog.", " "], tokenizer, tokenizer, 100)
    with pytest.raises(DataError, match="target side has 2 lines but the source side has more"):
        build_store(tmp_path / "b", ["a", "b", "c"], ["x", "y"], tokenizer, tokenizer, 100)
    with pytest.raises(DataError, match="not a complete"):
        TokenStore(tmp_path / "a")


def test_cache_key_and_reuse(split, tokenizer, reference, tmp_path, caplog):
    files = [tmp_path / "train.de.gz", tmp_path / "train.en.gz"]
    for path, lines in zip(files, (split.src, split.tgt)):
        path.write_bytes(gzip.compress("".join(f"{line}\n" for line in lines).encode()))
    calls = []

    def lines():
        calls.append(1)
        return iter_lines(files[0]), iter_lines(files[1])

    key = store_key(files, tokenizer, tokenizer, MAX_LEN)
    assert len(key) == 16 and int(key, 16) >= 0
    with caplog.at_level(logging.INFO, logger="nmt.data.store"):
        first = cached_store(tmp_path / "cache", files, tokenizer, tokenizer, MAX_LEN, lines)
        second = cached_store(tmp_path / "cache", files, tokenizer, tokenizer, MAX_LEN, lines)
    assert calls == [1]  # the second call did not read (or tokenise) the text again
    assert first.folder == second.folder == tmp_path / "cache" / key and list(second) == reference
    assert "reusing the token store" in caplog.records[-1].getMessage()
    others = {store_key(files, tokenizer, tokenizer, MAX_LEN + 1),
              store_key(files[::-1], tokenizer, tokenizer, MAX_LEN),
              store_key(files, tokenizer.restricted(split.src[:200]), tokenizer, MAX_LEN),
              store_key(files, tokenizer, tokenizer, MAX_LEN, extra={"normalize": "moses"})}
    stat = files[1].stat()
    os.utime(files[1], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # touched, same bytes
    others.add(store_key(files, tokenizer, tokenizer, MAX_LEN))
    files[1].write_bytes(files[1].read_bytes() + gzip.compress(b"A cat.\n"))  # changed
    others.add(store_key(files, tokenizer, tokenizer, MAX_LEN))
    assert len(others) == 6 and key not in others
    with pytest.raises(FileNotFoundError, match="missing.de"):
        store_key([tmp_path / "missing.de"], tokenizer, tokenizer, MAX_LEN)


@pytest.mark.parametrize("name", ["bad.de", "bad.de.gz"])
def test_iter_lines_raises_what_read_lines_raises(tmp_path, name):
    data = "Zeile eins\nZeile zwei\nGr\u00fc\u00dfe\nvier\n".encode("latin-1")
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    with pytest.raises(TextFileError) as expected:
        read_lines(path)
    lines = iter_lines(path)
    assert [next(lines), next(lines)] == ["Zeile eins", "Zeile zwei"]  # the lines before the bad one first
    with pytest.raises(TextFileError) as got:
        next(lines)
    assert str(got.value) == str(expected.value)
    assert str(path) in str(got.value) and "line 3: byte 0xfc at column 3" in str(got.value)


def test_iter_lines_reads_as_it_goes(tmp_path, multi30k_dir):
    """Real data read line by line equals the whole file split at \\n; a pipe yields its first line before its
    writer has written the second (read_lines would wait for the end and deadlock here)."""
    whole = gzip.decompress((multi30k_dir / "train.de.gz").read_bytes()).decode("utf-8").split("\n")[:-1]
    assert list(iter_lines(multi30k_dir / "train.de.gz")) == whole
    with pytest.raises(FileNotFoundError, match="input=.*nothing.txt: file not found"):
        iter_lines(tmp_path / "nothing.txt", key="input")  # at the call, before any iteration
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    first_read = threading.Event()

    def writer():
        with open(fifo, "wb") as handle:
            handle.write("\ufeffeins\r\n".encode())
            handle.flush()
            first_read.wait(timeout=10)
            handle.write(b"zwei")

    thread = threading.Thread(target=writer)
    thread.start()
    lines = iter_lines(fifo)
    assert next(lines) == "eins"
    first_read.set()
    assert list(lines) == ["zwei"]
    thread.join(timeout=10)
