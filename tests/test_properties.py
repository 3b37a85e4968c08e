"""Property-based tests (hypothesis): line preservation of translate.py for arbitrary Unicode input, word merging
of subword alignments, AER identities, and checkpoint averaging of copies. Example counts are kept small so
the module runs in well under a minute; the tiny model is trained once on a real slice of Multi30k."""

from __future__ import annotations

import importlib
import logging
import shutil
import string

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from nmt.analysis.aer import aer
from nmt.data.textio import TextFileError
from nmt.decoding.word_alignment import merge_to_words
from nmt.models import checkpoint
from nmt.training.average import average_checkpoints
from nmt.training.run import train

TINY = ["data.train_limit=400", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", "train.max_steps=3", "train.valid_every=3",
        "decode.beam_size=2", "eval.plots=0", "device=cpu"]
SLOW_OK = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                          HealthCheck.too_slow])

# any character a line can hold: every script, controls, format characters, \r, \u2028, ... but not the line
# end "\n" and no lone surrogates (not encodable as UTF-8; a file holding one is refused, see below)
LINE_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")
LINES = st.lists(st.one_of(st.text(LINE_CHARS, max_size=40), st.sampled_from(["", " ", "\t \u3000", "\r"]),
                           st.text(string.ascii_letters + " ", min_size=300, max_size=600)), max_size=8)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, compose_cfg):
    run_dir = tmp_path_factory.mktemp("tiny")
    train(compose_cfg(TINY), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def translate_script():
    """The translate command's module, nmt.translate (its ``run(cfg)``, without Hydra's command line)."""
    return importlib.import_module("nmt.translate")


@settings(SLOW_OK, max_examples=12)
@given(lines=LINES)
@example(lines=[])
@example(lines=["", "", ""])
@example(lines=["Ein Hund\u2028läuft\u0085.", "\x0b\x0c\x1c\x1d\x1e", "一只狗 🦜 कुत्ता", "\ufeffA\u200bB\r"])
def test_translate_writes_one_output_line_per_input_line(lines, tiny_run, translate_script, compose_cfg,
                                                         tmp_path):
    source, output = tmp_path / "input.txt", tmp_path / "output.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    cfg = compose_cfg([f"checkpoint={tiny_run}", f"input={source}", f"output={output}", "device=cpu",
                       "beam_size=2"], config_name="translate")
    translate_script.run(cfg)
    text = output.read_text(encoding="utf-8")
    assert text.count("\n") == len(lines) and (not lines or text.endswith("\n"))
    assert len(text.splitlines()) == len(lines)  # no other line break (\r, \u2028, \x85, ...) in a translation


def test_translate_asks_to_keep_freed_memory_by_default(tiny_run, translate_script, compose_cfg, tmp_path,
                                                        monkeypatch, caplog):
    """translate.py's allocator default is ``reuse`` (nmt.models.allocator; NMT_MALLOC=default overrides it),
    and its log says what was done."""
    asked = []
    monkeypatch.setattr(translate_script, "reuse_freed_memory",
                        lambda default="default": asked.append(default) or "malloc tuned as asked")
    source = tmp_path / "input.txt"
    source.write_text("Ein Hund.\n", encoding="utf-8")
    cfg = compose_cfg([f"checkpoint={tiny_run}", f"input={source}", f"output={tmp_path / 'out.txt'}",
                       "device=cpu"], config_name="translate")
    with caplog.at_level(logging.INFO):
        translate_script.run(cfg)
    assert asked == ["reuse"]
    assert "memory: malloc tuned as asked" in caplog.messages
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").count("\n") == 1


def test_a_lone_surrogate_in_the_input_is_refused_with_its_line(tiny_run, translate_script, compose_cfg,
                                                               tmp_path):
    source = tmp_path / "input.txt"
    source.write_bytes(b"Ein Hund\nA \xed\xa0\x80 B\n")  # U+D800 as UTF-8 bytes: not valid UTF-8
    cfg = compose_cfg([f"checkpoint={tiny_run}", f"input={source}", f"output={tmp_path / 'out.txt'}",
                       "device=cpu"], config_name="translate")
    with pytest.raises(TextFileError, match=r"line 2: byte 0xed at column 3"):
        translate_script.run(cfg)
    assert not (tmp_path / "out.txt").exists()


# a word: a few chunks of letters (any script); some chunks are written as byte pieces, as SentencePiece's byte
# fallback does for characters outside its vocabulary
CHUNK = st.text(st.characters(whitelist_categories=("Lu", "Ll", "Lo", "Nd")), min_size=1, max_size=4)
WORD = st.lists(st.tuples(CHUNK, st.booleans()), min_size=1, max_size=3)


def pieces_of(words: list[list[tuple[str, bool]]]) -> list[str]:
    """SentencePiece-style pieces of the words (▁ before each word; byte pieces for flagged chunks), then </s>."""
    pieces = []
    for word in words:
        for i, (chunk, as_bytes) in enumerate(word):
            if as_bytes:
                if i == 0:
                    pieces.append("\u2581")  # the bare boundary piece before a byte-encoded word start
                pieces.extend(f"<0x{b:02X}>" for b in chunk.encode("utf-8"))
            else:
                pieces.append(("\u2581" if i == 0 else "") + chunk)
    return [*pieces, "</s>"]


@settings(max_examples=60, deadline=None)
@given(src=st.lists(WORD, min_size=1, max_size=6), hyp=st.lists(WORD, min_size=1, max_size=6),
       seed=st.integers(0, 2**16), shift=st.sampled_from([0, 1]))
def test_word_merging_keeps_every_word_and_rows_summing_to_one(src, hyp, seed, shift):
    src_pieces, hyp_pieces = pieces_of(src), pieces_of(hyp)
    weights = np.random.default_rng(seed).random((len(hyp_pieces), len(src_pieces))).astype(np.float32)
    weights[:, -1] = 0.0  # no weight on the source </s>: the real words then carry every row's mass
    weights /= weights.sum(axis=1, keepdims=True)
    merged, src_words, hyp_words = merge_to_words(weights, src_pieces, hyp_pieces, shift=shift)
    assert src_words == ["".join(chunk for chunk, _ in word) for word in src]
    assert hyp_words == ["".join(chunk for chunk, _ in word) for word in hyp]
    assert merged.shape == (len(hyp), len(src))
    np.testing.assert_allclose(merged.sum(axis=1), 1.0, rtol=1e-5)


LINK = st.tuples(st.integers(0, 6), st.integers(0, 6))
LINK_SETS = st.lists(st.sets(LINK, max_size=12), min_size=1, max_size=5)


@settings(max_examples=100, deadline=None)
@given(sure=LINK_SETS, extra=st.data())
def test_aer_of_the_gold_against_itself_is_zero(sure, extra):
    possible = [s | extra.draw(st.sets(LINK, max_size=6)) for s in sure]
    assume(any(sure))
    assert aer(sure, possible, sure).aer == 0.0  # A = S: every hypothesis link is sure and possible
    result = aer(sure, possible, possible)  # A = P: precision 1, recall 1, so AER 0 too
    assert result.aer == 0.0 and result.precision == 1.0 and result.recall == 1.0


@settings(max_examples=100, deadline=None)
@given(a=LINK_SETS, b=st.data())
def test_aer_with_sure_links_only_is_symmetric(a, b):
    other = [b.draw(st.sets(LINK, max_size=12)) for _ in a]
    assume(any(a) or any(other))
    # with P = S, AER = 1 - 2|A ∩ S| / (|A| + |S|) (one minus the Dice coefficient): gold and hypothesis swap
    assert aer(a, None, other).aer == pytest.approx(aer(other, None, a).aer, abs=1e-12)


@settings(SLOW_OK, max_examples=4)
@given(k=st.integers(1, 5))
def test_averaging_k_copies_of_a_checkpoint_gives_that_checkpoint(k, tiny_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("copies")
    original = tiny_run / "checkpoints" / "best.pt"
    copies = [shutil.copy(original, folder / f"step_{i}.pt") for i in range(k)]
    averaged = average_checkpoints(copies, folder / "averaged.pt")
    weights = torch.load(original, weights_only=True)["model"]
    assert averaged["model"].keys() == weights.keys()
    assert all(torch.equal(averaged["model"][key], value) for key, value in weights.items())
    model, *_ = checkpoint.load(folder / "averaged.pt")
    assert all(torch.equal(model.state_dict()[key], value) for key, value in weights.items())
