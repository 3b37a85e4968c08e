"""Per-head alignments of multi-head attention (nmt.analysis.heads, ``nmt.align head=``): choosing a head on gold
links by hand, the heads file beside the alignments (written, read back, refused when it belongs to other
matrices), and a tiny trained multi-head model through search, forced alignment, the evaluation and the command."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.analysis.aer import aer
from nmt.analysis.align import UsageError, main, parse_args
from nmt.analysis.forced import force_align, links
from nmt.analysis.gold import AlignmentWarning, read_pharaoh
from nmt.analysis.heads import (
    best_head,
    halves,
    head_aer,
    head_count,
    load_saved,
    parse_head,
    read_heads,
    select_head,
    with_head,
)
from nmt.data.textio import read_lines
from nmt.data.tokenizer import BOS_ID, PAD_ID
from nmt.decoding.artifacts import heads_path, save_alignments
from nmt.decoding.translation import EMPTY, Translation, translate
from nmt.decoding.word_alignment import to_pharaoh
from nmt.models import checkpoint
from nmt.training.run import train

SRC = ["▁a", "▁b", "▁c", "</s>"]
HYP = ["▁x", "▁y", "▁z", "</s>"]


def one_hot(order: list[int]) -> np.ndarray:
    """A ``[4, 4]`` alignment: target word j -> source word ``order[j]``, ``</s>`` -> ``</s>``."""
    matrix = np.zeros((4, 4), np.float32)
    for target, source in enumerate([*order, 3]):
        matrix[target, source] = 1.0
    return matrix


DIAGONAL, SHIFTED = one_hot([0, 1, 2]), one_hot([1, 2, 0])  # the gold links / none of them
UNIFORM = np.full((4, 4), 0.25, np.float32)  # argmax_target links every target word to source word 0


def line(*heads: np.ndarray) -> Translation:
    stack = np.stack(heads)
    return Translation("x y z", SRC, HYP, stack.mean(axis=0), 0.0, heads=stack)


# Head 1 is right on the first three lines (the first half, which chooses) and wrong on the last two; head 2 is
# right on four lines of five, the best over all lines, but wrong on line 2: the first half must choose head 1.
LINES = [line(UNIFORM, DIAGONAL, DIAGONAL), line(UNIFORM, DIAGONAL, DIAGONAL), line(UNIFORM, DIAGONAL, SHIFTED),
         line(UNIFORM, SHIFTED, DIAGONAL), line(UNIFORM, SHIFTED, DIAGONAL)]


@pytest.fixture()
def gold(tmp_path):
    path = tmp_path / "gold.pharaoh"
    path.write_text("0-0 1-1 2-2\n" * len(LINES), encoding="utf-8")
    return read_pharaoh(path)


def test_best_head_is_chosen_on_the_first_half_and_scored_on_the_rest(gold):
    assert halves(5) == (range(3), range(3, 5)) and halves(4) == (range(2), range(2, 4))
    choice = best_head(LINES, gold)
    assert choice.head == 1
    assert [r.aer for r in choice.per_head] == pytest.approx([2 / 3, 0.0, 1 / 3])  # on lines 0-2
    assert choice.selection.aer == 0.0 and choice.chosen_on == range(3)
    assert choice.held_out.aer == 1.0 and choice.held_out_lines == range(3, 5)  # head 1 is wrong there
    # over all lines head 2 would win: the choice really uses the first half only
    every_line = range(5)
    assert head_aer(LINES, gold, 2, every_line).aer < head_aer(LINES, gold, 1, every_line).aer
    assert head_aer(LINES, gold, "mean", every_line) == aer(gold.sure, gold.possible, [links(t) for t in LINES])


def test_select_and_refuse_heads(gold):
    assert parse_head("mean") == "mean" and parse_head("best") == "best" and parse_head("2") == 2
    for bad in ("-1", "two", "", "1.5"):
        with pytest.raises(ValueError, match="0-based head index"):
            parse_head(bad)
    assert head_count(LINES) == 3 and head_count([EMPTY]) == 0
    assert select_head(LINES[2], "mean") is LINES[2].alignment
    np.testing.assert_array_equal(select_head(LINES[2], 2), SHIFTED)
    chosen = with_head([*LINES, EMPTY], 1)
    assert [links(t) for t in chosen[:3]] == [[(0, 0), (1, 1), (2, 2)]] * 3
    assert chosen[5].alignment.shape == (0, 0) and chosen[0].heads is LINES[0].heads
    with pytest.raises(ValueError, match="has 3 heads, numbered 0..2"):
        select_head(LINES[0], 3)
    with pytest.raises(ValueError, match="one attention head"):
        select_head(Translation("x", SRC, HYP, DIAGONAL, 0.0), 0)
    with pytest.raises(ValueError, match="use head=mean"):
        best_head([Translation("x", SRC, HYP, DIAGONAL, 0.0)] * 5, gold)
    with pytest.raises(ValueError, match="at least 2 gold lines"):
        best_head(LINES[:1], first_lines(gold, 1))


def first_lines(gold, n):
    """The first ``n`` lines of a gold set."""
    return type(gold)(gold.sure[:n], gold.possible[:n], gold.path)


def test_heads_file_round_trip(tmp_path):
    translations = [*LINES[:3], EMPTY, LINES[3]]
    npz = tmp_path / "test.alignments.npz"
    save_alignments(npz, translations)
    assert heads_path(npz) == tmp_path / "test.alignments.heads.npz" and heads_path(npz).is_file()
    with np.load(npz) as combined:  # the combined file keeps its format: one [T, S] matrix per line
        assert sorted(combined.files, key=int) == ["0", "1", "2", "3", "4"]
        assert combined["2"].shape == (4, 4) and combined["3"].shape == (0, 0)
        np.testing.assert_array_equal(combined["2"], LINES[2].alignment)
    heads = read_heads(npz)
    assert sorted(heads) == [0, 1, 2, 3, 4]
    assert heads[3].shape == (3, 0, 0) and heads[4].dtype == np.float32
    for i, t in enumerate(translations):
        if t.heads is not None:
            np.testing.assert_array_equal(heads[i], t.heads)
    loaded = load_saved(npz)
    assert [t.hyp_pieces for t in loaded] == [t.hyp_pieces for t in translations]
    np.testing.assert_array_equal(loaded[2].heads, LINES[2].heads)
    np.testing.assert_array_equal(select_head(loaded[4], 1), SHIFTED)

    # a single-head model writes no heads file; a heads file left from another model is refused
    single = tmp_path / "single.alignments.npz"
    save_alignments(single, [Translation("x", SRC, HYP, DIAGONAL, 0.0)])
    assert not heads_path(single).exists() and load_saved(single)[0].heads is None
    with pytest.raises(FileNotFoundError, match="only a multi-head attention model"):
        read_heads(single)
    heads_path(single).write_bytes(heads_path(npz).read_bytes())
    with pytest.raises(ValueError, match="does not match .*single.alignments.npz at line 0"):
        read_heads(single)


def test_parse_args_head_and_gold():
    base = ["checkpoint=c", "src=s", "tgt=t", "out=o"]
    opts = parse_args(base)
    assert opts["head"] == "mean" and opts["gold"] is None and opts["gold_one_based"] is False
    opts = parse_args([*base, "head=best", "gold=g", "gold_one_based=true"])
    assert opts["head"] == "best" and opts["gold"] == "g" and opts["gold_one_based"] is True
    assert parse_args([*base, "head=3"])["head"] == 3
    for bad, message in [(["head=best"], "add gold=FILE"), (["head=first"], "0-based head index"),
                         (["head=1", "reverse_checkpoint=r"], "with reverse_checkpoint or an ensemble use head=mean"),
                         (["gold_one_based=yes"], "valid: true, false")]:
        with pytest.raises(UsageError, match=message):
            parse_args([*base, *bad])


# ---------------------------------------------------------------- a tiny trained multi-head model

TINY = ["data.train_limit=600", "data.eval_limit=4", "tokenizer.vocab_size=600", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=300", "train.max_steps=30", "train.valid_every=30",
        "decode=greedy", "eval.plots=0", "device=cpu", "train.max_epochs=null", "model.tie_embeddings=false",
        "attention=multihead"]


@pytest.fixture(scope="module")
def trained(compose_cfg, tmp_path_factory, multi30k_dir):
    """A tiny de->en model with 4-head dot attention (Luong decoder), trained for 30 steps in-process."""
    run_dir = tmp_path_factory.mktemp("multihead_run")
    train(compose_cfg(TINY), run_dir)
    model, cfg, src_tok, tgt_tok, _ = checkpoint.load(run_dir / "checkpoints" / "best.pt")
    return run_dir, model, cfg, src_tok, tgt_tok


@pytest.fixture(scope="module")
def gold_set():
    """The German-English Europarl gold set (100 pairs, 0-based Pharaoh, source first)."""
    folder = Path(os.environ["NMT_DATA_DIR"]) / "align_deen_bicici100"
    return folder / "test.de.gz", folder / "test.en.gz", folder / "de-en.wa.gz"


def test_the_evaluation_saves_every_head(trained):
    run_dir, *_ = trained
    for split in ("valid", "test"):
        npz = run_dir / "eval" / f"{split}.alignments.npz"
        heads = read_heads(npz)  # checked against the combined matrices: same shapes, mean equal
        assert len(heads) == 4 and all(h.shape[0] == 4 for h in heads.values())
        scores = json.loads((run_dir / "eval" / f"{split}.scores.json").read_text(encoding="utf-8"))
        assert scores["attention"] == "MultiHead"


def test_saved_beam_heads_equal_teacher_forced_heads(trained, multi30k_dir, tmp_path):
    """Beam search's per-head matrices, saved and read back, equal teacher forcing of each hypothesis' own ids."""
    _, model, cfg, src_tok, tgt_tok = trained
    sources = read_lines(multi30k_dir / "val.de.gz")[:12]
    translations = translate(model, src_tok, tgt_tok, sources, cfg.decode, beam_size=3)
    save_alignments(tmp_path / "beam.alignments.npz", translations)
    saved = load_saved(tmp_path / "beam.alignments.npz")
    spread = 0.0
    for i, t in enumerate(translations):
        np.testing.assert_array_equal(saved[i].heads, t.heads)
        assert t.heads.shape == (4, len(t.hyp_pieces), len(t.src_pieces))
        np.testing.assert_allclose(t.heads.mean(axis=0), t.alignment, atol=1e-6, rtol=0)
        src = torch.tensor([src_tok.encode(sources[i])])
        ids = [tgt_tok.piece_to_id(piece) for piece in t.hyp_pieces]
        with torch.no_grad():
            _, _, heads = model.teacher_force(src, src != PAD_ID, torch.tensor([[BOS_ID, *ids[:-1]]]))
        np.testing.assert_allclose(saved[i].heads, heads[0].transpose(0, 1).numpy(), atol=1e-5, rtol=0,
                                   err_msg=f"line {i}")
        spread = max(spread, float(np.abs(t.heads[0] - t.heads[1]).max()))
    assert spread > 1e-3  # the heads differ, so comparing them head by head means something


def test_align_command_head_choices(trained, gold_set, tmp_path, capsys):
    run_dir, model, _, src_tok, tgt_tok = trained
    src, tgt, gold_file = gold_set
    common = [f"checkpoint={run_dir}", f"src={src}", f"tgt={tgt}", "device=cpu", "lowercase=false"]
    forced = force_align(model, src_tok, tgt_tok, read_lines(src), read_lines(tgt))
    with pytest.warns(AlignmentWarning, match="line 63"):  # the one gold link beyond its sentence
        gold = read_pharaoh(gold_file, lengths=[(len(s.split()), len(t.split()))
                                               for s, t in zip(read_lines(src), read_lines(tgt))])
    capsys.readouterr()

    assert main([*common, "head=best", f"gold={gold_file}", f"out={tmp_path / 'best.align'}",
                 f"matrices={tmp_path / 'm.npz'}"]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "line 63: link '12-16'" in err  # the dropped gold link, once, as a warning
    expected = best_head(forced, gold)
    found = re.search(r"head=best: head (\d) of 4, the lowest AER on gold lines 1-50 .*: ([0-9.]+) \(heads 0-3: ", err)
    assert found, err
    assert int(found.group(1)) == expected.head and float(found.group(2)) == pytest.approx(expected.selection.aer,
                                                                                          abs=1e-4)
    assert f"head {expected.head} on the other gold lines 51-100 (not used to choose it): {expected.held_out}" in err
    written = (tmp_path / "best.align").read_text(encoding="utf-8").splitlines()
    chosen = [links(t) for t in with_head(forced, expected.head)]
    assert written == [to_pharaoh(x) for x in chosen]
    assert f"head=best (head {expected.head}), all 100 gold lines: {aer(gold.sure, gold.possible, chosen)}" in err
    every = [float(x) for x in re.search(r"heads 0-3: ([0-9. ]+)\)", err).group(1).split()]
    assert every == pytest.approx([r.aer for r in expected.per_head], abs=1e-4)
    assert min(every) == pytest.approx(expected.selection.aer, abs=1e-4)

    # the matrices keep the combined format, every head beside them
    heads = read_heads(tmp_path / "m.npz")
    for i in (0, 57, 99):
        np.testing.assert_allclose(heads[i], forced[i].heads, atol=1e-6)

    # head=INDEX and the default mean; gold= alone reports the AER of the links written
    other = (expected.head + 1) % 4
    assert main([*common, f"head={other}", f"gold={gold_file}", f"out={tmp_path / 'one.align'}"]) == 0
    one = [links(t) for t in with_head(forced, other)]
    assert (tmp_path / "one.align").read_text(encoding="utf-8").splitlines() == [to_pharaoh(x) for x in one]
    assert f"head={other}, all 100 gold lines: {aer(gold.sure, gold.possible, one)}" in capsys.readouterr().err
    assert main([*common, f"out={tmp_path / 'mean.align'}"]) == 0
    assert (tmp_path / "mean.align").read_text(encoding="utf-8").splitlines() == [to_pharaoh(links(t))
                                                                                    for t in forced]
    assert one != [links(t) for t in forced]  # one head is not the mean
    capsys.readouterr()
    assert main([*common, "head=4", f"out={tmp_path / 'x.align'}"]) == 1
    assert "the model has 4 heads, numbered 0..3" in capsys.readouterr().err


def test_the_python_api_carries_every_head(trained, multi30k_dir):
    from nmt import Translator

    run_dir, *_ = trained
    translator = Translator.load(run_dir, device="cpu")
    sources, targets = read_lines(multi30k_dir / "val.de.gz")[:3], read_lines(multi30k_dir / "val.en.gz")[:3]
    mean, second = translator.align(sources, targets), translator.align(sources, targets, head="1")
    for m, s in zip(mean, second):
        assert m.heads.shape == (4, len(m.hyp_pieces), len(m.src_pieces))
        np.testing.assert_array_equal(s.alignment, m.heads[1])
        np.testing.assert_array_equal(s.heads, m.heads)
    with pytest.raises(ValueError, match="has 4 heads, numbered 0..3"):
        translator.align(sources, targets, head=4)
    with pytest.raises(ValueError, match="needs gold links"):
        translator.align(sources, targets, head="best")
    best = translator.translate(sources[0], beam_size=3)[0]
    np.testing.assert_allclose(best.heads.mean(axis=0), best.alignment, atol=1e-6)


def test_plot_draws_one_head_and_chooses_the_best_on_gold(trained, gold_set, tmp_path, capsys):
    from nmt.analysis import plot

    run_dir, model, _, src_tok, tgt_tok = trained
    src, tgt, gold_file = gold_set
    npz = run_dir / "eval" / "test.alignments.npz"
    one = plot.main([str(npz), "index=[0,2]", "head=3", f"out={tmp_path / 'one'}"])
    assert [p.name for p in one] == ["test_0_head3.png", "test_2_head3.png"]
    mean = plot.main([str(npz), "index=[0]", f"out={tmp_path / 'mean'}"])
    assert [p.name for p in mean] == ["test_0.png"]
    assert one[0].read_bytes() != (tmp_path / "mean" / "test_0.png").read_bytes()  # a head is not the mean
    capsys.readouterr()
    with pytest.raises(SystemExit):
        plot.main([str(npz), "head=4", f"out={tmp_path / 'x'}"])
    assert "head=4: " in (err := capsys.readouterr().err) and "has 4 heads, numbered 0..3" in err
    assert not (tmp_path / "x").exists()

    # head=best on the gold set's own forced alignments: the head nmt.align chooses, drawn over the gold links
    assert main([f"checkpoint={run_dir}", f"src={src}", f"tgt={tgt}", "device=cpu", "lowercase=false",
                 f"out={tmp_path / 'g.align'}", f"matrices={tmp_path / 'g.npz'}"]) == 0
    forced = force_align(model, src_tok, tgt_tok, read_lines(src), read_lines(tgt))
    with pytest.warns(AlignmentWarning):
        gold = read_pharaoh(gold_file, lengths=[(len(s.split()), len(t.split()))
                                               for s, t in zip(read_lines(src), read_lines(tgt))])
    expected = best_head(forced, gold)
    capsys.readouterr()
    best = plot.main([str(tmp_path / "g.npz"), "index=[5]", f"gold={gold_file}", "head=best", f"out={tmp_path}"])
    assert [p.name for p in best] == [f"g_5_head{expected.head}_gold.png"]
    assert f"head=best: head {expected.head}, AER {expected.selection.aer:.4f}" in capsys.readouterr().err
