"""Training reads its corpus through the token store: built by the first run, reused by the next, and the same
batches as encoding the text in memory."""

from __future__ import annotations

import torch

from nmt.training.run import train

TINY = ["data.train_limit=300", "data.eval_limit=4", "tokenizer.vocab_size=400", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=150", "train.max_steps=4", "train.valid_every=4",
        "decode.beam_size=1", "eval.plots=0", "device=cpu", "train.keep_best=0", "model.dropout=0"]


def test_a_second_run_reuses_the_store_and_trains_the_same(compose_cfg, tmp_path, caplog):
    caplog.set_level("INFO", logger="nmt")
    cache = [f"cache_dir={tmp_path / 'cache'}"]
    train(compose_cfg([*TINY, *cache]), tmp_path / "first")
    assert "building the token store" in caplog.text
    caplog.clear()
    train(compose_cfg([*TINY, *cache]), tmp_path / "second")
    assert "reusing the token store" in caplog.text and "building the token store" not in caplog.text
    stores = list((tmp_path / "cache" / "stores").iterdir())
    assert len(stores) == 1
    first, second = (torch.load(tmp_path / run / "checkpoints" / "last.pt", weights_only=True)["model"]
                     for run in ("first", "second"))
    for key, value in first.items():
        assert torch.equal(value, second[key]), key
    # the in-memory path (subword regularization reads the text every epoch) still trains, here sampling the
    # source side only
    train(compose_cfg([*TINY, *cache, "tokenizer.sample_alpha=0.1", "tokenizer.sample_side=source"]),
          tmp_path / "sampled")
    assert "(tokenizer.sample_alpha=0.1, tokenizer.sample_side=source)" in caplog.text
    assert len(list((tmp_path / "cache" / "stores").iterdir())) == 1
