"""Fine-tuning (train.init): a new run starts from a trained model's weights and subword models, on its own data,
with a new optimizer and schedule; an agreement checkpoint's reverse model comes along; refusals."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from nmt.training.loop import resume_overrides
from nmt.training.run import train

TINY = ["data.train_limit=400", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", "train.valid_every=6", "decode.beam_size=2",
        "eval.plots=0", "device=cpu", "train.keep_best=0", "train.max_epochs=null"]
ON = ["train.agreement.weight=1.0", "train.agreement.loss=product"]
STILL = ["train.lr=1e-12", "model.dropout=0.0"]  # a step that leaves the weights where they started


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(path, key="model"):
    return torch.load(path, weights_only=True)[key]


@pytest.fixture(scope="module")
def trained(compose_cfg, tmp_path_factory):
    """A tiny de->en agreement run of 12 steps (its best.pt holds both directions)."""
    run = tmp_path_factory.mktemp("first")
    train(compose_cfg([*TINY, *ON, "train.max_steps=12"]), run)
    return run


def test_a_fine_tuning_run_starts_from_the_weights_on_its_own_data(compose_cfg, trained, tmp_path, caplog):
    """Weights, architecture and subword models are the checkpoint's (its first validation scores as the checkpoint
    did), the data and schedule this run's, and the step count starts at 0."""
    caplog.set_level("INFO", logger="nmt")
    run = tmp_path / "tuned"
    train(compose_cfg([*TINY, *STILL, "data.train_limit=150", "model.hidden_size=64", "tokenizer.vocab_size=300",
                       "train.max_steps=1", "train.valid_every=1", f"train.init={trained}"]), run)
    best = trained / "checkpoints" / "best.pt"
    for name, tensor in weights(best).items():
        torch.testing.assert_close(weights(run / "checkpoints" / "last.pt")[name], tensor, atol=1e-6, rtol=0,
                                   msg=name)
    assert (run / "spm" / "src.model").read_bytes() == (trained / "spm" / "joint.model").read_bytes()
    saved = OmegaConf.create(torch.load(run / "checkpoints" / "last.pt", weights_only=True)["config"])
    assert saved.model.hidden_size == 32 and saved.tokenizer.vocab_size == 500  # the checkpoint's, not 64 / 300
    assert saved.data.train_limit == 150 and saved.train.lr == 1e-12 and saved.model.dropout == 0.0  # this run's
    assert "model.hidden_size=32 (this run: 64)" in caplog.text
    first_valid = next(r for r in records(trained) if r["step"] == torch.load(best, weights_only=True)["progress"]
                       ["step"])
    assert [r["step"] for r in records(run)] == [1]
    assert records(run)[0]["valid_loss"] == pytest.approx(first_valid["valid_loss"], abs=1e-4)
    assert "150 training pairs" in caplog.text


def test_an_agreement_checkpoint_also_starts_the_reverse_model(compose_cfg, trained, tmp_path):
    run = tmp_path / "both"
    train(compose_cfg([*TINY, *ON, *STILL, "train.max_steps=1", "train.valid_every=1",
                       f"train.init={trained / 'checkpoints' / 'best.pt'}"]), run)
    before = weights(trained / "checkpoints" / "best.pt", "reverse_model")
    after = weights(run / "reverse" / "checkpoints" / "best.pt")
    for name, tensor in before.items():
        torch.testing.assert_close(after[name], tensor, atol=1e-6, rtol=0, msg=name)


def test_an_interrupted_fine_tuning_run_resumes_from_its_own_last_pt(compose_cfg, trained, tmp_path, caplog):
    run = tmp_path / "tuned"
    train(compose_cfg([*TINY, "train.max_steps=3", f"train.init={trained}"]), run)
    caplog.clear()
    caplog.set_level("INFO", logger="nmt")
    train(compose_cfg([*TINY, "train.max_steps=6", f"train.init={trained}"]), run)
    assert "fine-tuning" not in caplog.text  # it continued from its own last.pt, not from train.init again
    assert torch.load(run / "checkpoints" / "last.pt", weights_only=True)["progress"]["step"] == 6
    assert [r["step"] for r in records(run)] == [3, 6]


def test_the_printed_resume_command_leaves_train_init_out_and_the_resumed_run_keeps_it(compose_cfg, trained,
                                                                                     tmp_path, caplog):
    """After an interruption the printed command resumes with train.resume (train.init with it would be refused);
    the resumed run still records the model it started from, without a warning about train.init."""
    overrides = [f"train.init={trained}", "train.lr=0.0002", "hydra.run.dir=RUN", "train.resume=OLD"]
    assert resume_overrides(overrides) == ["train.lr=0.0002"]
    run = tmp_path / "tuned"
    train(compose_cfg([*TINY, "train.max_steps=3", f"train.init={trained}"]), run)
    caplog.set_level("WARNING", logger="nmt")
    train(compose_cfg([*TINY, "train.max_steps=6", f"train.resume={run / 'checkpoints' / 'last.pt'}"]),
          tmp_path / "moved")
    saved = torch.load(tmp_path / "moved" / "checkpoints" / "last.pt", weights_only=True)
    assert saved["progress"]["step"] == 6 and saved["config"]["train"]["init"] == str(trained)
    assert "train.init" not in caplog.text


def test_one_direction_checkpoint_with_agreement_warns_that_the_reverse_model_is_new(compose_cfg, tmp_path, caplog):
    one = tmp_path / "one"
    train(compose_cfg([*TINY, "train.max_steps=2"]), one)
    caplog.set_level("WARNING", logger="nmt")
    train(compose_cfg([*TINY, *ON, "train.max_steps=1", f"train.init={one}"]), tmp_path / "both")
    assert "holds no reverse model" in caplog.text


@pytest.mark.parametrize("setting, error, message", [
    ("train.resume={run}", ValueError, "set one of them"),
    ("data.src_lang=en", ValueError, ("that model translates de -> en, this run's data is en -> de; set "
                                      "data.src_lang=de data.tgt_lang=en, or start from a model trained en -> de")),
])
def test_refusals_name_what_to_do(compose_cfg, trained, tmp_path, setting, error, message):
    extra = ["data.tgt_lang=de"] if "src_lang" in setting else []
    with pytest.raises(error, match=message):
        train(compose_cfg([*TINY, "train.max_steps=1", f"train.init={trained}", *extra,
                           setting.format(run=trained)]), tmp_path / "run")


def test_a_folder_without_a_checkpoint_is_refused(compose_cfg, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="a folder without checkpoints/best.pt"):
        train(compose_cfg([*TINY, "train.max_steps=1", f"train.init={tmp_path / 'empty'}"]), tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        train(compose_cfg([*TINY, "train.max_steps=1", f"train.init={tmp_path / 'nothing.pt'}"]), tmp_path / "run")


@pytest.mark.parametrize("argv0, expected", [
    ("train.py", "python train.py"), ("/work/nmt-checkout/train.py", "python /work/nmt-checkout/train.py"),
    ("/usr/lib/python3/site-packages/nmt/train.py", "python -m nmt.train"), ("/usr/bin/nmt-train", "nmt-train"),
    ("/home/my runs/train.py", "python '/home/my runs/train.py'"),
])
def test_the_resume_command_starts_as_the_interrupted_command_did(monkeypatch, argv0, expected):
    """The printed resume command works from any folder: the script's path as typed, -m nmt.train, or nmt-train."""
    import sys

    from nmt.training.distributed import Distributed
    from nmt.training.loop import launcher

    monkeypatch.setattr(sys, "argv", [argv0, "train.max_steps=3"])
    assert launcher(Distributed()) == expected


def test_the_resume_command_of_a_run_on_several_machines_names_them(monkeypatch):
    """torchrun on 2 machines x 1 process: the printed command says --nnodes and leaves the rendezvous options
    (which the ranks do not see) to the user, rather than a one-machine command."""
    import sys

    from nmt.training.distributed import Distributed
    from nmt.training.loop import launcher

    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert launcher(Distributed(0, 2)) == "torchrun --nnodes 2 --nproc_per_node 1 RENDEZVOUS train.py"
    monkeypatch.setenv("GROUP_WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert launcher(Distributed(0, 2)) == "torchrun --nproc_per_node 2 train.py"
