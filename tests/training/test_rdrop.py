"""R-Drop (train.rdrop_alpha): the symmetric KL term, its known answers (no dropout: no term, the plain loss), what
it teaches (two dropout samples that agree), its settings and a run end to end."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from nmt.models.build import build_model
from nmt.training.rdrop import RDropObjective, symmetric_kl
from nmt.training.run import train
from nmt.training.step import batch_loss, train_step
from tests.training.test_guided import TINY, reversal_task


def test_the_symmetric_kl_is_the_two_directed_kl_divergences_over_the_kept_positions():
    torch.manual_seed(0)
    first, second = torch.randn(6, 11) * 3, torch.randn(6, 11) * 3
    keep = torch.tensor([True, True, False, True, False, True])
    log_p, log_q = F.log_softmax(first, -1), F.log_softmax(second, -1)
    both = F.kl_div(log_q, log_p, log_target=True, reduction="none").sum(-1) + \
        F.kl_div(log_p, log_q, log_target=True, reduction="none").sum(-1)  # KL(P‖Q) + KL(Q‖P) per row
    torch.testing.assert_close(symmetric_kl(first, second, keep), both[keep].sum())
    assert float(symmetric_kl(first, first, keep)) == pytest.approx(0.0, abs=1e-6)


def _model(compose_cfg, dropout: float):
    torch.manual_seed(0)
    cfg = compose_cfg(["model.emb_size=16", "model.hidden_size=32", f"model.dropout={dropout}"])
    return build_model(cfg.model, cfg.decoder, cfg.attention, 30, 50), cfg.train


def test_without_dropout_the_two_samples_agree_and_the_loss_is_the_plain_one(compose_cfg):
    batch, _, _ = reversal_task()
    model, _ = _model(compose_cfg, 0.0)
    objective = RDropObjective(5.0)
    minimised, reported = objective(model, batch, 0.1)
    plain, _ = batch_loss(model, batch, 0.1)
    torch.testing.assert_close(reported, plain)
    torch.testing.assert_close(minimised, plain)
    assert objective.window()["rdrop_term"] == pytest.approx(0.0, abs=1e-6)


def test_with_dropout_the_term_is_reported_per_target_token_and_weighted_by_alpha_over_four(compose_cfg):
    batch, _, _ = reversal_task()
    model, _ = _model(compose_cfg, 0.5)
    objective = RDropObjective(5.0)
    minimised, reported = objective(model, batch, 0.1)
    term = objective.window()["rdrop_term"]
    assert term > 0.01
    assert float((minimised - reported).detach()) == pytest.approx(5.0 / 4 * term * batch.num_tgt_tokens, rel=1e-4)
    assert objective.window() == {}  # a new window


def _disagreement(model, batch) -> float:
    """The symmetric KL per target token between two dropout samples of the model (training mode), averaged."""
    probe = RDropObjective(1.0)
    with torch.no_grad():
        for _ in range(5):
            probe(model, batch, 0.0)
    return probe.window()["rdrop_term"]


def test_the_term_teaches_two_dropout_samples_to_agree(compose_cfg):
    batch, _, _ = reversal_task()
    runs = {}
    for name, objective in (("plain", batch_loss), ("rdrop", RDropObjective(5.0))):
        model, settings = _model(compose_cfg, 0.3)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(60):
            train_step(model, optimizer, batch, settings, objective=objective)
        runs[name] = _disagreement(model, batch)
    assert runs["rdrop"] < 0.65 * runs["plain"]  # about 0.45 of it here; without the term about 1


@pytest.mark.parametrize(("override", "message"), [
    ("train.rdrop_alpha=0", r"train.rdrop_alpha=0 must be above 0 \(or null: no R-Drop\)"),
    ("train.rdrop_alpha=-5", "train.rdrop_alpha=-5 must be above 0"),
    ("train.rdrop_alpha=five", "train.rdrop_alpha=five must be a number"),
    ("train.rdrop_alpha=inf", "must be a finite number"),
    ("train.agreement.weight=1.0", "train.rdrop_alpha does not combine with train.agreement"),
    ("train.guided_alignment.weight=0.05", "train.rdrop_alpha does not combine with train.guided_alignment"),
])
def test_bad_settings_are_refused_before_any_work(compose_cfg, tmp_path, override, message):
    alpha = [] if override.startswith("train.rdrop_alpha") else ["train.rdrop_alpha=5"]
    with pytest.raises(ValueError, match=message):
        train(compose_cfg([*TINY, *alpha, override]), tmp_path / "run")
    assert not (tmp_path / "run" / "spm").exists()


def test_a_run_with_rdrop_trains_and_logs_its_term(compose_cfg, tmp_path, caplog):
    caplog.set_level("INFO")
    results = train(compose_cfg([*TINY, "train.rdrop_alpha=5"]), tmp_path / "run")
    assert results["steps"] == 5
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    terms = [r["rdrop_term"] for r in records if "train_loss" in r]
    assert terms and all(0 < term < 5 for term in terms) and "R-Drop term" in caplog.text


def test_a_run_resumed_by_its_folder_keeps_rdrop_unless_the_command_line_sets_it(compose_cfg, tmp_path):
    run = tmp_path / "run"
    train(compose_cfg([*TINY, "train.rdrop_alpha=5"]), run)
    results = train(compose_cfg([*TINY, "train.max_steps=8"]), run, overrides=["train.max_steps=8"])
    assert results["steps"] == 8
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "rdrop_term" in r] == [5, 8]  # still R-Drop after the resume
    off = ["train.max_steps=11", "train.rdrop_alpha=null"]
    train(compose_cfg([*TINY, *off]), run, overrides=off)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 11 and "rdrop_term" not in records[-1]
