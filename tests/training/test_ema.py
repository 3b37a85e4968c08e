"""The moving average of the weights (``train.ema_decay``): its arithmetic, the swap in and out of the model, and
training with it: the raw trajectory is unchanged, what is validated and saved is the average, resuming is exact."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from nmt.models import checkpoint
from nmt.models.build import build_model
from nmt.training.checks import check_numbers
from nmt.training.ema import ExponentialMovingAverage
from nmt.training.run import train
from nmt.training.validation import validation_loss

N = 4  # steps before the interruption; the uninterrupted run goes to 2N
TINY = ["data.train_limit=600", "data.eval_limit=8", "tokenizer.vocab_size=600", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=150", f"train.valid_every={N}", "decode.beam_size=2",
        "eval.plots=0", "device=cpu", "model.dropout=0.3", "train.max_epochs=null", "train.keep_best=2"]


def test_the_average_follows_the_formula_with_the_warm_up():
    """θ̄_t = d_t θ̄_{t-1} + (1 - d_t) θ_t, d_t = min(d, (1 + t) / (10 + t)), from the initial weights."""
    layer = nn.Linear(3, 2)
    ema = ExponentialMovingAverage(layer, decay=0.6)
    expected = [p.detach().clone() for p in layer.parameters()]
    assert ema.rate(1) == pytest.approx(2 / 11) and ema.rate(100) == 0.6
    for step in range(1, 13):
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(torch.randn_like(p))
        ema.update()
        assert ema.updates == step
        d = min(0.6, (1 + step) / (10 + step))
        expected = [d * e + (1 - d) * p.detach() for e, p in zip(expected, layer.parameters())]
    for shadow, e in zip(ema.shadow, expected):
        torch.testing.assert_close(shadow, e, rtol=0, atol=1e-6)


def test_applied_swaps_the_average_in_and_the_raw_weights_back_bit_for_bit_even_after_an_error(compose_cfg):
    """On a real model with tied embeddings: the shared matrix is averaged once and shows in both places."""
    cfg = compose_cfg(["model.emb_size=8", "model.hidden_size=16", "model.tie_embeddings=true"])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, 20, 20)
    assert model.decoder.generator.weight is model.decoder.embed.weight
    ema = ExponentialMovingAverage(model, decay=0.9)
    assert len(ema.shadow) == len(list(model.parameters()))  # the tied matrix once
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    raw = {k: v.clone() for k, v in model.state_dict().items()}
    ema.update()  # d_1 = 2/11: the average is 2/11 θ_0 + 9/11 (3 θ_0) = 29/11 θ_0
    with pytest.raises(RuntimeError, match="inside"), ema.applied():
        state = model.state_dict()
        for key, value in before.items():
            torch.testing.assert_close(state[key], value * 29 / 11, rtol=1e-6, atol=1e-7, msg=key)
        assert model.decoder.generator.weight is model.decoder.embed.weight
        raise RuntimeError("inside")
    for key, value in model.state_dict().items():
        assert torch.equal(value, raw[key]), key
    averaged = ema.averaged_state(model)  # what checkpoints store: the same values, the tied matrix shared
    for key, value in before.items():
        torch.testing.assert_close(averaged[key], value * 29 / 11, rtol=1e-6, atol=1e-7, msg=key)
    assert averaged["decoder.generator.weight"] is averaged["decoder.embed.weight"]


@pytest.mark.parametrize("decay", [1.0, -0.1, 0.0, 1e-4])
def test_a_decay_outside_half_to_1_is_refused_with_marians_convention_named(compose_cfg, decay):
    """1e-4 is Marian's --exponential-smoothing (1 - d): it would keep almost nothing of the average."""
    with pytest.raises(ValueError, match=r"train\.ema_decay=.*Marian's --exponential-smoothing 1e-4 is 0\.9999"):
        check_numbers(compose_cfg([f"train.ema_decay={decay}"]))
    with pytest.raises(ValueError, match=r"train\.ema_decay=.*0\.9999"):
        ExponentialMovingAverage(nn.Linear(2, 2), decay)
    check_numbers(compose_cfg(["train.ema_decay=null"]))
    check_numbers(compose_cfg(["train.ema_decay=0.999"]))


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_training_with_the_average_validates_and_saves_it_and_leaves_the_raw_trajectory_alone(
        compose_cfg, tmp_path, small_splits):
    """Same seed with and without the average: identical raw weights and training losses (the average does not
    touch training); with it, best.pt/step_N.pt/last.pt hold the average as their model, the one the recorded
    validation loss was measured on, and last.pt the raw weights as train_weights."""
    plain, averaged = tmp_path / "plain", tmp_path / "averaged"
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}"]), plain)
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}", "train.ema_decay=0.9"]), averaged)
    plain_last = torch.load(plain / "checkpoints" / "last.pt", weights_only=True)
    ema_last = torch.load(averaged / "checkpoints" / "last.pt", weights_only=True)
    assert "train_weights" not in plain_last
    for key, value in plain_last["model"].items():
        torch.testing.assert_close(ema_last["train_weights"][key], value, rtol=0, atol=1e-6, msg=key)
    assert [r["train_loss"] for r in records(averaged)] == pytest.approx([r["train_loss"] for r in records(plain)])
    differs = [key for key, value in ema_last["model"].items()
               if not torch.allclose(value, ema_last["train_weights"][key])]
    assert "decoder.embed.weight" in differs and "encoder.rnn.weight_hh_l0" in differs
    # the recorded validation loss is the average's: recompute it from last.pt's model
    model, cfg, src_tok, tgt_tok, _ = checkpoint.load(averaged / "checkpoints" / "last.pt")
    from nmt.data.batches import encode_pairs
    from nmt.data.corpus import load_splits

    valid = load_splits(cfg.data)["valid"]
    loss = validation_loss(model, encode_pairs(valid, src_tok, tgt_tok), cfg.train.batch_tokens, torch.device("cpu"))
    assert loss == pytest.approx(records(averaged)[-1]["valid_loss"], abs=1e-5)
    assert loss != pytest.approx(records(plain)[-1]["valid_loss"], abs=1e-3)
    # the weights-only step checkpoints are the average too
    step = torch.load(averaged / "checkpoints" / f"step_{2 * N}.pt", weights_only=True)
    for key, value in ema_last["model"].items():
        assert torch.equal(step["model"][key], value), key


def test_a_resumed_run_with_the_average_equals_the_uninterrupted_one(compose_cfg, tmp_path):
    """Stop at N, resume to 2N: the raw weights and the average both match the run that never stopped."""
    full, first, resumed = tmp_path / "full", tmp_path / "first", tmp_path / "resumed"
    ema = "train.ema_decay=0.9"
    train(compose_cfg([*TINY, ema, f"train.max_steps={2 * N}"]), full)
    train(compose_cfg([*TINY, ema, f"train.max_steps={N}"]), first)
    train(compose_cfg([*TINY, ema, f"train.max_steps={2 * N}", f"train.resume={first}/checkpoints/last.pt"]), resumed)
    want = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    got = torch.load(resumed / "checkpoints" / "last.pt", weights_only=True)
    for part in ("model", "train_weights"):
        for key, value in want[part].items():
            torch.testing.assert_close(got[part][key], value, rtol=0, atol=1e-6, msg=f"{part} {key}")
    assert records(resumed)[-1]["valid_loss"] == pytest.approx(records(full)[-1]["valid_loss"], abs=1e-6)


def test_turning_the_average_on_or_off_at_a_resume_is_warned_and_restarts_its_warm_up(compose_cfg, tmp_path, caplog):
    """On at a resume: the average starts from the raw weights with d_1 again (not the step count's d); off: the
    raw weights train on and the last validation is theirs; both say that the best BLEU so far compares other
    weights."""
    plain, on = tmp_path / "plain", tmp_path / "on"
    train(compose_cfg([*TINY, f"train.max_steps={N}"]), plain)
    raw_at_n = torch.load(plain / "checkpoints" / "last.pt", weights_only=True)["model"]
    with caplog.at_level("WARNING"):
        train(compose_cfg([*TINY, f"train.max_steps={N + 1}", "train.ema_decay=0.999",
                           f"train.resume={plain}/checkpoints/last.pt"]), on)
    assert "train.ema_decay was null and is 0.999 now" in caplog.text
    state = torch.load(on / "checkpoints" / "last.pt", weights_only=True)
    assert state["ema_updates"] == 1
    d = 2 / 11  # d_1 = (1 + 1) / (10 + 1), not min(0.999, ...) at step N + 1
    for key in ("decoder.embed.weight", "encoder.rnn.weight_ih_l0"):
        torch.testing.assert_close(state["model"][key], d * raw_at_n[key] + (1 - d) * state["train_weights"][key],
                                   rtol=0, atol=1e-6)
    caplog.clear()
    kept = tmp_path / "kept"  # resumed without naming the setting (hydra.run.dir=RUN alone): it keeps averaging
    with caplog.at_level("INFO"):
        train(compose_cfg([*TINY, f"train.max_steps={N + 2}", f"train.resume={on}/checkpoints/last.pt"]), kept)
    assert "train.ema_decay=0.999 from the checkpoint" in caplog.text and "was 0.999 and is null" not in caplog.text
    assert torch.load(kept / "checkpoints" / "last.pt", weights_only=True)["ema_updates"] == 2
    caplog.clear()
    off = tmp_path / "off"
    with caplog.at_level("WARNING"):
        train(compose_cfg([*TINY, f"train.max_steps={N + 2}", f"train.resume={on}/checkpoints/last.pt",
                           "train.ema_decay=null"]), off, overrides=["train.ema_decay=null"])
    assert "train.ema_decay was 0.999 and is null now: validation BLEU from here is of the raw weights" in caplog.text
    assert "train_weights" not in torch.load(off / "checkpoints" / "last.pt", weights_only=True)


def test_train_weights_that_do_not_fit_are_one_error_naming_the_checkpoint(compose_cfg, tmp_path):
    run = tmp_path / "run"
    train(compose_cfg([*TINY, f"train.max_steps={N}", "train.ema_decay=0.9"]), run)
    path = run / "checkpoints" / "last.pt"
    payload = torch.load(path, weights_only=True)
    payload["train_weights"].pop("decoder.combine.weight")
    checkpoint.write_payload(path, payload)
    with pytest.raises(checkpoint.CheckpointError, match=r"last\.pt: its train_weights .* do not fit"):
        train(compose_cfg([*TINY, f"train.max_steps={2 * N}", "train.ema_decay=0.9", f"train.resume={path}"]),
              tmp_path / "again")
