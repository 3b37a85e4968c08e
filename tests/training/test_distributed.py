"""Data-parallel training on two CPU processes (gloo) launched by torchrun: the ranks stay identical, two ranks
equal one process accumulating two batches, uneven epochs end, stops are taken together, resume is exact, one
run folder, two "machines" on one host, and a dead rank ends its peer instead of hanging it."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nmt.training.run import train

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "training" / "ddp_worker.py"
TINY = ["data.train_limit=300", "data.eval_limit=4", "tokenizer.vocab_size=400", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=150", "decode.beam_size=1", "eval.plots=0", "device=cpu",
        "train.keep_best=0", "train.max_epochs=null", "train.dist_timeout=120"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
       "PYTHONUNBUFFERED": "1"}


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_worker(tmp_path: Path, name: str, overrides: list[str], timeout: int = 180) -> dict:
    out = tmp_path / f"{name}_weights"
    out.mkdir()
    proc = subprocess.run(torchrun(str(WORKER), str(out), str(tmp_path / name), *TINY, *overrides), cwd=REPO,
                          env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {rank: torch.load(out / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)}


def assert_same(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        torch.testing.assert_close(value, b[key], atol=atol, rtol=0, msg=key)


def last(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def test_two_ranks_stay_identical_and_equal_one_process_accumulating_two_batches(tmp_path, compose_cfg):
    """Dropout off, so both runs see the same numbers: 2 ranks x 1 batch == 1 process x accum_steps=2, for one
    whole epoch whose batch count need not be even (its incomplete last update is left out on both)."""
    settings = ["model.dropout=0", "train.max_epochs=1", "train.valid_every=1000"]
    ranks = run_worker(tmp_path, "ddp", settings)
    assert_same(ranks[0], ranks[1], atol=0)  # DDP: the same gradients, the same Adam steps
    single = tmp_path / "single"
    train(compose_cfg([*TINY, *settings, "train.accum_steps=2"]), single)
    assert_same(ranks[0], last(single)["model"], atol=1e-5)
    ddp_progress, single_progress = last(tmp_path / "ddp")["progress"], last(single)["progress"]
    assert ddp_progress["step"] == single_progress["step"] > 3
    assert ddp_progress["epoch"] == single_progress["epoch"] == 1
    assert ddp_progress["world_size"] == 2 and single_progress["world_size"] == 1
    ended = float((tmp_path / "ddp_weights" / "rank1.ended").read_text())
    assert ended >= (tmp_path / "ddp" / "eval" / "test.scores.json").stat().st_mtime  # rank 1 waited for rank 0


def test_stopped_and_resumed_on_two_ranks_equals_an_uninterrupted_run(tmp_path):
    """Dropout on: each rank's RNG state is saved and put back, so the resumed run continues exactly."""
    settings = ["model.dropout=0.3", "train.valid_every=3"]
    full = run_worker(tmp_path, "full", [*settings, "train.max_steps=6"])
    run_worker(tmp_path, "first", [*settings, "train.max_steps=3"])
    resumed = run_worker(tmp_path, "resumed", [*settings, "train.max_steps=6",
                                               f"train.resume={tmp_path / 'first' / 'checkpoints' / 'last.pt'}"])
    for rank in (0, 1):
        assert_same(full[rank], resumed[rank], atol=1e-6)
    assert last(tmp_path / "resumed")["progress"]["step"] == 6


def test_sigint_to_one_rank_stops_both_with_one_last_pt(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(torchrun("train.py", *TINY, "train.max_steps=100000", "train.valid_every=2",
                                     f"hydra.run.dir={run_dir}"), cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoints" / "last.pt").is_file():  # training runs: a validation happened
            assert time.monotonic() < deadline and proc.poll() is None, "training did not start"
            time.sleep(0.5)
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False).stdout.split()
        assert len(workers) == 2, workers
        os.kill(int(max(workers, key=int)), signal.SIGINT)  # one rank only (the one started last)
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode != 0  # interrupted, not finished
    assert "Resume with:" in output and "torchrun --nproc_per_node 2 train.py" in output, output[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt"]
    assert not (run_dir / "eval").exists()
    assert last(run_dir)["progress"]["step"] > 0


def test_two_machines_share_one_run_folder(tmp_path):
    """Two torchrun commands (node 0 and node 1) on 127.0.0.1, each with one process; the run folder setting
    holds microseconds, so each rank resolves another name: all of the run lands in rank 0's folder."""
    port = free_port()
    outputs = tmp_path / "outputs"
    common = ["--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
              "train.py", *TINY, "train.max_steps=4", "train.valid_every=2",
              f"hydra.run.dir={outputs}/" + "${now:%H-%M-%S-%f}"]
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--node_rank={rank}", *common],
                              cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    results = [p.communicate(timeout=180) for p in procs]
    both = "\n".join(f"--- node {rank}, status {proc.returncode}:\n{output[-3000:]}"
                     for rank, (proc, (output, _)) in enumerate(zip(procs, results)))
    assert [proc.returncode for proc in procs] == [0, 0], both
    folders = list(outputs.iterdir())
    assert len(folders) == 1, folders
    assert (folders[0] / "eval" / "test.scores.json").is_file()
    assert last(folders[0])["progress"]["world_size"] == 2
    log = (folders[0] / "train.log").read_text(encoding="utf-8")
    assert "rank 0 of 2: gloo on cpu" in log and "rank 1 of 2" not in log  # rank 0 alone writes the run folder


def test_a_killed_rank_ends_its_peer_with_an_error_naming_the_rank(tmp_path):
    """Without torchrun's agent to clean up (two processes started by hand, as a scheduler might): SIGKILL one
    rank, and the other leaves with status 1 and a message instead of waiting forever."""
    port = free_port()
    run_dir = tmp_path / "run"
    procs = []
    for rank in (0, 1):
        env = {**ENV, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, "train.py", *TINY, "train.max_steps=100000",
                                       "train.valid_every=2", "train.dist_timeout=30", f"hydra.run.dir={run_dir}"],
                                      cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoints" / "last.pt").is_file():
            assert time.monotonic() < deadline and procs[0].poll() is None, "training did not start"
            time.sleep(0.5)
        procs[1].kill()
        began = time.monotonic()
        output, _ = procs[0].communicate(timeout=90)
        waited = time.monotonic() - began
    finally:
        for proc in procs:
            proc.kill()
    assert procs[0].returncode == 1, output[-3000:]
    assert "train.py: error: rank 0 of 2: " in output and "peer process died" in output, output[-3000:]
    assert waited < 60


@pytest.mark.parametrize("settings, message", [
    (["device=cuda"], "no usable CUDA GPU"),
    (["train.precision=fp16"], "train.precision=fp16 needs a CUDA device"),
    (["train.batch_tokens=0"], "train.batch_tokens=0"),
])
def test_bad_launch_settings_are_refused_before_any_work(tmp_path, settings, message):
    run_dir = tmp_path / "run"
    proc = subprocess.run(torchrun("train.py", *TINY, *settings, f"hydra.run.dir={run_dir}"), cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and message in output, output[-3000:]
    assert output.count("train.py: error") == 1, output[-3000:]  # rank 0 says it; the other rank only exits
    assert not run_dir.exists() or not any(run_dir.iterdir())  # what Hydra made for the command is removed



def test_a_silent_rank_gives_the_reporting_rank_time_to_print_only_under_torchrun(monkeypatch):
    # torchrun ends every worker once one fails: a rank that left the error to rank 0 and exited at once could
    # end rank 0 before its message was out (seen as a torchrun failure with no reason printed)
    from nmt.training import distributed
    slept = []
    monkeypatch.setattr(distributed.time, "sleep", slept.append)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    distributed.wait_for_the_reporting_rank()
    assert slept == []
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")
    distributed.wait_for_the_reporting_rank(5.0)
    assert slept == [5.0]

def test_the_end_of_the_run_waits_for_rank_0_and_only_warns_when_it_cannot(monkeypatch, caplog):
    # a finished run stays finished: the wait for rank 0's final evaluation (end_together) never raises
    from nmt.training import distributed
    calls = []

    def barrier(group=None):
        calls.append(group)
        raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer\nmore")

    monkeypatch.setattr(distributed.dist, "barrier", barrier)
    distributed.Distributed().end_together()  # one rank: nothing to wait for
    assert calls == []
    with caplog.at_level(logging.WARNING, logger="nmt.training.distributed"):
        distributed.Distributed(1, 2).end_together()
    assert calls == [None]
    assert "rank 1 of 2: the ranks did not end together" in caplog.text and "Connection closed by peer" in caplog.text
    assert "more" not in caplog.text


def test_world_size_without_a_rendezvous_is_refused(tmp_path):
    env = {**ENV, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    env.pop("MASTER_ADDR", None), env.pop("MASTER_PORT", None)
    proc = subprocess.run([sys.executable, "train.py", *TINY, f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert "MASTER_ADDR, MASTER_PORT not set: start several processes with torchrun" in proc.stderr
