"""Learning-rate schedules: the budget (linear) decay by hand, its errors, and on a real tiny training run."""

from __future__ import annotations

import json
import re

import pytest
import torch
from omegaconf import OmegaConf

from nmt.training.checks import check_numbers
from nmt.training.loop import DIVERGENCE_WINDOW
from nmt.training.run import train
from nmt.training.schedule import BudgetDecay, check_schedule, make_optimizer
from tests.training.test_resume import TINY


def budget(**train):
    t = OmegaConf.create({"lr_scheduler": "budget", "lr": 1e-3, "min_lr": 1e-5, "max_steps": None,
                          "max_minutes": None, **train})
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=t.lr)
    return BudgetDecay(optimizer, t), optimizer


def test_linear_from_lr_to_min_lr_over_the_step_budget():
    schedule, _ = budget(max_steps=100)
    assert schedule.rate(0, 0.0) == pytest.approx(1e-3)
    assert schedule.rate(50, 0.0) == pytest.approx((1e-3 + 1e-5) / 2)
    assert schedule.rate(100, 0.0) == pytest.approx(1e-5)
    assert schedule.rate(250, 0.0) == pytest.approx(1e-5)  # past the budget: stays at min_lr


def test_time_budget_and_the_closer_of_two_budgets_counts():
    schedule, _ = budget(max_minutes=10)
    assert schedule.rate(10**6, 150.0) == pytest.approx(1e-3 - 0.25 * (1e-3 - 1e-5))  # 2.5 of 10 minutes
    both, _ = budget(max_minutes=10, max_steps=1000)
    assert both.used(100, 300.0) == pytest.approx(0.5)  # time is closer to its end than steps
    assert both.used(900, 300.0) == pytest.approx(0.9)


def test_decay_start_keeps_the_rate_then_decays_over_the_rest():
    schedule, optimizer = budget(max_steps=100, lr_decay_start=0.6)
    assert schedule.rate(60, 0.0) == pytest.approx(1e-3)
    assert schedule.rate(80, 0.0) == pytest.approx((1e-3 + 1e-5) / 2)
    schedule.update(80, 0.0)
    assert optimizer.param_groups[0]["lr"] == pytest.approx((1e-3 + 1e-5) / 2)


@pytest.mark.parametrize(("settings", "message"), [
    ({}, "set a positive train.max_minutes and/or train.max_steps"),
    ({"max_steps": 0}, "set a positive train.max_minutes and/or train.max_steps"),
    ({"max_steps": 10, "lr_decay_start": 1.0}, r"lr_decay_start .* a number in \[0, 1\), got 1.0"),
    ({"max_steps": 10, "lr_decay_start": -0.1}, r"a number in \[0, 1\), got -0.1"),
    ({"max_steps": 10, "lr_decay_start": "abc"}, r"a number in \[0, 1\), got 'abc'"),
    ({"max_steps": 10, "min_lr": 0.01}, "min_lr=0.01 is above train.lr=0.001"),
])
def test_errors_say_what_to_set(settings, message):
    with pytest.raises(ValueError, match=message):
        budget(**settings)


def test_early_stopping_with_the_budget_schedule_is_warned_about_once(caplog):
    """patience cuts a budget decay short (a 90-minute run stopped at 74% of its budget this way): train()'s check
    says so before any work; the schedule itself, built afterwards, does not repeat it."""
    t = OmegaConf.create({"lr_scheduler": "budget", "lr": 1e-3, "min_lr": 1e-5, "max_minutes": 90, "patience": 8})
    caplog.set_level("WARNING", logger="nmt.training.schedule")
    check_schedule(t)
    assert "train.patience=8: early stopping can end the run before the budget schedule" in caplog.text
    caplog.clear()
    BudgetDecay(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3), t)
    check_schedule(OmegaConf.merge(t, {"patience": None}))
    check_schedule(OmegaConf.merge(t, {"lr_scheduler": "plateau"}))
    assert caplog.text == ""


def test_plateau_with_min_lr_null_halves_without_a_floor():
    """``train.min_lr: null`` means no floor (as for the budget schedule), not a crash at the first reduction."""
    cfg = OmegaConf.create({"train": {"lr_scheduler": "plateau", "lr": 1e-3, "lr_factor": 0.5, "lr_patience": 0,
                                      "min_lr": None}})
    optimizer, scheduler = make_optimizer(torch.nn.Linear(2, 2), cfg)
    for bleu in (10.0, 9.0, 9.0, 9.0):
        scheduler.step(bleu)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 / 8)


def test_unknown_scheduler_is_refused(compose_cfg):
    with pytest.raises(ValueError, match="'plateau', 'budget' or 'constant'"):
        make_optimizer(torch.nn.Linear(2, 2), compose_cfg(["train.lr_scheduler=cosine"]))


def test_budget_schedule_on_a_real_training_run(compose_cfg, tmp_path):
    """Each validation logs the rate of the update just made: step s used rate(s - 1), linear in s."""
    steps = 12
    train(compose_cfg([*TINY, f"train.max_steps={steps}", "train.valid_every=4", "train.lr_scheduler=budget",
                       "train.lr=0.002", "train.min_lr=0.0", "train.keep_best=0"]), tmp_path)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [4, 8, 12]
    assert [r["lr"] for r in records] == pytest.approx([0.002 * (1 - (s - 1) / steps) for s in (4, 8, 12)])


@pytest.mark.parametrize("override, message", [
    ("train.lr_decay_start=2", "lr_decay_start"),
    ("decoder.style=foo", "decoder.style must be 'luong', 'bahdanau' or 'conditional', got 'foo'"),
    ("decode.batch_size=0", r"decode.batch_size=0 must be a whole number >= 1"),
    ("decode.max_src_len=1", r"decode.max_src_len=1 must be a whole number >= 2"),
    ("decode.length_penalty=-1", r"decode.length_penalty=-1 must be a number >= 0"),
    ("decode.coverage_penalty=-0.2", r"decode.coverage_penalty=-0.2 must be a number >= 0 \(GNMT beta"),
    ("decode.coverage_penalty=null", r"decode.coverage_penalty=None must be a number >= 0"),
    ("decode.length_penalty=nan", r"decode.length_penalty=nan must be a number >= 0"),
])
def test_a_bad_setting_fails_before_any_work(compose_cfg, tmp_path, override, message):
    """Checked before the corpus is read and the tokenizers trained: nothing is left in the run folder (a bad
    decoding setting used to surface at the first validation, a bad decoder style after SentencePiece training)."""
    with pytest.raises(ValueError, match=message):
        train(compose_cfg([*TINY, "train.max_steps=4", "train.lr_scheduler=budget", override]), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_stopping_before_the_budget_ends_and_a_changed_budget_on_resume_are_reported(compose_cfg, tmp_path, caplog):
    """Also: a run resumed into a new folder that never beats the old best still has best.pt to evaluate."""
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    caplog.set_level("INFO", logger="nmt")  # nmt.training and nmt.training.state
    train(compose_cfg([*TINY, "train.max_steps=4", "train.lr_scheduler=budget", "train.keep_best=0"]), first)
    assert "of the learning-rate budget" not in caplog.text  # the budget was used up: no warning
    caplog.clear()
    train(compose_cfg([*TINY, "train.max_steps=8", "train.lr_scheduler=budget", "train.keep_best=0",
                       f"train.resume={first}/checkpoints/last.pt"]), resumed)
    assert "train.max_steps was 4 when it was saved and is 8 now" in caplog.text
    assert "budget schedule: 50% of the budget used" in caplog.text
    assert (resumed / "checkpoints" / "best.pt").is_file() and (resumed / "eval" / "test.hyp").is_file()
    caplog.clear()
    small = [o if not o.startswith("data.train_limit=") else "data.train_limit=150" for o in TINY]
    train(compose_cfg([*small, "train.max_steps=1000", "train.max_epochs=1", "train.lr_scheduler=budget",
                       "train.valid_every=1000", "train.keep_best=0"]), tmp_path / "epoch")
    warning = next(r.getMessage() for r in caplog.records if "of the learning-rate budget" in r.getMessage())
    assert "max_epochs=1 reached" in warning and "max_epochs=null" in warning


@pytest.mark.parametrize("override, message", [
    ("train.max_minutes=one", "train.max_minutes=one must be a number (or null)"),
    ("train.lr=fast", "train.lr=fast must be a number"),
    ("model.hidden_size=big", "model.hidden_size=big must be a whole number"),
    ("model.emb_size=25.5", "model.emb_size=25.5 must be a whole number"),
    ("train.batch_tokens=0", "train.batch_tokens=0 must be a whole number >= 1"),
    ("train.max_minutes=0", "train.max_minutes=0 must be above 0 (or null: no limit)"),  # 0 used to mean no limit
    ("train.max_minutes=-3", "train.max_minutes=-3 must be above 0 (or null: no limit)"),  # not ">= 0.0" as 0 is refused
    ("train.max_steps=0", "train.max_steps=0 must be a whole number >= 1 (or null: no limit)"),
    ("train.max_epochs=0", "train.max_epochs=0 must be a whole number >= 1 (or null: no limit)"),
    ("train.valid_every=true", "train.valid_every=True must be a whole number"),
    ("model.dropout=1.0", "model.dropout=1.0 must be below 1"),
    ("model.source_word_dropout=1", "model.source_word_dropout=1 must be below 1"),
    ("model.target_word_dropout=-0.1", "model.target_word_dropout=-0.1 must be a number >= 0.0"),
    ("train.clip=0", "train.clip=0 must be above 0"),
    ("train.lr=nan", "train.lr=nan must be a finite number"),
    ("train.lr=inf", "train.lr=inf must be a finite number"),  # it used to train on NaN for the whole budget
    ("train.clip=nan", "train.clip=nan must be a finite number"),  # inf is allowed: no clipping
    ("train.max_minutes=inf", "train.max_minutes=inf must be a finite number (or null: no limit)"),
    ("train.ema_decay='0.9'",  # it used to say "0.9 must be a number"
     ("train.ema_decay='0.9' must be a number (or null); it is text: give it without quotes (or wrap an "
     "${oc.env:...} in ${oc.decode:...})")),
    ("train.lr_factor=1.5", "train.lr_factor=1.5 must be below 1"),
    ("eval.plots=abc", "eval.plots=abc must be a whole number (or null)"),
    ("data.max_len=abc", "data.max_len=abc must be a whole number"),
    ("data.train_limit=1.5", "data.train_limit=1.5 must be a whole number (or null)"),
])
def test_settings_that_are_not_numbers_are_refused_before_any_work(compose_cfg, tmp_path, override, message):
    """One error naming the key, before the corpus is read or SentencePiece trained (no spm/ folder)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        train(compose_cfg([*TINY, override]), tmp_path)
    assert not (tmp_path / "spm").exists()
    check_numbers(compose_cfg([*TINY, "train.max_minutes=null", "train.patience=null", "model.dropout=0",
                               "train.max_steps=1e5", "train.clip=inf"]))  # 1e5 is a whole number; inf: no clipping


def test_a_diverging_run_stops_at_the_first_non_finite_gradient(compose_cfg, tmp_path):
    """A learning rate far too high (finite, so allowed) makes the loss overflow within a few steps: the run stops
    with one error naming the step and train.lr; it used to go on training NaN weights for its whole budget."""
    run = tmp_path / "run"
    with pytest.raises(FloatingPointError, match=r"step (\d+): training diverged: gradient norm (nan|inf), .* lower "
                                                 r"train\.lr \(it is 1e\+38; the rate") as caught:
        train(compose_cfg([*TINY, "train.max_steps=60", "train.valid_every=1", "train.lr=1e38"]), run)
    step = int(re.match(r"step (\d+)", str(caught.value)).group(1))
    assert step < 60
    assert max(json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()) == step - 1


def test_a_run_whose_loss_runs_away_but_stays_finite_is_stopped(compose_cfg, tmp_path):
    """train.lr=10: the loss climbs to hundreds of nats per token (a uniform guess costs ln V, about 6 here) while
    every gradient stays finite; the run used to train, save and evaluate as if nothing happened."""
    with pytest.raises(FloatingPointError, match=r"step (\d+): training diverged: the training loss averaged .* "
                                                 r"more than twice that of a uniform guess \(ln \d+ = .* lower "
                                                 r"train\.lr \(it is 10;") as caught:
        train(compose_cfg([*TINY, "train.max_steps=100", "train.valid_every=50", "train.lr=10"]), tmp_path / "run")
    step = int(re.match(r"step (\d+)", str(caught.value)).group(1))
    assert DIVERGENCE_WINDOW <= step < 100
    assert not (tmp_path / "run" / "eval").exists()
