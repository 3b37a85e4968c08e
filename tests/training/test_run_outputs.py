"""What a run writes besides its model: TensorBoard event files (train.tensorboard=true) with the training loss,
learning rate, tokens/s, every validation figure and the final scores; one training time in metrics.jsonl and
the final figures; and a weights-only best.pt (train.best_optimizer=false)."""

from __future__ import annotations

import json

import pytest

from nmt.training.run import train

pytest.importorskip("tensorboard", reason="train.tensorboard needs the tensorboard package (the dev extra has it)")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

TINY = ["data.train_limit=400", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", "train.max_steps=20", "train.valid_every=10",
        "decode.beam_size=2", "eval.plots=0", "device=cpu", "train.keep_best=0"]


def test_a_run_writes_training_and_validation_figures_and_its_final_scores(compose_cfg, tmp_path):
    run = tmp_path / "run"
    results = train(compose_cfg([*TINY, "train.tensorboard=true"]), run)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"train/loss", "train/lr", "train/tokens_per_sec"} <= set(scalars)
    assert [e.step for e in events.Scalars("train/loss")] == [10, 20]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # one training time: the last validation's record includes that validation, as the run's own figure does
    assert records[-1]["elapsed_sec"] == pytest.approx(results["train_minutes"] * 60, abs=0.06)
    for name in ("bleu", "ppl", "loss"):
        logged = events.Scalars(f"valid/{name}")
        assert [e.step for e in logged] == [r["step"] for r in records]
        assert [e.value for e in logged] == pytest.approx([r[f"valid_{name}"] for r in records], rel=1e-6)
    hparams = EventAccumulator(str(run / "tensorboard"))
    hparams.Reload()
    final = [t for t in hparams.Tags()["scalars"] if t.startswith("final/")]
    assert "final/test_beam2_bleu" in final
    assert hparams.Scalars("final/test_beam2_bleu")[0].value == pytest.approx(results["test_beam2_bleu"])
    assert any(name.endswith("hparams_plugin") or "hparams" in name for name in hparams.PluginTagToContent("hparams"))


def test_off_by_default_and_refused_without_the_package(compose_cfg, tmp_path, monkeypatch):
    import builtins

    train(compose_cfg(TINY), tmp_path / "plain")
    assert not (tmp_path / "plain" / "tensorboard").exists()
    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith(("torch.utils.tensorboard", "tensorboard")):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(ValueError, match=r'train.tensorboard=true needs the tensorboard package: pip install "nmt\[tensorboard\]"'):
        train(compose_cfg([*TINY, "train.tensorboard=true"]), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_best_without_the_optimizer_state_is_smaller_and_still_resumes(compose_cfg, tmp_path):
    """train.best_optimizer=false: a way to keep less on disk (best.pt and last.pt were 73 MB each at the preset's
    size, two thirds of it Adam's moment estimates); the weights-only best.pt loads and resumes."""
    import torch

    from nmt.models import checkpoint

    run = tmp_path / "slim"
    train(compose_cfg([*TINY, "train.best_optimizer=false"]), run)
    best, last = run / "checkpoints" / "best.pt", run / "checkpoints" / "last.pt"
    assert torch.load(best, weights_only=True)["optimizer"] is None
    weights = sum(p.numel() * p.element_size() for p in checkpoint.load(best)[0].parameters())  # tied: once
    assert last.stat().st_size - best.stat().st_size > 1.9 * weights  # Adam's two moments: twice the weights
    resumed = train(compose_cfg([*TINY, "train.max_steps=25", f"train.resume={best}"]), tmp_path / "again")
    assert resumed["steps"] == 25
