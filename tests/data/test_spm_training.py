"""Training the run's SentencePiece models (nmt.data.spm_training, nmt.training.subwords.prepare_tokenizers): a
text SentencePiece cannot learn from is refused naming the file and the setting to change, before anything is
written; tokenizer.user_defined_symbols, tokenizer.normalization and tokenizer.max_sentence_length are settable,
checked, and recorded in spm/settings.json, so that a change never reuses a stale model."""

import json
import logging
import os
import subprocess
import sys

import pytest

from nmt.data.stream import train_stream
from nmt.data.tokenizer import UNK_ID, Tokenizer, train_spm
from nmt.decoding.word_alignment import words_from_pieces
from nmt.training.subwords import prepare_tokenizers

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def long_line_files(small_splits, folder, per_line=100, short=0):
    """Real Multi30k text with ``per_line`` sentences joined into each line (a paragraph per line, over
    SentencePiece's 4192 bytes), and ``short`` ordinary one-sentence lines after them."""
    train, paths = small_splits["train"], []
    for side, name in (("src", "train.de"), ("tgt", "train.en")):
        lines = train.lines(side)
        text = [" ".join(lines[i:i + per_line]) for i in range(0, 1200, per_line)] + lines[1200:1200 + short]
        (folder / name).write_text("\n".join(text) + "\n", encoding="utf-8")
        paths.append(folder / name)
    return paths


def files_cfg(compose_cfg, paths, *overrides):
    src, tgt = paths
    return compose_cfg(["data=files", f"data.train_src={src}", f"data.train_tgt={tgt}", f"data.valid_src={src}",
                        f"data.valid_tgt={tgt}", "tokenizer.vocab_size=500", *overrides])


def test_a_corpus_of_too_long_lines_is_refused_naming_the_file_before_anything_is_written(
        small_splits, compose_cfg, tmp_path):
    """Every line longer than tokenizer.max_sentence_length: a ValueError naming the file, the longest line and the
    settings to change, and no spm/ folder (before: SentencePiece's '[!sentences_.empty()]' after spm/ was made).
    The limit is settable: raised above the longest line, the same corpus trains, and the limit is recorded."""
    paths = long_line_files(small_splits, tmp_path)
    cfg = files_cfg(compose_cfg, paths)
    with pytest.raises(ValueError, match=rf"{paths[0]}: all 12 lines with text are longer than "
                                         r"tokenizer\.max_sentence_length=4192 bytes .*the longest has (\d+)\).*"
                                         r"one sentence per line, or set tokenizer\.max_sentence_length=\1 or more"):
        prepare_tokenizers(cfg.tokenizer, train_stream(cfg.data), tmp_path / "run" / "spm")
    assert not (tmp_path / "run").exists()
    cfg = files_cfg(compose_cfg, paths, "tokenizer.max_sentence_length=20000")
    src_tok, _ = prepare_tokenizers(cfg.tokenizer, train_stream(cfg.data), tmp_path / "run" / "spm")
    assert src_tok.decode(src_tok.encode("Ein Mann läuft.")) == "Ein Mann läuft."
    assert json.loads((tmp_path / "run" / "spm" / "settings.json").read_text())["max_sentence_length"] == 20000


def test_some_too_long_lines_are_left_out_with_a_warning(small_splits, compose_cfg, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="nmt")
    paths = long_line_files(small_splits, tmp_path, short=300)
    cfg = files_cfg(compose_cfg, paths)
    tgt_tok = prepare_tokenizers(cfg.tokenizer, train_stream(cfg.data), tmp_path / "spm")[1]
    assert f"{paths[0]}: 12 of 312 lines are longer than tokenizer.max_sentence_length=4192 bytes" in caplog.text
    assert f"{paths[1]}: 12 of 312 lines are longer" in caplog.text
    assert tgt_tok.decode(tgt_tok.encode("Two dogs play.")) == "Two dogs play."


def test_train_py_with_too_long_lines_says_so_in_one_line_and_leaves_no_run_folder(small_splits, repo_root, tmp_path):
    """The user's view: one 'train.py: error:' line naming the file, and no half-made run folder under outputs/."""
    paths = long_line_files(small_splits, tmp_path)
    args = ["data=files", f"data.train_src={paths[0]}", f"data.train_tgt={paths[1]}", f"data.valid_src={paths[0]}",
            f"data.valid_tgt={paths[1]}", "device=cpu"]
    proc = subprocess.run([sys.executable, str(repo_root / "train.py"), *args], cwd=tmp_path, env=ENV,
                          capture_output=True, timeout=300, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err and "sentences_.empty" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"train.py: error: {paths[0]}: all 12 lines with text are longer")
    assert not (tmp_path / "outputs").exists()  # neither the run folder nor the outputs/ the command made


def test_a_vocabulary_too_small_or_too_large_is_said_with_the_size_to_use(small_splits, tmp_path, caplog):
    """Too small for the text's characters: a ValueError with the least size (before: SentencePiece's
    'Vocabulary size is smaller than required_chars'); too large: a smaller model and a warning (kept)."""
    english = small_splits["train"].tgt[:500]
    with pytest.raises(ValueError, match=r"tokenizer\.vocab_size=100 is too small for the English text: "
                                         r"SentencePiece needs at least (\d+) pieces.*tokenizer\.vocab_size=\1 or more"):
        train_spm(english, tmp_path / "small.model", vocab_size=100, source="the English text")
    assert not tmp_path.joinpath("small.model").exists()
    assert len(Tokenizer.load(train_spm(english, tmp_path / "large.model", vocab_size=50_000))) < 50_000


@pytest.mark.parametrize("override, message", [
    ("tokenizer.normalization=nfkd", (r"tokenizer\.normalization must be one of nmt_nfkc, nfkc, nmt_nfkc_cf, "
                                      r"nfkc_cf, identity .*got 'nfkd'")),
    ("tokenizer.user_defined_symbols=NUM", r"tokenizer\.user_defined_symbols must be a list, got 'NUM'"),
    ('tokenizer.user_defined_symbols=["<s>"]', r"'<s>' cannot be a symbol"),
    ('tokenizer.user_defined_symbols=["a b"]', r"'a b' cannot be a symbol: .*without spaces"),
    ('tokenizer.user_defined_symbols=["<0x41>"]', r"'<0x41>' cannot be a symbol"),
    ('tokenizer.user_defined_symbols=["<N>","<N>"]', r"lists a symbol twice"),
    ("tokenizer.max_sentence_length=0", r"tokenizer\.max_sentence_length must be a whole number of bytes >= 1"),
])
def test_bad_tokenizer_settings_are_refused_before_anything_is_written(small_splits, compose_cfg, tmp_path, override,
                                                                       message):
    cfg = compose_cfg([override])
    with pytest.raises(ValueError, match=message):
        prepare_tokenizers(cfg.tokenizer, small_splits["train"], tmp_path / "spm")
    assert not (tmp_path / "spm").exists()


def test_user_defined_symbols_stay_one_piece_and_survive_the_restricted_vocabulary(small_splits, compose_cfg,
                                                                                    tmp_path, caplog):
    """Placeholders the training text never holds (a warning says so): one piece each, kept by restrict_vocab,
    decoded as they are, one word each for the word alignment; recorded in settings.json and in the model."""
    caplog.set_level(logging.WARNING, logger="nmt")
    cfg = compose_cfg(['tokenizer.user_defined_symbols=["<NUM>","<URL>"]', "tokenizer.vocab_size=500"])
    train = small_splits["train"]
    src_tok, tgt_tok = prepare_tokenizers(cfg.tokenizer, train, tmp_path / "spm")
    assert tgt_tok.vocab is not None and not any("<NUM>" in line for line in train.tgt)
    for tok, text in ((tgt_tok, "A man buys <NUM> apples at <URL>."), (src_tok, "Ein Mann kauft <NUM><NUM> Äpfel")):
        ids = tok.encode(text)
        pieces = tok.pieces(ids)
        assert UNK_ID not in ids and pieces.count("<NUM>") in (1, 2) and all("NUM>" not in p or p == "<NUM>"
                                                                          for p in pieces), pieces
        assert tok.decode(ids) == text
        assert max(words_from_pieces(pieces)) + 1 == len(text.split())
    assert tgt_tok.piece_to_id("<URL>") != UNK_ID
    assert "tokenizer.user_defined_symbols <NUM> <URL> occur in no line of the training text" in caplog.text
    assert json.loads((tmp_path / "spm" / "settings.json").read_text())["user_defined_symbols"] == ["<NUM>", "<URL>"]
    again = Tokenizer(tgt_tok.model_proto, vocab=tgt_tok.vocab)  # as a checkpoint rebuilds it
    assert again.pieces(again.encode("<URL>")) == ["\u2581", "<URL>", "</s>"]


def test_identity_normalization_keeps_characters_that_nmt_nfkc_rewrites(small_splits, compose_cfg, tmp_path):
    """tokenizer.normalization=identity: a full-width letter, a ligature and a non-breaking space come back as they
    are (the default nmt_nfkc gives 'ABC', 'fi' and a space); the rule travels in the model's bytes."""
    text = "Ein Ｍann mit ﬁsch\u00a0Ａ"
    tokens = {}
    for rule in ("nmt_nfkc", "identity"):
        cfg = compose_cfg([f"tokenizer.normalization={rule}", "tokenizer.vocab_size=500"])
        tokens[rule] = prepare_tokenizers(cfg.tokenizer, small_splits["train"], tmp_path / rule)[0]
    default, identity = tokens["nmt_nfkc"], tokens["identity"]
    assert default.decode(default.encode(text)) == "Ein Mann mit fisch A"
    assert identity.decode(identity.encode(text)) == text
    assert Tokenizer(identity.model_proto).normalize(text) == text
    assert json.loads((tmp_path / "identity" / "settings.json").read_text())["normalization"] == "identity"


def test_a_change_of_these_settings_never_reuses_the_earlier_model(small_splits, compose_cfg, tmp_path):
    """spm/ of an earlier attempt in the same run folder: other symbols, normalization or length limit are refused,
    naming both values; a settings.json written before these settings existed counts as their defaults."""
    train, spm_dir = small_splits["train"], tmp_path / "spm"
    first = prepare_tokenizers(compose_cfg(["tokenizer.vocab_size=500"]).tokenizer, train, spm_dir)[0]
    for override, named in (('tokenizer.user_defined_symbols=["<NUM>"]',
                             r"user_defined_symbols=\[\] \(this run: \['<NUM>'\]\)"),
                            ("tokenizer.normalization=identity", r"normalization=nmt_nfkc \(this run: identity\)"),
                            ("tokenizer.max_sentence_length=9000", r"max_sentence_length=4192 \(this run: 9000\)")):
        with pytest.raises(ValueError, match=rf"earlier attempt in this run folder, trained with tokenizer\.{named}: "
                                             r"delete that spm/ folder"):
            prepare_tokenizers(compose_cfg(["tokenizer.vocab_size=500", override]).tokenizer, train, spm_dir)
    record = json.loads((spm_dir / "settings.json").read_text())
    for key in ("user_defined_symbols", "normalization", "max_sentence_length"):
        del record[key]
    (spm_dir / "settings.json").write_text(json.dumps(record) + "\n")
    again = prepare_tokenizers(compose_cfg(["tokenizer.vocab_size=500"]).tokenizer, train, spm_dir)[0]
    assert again.model_proto == first.model_proto
