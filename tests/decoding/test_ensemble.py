"""Ensemble decoding (nmt.decoding.ensemble) with checkpoints of real short runs on a slice of Multi30k."""

from __future__ import annotations

import numpy as np
import pytest

from nmt.data.corpus import load_splits
from nmt.decoding.ensemble import load_ensemble
from nmt.decoding.translation import translate
from nmt.models import checkpoint
from nmt.models.checkpoint import CheckpointError
from nmt.training.run import train

TINY = ["data.train_limit=600", "data.eval_limit=30", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=300", "train.max_steps=40", "train.valid_every=20",
        "train.keep_best=2", "decode.beam_size=3", "eval.plots=0", "device=cpu"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, compose_cfg):
    root = tmp_path_factory.mktemp("ensemble")
    cfg = compose_cfg(TINY)
    train(cfg, root / "a")
    train(compose_cfg([*TINY, "tokenizer.vocab_size=400"]), root / "other_subwords")
    return root, cfg, load_splits(cfg.data, train=False)["test"].src


@pytest.mark.parametrize("combine", ["prob", "loglinear"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_copies_of_one_model_translate_as_that_model(runs, combine, beam_size):
    root, cfg, sentences = runs
    best = root / "a" / "checkpoints" / "best.pt"
    model, _, src_tok, tgt_tok, _ = checkpoint.load(best)
    single = translate(model, src_tok, tgt_tok, sentences, cfg.decode, "cpu", beam_size)
    ensemble, _, e_src, e_tgt = load_ensemble([best, best, best], combine=combine)
    together = translate(ensemble, e_src, e_tgt, sentences, cfg.decode, "cpu", beam_size)
    assert sum(a.text == b.text for a, b in zip(single, together)) >= len(sentences) - 1  # float rounding at ties
    same = [(a, b) for a, b in zip(single, together) if a.text == b.text]
    np.testing.assert_allclose([a.score for a, _ in same], [b.score for _, b in same], rtol=1e-4, atol=1e-4)
    for a, b in same:
        np.testing.assert_allclose(a.alignment, b.alignment, rtol=1e-5, atol=1e-6)


def test_two_checkpoints_of_a_run_combine_their_steps(runs):
    root, cfg, sentences = runs
    steps = sorted((root / "a" / "checkpoints").glob("step_*.pt"))
    assert len(steps) == 2
    ensemble, _, src_tok, tgt_tok = load_ensemble(steps)
    results = translate(ensemble, src_tok, tgt_tok, sentences, cfg.decode, "cpu", 3)
    assert len(results) == len(sentences)
    for r in results:
        assert r.alignment.shape == (len(r.hyp_pieces), len(r.src_pieces))
        np.testing.assert_allclose(r.alignment.sum(axis=1), 1.0, rtol=1e-5)  # mean of rows summing to 1
    member = [translate(checkpoint.load(s)[0], src_tok, tgt_tok, sentences, cfg.decode, "cpu", 3) for s in steps]
    assert [r.text for r in results] != [r.text for r in member[0]] or [r.text for r in results] != \
        [r.text for r in member[1]]  # the ensemble is not simply one of its members


def test_members_of_other_subwords_or_another_direction_are_refused(runs, tmp_path):
    root, _, _ = runs
    best, other = root / "a" / "checkpoints" / "best.pt", root / "other_subwords" / "checkpoints" / "best.pt"
    with pytest.raises(CheckpointError, match="other_subwords.*subword models differ"):
        load_ensemble([best, other])
    payload = checkpoint.load_payload(best)
    payload["config"]["data"]["src_lang"], payload["config"]["data"]["tgt_lang"] = "en", "de"
    checkpoint.write_payload(tmp_path / "reversed.pt", payload)
    with pytest.raises(CheckpointError, match="reversed.pt: translates en->de.*de->en"):
        load_ensemble([best, tmp_path / "reversed.pt"])
    with pytest.raises(ValueError, match="'mean' is not one of prob, loglinear"):
        load_ensemble([best], combine="mean")


def test_translate_py_takes_a_list_of_checkpoints_as_an_ensemble(runs, repo_root, tmp_path):
    import subprocess
    import sys

    root, _, sentences = runs
    steps = sorted((root / "a" / "checkpoints").glob("step_*.pt"))
    source = tmp_path / "in.de"
    source.write_text("\n".join(sentences[:8]) + "\n", encoding="utf-8")
    out = tmp_path / "out.en"
    proc = subprocess.run([sys.executable, "translate.py", f"checkpoint=[{steps[0]},{steps[1]}]", "ensemble=loglinear",
                           f"input={source}", f"output={out}", "beam_size=2", "threads=1"], cwd=repo_root,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(out.read_text(encoding="utf-8").splitlines()) == 8
    assert f"{steps[0]},{steps[1]}" in proc.stderr  # the success line names both members
    other = root / "other_subwords" / "checkpoints" / "best.pt"
    refused = subprocess.run([sys.executable, "translate.py", f"checkpoint=[{steps[0]},{other}]", f"input={source}",
                              f"output={tmp_path / 'no.en'}"], cwd=repo_root, capture_output=True, text=True,
                             timeout=300, check=False)
    assert refused.returncode == 1 and "subword models differ" in refused.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "no.en").exists()
