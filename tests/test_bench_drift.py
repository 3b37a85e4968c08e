"""bench/drift.py: its count of subnormal numbers in Adam's moment estimates."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def drift(bench_script):
    return bench_script("drift")


def test_subnormal_share_counts_nonzero_entries_below_the_smallest_normal_number(drift):
    weight = torch.nn.Parameter(torch.zeros(4))
    optimizer = torch.optim.Adam([weight])
    assert drift.subnormal_share(optimizer) == 0.0  # no state before the first step
    weight.grad = torch.ones(4)
    optimizer.step()
    tiny = torch.finfo(torch.float32).tiny
    optimizer.state[weight]["exp_avg"].copy_(torch.tensor([tiny / 4, tiny, 0.0, -tiny / 1024]))
    optimizer.state[weight]["exp_avg_sq"].copy_(torch.tensor([1.0, 0.0, tiny / 2, 2 * tiny]))
    assert drift.subnormal_share(optimizer) == 3 / 8  # tiny/4, -tiny/1024, tiny/2; zeros and normals are not



def test_a_checkpoint_gives_its_weights_adam_state_and_subwords_and_reinit_new_ones(drift, compose_cfg, tokenizer,
                                                                                     small_splits, tmp_path):
    from nmt.data.batches import encode_pairs, iterate_batches
    from nmt.models import checkpoint
    from nmt.models.build import build_model
    from nmt.training.schedule import make_optimizer
    from nmt.training.step import train_step

    cfg = compose_cfg(["model.emb_size=16", "model.hidden_size=16", "train.lr=0.01"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer)).train()
    optimizer, _ = make_optimizer(model, cfg)
    splits = {"train": small_splits["train"]}
    encoded = encode_pairs(splits["train"], tokenizer, tokenizer, cfg.data.max_len)
    batch = next(iter(iterate_batches(encoded[:64], 2000, shuffle=False)))
    train_step(model, optimizer, batch, cfg.train)
    for group in optimizer.param_groups:
        group["lr"] = 1e-5  # as at the end of a run's decay
    path = tmp_path / "last.pt"
    checkpoint.save(path, model, cfg, tokenizer, tokenizer, optimizer=optimizer.state_dict())
    src_tok, tgt_tok, pairs, late, late_optimizer = drift.checkpoint_setup(cfg, splits, drift.load_run(path, cfg),
                                                                           reinit=False)
    assert src_tok.model_proto == tgt_tok.model_proto == tokenizer.model_proto and pairs == encoded
    weights = model.state_dict()
    assert late.training and all(torch.equal(value, weights[key]) for key, value in late.state_dict().items())
    moments = [state["exp_avg_sq"] for state in late_optimizer.state.values()]
    assert len(moments) == len(list(model.parameters())) and all(bool((m > 0).any()) for m in moments)
    assert [group["lr"] for group in late_optimizer.param_groups] == [0.01] * len(optimizer.param_groups)
    bigger = compose_cfg(["model.emb_size=32", "model.hidden_size=32", "train.lr=0.01"])
    _, _, _, fresh, fresh_optimizer = drift.checkpoint_setup(bigger, splits, drift.load_run(path, cfg), reinit=True)
    assert fresh_optimizer.state == {}  # new weights of the checkpoint's sizes, not of the config's
    assert {key: value.shape for key, value in fresh.state_dict().items()} == {k: v.shape for k, v in weights.items()}
    assert not any(torch.equal(value, weights[key]) for key, value in fresh.state_dict().items()
                   if value.dtype.is_floating_point and value.abs().sum() > 0)
    checkpoint.save(tmp_path / "weights.pt", model, cfg, tokenizer, tokenizer)
    with pytest.raises(SystemExit, match=r"holds weights only \(no optimizer state\): give the run's "
                                         r"checkpoints/last.pt \(or best.pt\), or --reinit"):
        drift.checkpoint_setup(cfg, splits, drift.load_run(tmp_path / "weights.pt", cfg), reinit=False)
    other = compose_cfg(["data.src_lang=en", "data.tgt_lang=de"])
    with pytest.raises(SystemExit, match=r"drift.py: error: .*last.pt translates de->en, the benchmark is set for "
                                         r"en->de: give data.src_lang=de data.tgt_lang=en"):
        drift.load_run(path, other)
    with pytest.raises(SystemExit, match=r"drift.py: error: .*checkpoint not found"):
        drift.load_run(tmp_path / "nope.pt", cfg)


@pytest.mark.parametrize("args, message", [
    (["--plan", "TX"], "--plan 'TX': write T (train a block) and V (validate)"),
    (["--block", "0"], "--block must be at least 1"),
    (["--reinit"], "--reinit needs --checkpoint"),
])
def test_bad_arguments_are_refused_in_one_line(repo_root, args, message):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(repo_root / "bench" / "drift.py"), *args], check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
