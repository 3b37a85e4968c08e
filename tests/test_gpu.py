"""On a CUDA machine (skipped elsewhere): training in fp32, bf16 and fp16, translation, forced alignment, and
data-parallel training with NCCL when there are two GPUs. Run them with ``python -m pytest -m gpu``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from nmt.analysis.forced import force_align
from nmt.data.corpus import load_splits
from nmt.decoding.translation import translate
from nmt.models import checkpoint
from nmt.training.run import train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
TINY = ["data.train_limit=600", "data.eval_limit=20", "tokenizer.vocab_size=500", "model.emb_size=32",
        "model.hidden_size=64", "train.batch_tokens=400", "train.max_steps=30", "train.valid_every=30",
        "decode.beam_size=3", "eval.plots=0", "device=cuda", "train.keep_best=0"]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_on_the_gpu(compose_cfg, tmp_path, precision):
    results = train(compose_cfg([*TINY, f"train.precision={precision}"]), tmp_path / "run")
    assert results["steps"] == 30 and (tmp_path / "run" / "eval" / "test.scores.json").is_file()
    payload = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True, map_location="cpu")
    assert all(t.dtype == torch.float32 for t in payload["model"].values() if t.is_floating_point())


def test_translation_and_forced_alignment_on_the_gpu_match_the_cpu(compose_cfg, tmp_path):
    cfg = compose_cfg(TINY)
    train(cfg, tmp_path / "run")
    sentences = load_splits(cfg.data)["test"].src[:20]
    outputs = {}
    for device in ("cpu", "cuda"):
        model, _, src_tok, tgt_tok, _ = checkpoint.load(tmp_path / "run" / "checkpoints" / "best.pt", device)
        outputs[device] = translate(model, src_tok, tgt_tok, sentences, cfg.decode, torch.device(device))
        forced = force_align(model, src_tok, tgt_tok, sentences, [t.text for t in outputs[device]],
                             device=torch.device(device))
        assert len(forced) == len(sentences)
    same = sum(a.text == b.text for a, b in zip(outputs["cpu"], outputs["cuda"]))
    assert same >= 18  # float rounding may flip a near tie now and then


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_with_nccl(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "train.py", *TINY, f"hydra.run.dir={tmp_path / 'run'}"], cwd=repo, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "run" / "eval" / "test.scores.json").is_file()
