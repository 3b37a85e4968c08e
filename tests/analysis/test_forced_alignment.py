"""Forced alignment (nmt.align) and the alignment extensions it uses (nmt.decoding.word_alignment: shift, symmetrize).

The tie between two paths: teacher-forcing a model's own greedy translation reproduces, matrix for matrix, the
attention saved when that translation was produced (the decoder's state at step t depends only on y_<t).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nmt.analysis.align import UsageError, main, members, parse_args, repeated_members
from nmt.analysis.forced import combined_links, force_align, links, sharpen, swapped_sides
from nmt.analysis.symmetrize import combine_directions, symmetrize
from nmt.data.textio import read_lines
from nmt.decoding.artifacts import save_alignments
from nmt.decoding.scoring import score
from nmt.decoding.translation import EMPTY, Translation, translate
from nmt.decoding.word_alignment import hard_alignment, merge_to_words, pharaoh_line
from nmt.models import checkpoint
from nmt.training.run import train

REPO = Path(__file__).resolve().parents[2]
TINY = ["data.train_limit=600", "data.eval_limit=4", "tokenizer.vocab_size=600", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=300", "train.max_steps=30", "train.valid_every=30",
        "decode=greedy", "eval.plots=0", "device=cpu", "train.max_epochs=null",
        # after 30 steps a tiny tied model still babbles ("on on on" with no word start), which re-encodes
        # to other pieces; an untied one already writes re-encodable hypotheses
        "model.tie_embeddings=false"]


def _trained(compose_cfg, tmp_path_factory, overrides):
    run_dir = tmp_path_factory.mktemp("align_run")
    train(compose_cfg([*TINY, *overrides]), run_dir)
    path = run_dir / "checkpoints" / "best.pt"
    model, cfg, src_tok, tgt_tok, _ = checkpoint.load(path)
    return path, model, cfg, src_tok, tgt_tok


@pytest.fixture(scope="module")
def trained(compose_cfg, tmp_path_factory, multi30k_dir):
    """A tiny de->en model (additive attention, Luong decoder) trained for a few steps in-process."""
    return _trained(compose_cfg, tmp_path_factory, [])


@pytest.fixture(scope="module")
def reverse(compose_cfg, tmp_path_factory, multi30k_dir):
    """The same tiny recipe trained en->de: the reverse direction for symmetrization."""
    return _trained(compose_cfg, tmp_path_factory, ["data.src_lang=en", "data.tgt_lang=de"])


@pytest.fixture(scope="module")
def sources(multi30k_dir):
    return read_lines(multi30k_dir / "val.de.gz")[:40]


@pytest.fixture(scope="module")
def references(multi30k_dir):
    return read_lines(multi30k_dir / "val.en.gz")[:40]


def _check_forced_equals_greedy(model, cfg, src_tok, tgt_tok, sources, tmp_path):
    translations = translate(model, src_tok, tgt_tok, sources, cfg.decode, beam_size=1)
    save_alignments(tmp_path / "greedy.alignments.npz", translations)
    saved = np.load(tmp_path / "greedy.alignments.npz")
    forced = force_align(model, src_tok, tgt_tok, sources, [t.text for t in translations], batch_size=7)
    same_ids = [i for i, t in enumerate(translations)
                if t.text.strip() and tgt_tok.pieces(tgt_tok.encode(t.text)) == t.hyp_pieces]
    # a tiny model may spell a word in other pieces than SentencePiece would (single characters are in every
    # restricted vocabulary): those lines have no greedy alignment to compare with
    assert len(same_ids) >= 0.5 * len(sources), f"only {len(same_ids)} hypotheses re-encode to their own ids"
    for i in same_ids:
        assert forced[i].hyp_pieces == translations[i].hyp_pieces
        assert forced[i].src_pieces == translations[i].src_pieces
        assert forced[i].alignment.dtype == np.float32
        np.testing.assert_allclose(forced[i].alignment, saved[str(i)], atol=1e-5, rtol=0, err_msg=f"line {i}")
        # greedy decoding uses length_penalty 0, so its score is the same log-probability
        assert forced[i].score == pytest.approx(translations[i].score, abs=1e-3)
    # the tolerance is meaningful: reading the rows one step off would differ by far more than 1e-5
    off_by_one = max(np.abs(forced[i].alignment[1:] - saved[str(i)][:-1]).max() for i in same_ids)
    assert off_by_one > 1e-4


def test_forced_alignment_of_greedy_translation_equals_saved_attention(trained, sources, tmp_path):
    _, model, cfg, src_tok, tgt_tok = trained
    _check_forced_equals_greedy(model, cfg, src_tok, tgt_tok, sources, tmp_path)


def test_forced_equals_greedy_for_local_p_with_bahdanau_decoder(compose_cfg, tmp_path_factory, sources, tmp_path):
    """local-p depends on each sentence's own source length: padding in a batch must not change it."""
    _, model, cfg, src_tok, tgt_tok = _trained(compose_cfg, tmp_path_factory,
                                               ["attention=local_p", "decoder.style=bahdanau"])
    _check_forced_equals_greedy(model, cfg, src_tok, tgt_tok, sources, tmp_path)


def test_shapes_batching_and_empty_lines(trained, sources, references):
    _, model, _, src_tok, tgt_tok = trained
    src = [sources[0], "", sources[1], "   ", sources[2], sources[3]]
    tgt = [references[0], references[1], "", references[3], references[2], references[3]]
    result = force_align(model, src_tok, tgt_tok, src, tgt, batch_size=2)
    assert len(result) == len(src)
    for i in (1, 2, 3):
        assert result[i] is EMPTY
    for i in (0, 4, 5):
        t = result[i]
        assert t.text == tgt[i]
        assert t.hyp_pieces == tgt_tok.pieces(tgt_tok.encode(tgt[i])) and t.hyp_pieces[-1] == "</s>"
        assert t.src_pieces == src_tok.pieces(src_tok.encode(src[i])) and t.src_pieces[-1] == "</s>"
        assert t.alignment.shape == (len(t.hyp_pieces), len(t.src_pieces))
        np.testing.assert_allclose(t.alignment.sum(axis=1), 1.0, atol=1e-5)  # global attention rows
        assert t.score < 0
    # batch composition and order do not matter
    alone = force_align(model, src_tok, tgt_tok, src[::-1], tgt[::-1], batch_size=64)[::-1]
    for a, b in zip(result, alone):
        np.testing.assert_allclose(a.alignment, b.alignment, atol=1e-5)
    with pytest.raises(ValueError, match="6 source lines but 5 target lines"):
        force_align(model, src_tok, tgt_tok, src, tgt[:5])


def test_cli_writes_one_pharaoh_line_per_input_line(trained, reverse, sources, references, tmp_path, capsys):
    path, reverse_path = trained[0], reverse[0]
    src_lines = [sources[0], "", sources[1], sources[2]]
    tgt_lines = [references[0], "", references[1], references[2]]
    (tmp_path / "in.de").write_text("".join(s + "\n" for s in src_lines), encoding="utf-8")
    (tmp_path / "in.en").write_text("".join(s + "\n" for s in tgt_lines), encoding="utf-8")
    common = [f"checkpoint={path}", f"src={tmp_path / 'in.de'}", f"tgt={tmp_path / 'in.en'}", "device=cpu"]
    assert main([*common, f"out={tmp_path / 'a.align'}", f"matrices={tmp_path / 'm.npz'}"]) == 0

    lines = (tmp_path / "a.align").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == len(src_lines)
    n_links = sum(len(line.split()) for line in lines)
    assert f"a.align: 4 sentence pairs, {n_links} links; matrices in" in capsys.readouterr().err
    assert lines[1] == ""
    for i in (0, 2, 3):
        n_src, n_tgt = len(src_lines[i].split()), len(tgt_lines[i].split())
        links = [tuple(map(int, link.split("-"))) for link in lines[i].split()]
        assert 0 < len(links) <= n_tgt  # argmax_target: at most one link per target word
        assert all(0 <= s < n_src and 0 <= t < n_tgt for s, t in links)

    npz = np.load(tmp_path / "m.npz")
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(npz.files, key=int) == [str(i) for i in range(len(src_lines))]
    assert [r["index"] for r in records] == list(range(len(src_lines)))
    for r in records:
        assert npz[str(r["index"])].shape == (len(r["hypothesis_tokens"]), len(r["source_tokens"]))
    assert records[1]["source_tokens"] == [] and npz["1"].shape == (0, 0)
    for i in (0, 2, 3):  # the Pharaoh line is the matrix's own argmax_target line
        assert lines[i] == pharaoh_line(npz[str(i)], records[i]["source_tokens"], records[i]["hypothesis_tokens"])

    # other extraction options and symmetrization with the reverse (en->de) model; a run folder works too
    outputs = {}
    for name, extra in {"shift": ["shift=1"], "threshold": ["method=threshold", "threshold=0.2"],
                        "inter": [f"reverse_checkpoint={reverse_path}", "method=intersection"],
                        "union": [f"reverse_checkpoint={reverse_path}", "method=union"],
                        "gdfa": [f"reverse_checkpoint={reverse_path.parent.parent}"]}.items():
        assert main([*common, f"out={tmp_path / name}.align", *extra]) == 0, name
        outputs[name] = (tmp_path / f"{name}.align").read_text(encoding="utf-8").split("\n")
        assert len(outputs[name]) - 1 == len(src_lines) and outputs[name][1] == ""
    for i in (0, 2, 3):
        inter, union, gdfa = (set(outputs[k][i].split()) for k in ("inter", "union", "gdfa"))
        assert inter <= gdfa <= union
        assert inter <= set(lines[i].split()) <= union  # the forward direction is one of the two
    capsys.readouterr()
    # a "reverse" model of the same direction is refused, naming both directions
    assert main([*common, f"out={tmp_path / 'same.align'}", f"reverse_checkpoint={path}"]) == 1
    assert "translates de->en, but checkpoint=" in capsys.readouterr().err

    # command-line errors: exit 2 with the valid keys / methods; file errors: exit 1
    assert main([*common, f"out={tmp_path / 'x.align'}", "beam=5"]) == 2
    assert "valid keys: checkpoint, src, tgt, out, matrices" in capsys.readouterr().err
    assert main([*common, f"out={tmp_path / 'x.align'}", "method=union"]) == 2
    assert "reverse_checkpoint" in capsys.readouterr().err
    (tmp_path / "short.en").write_text("one line\n", encoding="utf-8")
    assert main([*common[:2], f"tgt={tmp_path / 'short.en'}", f"out={tmp_path / 'x.align'}"]) == 1
    assert "has 4 lines but" in capsys.readouterr().err and not (tmp_path / "x.align").exists()


def test_swapped_source_and_target_files_are_named(trained, sources, references, tmp_path, capsys):
    """Without a gold file nothing else can tell: each side splits into fewer pieces per word with the other
    language's (restricted) vocabulary, so the command warns and still writes its links."""
    _, _, _, src_tok, tgt_tok = trained
    assert swapped_sides(src_tok, tgt_tok, sources, references, ("de", "en")) is None
    warning = swapped_sides(src_tok, tgt_tok, references, sources, ("de", "en"))
    assert warning.startswith("the source lines look like en and the target lines like de") and "src=" in warning
    assert swapped_sides(src_tok, src_tok, references, sources, ("de", "en")) is None  # one vocabulary: no guess
    (tmp_path / "in.de").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "in.en").write_text("".join(s + "\n" for s in references), encoding="utf-8")
    for src, tgt, swapped in (("in.de", "in.en", False), ("in.en", "in.de", True)):
        assert main([f"checkpoint={trained[0]}", f"src={tmp_path / src}", f"tgt={tmp_path / tgt}", "device=cpu",
                     f"out={tmp_path / 'out.align'}"]) == 0
        err = capsys.readouterr().err
        assert ("warning: the source lines look like en" in err) == swapped, err
        assert len((tmp_path / "out.align").read_text(encoding="utf-8").splitlines()) == len(sources)


def test_cli_entry_point_reports_usage(repo_root):
    proc = subprocess.run([sys.executable, "-m", "nmt.align", "checkpoint=x", "src=a", "tgt=b"], cwd=repo_root,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "missing out=" in proc.stderr and "usage: python -m nmt.align" in proc.stderr


def test_the_usage_names_the_installed_command_when_it_ran(monkeypatch, capsys):
    from nmt.analysis.align import main

    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/nmt-align"])
    assert main(["checkpoint=x", "src=a", "tgt=b"]) == 2
    err = capsys.readouterr().err
    assert "usage: nmt-align checkpoint=PATH" in err and "python -m" not in err


def test_settings_that_the_method_does_not_use_are_named_as_ignored():
    base = ["checkpoint=c", "src=s", "tgt=t", "out=o"]
    assert parse_args(base)["ignored"] == []
    assert parse_args([*base, "method=threshold", "threshold=0.2"])["ignored"] == []
    assert parse_args([*base, "reverse_checkpoint=r", "direction_method=threshold", "threshold=0.2"])["ignored"] == []
    assert parse_args([*base, "method=mutual_argmax", "threshold=0.2"])["ignored"] == [
        "threshold=0.2 is ignored: only method=threshold uses it (here mutual_argmax)"]
    ignored = parse_args([*base, "reverse_checkpoint=r", "combine=product", "direction_method=threshold",
                          "gold_one_based=true"])["ignored"]
    assert [line.split(" is ignored")[0] for line in ignored] == ["direction_method=threshold", "gold_one_based=true"]
    with pytest.raises(UsageError, match="unknown key 'treshold'; did you mean threshold"):
        parse_args([*base, "treshold=0.2"])


def test_parse_args_defaults_and_errors():
    opts = parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o"])
    assert opts["method"] == "argmax_target" and opts["shift"] == 0 and opts["threshold"] == 0.3
    opts = parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o", "reverse_checkpoint=r"])
    assert opts["method"] == "grow-diag-final-and" and opts["direction_method"] == "argmax_target"
    assert opts["threads"] is None  # threads= as train.py and translate.py take it
    assert parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o", "threads=1"])["threads"] == 1
    for bad, message in [(["out"], "not key=value"), (["shift=x"], "integers"), (["shift=-1"], "shift >= 0"),
                         (["threads=0"], "threads=0 must be a whole number of CPU threads >= 1"),
                         (["threads=two"], "threads integers"),
                         (["method=best"], "argmax_target, argmax_source, threshold"),
                         (["reverse_checkpoint=r", "method=threshold"], "intersection, union"),
                         (["reverse_checkpoint=r", "method=mutual_argmax"],
                          ("one-direction method: with reverse_checkpoint add combine=product .* "
                          "direction_method=mutual_argmax")),
                         (["matrices=m.txt"], ".npz"), (["out=o2"], "twice"),
                         (["reverse_checkpoint=r", "combine=product", "matrices=m"], "must end in .npz"),
                         (["--shift", "1"], "settings are written key=value, here shift=..."),
                         (["method=threshold", "threshold=0"], r"give an attention mass in \(0, 1\]"),
                         (["threshold=1.5"], "threshold=1.5: give an attention mass")]:
        with pytest.raises(UsageError, match=message):
            parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o", *bad])


def test_outputs_that_would_replace_a_file_being_read_are_refused():
    for args, message in [(["out=s"], "out=s would write s, which is src=s"),  # the source text
                          (["out=o", "matrices=m.npz", "gold=m.jsonl"], "matrices=m.npz would write m.jsonl"),
                          (["out=m.jsonl", "matrices=m.npz"], (r"would write one file \(m.jsonl; matrices=FILE.npz "
                                                                  "also writes FILE.jsonl")),
                          (["out=c"], "which is checkpoint=c")]:
        with pytest.raises(UsageError, match=message):
            parse_args(["checkpoint=c", "src=s", "tgt=t", *args])


# ------------------------------------------------------------------------------------------ symmetrize, by hand

# Intersection (0,0) (1,1) (2,2). Union links beyond it, each testing one rule:
#   (0,1) forward: next to (0,0)/(1,1) but both its words are aligned -> never added (only by union)
#   (2,3) backward: next to (2,2), source 2 aligned, target 3 not -> grow-diag adds it ("or")
#   (3,3) backward: diagonal to (2,2), both words new -> grow-diag adds it; (4,4) forward: then diagonal to
#         (3,3) -> added in the same growing
#   (7,6) forward: far from everything, both words unaligned -> final-and adds it
#   (6,0) backward: far from everything, target 0 aligned -> final adds it, final-and does not
FORWARD = {(0, 0), (1, 1), (2, 2), (0, 1), (4, 4), (7, 6)}
BACKWARD = {(0, 0), (1, 1), (2, 2), (2, 3), (3, 3), (6, 0)}


@pytest.mark.parametrize("method, expected", [
    ("intersection", [(0, 0), (1, 1), (2, 2)]),
    ("union", [(0, 0), (0, 1), (1, 1), (2, 2), (2, 3), (3, 3), (4, 4), (6, 0), (7, 6)]),
    ("grow-diag", [(0, 0), (1, 1), (2, 2), (2, 3), (3, 3), (4, 4)]),
    ("grow-diag-final-and", [(0, 0), (1, 1), (2, 2), (2, 3), (3, 3), (4, 4), (7, 6)]),
    ("grow-diag-final", [(0, 0), (1, 1), (2, 2), (2, 3), (3, 3), (4, 4), (6, 0), (7, 6)]),
])
def test_symmetrize_by_hand(method, expected):
    assert symmetrize(FORWARD, BACKWARD, method) == expected
    assert symmetrize(list(FORWARD), list(BACKWARD), method) == expected


def test_symmetrize_small_cases():
    # the textbook case: one direction 1-to-many, the other many-to-1; growing fills the block
    forward = {(0, 0), (1, 1), (1, 2)}
    backward = {(0, 0), (1, 1), (2, 1)}
    assert symmetrize(forward, backward) == [(0, 0), (1, 1), (1, 2), (2, 1)]
    assert symmetrize(set(), set()) == []
    assert symmetrize({(0, 0)}, set(), "intersection") == []
    assert symmetrize({(0, 0)}, set()) == [(0, 0)]  # final-and: both words unaligned
    with pytest.raises(ValueError, match="intersection, union, grow-diag, grow-diag-final, grow-diag-final-and"):
        symmetrize(forward, backward, "gdfa")


# ------------------------------------------------------------------------------------------ shift, by hand

SRC = ["▁Ein", "▁Mann", "s", "</s>"]
HYP = ["▁A", "▁m", "an", "</s>"]
# [hyp_len=4, src_len=4]: row 0 looks at "Mann", row 1 at "Ein", rows 2-3 at "Mann"(+"s")
MATRIX = np.array([[0.1, 0.8, 0.0, 0.1],
                   [0.8, 0.1, 0.0, 0.1],
                   [0.2, 0.1, 0.6, 0.1],
                   [0.0, 0.6, 0.2, 0.2]], dtype=np.float32)


def test_shift_reads_the_next_row():
    # shift=0: "A" = row 0 -> [0.1, 0.8]; "man" = mean(rows 1, 2) = mean([0.8, 0.1], [0.2, 0.7]) = [0.5, 0.4]
    words, _, _ = merge_to_words(MATRIX, SRC, HYP)
    np.testing.assert_allclose(words, [[0.1, 0.8], [0.5, 0.4]], atol=1e-6)
    assert pharaoh_line(MATRIX, SRC, HYP) == "0-1 1-0"
    # shift=1: "A" = row 1 -> [0.8, 0.1]; "m" = row 2, "an" = row 3 (the </s> row) -> [0.1, 0.75]
    words, src_words, hyp_words = merge_to_words(MATRIX, SRC, HYP, shift=1)
    np.testing.assert_allclose(words, [[0.8, 0.1], [0.1, 0.75]], atol=1e-6)
    assert (src_words, hyp_words) == (["Ein", "Manns"], ["A", "man"])
    assert pharaoh_line(MATRIX, SRC, HYP, shift=1) == "0-0 1-1"
    assert pharaoh_line(MATRIX, SRC, HYP, method="argmax_source", shift=1) == "0-0 1-1"


def test_shift_without_eos_row_and_errors():
    # no </s> row: the last word has no row left, gets a zero row, and no argmax link
    words, _, _ = merge_to_words(MATRIX[:2], SRC, HYP[:2], shift=1)
    np.testing.assert_allclose(words, [[0.8, 0.1], [0.0, 0.0]], atol=1e-6)
    assert pharaoh_line(MATRIX[:2], SRC, HYP[:2], shift=1) == "0-0"
    # "man" keeps the one row it still has (row 3 for "m"; "an" has none)
    words, _, _ = merge_to_words(MATRIX, SRC, HYP, shift=2)
    np.testing.assert_allclose(words, [[0.2, 0.7], [0.0, 0.8]], atol=1e-6)
    assert pharaoh_line(np.zeros((0, 0), np.float32), [], [], shift=1) == ""
    with pytest.raises(ValueError, match="shift must be >= 0"):
        merge_to_words(MATRIX, SRC, HYP, shift=-1)


# ------------------------------------------------------------------------------------------ temperature

def test_sharpen_equals_softmax_of_scaled_energies():
    energies = np.random.default_rng(0).normal(size=(5, 7)) * 3

    def softmax(e):
        e = np.exp(e - e.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    weights = softmax(energies)
    np.testing.assert_allclose(sharpen(weights, 1.0), weights, atol=1e-6)
    for temperature in (0.25, 0.5, 2.0):
        np.testing.assert_allclose(sharpen(weights, temperature), softmax(energies / temperature), atol=1e-5)
    # low temperature -> one-hot on each row's argmax; zero cells (outside a local-p window) stay zero
    cold = sharpen(weights, 0.01)
    np.testing.assert_allclose(cold, np.eye(7)[weights.argmax(axis=1)], atol=1e-4)
    windowed = np.array([[0.0, 0.3, 0.7], [0.0, 0.0, 0.0]], np.float32)
    np.testing.assert_allclose(sharpen(windowed, 0.5), [[0.0, 0.09 / 0.58, 0.49 / 0.58], [0.0, 0.0, 0.0]],
                               atol=1e-6)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sharpen(weights, 0.0)


def test_temperature_changes_merged_words_and_threshold_links():
    # "Manns" = 2 pieces: at T=1 their sum (0.6) beats "Ein" (0.4); sharpened, the single piece 0.4 wins
    matrix = np.array([[0.4, 0.3, 0.3, 0.0]], np.float32)
    translation = Translation("A", SRC, ["▁A"], matrix, 0.0)
    assert links(translation) == [(1, 0)]
    assert links(translation, temperature=0.2) == [(0, 0)]
    assert links(translation, "threshold", threshold=0.5) == [(1, 0)]
    assert links(translation, "threshold", threshold=0.5, temperature=0.2) == [(0, 0)]


def test_parse_args_temperature_and_lowercase():
    opts = parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o", "temperature=0.5", "lowercase=true"])
    assert opts["temperature"] == 0.5 and opts["lowercase"] == "true"
    assert parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o"])["lowercase"] == "auto"
    for bad, message in [(["temperature=0"], "temperature > 0"), (["temperature=x"], "numbers"),
                         (["lowercase=yes"], "auto .*true, false")]:
        with pytest.raises(UsageError, match=message):
            parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o", *bad])


def test_lowercase_auto_follows_the_checkpoint(trained, sources, references, tmp_path):
    """A model trained on raw text aligns the lines as given; ``lowercase=true`` changes what it sees."""
    path = trained[0]
    (tmp_path / "src.txt").write_text("".join(s.upper() + "\n" for s in sources[:8]), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(r.upper() + "\n" for r in references[:8]), encoding="utf-8")
    outputs = {}
    for lowercase in ("auto", "false", "true"):
        out = tmp_path / f"{lowercase}.align"
        assert main([f"checkpoint={path}", f"src={tmp_path / 'src.txt'}", f"tgt={tmp_path / 'tgt.txt'}",
                     f"out={out}", f"lowercase={lowercase}", f"matrices={tmp_path / lowercase}.npz"]) == 0
        outputs[lowercase] = np.load(tmp_path / f"{lowercase}.npz")
    assert all(np.array_equal(outputs["auto"][k], outputs["false"][k]) for k in outputs["auto"].files)
    assert any(outputs["true"][k].shape != outputs["false"][k].shape for k in outputs["true"].files)


def test_lowercase_auto_for_a_model_trained_on_lowercased_text(compose_cfg, tmp_path_factory, sources, tmp_path):
    path = _trained(compose_cfg, tmp_path_factory, ["data.normalize.lowercase=true", "train.max_steps=5"])[0]
    # the run's scores say they compare lowercased text (a case:mixed signature alone would not)
    scores = json.loads((path.parent.parent / "eval" / "test.scores.json").read_text(encoding="utf-8"))
    assert scores["references_normalized"] == {"lowercase": True}
    (tmp_path / "src.txt").write_text("".join(s.upper() + "\n" for s in sources[:6]), encoding="utf-8")
    matrices = {}
    for lowercase in ("auto", "true", "false"):
        assert main([f"checkpoint={path}", f"src={tmp_path / 'src.txt'}", f"tgt={tmp_path / 'src.txt'}",
                     f"out={tmp_path / lowercase}.align", f"lowercase={lowercase}",
                     f"matrices={tmp_path / lowercase}.npz"]) == 0
        matrices[lowercase] = np.load(tmp_path / f"{lowercase}.npz")
    assert all(np.array_equal(matrices["auto"][k], matrices["true"][k]) for k in matrices["auto"].files)
    assert any(matrices["auto"][k].shape != matrices["false"][k].shape for k in matrices["auto"].files)
    # translate.py normalizes its input like the model's training data: UPPER and lower case translate alike
    (tmp_path / "lower.txt").write_text("".join(s.lower() + "\n" for s in sources[:6]), encoding="utf-8")
    outputs = []
    for name in ("src", "lower"):
        subprocess.run([sys.executable, str(REPO / "translate.py"), f"checkpoint={path}",
                        f"input={tmp_path / name}.txt", f"output={tmp_path / name}.hyp", "beam_size=1",
                        "device=cpu", "threads=1"], check=True, capture_output=True, timeout=300, cwd=REPO)
        outputs.append((tmp_path / f"{name}.hyp").read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 6
    # ... and scores against references normalized the same way (as training's final evaluation does): the
    # hypotheses themselves, upper-cased, score as the hypotheses do against themselves
    assert any(c.isalpha() for c in outputs[0])
    (tmp_path / "upper.ref").write_text(outputs[0].upper(), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(REPO / "translate.py"), f"checkpoint={path}",
                           f"input={tmp_path / 'lower.txt'}", f"output={tmp_path / 'again.hyp'}", "beam_size=1",
                           f"reference={tmp_path / 'upper.ref'}", "device=cpu", "threads=1"],
                          check=True, capture_output=True, text=True, timeout=300, cwd=REPO)
    scores = json.loads(proc.stderr[proc.stderr.index("{"):])
    assert scores["bleu"] == score(outputs[0].splitlines(), outputs[0].splitlines())["bleu"]
    assert scores["references_normalized"]["lowercase"] is True


# ------------------------------------------------------------------------------------------ soft symmetrization

def test_combine_directions_by_hand():
    forward = np.array([[0.8, 0.2], [0.5, 0.5]], np.float32)  # [tgt_words=2, src_words=2]
    backward = np.array([[0.9, 0.1], [0.2, 0.8]], np.float32)  # [src_words, tgt_words]: src 1 -> tgt 1
    np.testing.assert_allclose(combine_directions(forward, backward, "mean"), [[0.85, 0.2], [0.3, 0.65]])
    np.testing.assert_allclose(combine_directions(forward, backward, "product"),
                               np.sqrt([[0.72, 0.04], [0.05, 0.4]]), atol=1e-6)
    # the forward model alone cannot decide target word 1 (a tie -> argmax picks source 0); the reverse model does
    assert hard_alignment(forward) == [(0, 0), (0, 1)]
    assert hard_alignment(combine_directions(forward, backward)) == [(0, 0), (1, 1)]
    with pytest.raises(ValueError, match="do not describe the same sentence pair"):
        combine_directions(forward, np.ones((3, 2)))
    with pytest.raises(ValueError, match="product, mean"):
        combine_directions(forward, backward, "max")


def test_combined_links_and_cli_keys():
    fwd = Translation("A man", SRC, HYP, MATRIX, 0.0)  # en "A man" <- de "Ein Manns"
    bwd = Translation("Ein Manns", HYP, SRC, MATRIX.T.copy(), 0.0)
    # a reverse model that mirrors the forward one agrees with it: the combination gives the forward links
    assert combined_links(fwd, bwd, "mean", "argmax_target") == links(fwd) == [(0, 1), (1, 0)]
    assert combined_links(fwd, Translation("", [], [], np.zeros((0, 0), np.float32), 0.0)) == []
    opts = parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o", "reverse_checkpoint=r", "combine=product"])
    assert opts["combine"] == "product" and opts["method"] == "argmax_target"
    for bad, message in [(["combine=product"], "needs reverse_checkpoint"),
                         (["reverse_checkpoint=r", "combine=max"], "valid values are product, mean"),
                         (["reverse_checkpoint=r", "combine=mean", "method=union"], "combined matrix")]:
        with pytest.raises(UsageError, match=message):
            parse_args(["checkpoint=c", "src=s", "tgt=t", "out=o", *bad])


# ------------------------------------------------------------------------------------------ ensembles of aligners

def test_an_ensemble_of_aligners_averages_its_members_attention(compose_cfg, tmp_path_factory, trained, reverse,
                                                                sources, references, tmp_path, capsys):
    """checkpoint=[A,B]: each member aligns the text, the matrices are averaged, links come from the mean."""
    other = _trained(compose_cfg, tmp_path_factory, ["seed=2"])  # same data and subwords, other weights
    (tmp_path / "in.de").write_text("".join(s + "\n" for s in sources[:8]), encoding="utf-8")
    (tmp_path / "in.en").write_text("".join(s + "\n" for s in references[:8]), encoding="utf-8")
    common = [f"src={tmp_path / 'in.de'}", f"tgt={tmp_path / 'in.en'}", "device=cpu"]
    assert main([f"checkpoint=[{trained[0]}, {other[0]}]", *common, f"out={tmp_path / 'e.align'}",
                 f"matrices={tmp_path / 'e.npz'}"]) == 0
    each = [force_align(m, tok_s, tok_t, sources[:8], references[:8]) for _, m, _, tok_s, tok_t in (trained, other)]
    saved, written = np.load(tmp_path / "e.npz"), (tmp_path / "e.align").read_text(encoding="utf-8").splitlines()
    differ = 0
    for i, (a, b) in enumerate(zip(*each)):
        mean = (a.alignment + b.alignment) / 2
        np.testing.assert_allclose(saved[str(i)], mean, atol=1e-6)
        assert written[i] == pharaoh_line(mean, a.src_pieces, a.hyp_pieces)
        differ += pharaoh_line(a.alignment, a.src_pieces, a.hyp_pieces) != written[i]
    assert differ > 0  # the second member changed some links: it was not ignored
    said = capsys.readouterr().err
    assert f"wrote {tmp_path / 'e.align'}: 8 sentence pairs, " in said
    assert " links by an ensemble of 2 models; matrices in " in said
    # a member of the other direction, and head= on an ensemble, are refused by name
    assert main([f"checkpoint=[{trained[0]},{reverse[0]}]", *common, f"out={tmp_path / 'x.align'}"]) == 1
    said = capsys.readouterr().err
    assert "an ensemble needs one direction" in said and f"checkpoint=[{trained[0]},{reverse[0]}]: " in said
    assert main([f"checkpoint={trained[0]}", f"reverse_checkpoint=[{reverse[0]},{trained[0]}]", *common,
                 f"out={tmp_path / 'x.align'}"]) == 1
    said = capsys.readouterr().err
    assert "an ensemble needs one direction" in said and f"reverse_checkpoint=[{reverse[0]},{trained[0]}]: " in said
    files = ["src=s", "tgt=t", "out=o"]
    for bad, message in [(["checkpoint=[a,b]", "head=0"], "ensemble use head=mean"),
                         (["checkpoint=[a,"], "the list is not closed"), (["checkpoint=[a,]"], "no empty member"),
                         (["checkpoint=['a,b]"], "quotes closed"),
                         (["checkpoint=[a,", "b]"], "'b]' is the rest of checkpoint=: write the list without spaces")]:
        with pytest.raises(UsageError, match=message):
            parse_args([*bad, *files])
    opts = parse_args(["checkpoint=[a, 'r,x']", *files, "reverse_checkpoint=['c d',d]", "combine=product"])
    assert (opts["checkpoints"], opts["reverse_checkpoints"]) == (["a", "r,x"], ["c d", "d"])
    assert parse_args(["checkpoint='runs/lr=1'", *files])["checkpoints"] == ["runs/lr=1"]  # quoted as for Hydra
    assert members({"checkpoints": ["a", "b"], "reverse_checkpoints": ["c", "d"]}) == \
        " by an ensemble of 2 models and an ensemble of 2 reverse models"
    assert members({"checkpoints": ["a"], "reverse_checkpoints": ["c", "d"]}) == \
        " by one model and an ensemble of 2 reverse models"
    assert members({"checkpoints": ["a", "b"], "reverse_checkpoints": []}) == " by an ensemble of 2 models"
    assert members({"checkpoints": ["a"], "reverse_checkpoints": ["c"]}) == ""
    twice = {"checkpoints": ["runs/a", "runs/b", "./runs/a/"], "reverse_checkpoints": ["r"]}
    assert repeated_members(twice) == ["checkpoint= names runs/a 2 times: it weighs 2x in the average"]
