"""Checkpoint averaging (nmt.average) and its use at the end of training (train.keep_best / train.average)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.data.tokenizer import Tokenizer
from nmt.models import checkpoint
from nmt.models.build import build_model
from nmt.models.checkpoint import CheckpointError
from nmt.settings import differences
from nmt.training.average import (
    average_checkpoints,
    average_state_dicts,
    check_same_model,
    main,
    select_checkpoints,
)
from nmt.training.run import train

REPO = Path(__file__).resolve().parents[2]

SMALL = ["model.emb_size=8", "model.hidden_size=12", "device=cpu"]


@pytest.fixture()
def three_checkpoints(compose_cfg, tokenizer, tmp_path):
    """Three checkpoints of one architecture with different random weights, and their state dicts."""
    cfg = compose_cfg(SMALL)
    paths, states = [], []
    for seed in range(3):
        torch.manual_seed(seed)
        model = build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer))
        path = tmp_path / "checkpoints" / f"step_{(seed + 1) * 10}.pt"
        checkpoint.save(path, model, cfg, tokenizer, tokenizer, progress={"step": (seed + 1) * 10})
        paths.append(path)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    return cfg, paths, states


def test_average_is_the_elementwise_mean_and_loads(three_checkpoints, tmp_path):
    _, paths, states = three_checkpoints
    out = tmp_path / "averaged.pt"
    average_checkpoints(paths, out)
    model, _, src_tok, _, payload = checkpoint.load(out)
    for key, value in model.state_dict().items():
        expected = (states[0][key] + states[1][key] + states[2][key]) / 3
        torch.testing.assert_close(value, expected, rtol=1e-6, atol=1e-7)
    assert payload["averaged"]["steps"] == [10, 20, 30]
    assert not payload.get("optimizer")
    assert isinstance(src_tok, Tokenizer)


def test_averaging_one_checkpoint_gives_it_back(three_checkpoints, tmp_path):
    _, paths, states = three_checkpoints
    averaged = average_state_dicts([torch.load(paths[1], weights_only=True)["model"]], [str(paths[1])])
    for key, value in states[1].items():
        assert torch.equal(averaged[key], value)


def test_different_architectures_are_refused_by_name(three_checkpoints, compose_cfg, tokenizer, tmp_path):
    _, paths, _ = three_checkpoints
    other = tmp_path / "other.pt"
    cfg = compose_cfg(["model.emb_size=8", "model.hidden_size=16", "device=cpu"])
    checkpoint.save(other, build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer)), cfg, tokenizer, tokenizer)
    with pytest.raises(CheckpointError, match="other.pt.*shape"):
        average_checkpoints([paths[0], other], tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()
    with pytest.raises(CheckpointError, match="no checkpoints"):
        average_state_dicts([], [])


def test_same_shapes_but_another_model_or_other_subwords_are_refused(three_checkpoints, compose_cfg, tokenizer,
                                                                     tmp_path):
    """Scaled and unscaled dot attention have the same weights' shapes, and so do two corpora's subword models of
    one size; averaging them would give a meaningless model that silently carries the first one's tokenizer."""
    cfg = compose_cfg([*SMALL, "attention=dot"])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer))
    paths = {}
    for scaled in (True, False):
        cfg.attention.scaled = scaled
        paths[scaled] = tmp_path / f"scaled_{scaled}.pt"
        checkpoint.save(paths[scaled], model, cfg, tokenizer, tokenizer)
    with pytest.raises(CheckpointError, match=r"scaled_False\.pt: attention settings differ from .*scaled_True\.pt's "
                                              r"\(scaled\)"):
        average_checkpoints([paths[True], paths[False]], tmp_path / "out.pt")
    _, three, _ = three_checkpoints
    other = tmp_path / "other_subwords.pt"
    payload = torch.load(three[1], weights_only=True)
    payload["spm"]["tgt"] = payload["spm"]["tgt"].flip(0)  # the same model with other target subwords
    torch.save(payload, other)
    with pytest.raises(CheckpointError, match=r"other_subwords\.pt: its SentencePiece models or vocabularies differ"):
        average_checkpoints([three[0], other], tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_checkpoints_from_before_later_settings_load_resume_and_average(three_checkpoints, compose_cfg, tokenizer,
                                                                         tmp_path):
    """A checkpoint whose config has no decoder.input_feeding (written before the setting existed) is an input
    feeding model: it loads as one and averages with a new one; a model without input feeding is refused. One
    without model.source_word_dropout / target_word_dropout had none: it loads with 0.0, so its model settings
    equal a new checkpoint's (what resuming compares) and it averages with one; one without
    decode.coverage_penalty decodes with it off."""
    _, paths, _ = three_checkpoints
    old = tmp_path / "old.pt"
    payload = torch.load(paths[1], weights_only=True)
    del payload["config"]["decoder"]["input_feeding"]
    torch.save(payload, old)
    assert checkpoint.load_payload(old)["config"]["decoder"]["input_feeding"] is True
    assert checkpoint.load(old)[0].decoder.input_feeding is True
    for side in ("source", "target"):  # word dropout (a later setting still): none, as before it existed
        del payload["config"]["model"][f"{side}_word_dropout"]
    torch.save(payload, old)
    assert checkpoint.load_payload(old)["config"]["model"]["source_word_dropout"] == 0.0
    assert checkpoint.load_payload(old)["config"]["model"]["target_word_dropout"] == 0.0
    del payload["config"]["decode"]["coverage_penalty"]  # decoding with it off, as before it existed
    torch.save(payload, old)
    assert checkpoint.load_payload(old)["config"]["decode"]["coverage_penalty"] == 0.0
    old_cfg, new_cfg = checkpoint.load(old)[1], checkpoint.load(paths[0])[1]
    assert differences(old_cfg.model, new_cfg.model, "model") == []
    average_checkpoints([paths[0], old], tmp_path / "out.pt")
    cfg = compose_cfg([*SMALL, "decoder.input_feeding=false"])
    nofeed = tmp_path / "nofeed.pt"
    checkpoint.save(nofeed, build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer)), cfg, tokenizer, tokenizer)
    assert checkpoint.load(nofeed)[0].decoder.input_feeding is False
    with pytest.raises(CheckpointError, match="nofeed.pt"):
        average_checkpoints([old, nofeed], tmp_path / "out2.pt")
    payloads = [checkpoint.load_payload(p) for p in (old, nofeed)]
    with pytest.raises(CheckpointError, match=r"decoder settings differ .*\(input_feeding\)"):
        check_same_model(payloads, ["old.pt", "nofeed.pt"])  # the config check too, not only the weight shapes


def test_select_best_by_validation_bleu_and_last_by_step(three_checkpoints, tmp_path):
    assert len(three_checkpoints[1]) == 3  # step_10, step_20, step_30 in tmp_path/checkpoints
    records = [{"step": 10, "valid_bleu": 5.0}, {"step": 20, "valid_bleu": 7.5}, {"step": 30, "valid_bleu": 6.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [p.name for p in select_checkpoints(tmp_path, best=2)] == ["step_20.pt", "step_30.pt"]
    assert [p.name for p in select_checkpoints(tmp_path, last=2)] == ["step_20.pt", "step_30.pt"]
    assert [p.name for p in select_checkpoints(tmp_path, best=1)] == ["step_20.pt"]
    with pytest.raises(FileNotFoundError, match="keep_best"):
        select_checkpoints(tmp_path / "checkpoints")


def test_command_line_reports_success_once_on_stdout(three_checkpoints, tmp_path):
    """As a program: the "wrote" line on stdout and nothing on stderr (no second report through logging);
    a warning (one checkpoint only) still reaches stderr."""
    _, paths, _ = three_checkpoints
    proc = subprocess.run([sys.executable, "-m", "nmt.average", *map(str, paths[:2]), f"out={tmp_path / 'a.pt'}"],
                          check=False, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == f"wrote {tmp_path / 'a.pt'} (mean of {paths[0]}, {paths[1]})\n"
    proc = subprocess.run([sys.executable, "-m", "nmt.average", str(paths[0]), f"out={tmp_path / 'b.pt'}"],
                          check=False, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0
    assert proc.stderr == (f"python -m nmt.average: warning: only one checkpoint ({paths[0]}): the output is a "
                           "weights-only copy of it\n")


def test_command_line_one_warning_when_fewer_than_asked(three_checkpoints, tmp_path):
    """best=3 on a run with one step checkpoint: one prefixed warning line saying both things (fewer than
    asked, a weights-only copy), not two overlapping ones; with two of three, "averaging all of them"."""
    _, paths, _ = three_checkpoints
    for kept in (1, 2):
        run = tmp_path / f"run{kept}"
        (run / "checkpoints").mkdir(parents=True)
        for path in paths[:kept]:
            shutil.copy(path, run / "checkpoints" / path.name)
        proc = subprocess.run([sys.executable, "-m", "nmt.average", str(run), "best=3", f"out={run / 'avg.pt'}"],
                              check=False, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 0 and proc.stdout.startswith(f"wrote {run / 'avg.pt'}")
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m nmt.average: warning: "), proc.stderr
        noun = "checkpoint" if kept == 1 else "checkpoints"
        assert f"has {kept} step {noun}, fewer than the 3 asked for: " in lines[0]
        assert lines[0].endswith("weights-only copy of it" if kept == 1 else "averaging all of them")


def test_command_line(three_checkpoints, tmp_path, capsys):
    _, paths, states = three_checkpoints
    assert main([str(p) for p in paths[:2]] + [f"out={tmp_path / 'a.pt'}"]) == 0
    payload = torch.load(tmp_path / "a.pt", weights_only=True)
    key = "decoder.cells.0.weight_hh"
    torch.testing.assert_close(payload["model"][key], (states[0][key] + states[1][key]) / 2)
    assert main([str(tmp_path / "missing.pt"), f"out={tmp_path / 'b.pt'}"]) == 1
    assert capsys.readouterr().err.strip() == f"python -m nmt.average: error: checkpoint not found: " \
                                              f"{tmp_path / 'missing.pt'}"  # one line: no warning before it
    assert main([str(paths[0].parent), f"out={tmp_path / 'b.pt'}"]) == 1  # a run's folder without best=/last=
    assert capsys.readouterr().err.strip() == f"python -m nmt.average: error: {paths[0].parent} is a folder: give " \
                                              "best=K or last=K to average a run's step checkpoints, or the " \
                                              "checkpoint files themselves"
    # out= naming one of the inputs would replace that checkpoint: refused, the file unchanged
    before = paths[0].read_bytes()
    assert main([str(p) for p in paths[:2]] + [f"out={paths[0]}"]) == 1
    assert f"out={paths[0]} is one of the checkpoints being averaged" in capsys.readouterr().err
    assert paths[0].read_bytes() == before
    # an out= that cannot be written is an error before any checkpoint is loaded (it was a traceback after)
    assert main([str(p) for p in paths[:2]] + [f"out={tmp_path / 'a.pt' / 'x.pt'}"]) == 1
    assert capsys.readouterr().err.strip() == (f"python -m nmt.average: error: out={tmp_path}/a.pt/x.pt: "
                                               f"{tmp_path}/a.pt is a file, not a folder")
    for bad, key in (("best=0", "best="), ("last=-2", "last=")):  # -2 used to average all but the two oldest
        with pytest.raises(SystemExit) as info:
            main([str(tmp_path), f"out={tmp_path / 'c.pt'}", bad])
        err = capsys.readouterr().err
        assert info.value.code == 2 and f"error: {key} takes a number of checkpoints, at least 1" in err, err
    assert not (tmp_path / "c.pt").exists()


def test_training_keeps_the_k_best_and_evaluates_the_average_when_it_is_no_worse(compose_cfg, tmp_path):
    cfg = compose_cfg(["data.train_limit=600", "data.eval_limit=20", "tokenizer.vocab_size=600",
                       "model.emb_size=16", "model.hidden_size=32", "train.batch_tokens=200", "train.max_steps=40",
                       "train.valid_every=10", "train.keep_best=2", "train.average=true", "decode.beam_size=2",
                       "eval.plots=0", "device=cpu"])
    results = train(cfg, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    ranked = sorted(records, key=lambda r: (r["valid_bleu"], r["step"]), reverse=True)[:2]
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*.pt"))
    assert kept == sorted(f"step_{r['step']}.pt" for r in ranked)
    assert (tmp_path / "checkpoints" / "averaged.pt").is_file()
    expected = "averaged.pt" if results["averaged_valid_bleu"] >= results["valid_bleu"] else "best.pt"
    assert results["final_checkpoint"] == expected
    scores = json.loads((tmp_path / "eval" / "test.scores.json").read_text())
    assert scores["checkpoint"].endswith(expected)


def test_checkpoints_of_another_run_are_refused_unless_asked(three_checkpoints, compose_cfg, tokenizer, tmp_path):
    """Two runs that differ only in the seed used to be averaged silently (the mean was worse than either)."""
    _, paths, _ = three_checkpoints
    cfg = compose_cfg([*SMALL, "seed=7"])
    torch.manual_seed(7)
    other = tmp_path / "seed7.pt"
    checkpoint.save(other, build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer)), cfg,
                    tokenizer, tokenizer, progress={"step": 10})
    with pytest.raises(CheckpointError, match=r"seed7\.pt: comes from another training run .*seed differs; seed 7 "
                                              r"vs 1234.*other_runs=true"):
        average_checkpoints([paths[0], other], tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()
    payload = average_checkpoints([paths[0], other], tmp_path / "out.pt", other_runs=True)
    assert payload["averaged"] == {"checkpoints": [str(paths[0]), str(other)], "steps": [10, 10]}
    assert main([str(paths[0]), str(other), f"out={tmp_path / 'cli.pt'}"]) == 1
    assert main([str(paths[0]), str(other), f"out={tmp_path / 'cli.pt'}", "other_runs=true"]) == 0
