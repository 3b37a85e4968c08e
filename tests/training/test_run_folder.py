"""One run per run folder: the folder's lock (a second command is refused while a run trains there, a killed
run leaves no stale lock, torchrun's ranks all leave when rank 0 is refused), and a folder that holds a run of
other settings is refused instead of resumed and reported as if it were this command's."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nmt.training import lock as run_lock
from nmt.training.lock import LOCK_NAME, RunFolderBusy, lock_run_folder
from nmt.training.resume import RunMismatch, check_run_folder
from nmt.training.run import train

TINY = ["data.train_limit=300", "data.eval_limit=4", "tokenizer.vocab_size=400", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=150", "train.valid_every=2", "train.max_epochs=null",
        "decode.beam_size=1", "eval.plots=0", "device=cpu", "threads=1", "train.keep_best=0"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
       "PYTHONUNBUFFERED": "1"}
HOLD = "import sys, time; from nmt.training.lock import lock_run_folder; lock_run_folder(sys.argv[1]); " \
       "print('held', flush=True); time.sleep(600)"


def train_py(repo_root, *args, timeout=180):
    return subprocess.run([sys.executable, "train.py", *args], cwd=repo_root, env=ENV, capture_output=True,
                          text=True, timeout=timeout, check=False)


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_lock_is_exclusive_and_a_killed_holder_leaves_none(tmp_path):
    held = lock_run_folder(tmp_path / "run", "python train.py first")
    with pytest.raises(RunFolderBusy) as refused:
        lock_run_folder(tmp_path / "run")
    message = str(refused.value)
    assert str(tmp_path / "run") in message and f"pid {os.getpid()} on host {socket.gethostname()}" in message
    assert "python train.py first" in message and "hydra.run.dir=" in message
    held.release()
    assert not (tmp_path / "run" / LOCK_NAME).exists()  # a run that ends removes its lock file
    lock_run_folder(tmp_path / "run").release()
    # a holder killed with SIGKILL: its file stays, unlocked, and the next command takes it
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run")], env=ENV, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderBusy, match=f"pid {holder.pid} "):
            lock_run_folder(tmp_path / "run")
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / "run" / LOCK_NAME).exists()
    lock_run_folder(tmp_path / "run").release()


def test_without_fcntl_the_lock_file_is_created_exclusively(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "fcntl", None)  # as on Windows
    held = lock_run_folder(tmp_path, "python train.py first")
    with pytest.raises(RunFolderBusy, match=rf"pid {os.getpid()} .*delete {tmp_path / LOCK_NAME}"):
        lock_run_folder(tmp_path)
    held.release()
    lock_run_folder(tmp_path).release()


def test_a_second_command_into_a_folder_where_a_run_trains_is_refused(repo_root, tmp_path):
    """Before: the second command trained (or resumed) in the same folder, beside the first. Now it is refused
    at once, naming the folder and the process, and touches nothing there; after the first is killed (SIGKILL),
    the folder's run resumes."""
    run = tmp_path / "run"
    log = (tmp_path / "first.err").open("w")
    first = subprocess.Popen([sys.executable, "train.py", *TINY, "train.max_steps=100000", f"hydra.run.dir={run}"],
                             cwd=repo_root, env=ENV, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "last.pt").is_file():
            assert time.monotonic() < deadline and first.poll() is None, (tmp_path / "first.err").read_text()[-3000:]
            time.sleep(0.2)
        record = digest(run / ".hydra" / "config.yaml")
        second = train_py(repo_root, *TINY, "attention=dot", "train.max_steps=4", f"hydra.run.dir={run}")
        assert second.returncode == 1, second.stderr[-3000:]
        last = second.stderr.strip().splitlines()[-1]
        assert last.startswith(f"train.py: error: run folder {run} is in use"), last
        assert f"pid {first.pid} on host {socket.gethostname()}, started " in last and "hydra.run.dir=" in last
        assert first.poll() is None  # the first run trains on, with its own record
        assert digest(run / ".hydra" / "config.yaml") == record
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
        log.close()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)), steps  # one record per validation: nobody else wrote here
    again = train_py(repo_root, *TINY, f"train.max_steps={steps[-1] + 2}", f"hydra.run.dir={run}")
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = re.search(r"resumed at step (\d+)", again.stdout + again.stderr)
    # the last validation, or the one before it when the kill fell between its record and its last.pt
    assert resumed and int(resumed.group(1)) in steps[-2:], (steps, (again.stdout + again.stderr)[-2000:])
    assert not (run / LOCK_NAME).exists()


def test_torchrun_into_a_locked_folder_ends_every_rank_at_once(repo_root, tmp_path):
    """Rank 0 alone takes the lock; refused, it says so once, and the other rank leaves too instead of waiting
    for it."""
    run = tmp_path / "run"
    holder = lock_run_folder(run, "held by the test")
    try:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                               "train.py", *TINY, "train.max_steps=4", "train.dist_timeout=60",
                               f"hydra.run.dir={run}"], cwd=repo_root, env=ENV, capture_output=True, text=True,
                              timeout=120, check=False)
    finally:
        holder.release()
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert output.count("train.py: error") == 1 and f"run folder {run} is in use" in output, output[-3000:]
    assert "held by the test" in output
    assert not (run / ".hydra").exists() and not (run / "checkpoints").exists()


def test_a_folder_holding_a_run_of_other_settings_is_refused_not_reported(repo_root, tmp_path):
    """Before: ``attention=dot hydra.run.dir=RUN`` on an additive run's folder resumed it with a warning and
    reported "done" with the additive run's checkpoints and scores. Now it is refused, and nothing in the folder
    changes; the same command as the run's own still resumes it."""
    run = tmp_path / "run"
    assert train_py(repo_root, *TINY, "train.max_steps=4", f"hydra.run.dir={run}").returncode == 0
    kept = {path: digest(run / path) for path in (".hydra/config.yaml", "eval/test.scores.json", "metrics.jsonl")}
    other = train_py(repo_root, *TINY, "attention=dot", "train.max_steps=4", f"hydra.run.dir={run}")
    assert other.returncode == 1, other.stdout[-2000:] + other.stderr[-2000:]
    last = other.stderr.strip().splitlines()[-1]
    assert last.startswith(f"train.py: error: run folder {run} already holds a run of other settings"), last
    assert "attention._target_=nmt.models.attention.Additive in that run, nmt.models.attention.Dot in this " \
           "command" in last and "hydra.run.dir=" in last
    assert {path: digest(run / path) for path in kept} == kept
    assert not (run / LOCK_NAME).exists()
    same = train_py(repo_root, *TINY, "train.max_steps=4", f"hydra.run.dir={run}")  # its own settings
    assert same.returncode == 0 and "done: test BLEU" in same.stdout + same.stderr, same.stderr[-3000:]


def test_which_settings_a_run_folder_must_share(compose_cfg, tmp_path):
    """check_run_folder's rule: a single run compares the settings its command line names (a preset names them
    all), a sweep job every setting but the budget; an explicit train.resume must be the folder's own run."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    train(compose_cfg([*TINY, "train.max_steps=2"]), run)
    check_run_folder(compose_cfg([*TINY, "train.max_steps=9", "train.lr=0.01"]), run, ["train.lr"])
    check_run_folder(compose_cfg([*TINY, "attention=dot"]), run, [])  # resumed by the folder alone: the run's own
    with pytest.raises(RunMismatch, match=r"model\.hidden_size=32 in that run, 64 in this command"):
        check_run_folder(compose_cfg([*TINY, "model.hidden_size=64"]), run, ["model.hidden_size"])
    with pytest.raises(RunMismatch, match=r"data\.src_lang=de in that run, en in this command"):
        check_run_folder(compose_cfg([*TINY, "data.src_lang=en", "data.tgt_lang=fr"]), run, ["experiment"])
    check_run_folder(compose_cfg([*TINY, "train.max_steps=9"]), run, [], sweep=True)  # extends the job's run
    corpus = Path(compose_cfg(TINY).data.dir).resolve()  # the same folder spelt otherwise is the same setting
    spelt = f"{corpus.parent}/../{corpus.parent.name}/{corpus.name}"
    check_run_folder(compose_cfg([*TINY, f"data.dir={spelt}"]), run, ["data.dir"])
    (tmp_path / "link").symlink_to(corpus)
    check_run_folder(compose_cfg([*TINY, f"data.dir={tmp_path / 'link'}"]), run, ["data.dir"])
    with pytest.raises(RunMismatch, match=r"data\.dir="):
        check_run_folder(compose_cfg([*TINY, f"data.dir={tmp_path}"]), run, ["data.dir"])
    with pytest.raises(RunMismatch, match=r"job folder .*train\.lr=0\.001 in that run, 0\.01 in this command.*"
                                          r"hydra\.sweep\.dir="):
        check_run_folder(compose_cfg([*TINY, "train.lr=0.01"]), run, [], sweep=True)
    check_run_folder(compose_cfg([*TINY, f"train.resume={run}"]), run, [])
    check_run_folder(compose_cfg([*TINY, f"train.resume={run}"]), elsewhere, [])  # no run there yet
    with pytest.raises(RunMismatch, match=r"already holds a run .*train\.resume=.* is another run's checkpoint"):
        check_run_folder(compose_cfg([*TINY, f"train.resume={elsewhere}/last.pt"]), run, [])
