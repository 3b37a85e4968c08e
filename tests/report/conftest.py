"""Real runs to report on: tiny models trained on a real slice of Multi30k de-en (seconds each), once per test
run, and the report written from them once."""

from __future__ import annotations

import pytest

# tiny settings (as tests/test_robustness.py's): 400 training pairs, 12 test sentences, a 16/32-wide model,
# 4 steps with a validation every 2, beam 2
TINY = ["data.train_limit=400", "data.eval_limit=12", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", "train.max_steps=4", "train.valid_every=2",
        "decode.beam_size=2", "eval.plots=0", "device=cpu", "threads=1"]


@pytest.fixture(scope="session")
def tiny_overrides() -> list[str]:
    """The training overrides of the tiny runs."""
    return list(TINY)


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory, compose_cfg, multi30k_dir):
    """Two finished runs, additive and dot attention, in one sweep-like folder: ``(sweep folder, [run folders])``."""
    from nmt.training.run import train

    sweep = tmp_path_factory.mktemp("sweep")
    runs = []
    for number, attention in enumerate(("additive", "dot")):
        run_dir = sweep / f"{number}_{attention}_luong"
        train(compose_cfg([*TINY, f"attention={attention}"]), run_dir)
        runs.append(run_dir)
    return sweep, runs


@pytest.fixture(scope="session")
def other_test_set_run(tmp_path_factory, compose_cfg, multi30k_dir):
    """A run like the others, but scored on the first 12 validation sentences as its test set."""
    from nmt.training.run import train

    run_dir = tmp_path_factory.mktemp("other") / "valid_as_test"
    train(compose_cfg([*TINY, "data.files.test=val"]), run_dir)
    return run_dir


@pytest.fixture(scope="session")
def written_report(tiny_runs, tmp_path_factory):
    """The report of the two tiny runs (given as their sweep folder): ``(index.html, Report)``."""
    from nmt.report.build import ReportOptions, build_report
    from nmt.report.page import render_report

    sweep, _ = tiny_runs
    report = build_report([sweep], ReportOptions(disagreements=5))  # sentences drawn: the default choice
    return render_report(report, tmp_path_factory.mktemp("report"), command="pytest"), report
