"""Interrupted training and untrusted checkpoints: exact resume, clean stop on SIGINT, refused pickles."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from nmt.models import checkpoint
from nmt.settings import override
from nmt.training.run import train

N = 6  # steps before the interruption; the uninterrupted run goes to 2N
TINY = ["data.train_limit=600", "data.eval_limit=8", "tokenizer.vocab_size=600", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=150", f"train.valid_every={N}", "decode.beam_size=2",
        "eval.plots=0", "device=cpu", "model.dropout=0.3", "train.max_epochs=null"]


def last_state(run_dir):
    payload = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    return payload["model"], payload["progress"]


def checkpoint_steps(run_dir):
    from nmt.training.average import select_checkpoints

    return sorted(int(p.stem.split("_")[1]) for p in select_checkpoints(run_dir, best=5))


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_stop_at_n_and_resume_to_2n_equals_uninterrupted_run(compose_cfg, tmp_path):
    """Model, optimizer, scheduler, step, data order and RNG are restored: parameters within 1e-6 and the same
    training losses as a run that never stopped (dropout on, so the RNG state matters)."""
    full, first, resumed = tmp_path / "full", tmp_path / "first", tmp_path / "resumed"
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}"]), full)
    train(compose_cfg([*TINY, f"train.max_steps={N}"]), first)
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}", f"train.resume={first}/checkpoints/last.pt"]), resumed)

    weights_full, progress_full = last_state(full)
    weights_resumed, progress_resumed = last_state(resumed)
    assert progress_resumed["step"] == progress_full["step"] == 2 * N
    assert progress_resumed["batch_in_epoch"] == progress_full["batch_in_epoch"]
    for name, tensor in weights_full.items():
        torch.testing.assert_close(weights_resumed[name], tensor, atol=1e-6, rtol=0, msg=name)
    # The uninterrupted run validated at N and 2N; the resumed one at 2N, over the same steps N+1..2N.
    full_records, resumed_records = metrics(full), metrics(resumed)
    assert [r["step"] for r in full_records] == [N, 2 * N]
    # resumed into a new folder, it carries the first run's validations up to step N along (its curve continues,
    # and averaging can rank the step_N.pt it copied)
    assert [r["step"] for r in resumed_records] == [N, 2 * N]
    assert resumed_records[0] == metrics(first)[0]
    assert checkpoint_steps(resumed) == [N, 2 * N]
    assert resumed_records[-1]["train_loss"] == pytest.approx(full_records[-1]["train_loss"], abs=1e-6)
    assert resumed_records[-1]["valid_loss"] == pytest.approx(full_records[-1]["valid_loss"], abs=1e-6)


def test_a_last_pt_copied_alone_resumes_and_evaluates_it(compose_cfg, tmp_path, caplog):
    """A last.pt copied without best.pt, whose recorded best BLEU no later validation beats: the run trains on
    and evaluates last.pt (it used to fail at the end with 'checkpoint not found: best.pt')."""
    first = tmp_path / "first"
    train(compose_cfg([*TINY, f"train.max_steps={N}", "train.keep_best=0"]), first)
    payload = torch.load(first / "checkpoints" / "last.pt", weights_only=True)
    payload["progress"]["best_bleu"] = 100.0  # unbeatable: no validation after the resume writes a best.pt
    (tmp_path / "copy").mkdir()
    torch.save(payload, tmp_path / "copy" / "last.pt")
    caplog.set_level("WARNING", logger="nmt")
    results = train(compose_cfg([*TINY, f"train.max_steps={2 * N}", "train.keep_best=0",
                                 f"train.resume={tmp_path / 'copy' / 'last.pt'}"]), tmp_path / "resumed")
    assert results["final_checkpoint"] == "last.pt" and "best.pt is missing" in caplog.text
    assert not (tmp_path / "resumed" / "checkpoints" / "best.pt").exists()
    assert (tmp_path / "resumed" / "eval" / "test.hyp").is_file()


def test_resume_keeps_the_checkpoints_architecture_whatever_the_command_line_says(compose_cfg, tmp_path, caplog):
    """A resumed run trains the checkpoint's model, so what it saves, logs and scores must describe that model,
    not the ``attention=`` / ``model.*`` given on the resuming command line (which only gets a warning)."""
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    train(compose_cfg([*TINY, f"train.max_steps={N}"]), first)
    command = [f"train.max_steps={2 * N}", "attention=dot", "decoder.style=bahdanau",
               f"train.resume={first}/checkpoints/last.pt"]
    with caplog.at_level("WARNING", logger="nmt"):
        results = train(compose_cfg([*TINY, *command]), resumed, command)
    # the warning names only what differs; the run folder's .hydra/config.yaml is rewritten to the model trained
    assert ("attention comes from the checkpoint, not from this run's settings: attention._target_="
            "nmt.models.attention.Additive (this run: nmt.models.attention.Dot)") in caplog.text
    assert "data comes from the checkpoint" not in caplog.text and "tokenizer comes" not in caplog.text
    assert "train.max_steps was" not in caplog.text  # the plateau schedule does not depend on the step budget
    (resumed / ".hydra").mkdir()
    (resumed / ".hydra" / "config.yaml").write_text("attention: {_target_: nmt.models.attention.Dot}\n")
    train(compose_cfg([*TINY, f"train.max_steps={2 * N + 1}", "attention=dot", f"train.resume={resumed}"]), resumed)
    assert "nmt.models.attention.Additive" in (resumed / ".hydra" / "config.yaml").read_text()  # a run folder resumes too
    assert last_state(resumed)[1]["step"] == 2 * N + 1
    for name in ("last.pt", "best.pt"):
        _, cfg, *_ = checkpoint.load(resumed / "checkpoints" / name)
        assert (cfg.attention._target_, cfg.decoder.style) == ("nmt.models.attention.Additive", "luong"), name
    scores = json.loads((resumed / "eval" / "test.scores.json").read_text())
    assert (scores["attention"], scores["decoder_style"]) == ("Additive", "luong")
    assert results["steps"] == 2 * N


def test_resuming_from_a_weights_only_checkpoint_names_the_file_to_use(compose_cfg, tmp_path):
    run = tmp_path / "run"
    train(compose_cfg([*TINY, f"train.max_steps={N}"]), run)
    step = run / "checkpoints" / f"step_{N}.pt"
    assert step.is_file()
    with pytest.raises(checkpoint.CheckpointError, match=rf"step_{N}\.pt holds weights only .*resume from the run's "
                                                         r"checkpoints/last\.pt"):
        train(compose_cfg([*TINY, f"train.max_steps={2 * N}", f"train.resume={step}"]), tmp_path / "again")


def test_a_resume_without_the_saved_optimizer_and_rng_would_differ(compose_cfg, tmp_path):
    """Guard for the exact-resume test: the same resume with a fresh optimizer state (Adam's moments) or a fresh
    RNG state (dropout masks) ends elsewhere than the uninterrupted run, so restoring them is what that test sees."""
    full, first = tmp_path / "full", tmp_path / "first"
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}"]), full)
    train(compose_cfg([*TINY, f"train.max_steps={N}"]), first)
    weights_full = last_state(full)[0]
    saved = torch.load(first / "checkpoints" / "last.pt", weights_only=True)
    fresh_model = checkpoint.load(first / "checkpoints" / "last.pt")[0]
    fresh_adam = torch.optim.Adam(fresh_model.parameters(), lr=1e-3).state_dict()
    for name, change in (("optimizer", {"optimizer": fresh_adam}),
                         ("rng", {"rng": {"torch": torch.random.default_generator.manual_seed(99).get_state()}})):
        torch.save({**saved, **change}, tmp_path / f"no_{name}.pt")
        out = tmp_path / f"resumed_no_{name}"
        train(compose_cfg([*TINY, f"train.max_steps={2 * N}", f"train.resume={tmp_path / f'no_{name}.pt'}"]), out)
        weights = last_state(out)[0]
        assert max(float((weights[k] - weights_full[k]).abs().max()) for k in weights) > 1e-4, name


def test_a_resume_applies_a_changed_rate_and_keeps_the_seed(compose_cfg, tmp_path, caplog):
    """The plateau schedule's settings and the rate given when resuming apply from there on, as the warning
    says (the saved optimizer and scheduler used to bring the old ones back); the seed stays the checkpoint's,
    because the batches of the current epoch come from it."""
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    train(compose_cfg([*TINY, f"train.max_steps={N}"]), first)
    caplog.set_level("INFO", logger="nmt")
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}", "train.lr=0.0005", "train.lr_factor=0.3",
                       "train.lr_patience=3", "seed=7", "train.keep_best=3", "decode.beam_size=1",
                       f"train.resume={first}/checkpoints/last.pt"]), resumed)
    assert "train.lr was 0.001 when it was saved and is 0.0005 now" in caplog.text
    schedule_warnings = [r.getMessage() for r in caplog.records if "schedule changes from here" in r.getMessage()]
    assert len(schedule_warnings) == 1 and "train.lr_factor was 0.5" in schedule_warnings[0]  # one line, not three
    # the other train.* and decode.* settings that changed are named once, in one warning (a resume by the run
    # folder alone falls back to the defaults for them)
    assert ("settings that are not the checkpoint's apply from here: train.keep_best was 5 and is 3 now; "
            "decode.beam_size was 2 and is 1 now (repeat") in caplog.text
    assert f"the budget is train.max_steps={2 * N} (it was {N})" in caplog.text  # the plateau schedule ignores it
    assert "learning rate set to train.lr=0.0005 from here" in caplog.text
    assert "seed=1234 comes from the checkpoint (this run: 7)" in caplog.text
    payload = torch.load(resumed / "checkpoints" / "last.pt", weights_only=True)
    assert [g["lr"] for g in payload["optimizer"]["param_groups"]] == [0.0005]
    assert payload["scheduler"]["factor"] == 0.3 and payload["scheduler"]["patience"] == 3
    assert payload["config"]["seed"] == 1234 and metrics(resumed)[-1]["lr"] == 0.0005


def test_a_finished_run_resumed_trains_no_further_but_validates_an_unvalidated_end(compose_cfg, tmp_path, caplog):
    """Re-running a finished run's command (a scheduler re-queues a job killed during its final evaluation) goes
    straight to the final evaluation: no step past max_steps. When the last step was never validated (a signal
    on it), it is validated first."""
    run = tmp_path / "run"
    cfg = [*TINY, f"train.max_steps={N}", "train.keep_best=0"]
    train(compose_cfg(cfg), run)
    caplog.set_level("INFO", logger="nmt")
    results = train(compose_cfg(cfg), run)  # the same folder: resumes from its last.pt
    assert results["steps"] == N and last_state(run)[1]["step"] == N
    assert f"nothing left to train at step {N}: max_steps={N} reached" in caplog.text
    assert "apply from here" not in caplog.text  # the same settings: nothing to report
    assert [r["step"] for r in metrics(run)] == [N]  # no second validation of the same weights
    payload = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    del payload["progress"]["validated_step"]  # a checkpoint from before the key existed: validated at its step
    torch.save(payload, run / "checkpoints" / "last.pt")
    train(compose_cfg(cfg), run)
    assert [r["step"] for r in metrics(run)] == [N]
    payload["progress"]["validated_step"] = N - 1  # as if a signal had stopped it right after step N
    torch.save(payload, run / "checkpoints" / "last.pt")
    train(compose_cfg(cfg), run)
    assert [r["step"] for r in metrics(run)] == [N, N] and last_state(run)[1]["step"] == N
    assert "train_loss" not in metrics(run)[-1]  # no training window before it: no made-up loss or tokens/s
    # a run that ended by early stopping is not trained further either (with the same patience)
    payload["progress"].update(validated_step=N, bad_validations=2)
    torch.save(payload, run / "checkpoints" / "last.pt")
    caplog.clear()
    train(compose_cfg([*TINY, f"train.max_steps={2 * N}", "train.keep_best=0", "train.patience=2"]), run)
    assert last_state(run)[1]["step"] == N and "nothing left to train" in caplog.text


def test_a_signal_during_the_last_validation_stops_before_the_final_evaluation(compose_cfg, tmp_path, monkeypatch):
    """SIGTERM while the budget's last validation runs used to be swallowed: the final evaluation ran anyway.
    It now ends like any signal (interrupted, last.pt saved), and the same command later does the evaluation."""
    import nmt.training.loop

    run = tmp_path / "run"
    cfg = [*TINY, f"train.max_steps={N}", "train.keep_best=0", f"train.valid_every={10 * N}"]
    original = nmt.training.loop.validate

    def validate_then_signal(*args, **kwargs):
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler of stop_on_signals only sets a flag
        return result

    monkeypatch.setattr(nmt.training.loop, "validate", validate_then_signal)
    results = train(compose_cfg(cfg), run)
    assert results.get("interrupted") and "SIGTERM" in results["stopped"]
    assert not (run / "eval").exists() and last_state(run)[1]["step"] == N
    monkeypatch.setattr(nmt.training.loop, "validate", original)
    results = train(compose_cfg(cfg), run)  # rerun: nothing left to train, then the final evaluation
    assert not results.get("interrupted") and (run / "eval" / "test.scores.json").is_file()
    assert [r["step"] for r in metrics(run)] == [N]


def test_subword_models_left_in_the_run_folder_must_match_the_settings(compose_cfg, small_splits, tmp_path):
    """A run that died before its first checkpoint left spm/ behind; a rerun in that folder with another
    tokenizer.vocab_size used to reuse the old model silently. The same settings reuse it."""
    from nmt.training.subwords import prepare_tokenizers

    tok_cfg = compose_cfg(["tokenizer.vocab_size=500"]).tokenizer
    first = prepare_tokenizers(tok_cfg, small_splits["train"], tmp_path / "spm")[0]
    model = (tmp_path / "spm" / "joint.model").read_bytes()
    tok_cfg.vocab_size, tok_cfg.model_type = 900, "unigram"
    with pytest.raises(ValueError, match=r"spm holds SentencePiece models of an earlier attempt in this run folder, "
                                         r"trained with tokenizer\.vocab_size=500 \(this run: 900\), "
                                         r"tokenizer\.model_type=bpe \(this run: unigram\): delete that spm/ folder"):
        prepare_tokenizers(tok_cfg, small_splits["train"], tmp_path / "spm")
    tok_cfg.vocab_size, tok_cfg.model_type = 500, "bpe"
    again = prepare_tokenizers(tok_cfg, small_splits["train"], tmp_path / "spm")[0]
    assert again.model_proto == first.model_proto == model
def test_subword_models_of_another_corpus_are_refused(compose_cfg, small_splits, tmp_path, caplog):
    """A retry in the same run folder with other languages used to reuse the earlier attempt's SentencePiece
    model silently; and a vocabulary larger than the text allows is said, with the size trained."""
    from nmt.data.corpus import Parallel
    from nmt.data.stream import corpus_settings
    from nmt.training.subwords import prepare_tokenizers

    caplog.set_level("WARNING", logger="nmt")
    tok_cfg = compose_cfg(["tokenizer.vocab_size=20000"]).tokenizer
    de_en, en_fr = (corpus_settings(compose_cfg(o).data) for o in ([], ["data.src_lang=en", "data.tgt_lang=fr"]))
    train = Parallel("train", small_splits["train"].src[:200], small_splits["train"].tgt[:200])
    first = prepare_tokenizers(tok_cfg, train, tmp_path / "spm", de_en)[0]
    assert "fewer than tokenizer.vocab_size=20000" in caplog.text
    assert prepare_tokenizers(tok_cfg, train, tmp_path / "spm", de_en)[0].model_proto == first.model_proto  # reused
    with pytest.raises(ValueError, match=r"trained with data\.src_lang=de \(this run: en\), data\.tgt_lang=en "
                                         r"\(this run: fr\): delete that spm/ folder"):
        prepare_tokenizers(tok_cfg, train, tmp_path / "spm", en_fr)


def test_sigint_finishes_the_step_saves_last_and_says_how_to_resume(repo_root, tmp_path):
    """The printed resume command works when pasted, also for a run folder whose path Hydra would split (an
    ``=`` and a space); and a run folder that holds last.pt resumes without being told."""
    run_dir = tmp_path / "run=1 x"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "train.py", *TINY, "train.valid_every=3", "train.max_steps=100000",
            override("hydra.run.dir", run_dir)]
    proc = subprocess.Popen(args, cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (run_dir / "metrics.jsonl").is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    output = stdout.decode() + stderr.decode()  # Hydra's console log goes to stdout
    assert proc.returncode == 130, output[-3000:]  # 128 + SIGINT: a script can tell it from a finished run
    assert "train.resume=" in output and "SIGINT" in output
    command = next(line for line in output.splitlines() if "python train.py" in line)
    assert "train.valid_every=3 train.max_steps=100000" in command, command  # the run's own settings carry over
    payload = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    step = payload["progress"]["step"]
    assert step >= 3
    assert not (run_dir / "eval").exists(), "an interrupted run must not pretend to have evaluated"
    # the printed command, pasted (a shorter budget: it stops 2 steps later and evaluates)
    pasted = [word.replace("train.max_steps=100000", f"train.max_steps={step + 2}")
              for word in shlex.split(command.strip())]
    assert pasted[:2] == ["python", "train.py"]
    resume = subprocess.run([sys.executable, *pasted[1:]], check=False, cwd=repo_root, env=env, capture_output=True,
                            timeout=300)
    assert resume.returncode == 0, resume.stderr.decode()[-3000:]
    assert f"resumed at step {step}" in resume.stdout.decode() + resume.stderr.decode()
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["progress"]["step"] == step + 2
    assert (run_dir / "eval" / "test.hyp").is_file()
    # resuming inside the same run directory continues from last.pt without being told
    again = subprocess.run([sys.executable, "train.py", *TINY, f"train.max_steps={step + 3}",
                            override("hydra.run.dir", run_dir)], check=False, cwd=repo_root, env=env,
                           capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["progress"]["step"] == step + 3


def test_checkpoint_with_pickled_object_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": OrderedDict(), "config": {}, "spm": {}, "extra": subprocess.Popen}, path)
    with pytest.raises(checkpoint.CheckpointError, match="pickled"):
        checkpoint.load_payload(path)


def test_truncated_and_missing_checkpoints_are_reported(tmp_path):
    path = tmp_path / "cut.pt"
    torch.save({"model": {"w": torch.zeros(1000)}, "config": {}, "spm": {}}, path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(checkpoint.CheckpointError, match="cut.pt"):
        checkpoint.load_payload(path)
    with pytest.raises(FileNotFoundError, match="nowhere.pt"):
        checkpoint.load_payload(tmp_path / "nowhere.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(checkpoint.CheckpointError, match="not an nmt checkpoint"):
        checkpoint.load_payload(tmp_path / "other.pt")


def test_a_resume_names_only_what_its_command_line_set(compose_cfg, tmp_path, caplog):
    """Resumed by its folder alone, a run is not told that the defaults differ from its own settings (it never
    asked for them); what the command line sets, and a corpus path from the environment, still are."""
    first = tmp_path / "first"
    train(compose_cfg([*TINY, f"train.max_steps={N}", "model.hidden_size=40"]), first)
    with caplog.at_level("WARNING", logger="nmt"):
        train(compose_cfg([*TINY, f"train.max_steps={N + 1}"]), first, [f"train.max_steps={N + 1}"])
    assert "comes from the checkpoint" not in caplog.text  # model.hidden_size=40 (this run's default: 32)
    caplog.clear()
    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    corpus = Path(compose_cfg(TINY).data.dir)
    for name in ("train.de.gz", "train.en.gz", "val.de.gz", "val.en.gz", "test_2016_flickr.de.gz",
                 "test_2016_flickr.en.gz"):
        (elsewhere / name).symlink_to(corpus / name)  # another folder (a link per file: not the same path)
    with caplog.at_level("WARNING", logger="nmt"):
        train(compose_cfg([*TINY, f"train.max_steps={N + 2}", "model.hidden_size=48", f"data.dir={elsewhere}"]),
              first, [f"train.max_steps={N + 2}", "model.hidden_size=48"])
    assert "model comes from the checkpoint, not from this run's settings: model.hidden_size=40 (this run: 48)" \
        in caplog.text
    assert f"data comes from the checkpoint, not from this run's settings: data.dir={corpus} (this run: " \
           f"{elsewhere})" in caplog.text

