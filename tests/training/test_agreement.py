"""Agreement-based joint training of both directions (train.agreement, Cheng et al. 2016): the agreement term on
hand-made matrices, the reverse batch, gradients into both models, a tiny real run that writes both models
(which load, translate and force-align, and whose printed nmt.align command runs), resume, and refusals."""

from __future__ import annotations

import json
import math
import shlex

import pytest
import torch

from nmt.data.batches import collate
from nmt.data.tokenizer import EOS_ID, PAD_ID
from nmt.models import checkpoint
from nmt.models.build import build_model
from nmt.training.agreement import Bidirectional, agreement_loss, piece_pairs, reverse_batch
from nmt.training.gold import RECORD_KEYS
from nmt.training.run import train
from tests.training.test_gold_curve import aer_on_gold

N = 6  # steps before an interruption; the uninterrupted run goes to 2N
TINY = ["data.train_limit=400", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", f"train.valid_every={N}", "decode.beam_size=2",
        "eval.plots=0", "device=cpu", "train.keep_best=0", "train.max_epochs=null"]
ON = ["train.agreement.weight=1.0", "train.agreement.loss=product"]


def gold_setting(corpora, method: str = "argmax_target") -> str:
    """eval.gold on the German-English gold set (100 pairs), so the printed nmt.align command names its files."""
    folder = corpora / "align_deen_bicici100"
    return (f"eval.gold={{links: {folder / 'de-en.wa.gz'}, link_langs: [de, en], method: {method}, "
            f"paths: {{de: {folder / 'test.de.gz'}, en: {folder / 'test.en.gz'}}}}}")


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def hand_made():
    """Two sentences: x = (5, 6, </s>), y = (7, 8, </s>); and x = (5, </s>, pad), y = (7, </s>, pad). The cells
    outside the real pieces (</s> and padding) hold values that would change every figure if they counted."""
    src = torch.tensor([[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]])
    tgt_out = torch.tensor([[7, 8, EOS_ID], [7, EOS_ID, PAD_ID]])
    a_xy = torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]],
                         [[0.5, 0.5, 0.9], [0.9, 0.1, 0.9], [0.9, 0.9, 0.9]]])  # [B, T, S]
    a_yx = torch.tensor([[[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]],
                         [[0.4, 0.6, 0.9], [0.9, 0.1, 0.9], [0.9, 0.9, 0.9]]])  # [B, S, T]
    return src, tgt_out, a_xy, a_yx


def test_square_and_product_on_hand_made_matrices():
    src, tgt_out, a_xy, a_yx = hand_made()
    pairs = piece_pairs(src, tgt_out)
    assert pairs[0].tolist() == [[True, True, False], [True, True, False], [False, False, False]]
    assert pairs[1].tolist() == [[True, False, False], [False, False, False], [False, False, False]]
    # sentence 0: A_yxᵀ on the real pieces is [[0.6, 0.2], [0.3, 0.5]] against A_xy's [[0.7, 0.2], [0.1, 0.8]]
    square = agreement_loss(a_xy, a_yx, pairs, "square")
    torch.testing.assert_close(square, torch.tensor([0.01 + 0.0 + 0.04 + 0.09, (0.5 - 0.4) ** 2]))
    product = agreement_loss(a_xy, a_yx, pairs, "product")
    torch.testing.assert_close(product, torch.tensor([-math.log(0.42 + 0.04 + 0.03 + 0.40), -math.log(0.5 * 0.4)]))
    # identical matrices agree perfectly under square; a sentence without real pieces adds nothing
    assert float(agreement_loss(a_xy, a_xy.transpose(1, 2), pairs, "square").abs().sum()) == 0.0
    assert agreement_loss(a_xy, a_yx, torch.zeros_like(pairs), "product").tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="agreement loss 'sum'"):
        agreement_loss(a_xy, a_yx, pairs, "sum")
    with pytest.raises(ValueError, match=r"a_yx \[B, S, T\]"):
        agreement_loss(a_xy, a_yx[:, :2], pairs, "square")


def test_the_reverse_batch_is_the_swapped_pairs_from_the_same_ids():
    pairs = [([11, 12, 13, EOS_ID], [21, 22, EOS_ID]), ([14, EOS_ID], [23, 24, 25, 26, EOS_ID])]
    forward = collate([s for s, _ in pairs], [t for _, t in pairs], [0, 1])
    swapped = collate([t for _, t in pairs], [s for s, _ in pairs], [0, 1])
    src, mask, tgt_in, tgt_out = reverse_batch(forward.src, forward.tgt_out)
    assert torch.equal(src, swapped.src) and torch.equal(mask, swapped.src_mask)
    assert torch.equal(tgt_in, swapped.tgt_in) and torch.equal(tgt_out, swapped.tgt_out)


def tiny_pair(compose_cfg):
    torch.manual_seed(0)
    cfg = compose_cfg(["model.emb_size=8", "model.hidden_size=16", "model.dropout=0.0"])
    xy = build_model(cfg.model, cfg.decoder, cfg.attention, 30, 40)
    yx = build_model(cfg.model, cfg.decoder, cfg.attention, 40, 30)
    batch = collate([[5, 6, 7, EOS_ID], [8, EOS_ID]], [[9, 10, EOS_ID], [11, 12, 13, EOS_ID]], [0, 1])
    return xy, yx, batch


def test_the_agreement_term_sends_gradients_into_both_models(compose_cfg):
    xy, yx, batch = tiny_pair(compose_cfg)
    joint = Bidirectional(xy, yx, "product", 1.0)
    objective, nll_xy, nll_yx, delta = joint(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_out)
    torch.testing.assert_close(objective, nll_xy + nll_yx + delta)
    delta.backward()  # the agreement term alone: both encoders and both attention models get a gradient
    for model in (xy, yx):
        assert float(model.encoder.embed.weight.grad.abs().sum()) > 0
        assert any(float(p.grad.abs().sum()) > 0 for p in model.decoder.attention.parameters())
    joint.zero_grad()
    weighted = Bidirectional(xy, yx, "square", 0.0)(batch.src, batch.src_mask, batch.tgt_in, batch.tgt_out)
    torch.testing.assert_close(weighted[0], weighted[1] + weighted[2])  # λ = 0: the two NLLs alone


def test_a_tiny_run_writes_both_models_which_load_translate_and_align(compose_cfg, multi30k_dir, tmp_path, caplog,
                                                                      capsys):
    from nmt.analysis.aer import main as aer_main
    from nmt.analysis.align import main as align_main
    from nmt.api import Translator

    run = tmp_path / "run"
    with caplog.at_level("INFO"):
        train(compose_cfg([*TINY, *ON, "train.max_steps=12", gold_setting(multi30k_dir / "..", "mutual_argmax")]),
              run)  # the gold files spelt through "..": the printed commands name them as the files they are
    record = records(run)[-1]
    for key in ("reverse_valid_loss", "reverse_valid_bleu", "valid_agreement", "reverse_aer", "aer",
                "symmetrized_aer", "symmetrized_alignment_precision", "symmetrized_alignment_recall"):
        assert math.isfinite(record[key]), key
    last = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert "reverse_model" in last
    model, cfg, _, _, payload = checkpoint.load(run / "reverse" / "checkpoints" / "best.pt")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "de")
    forward_model, *_ = checkpoint.load(run / "checkpoints" / "best.pt")
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    assert payload["progress"]["step"] == best["progress"]["step"]
    for name, tensor in model.state_dict().items():  # the reverse weights of best.pt are that checkpoint's
        torch.testing.assert_close(tensor, best["reverse_model"][name])
    assert model.encoder.embed.num_embeddings == forward_model.decoder.embed.num_embeddings
    assert len(Translator.load(run / "reverse").translate(["a man is walking ."])) == 1
    command = [r.getMessage() for r in caplog.records if "nmt.align" in r.getMessage()][-1].split("\n  ")[-1]
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "nmt.align"] and "combine=product" in argv and "method=mutual_argmax" in argv
    assert all("/../" not in arg and "/./" not in arg for arg in argv)  # paths as the files they name
    assert align_main(argv[3:]) == 0
    lines = (run / "eval" / "symmetrized.align").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 100 and any(lines)
    # the record of best.pt's step holds the AER that nmt.aer gives for the printed command's output
    expected = aer_on_gold(run / "eval" / "symmetrized.align")
    at_best = next(r for r in records(run) if r["step"] == best["progress"]["step"])
    assert [at_best[f"symmetrized_{key}"] for key in RECORD_KEYS] == [expected.aer, expected.precision,
                                                                       expected.recall]
    # and the printed nmt.aer command prints that figure
    command = [r.getMessage() for r in caplog.records if "nmt.aer" in r.getMessage()][-1].split("\n  ")[-1]
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "nmt.aer"] and "target_first=true" not in argv
    capsys.readouterr()
    assert aer_main(argv[3:]) == 0
    assert capsys.readouterr().out.startswith(f"AER {expected.aer:.4f}  precision {expected.precision:.4f}")
    assert any("both directions (combine=product): AER" in r.getMessage() for r in caplog.records)


def test_separate_subword_models_serve_the_two_directions_swapped(compose_cfg, tmp_path):
    run = tmp_path / "run"
    train(compose_cfg([*TINY, *ON, "train.max_steps=6", "tokenizer.joint=false"]), run)
    _, _, f_src, f_tgt, _ = checkpoint.load(run / "checkpoints" / "best.pt")
    _, _, r_src, r_tgt, _ = checkpoint.load(run / "reverse" / "checkpoints" / "best.pt")
    assert f_src.model_proto != f_tgt.model_proto
    assert (r_src.model_proto, r_tgt.model_proto) == (f_tgt.model_proto, f_src.model_proto)
    assert (r_src.vocab, r_tgt.vocab) == (f_tgt.vocab, f_src.vocab)


def test_an_agreement_run_resumed_by_its_folder_equals_the_uninterrupted_run(compose_cfg, tmp_path):
    """Both models, the shared Adam state, the step and the RNG come back from last.pt; the command line of the
    resume does not repeat train.agreement (the checkpoint's stays on)."""
    full, run = tmp_path / "full", tmp_path / "run"
    train(compose_cfg([*TINY, *ON, f"train.max_steps={2 * N}"]), full)
    train(compose_cfg([*TINY, *ON, f"train.max_steps={N}"]), run)
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}"]), run)
    expected = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    resumed = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert resumed["progress"]["step"] == 2 * N
    for part in ("model", "reverse_model"):
        for name, tensor in expected[part].items():
            torch.testing.assert_close(resumed[part][name], tensor, atol=1e-6, rtol=0, msg=f"{part}.{name}")
    assert records(run)[-1]["reverse_valid_loss"] == pytest.approx(records(full)[-1]["reverse_valid_loss"],
                                                                   abs=1e-6)
    moved = tmp_path / "moved"  # resumed into a new folder: the reverse model's best.pt comes along
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}", f"train.resume={run}"]), moved)
    assert (moved / "reverse" / "checkpoints" / "best.pt").is_file()


def test_switching_agreement_on_or_off_at_a_resume_is_refused(compose_cfg, tmp_path):
    one, both = tmp_path / "one", tmp_path / "both"
    train(compose_cfg([*TINY, f"train.max_steps={N}"]), one)
    with pytest.raises(ValueError, match="trained in one direction: train.agreement cannot be switched on"):
        train(compose_cfg([*TINY, *ON, f"train.max_steps={2 * N}", f"train.resume={one}"]), tmp_path / "a")
    train(compose_cfg([*TINY, *ON, f"train.max_steps={N}"]), both)
    with pytest.raises(ValueError, match="trained with train.agreement"):
        train(compose_cfg([*TINY, "train.agreement.weight=null", f"train.max_steps={2 * N}"]), both,
              overrides=["train.agreement.weight=null"])


@pytest.mark.parametrize("override, message", [
    ("train.agreement.loss=sum", r"train.agreement.loss='sum'; valid: product, square"),
    ("train.agreement.weight=-1", r"train.agreement.weight=-1 must be a number >= 0"),
    ("train.agreement.weight=inf", r"train.agreement.weight=inf must be a number >= 0"),
    ("train.ema_decay=0.99", r"train.agreement does not combine with train.ema_decay"),
])
def test_bad_settings_are_refused_before_any_work(compose_cfg, tmp_path, override, message):
    weight = [] if "weight" in override else ["train.agreement.weight=1.0"]
    with pytest.raises(ValueError, match=message):
        train(compose_cfg([*TINY, *weight, override]), tmp_path / "run")
    assert not (tmp_path / "run" / "spm").exists()


def test_the_printed_aer_command_names_the_gold_links_in_the_models_direction(compose_cfg, multi30k_dir, tmp_path):
    from nmt.training.reverse import Agreement

    folder = multi30k_dir.parent / "align_deen_bicici100"
    for src, tgt, flipped in (("de", "en", False), ("en", "de", True)):
        cfg = compose_cfg([*TINY, *ON, f"data.src_lang={src}", f"data.tgt_lang={tgt}",
                           gold_setting(multi30k_dir.parent), "+eval.gold.one_based=true"])
        argv = shlex.split(Agreement.aer_command(cfg, tmp_path))
        assert argv[:3] == ["python", "-m", "nmt.aer"] and "one_based=true" in argv
        assert f"src={folder / f'test.{src}.gz'}" in argv and f"tgt={folder / f'test.{tgt}.gz'}" in argv
        assert ("target_first=true" in argv) == flipped
    assert Agreement.aer_command(compose_cfg([*TINY, *ON]), tmp_path) is None
