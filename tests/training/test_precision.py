"""Mixed precision (train.precision): bf16 autocast on CPU trains every score model and decoder style, keeps
exact zeros on padding, and leaves the weights, optimizer state and checkpoints in fp32."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

import nmt.models.precision
from nmt.data.batches import collate
from nmt.models.build import build_model
from nmt.models.precision import KERNEL_CACHE, Precision, bound_kernel_cache, check_precision, cpu_has_bf16
from nmt.training.run import train
from nmt.training.step import train_step

SRC = [[5, 6, 7, 8, 9, 3], [10, 11, 3]]  # the second sentence has 3 padding positions
TGT = [[12, 13, 14, 3], [15, 3]]


@pytest.mark.parametrize("style", ["luong", "bahdanau", "conditional"])
@pytest.mark.parametrize("attention", ["additive", "dot", "general", "local_p"])
def test_bf16_training_lowers_the_loss_and_keeps_padding_at_zero(compose_cfg, attention, style):
    cfg = compose_cfg([f"attention={attention}", f"decoder.style={style}", "model.emb_size=16",
                       "model.hidden_size=32", "model.dropout=0"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, 40, 40)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch = collate(SRC, TGT, [0, 1])
    bf16 = Precision("bf16", torch.device("cpu"))
    losses = [train_step(model, optimizer, batch, cfg.train, precision=bf16) for _ in range(25)]
    first, last = (loss / ntok for loss, ntok in (losses[0], losses[-1]))
    assert last < 0.5 * first
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(v.dtype == torch.float32 for s in optimizer.state.values() for v in s.values() if v.is_floating_point())
    model.eval()
    with torch.no_grad(), bf16.autocast():
        logits, weights = model(batch.src, batch.src_mask, batch.tgt_in)
    assert weights.dtype == torch.bfloat16 and torch.isfinite(logits).all() and torch.isfinite(weights).all()
    assert torch.equal(weights[1, :, 3:], torch.zeros_like(weights[1, :, 3:]))  # exact zeros, not tiny numbers
    if attention != "local_p":  # local-p's Gaussian window leaves each row below 1 by design (Luong eq. 10)
        torch.testing.assert_close(weights.float().sum(-1), torch.ones(weights.shape[:2]), atol=2e-2, rtol=0)


def test_bf16_run_writes_fp32_checkpoints_and_bounds_the_kernel_cache(compose_cfg, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(KERNEL_CACHE, "")  # unset for train(); restored afterwards
    cfg = compose_cfg(["data.train_limit=200", "data.eval_limit=4", "tokenizer.vocab_size=500", "model.emb_size=16",
                       "model.hidden_size=32", "train.batch_tokens=150", "train.max_steps=4", "train.valid_every=4",
                       "decode.beam_size=1", "eval.plots=0", "device=cpu", "train.precision=bf16",
                       "train.keep_best=0"])
    with caplog.at_level(logging.INFO):
        results = train(cfg, tmp_path / "run")
    assert results["steps"] == 4 and (tmp_path / "run" / "eval" / "test.scores.json").is_file()
    payload = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)
    assert all(t.dtype == torch.float32 for t in payload["model"].values() if t.is_floating_point())
    assert payload["config"]["train"]["precision"] == "bf16"
    assert os.environ[KERNEL_CACHE] == "256"
    assert any(m.startswith("memory: ") and "oneDNN kernel cache bounded to 256 shapes" in m for m in caplog.messages)
    assert "train.precision=bf16: training in bf16 on cpu" in caplog.messages  # named even when not picked by auto


def test_the_kernel_cache_is_bounded_for_bf16_on_a_cpu_only_and_never_overrides_the_user():
    environ = {}
    assert "bounded to 256 shapes" in bound_kernel_cache("bf16", torch.device("cpu"), environ=environ)
    assert environ == {KERNEL_CACHE: "256"}
    environ = {KERNEL_CACHE: "64"}
    assert bound_kernel_cache("bf16", torch.device("cpu"), environ=environ).endswith("=64")
    assert environ == {KERNEL_CACHE: "64"}
    environ = {KERNEL_CACHE: " "}  # empty: unset
    assert "bounded to 8 shapes" in bound_kernel_cache("bf16", torch.device("cpu"), capacity=8, environ=environ)
    assert environ == {KERNEL_CACHE: "8"}
    for precision, device in [("fp32", "cpu"), ("bf16", "cuda"), ("fp16", "cuda")]:
        environ = {}
        assert "as it comes" in bound_kernel_cache(precision, torch.device(device), environ=environ)
        assert environ == {}


@pytest.mark.parametrize("value", ["abc", "1e3", "-5", "256 shapes", "\u0663"])
def test_a_kernel_cache_size_that_is_not_a_whole_number_is_refused(value):
    """oneDNN would read these silently as 0 (no cache) or its default; the run says what to set instead."""
    environ = {KERNEL_CACHE: value}
    with pytest.raises(ValueError, match=f"{KERNEL_CACHE}={value}: .*set a whole number"):
        bound_kernel_cache("bf16", torch.device("cpu"), environ=environ)
    assert environ == {KERNEL_CACHE: value}


BF16_SHAPES = """
import sys, torch
from nmt.models.precision import bound_kernel_cache
if sys.argv[1] == "bound":
    bound_kernel_cache("bf16", torch.device("cpu"), capacity=1)  # after torch's import, before any bf16 product
weight = torch.randn(64, 32)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for rows in (3, 5, 3):  # the third product has the first one's shape again
        torch.nn.functional.linear(torch.randn(rows, 32), weight)
"""


def test_a_bounded_kernel_cache_is_what_onednn_keeps(tmp_path):
    """oneDNN's own log: with a cache of one shape the repeated shape is built again (no cache hit)."""
    env = {k: v for k, v in os.environ.items() if k != KERNEL_CACHE} | {"ONEDNN_VERBOSE": "all"}
    script = tmp_path / "shapes.py"
    script.write_text(BF16_SHAPES)
    logs = {mode: subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True,
                                 check=True).stdout for mode in ("bound", "default")}
    if "create:cache_miss" not in logs["default"]:
        pytest.skip("this torch build does not run bf16 products through oneDNN")
    assert logs["default"].count("create:cache_hit") == 1 and logs["default"].count("create:cache_miss") == 2
    assert logs["bound"].count("create:cache_hit") == 0 and logs["bound"].count("create:cache_miss") == 3


@pytest.mark.parametrize("precision, device, message", [
    ("fp16", "cpu", "train.precision=fp16 needs a CUDA device"),
    ("half", "cpu", "train.precision=half is not one of fp32, bf16, fp16, auto"),
])
def test_bad_precision_is_refused(precision, device, message):
    with pytest.raises(ValueError, match=message):
        check_precision(precision, torch.device(device))


AMD_ZEN4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\nbugs\t\t: sysret_ss_attrs\n"
XEON_AMX = "flags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"
OLDER = "flags\t\t: fpu sse2 avx2 avx512f avx512bw\nbugs\t\t: avx512_bf16_is_not_a_flag_here\n"


@pytest.mark.parametrize("cpuinfo, fast", [(AMD_ZEN4, True), (XEON_AMX, True), (OLDER, False), (None, False)])
def test_auto_precision_is_bf16_only_on_a_cpu_with_bf16_units(cpuinfo, fast, tmp_path, monkeypatch):
    path = tmp_path / "cpuinfo"
    if cpuinfo is not None:  # None: no such file (another system than Linux)
        path.write_text(cpuinfo)
    assert cpu_has_bf16(path) is fast
    monkeypatch.setattr(nmt.models.precision, "cpu_has_bf16", lambda: fast)
    assert check_precision("auto", torch.device("cpu")) == ("bf16" if fast else "fp32")
    assert check_precision("auto", torch.device("cuda")) == "fp32"  # launch-bound on a GPU: fp32 is faster
    assert check_precision("fp32", torch.device("cpu")) == "fp32" and check_precision("bf16", torch.device("cpu")) == "bf16"


def test_bf16_search_casts_each_weight_once_not_at_every_step(compose_cfg):
    """Translation under bf16 autocast casts the decoder's recurrent weights to bf16 once per search, as
    training does: under ``torch.inference_mode`` autocast keeps no cast copy and casts them at every step."""
    from torch.profiler import ProfilerActivity, profile

    from nmt.decoding.search import greedy
    from nmt.models.precision import inference_context

    cfg = compose_cfg(["model.emb_size=16", "model.hidden_size=32", "model.dropout=0"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, 40, 40).eval()
    batch = collate(SRC, None, [0, 1])
    hidden = cfg.model.hidden_size
    weight_shape = [3 * hidden, hidden]  # the decoder GRU's W_hh, used once per step
    casts = {}
    for name, context in (("inference_mode", torch.inference_mode), ("ours", lambda: inference_context("cpu"))):
        with (Precision("bf16", torch.device("cpu")).autocast(), context(),
              profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof):
            hyp = greedy(model, batch.src, batch.src_mask, max_len_a=0, max_len_b=12)
        steps = max(len(h.ids) for h in hyp)
        casts[name] = sum(e.count for e in prof.key_averages(group_by_input_shape=True)
                          if e.key == "aten::_to_copy" and e.input_shapes and e.input_shapes[0] == weight_shape)
    assert steps >= 3
    assert casts["inference_mode"] >= steps  # what the context avoids: one cast per step
    assert 1 <= casts["ours"] <= 2  # once per search (the decoder's and the encoder's bridge may share the shape)
