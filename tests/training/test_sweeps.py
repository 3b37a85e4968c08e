"""Sweeps run in parallel by Hydra's launcher plugins (``pip install -e ".[cluster]"``): ``train.py -m`` with
``hydra/launcher=parallel`` (our conf/hydra/launcher/parallel.yaml over the joblib plugin) and with the submitit
plugin's local mode (the SLURM launcher's stand-in); conf/hydra/launcher/slurm.yaml composes.

Each job is a real ``train.py`` run in a subprocess of the test. A Hydra callback written to ``tmp_path`` (put
on the jobs' import path through ``PYTHONPATH``, and added with ``+hydra.callbacks.probe``) records in every job
folder its process id, start and end times and torch's thread count, which prove that the jobs ran at the same
time in separate processes, each with cores // n_jobs threads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

TINY = ["data.train_limit=600", "data.eval_limit=8", "tokenizer.vocab_size=600", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=150", "train.valid_every=10", "train.max_steps=20",
        "train.max_epochs=null", "decode.beam_size=2", "eval.plots=0", "device=cpu"]
JOBS = {"0_additive_luong", "1_dot_luong"}  # hydra.sweep.subdir = <n>_<attention>_<decoder.style>

PROBE = '''
import json, os, time
from pathlib import Path

from hydra.experimental.callback import Callback


class Probe(Callback):
    """Writes probe.json in each job's folder: pid, start/end time, torch threads, OMP_NUM_THREADS."""

    def on_job_start(self, config, **kwargs):
        import torch

        self.record = {"pid": os.getpid(), "start": time.time(), "threads_at_start": torch.get_num_threads(),
                       "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}

    def on_job_end(self, config, job_return, **kwargs):
        import torch

        self.record.update(end=time.time(), threads_at_end=torch.get_num_threads(),
                           status=job_return.status.name)
        (Path(config.hydra.runtime.output_dir) / "probe.json").write_text(json.dumps(self.record))
'''


def cores() -> int:
    """What joblib divides among its workers (loky's count: affinity and cgroup quota respected)."""
    from joblib import cpu_count

    return cpu_count()


def run_sweep(repo_root, tmp_path, launcher_args, timeout=180):
    """``train.py -m attention=additive,dot`` with the tiny settings into ``tmp_path/sweep``; returns the
    completed process, the sweep folder and the probe records by job folder name."""
    (tmp_path / "sweep_probe.py").write_text(textwrap.dedent(PROBE))
    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    env.pop("OMP_NUM_THREADS", None)  # a value set in the shell would be passed to joblib's workers as it is
    cmd = [sys.executable, "train.py", "-m", *launcher_args, "attention=additive,dot", *TINY,
           f"hydra.sweep.dir={sweep}", "+hydra.callbacks.probe._target_=sweep_probe.Probe"]
    proc = subprocess.run(cmd, check=False, cwd=repo_root, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = {p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "report"}
    assert jobs == JOBS, (jobs, proc.stderr[-2000:])
    for job in JOBS:
        scores = json.loads((sweep / job / "eval" / "test.scores.json").read_text())
        assert scores, job
    probes = {job: json.loads((sweep / job / "probe.json").read_text()) for job in JOBS}
    assert all(p["status"] == "COMPLETED" for p in probes.values()), probes
    page = sweep / "report" / "index.html"  # the sweep ends with its report, and the last line says where
    assert page.is_file() and proc.stdout.strip().splitlines()[-1] == f"nmt.report: the sweep's report: {page}"
    summary = (sweep / "report" / "summary.md").read_text()
    assert all(f"{job}" in summary for job in JOBS), summary[:2000]
    assert "python train.py -m " in summary and "attention=additive,dot" in summary  # the sweep's own command
    return proc, sweep, probes


def assert_overlapped(probes):
    """Separate processes whose [start, end] intervals intersect: the later start came before the earlier end."""
    a, b = probes.values()
    assert a["pid"] != b["pid"] != os.getpid(), probes
    assert max(a["start"], b["start"]) < min(a["end"], b["end"]), probes


def test_joblib_sweep_runs_two_jobs_at_once_sharing_the_cores(repo_root, tmp_path):
    """hydra/launcher=parallel, n_jobs=2: two score models trained side by side, each a complete run (its own
    folder with eval/test.scores.json), in two processes at the same time, each with cores // 2 torch threads
    (joblib's OMP_NUM_THREADS, read by torch because threads=null is left as it is)."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher",
                        reason="hydra-joblib-launcher not installed (pip install -e '.[cluster]')")
    proc, sweep, probes = run_sweep(repo_root, tmp_path, ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"])
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout + proc.stderr
    assert_overlapped(probes)
    expected = max(cores() // 2, 1)
    for job, probe in probes.items():
        assert probe["omp_num_threads"] == str(expected), (job, probe)
        assert probe["threads_at_start"] == probe["threads_at_end"] == expected, (job, probe)
    # each job's config is its own: the sweep's attention value, not the other job's
    for job in JOBS:
        overrides = (sweep / job / ".hydra" / "overrides.yaml").read_text()
        assert f"attention={job.split('_')[1]}" in overrides


def test_submitit_local_sweep_runs_both_jobs_at_once(repo_root, tmp_path):
    """hydra/launcher=submitit_local (the SLURM plugin's local mode) starts every job of the sweep at once,
    without dividing the cores: threads=1 keeps two jobs from thrashing two cores."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="hydra-submitit-launcher not installed (pip install -e '.[cluster]')")
    _, sweep, probes = run_sweep(repo_root, tmp_path, ["hydra/launcher=submitit_local", "threads=1"])
    assert_overlapped(probes)
    assert all(p["threads_at_end"] == 1 for p in probes.values()), probes
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2  # submitit's record of each job


def test_slurm_launcher_config_composes_over_the_plugins(repo_root):
    """conf/hydra/launcher/slurm.yaml extends the plugin's submitit_slurm: our defaults, its other keys."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="hydra-submitit-launcher not installed (pip install -e '.[cluster]')")
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(repo_root / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.timeout_min, launcher.cpus_per_task, launcher.gpus_per_node, launcher.tasks_per_node) == \
        (240, 4, 1, 1)
    assert launcher.partition == "gpu" and launcher.max_num_timeout == 0
    assert launcher.setup == ["export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK"]


QUICK = ["data.train_limit=300", "data.eval_limit=4", "tokenizer.vocab_size=400", "model.emb_size=16",
         "model.hidden_size=32", "train.batch_tokens=150", "train.valid_every=2", "train.max_epochs=null",
         "decode.beam_size=1", "eval.plots=0", "device=cpu", "threads=1", "train.keep_best=0"]


def sweep(repo_root, *args, timeout=240):
    """``train.py -m`` with the quick settings; the completed process (its output in ``.output``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "train.py", "-m", *QUICK, *args], check=False, cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=timeout)
    proc.output = proc.stdout + proc.stderr
    return proc


def files(folder) -> dict:
    """The contents of every file of a sweep folder's jobs, by path (Hydra's multirun.yaml and the sweep's report
    aside)."""
    return {p: p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and p.name != "multirun.yaml" and "report" not in p.relative_to(folder).parts[:1]}


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]],
                         ids=["basic", "parallel"])
def test_a_refused_job_fails_alone_and_every_failure_is_named(repo_root, tmp_path, launcher):
    """Jobs #0 and #2 are refused (model.dropout must be below 1), #1 trains. Before, the sweep ended with the
    first failure's traceback alone: job #2's error was never said. Now every job that can run runs, each failed
    job is named with its folder and its error, and the sweep exits with status 1."""
    if launcher:
        pytest.importorskip("hydra_plugins.hydra_joblib_launcher",
                            reason="hydra-joblib-launcher not installed (pip install -e '.[cluster]')")
    folder = tmp_path / "sweep"
    proc = sweep(repo_root, *launcher, "train.max_steps=2", "model.dropout=1.5,0.3,2.0", f"hydra.sweep.dir={folder}")
    assert proc.returncode == 1, proc.output[-3000:]
    for num, value in ((0, "1.5"), (2, "2.0")):
        said = f"train.py: error in job #{num} of the sweep ({folder / f'{num}_additive_luong'}): " \
               f"model.dropout={value} must be below 1"
        assert said in proc.stderr, proc.output[-3000:]
    assert (folder / "1_additive_luong" / "eval" / "test.scores.json").is_file()
    assert "Traceback" not in proc.output
    summary = (folder / "report" / "summary.md").read_text()  # the sweep's report lists the failed jobs
    for num, value in ((0, "1.5"), (2, "2.0")):
        assert f"Job #{num} ({folder / f'{num}_additive_luong'}) failed: " in summary, summary[-2000:]
        assert f"model.dropout={value} must be below 1" in summary
    assert "nmt.report: the report of the sweep's finished jobs: " + str(folder / "report" / "index.html") \
        in proc.stderr


def test_a_second_sweep_into_the_same_folder_never_mixes_runs(repo_root, tmp_path):
    """Before, a second sweep of other settings (here train.lr) into a sweep folder trained nothing: each job
    resumed the finished run in its folder and reported that model's BLEU under the new settings, rewriting its
    .hydra/config.yaml. Now each such job is refused, naming its folder and the setting, and leaves the folder as
    it was; the first sweep's own settings (with a larger budget) resume its runs."""
    folder = tmp_path / "sweep"
    first = sweep(repo_root, "train.max_steps=2", "attention=additive,dot", f"hydra.sweep.dir={folder}")
    assert first.returncode == 0, first.output[-3000:]
    kept = files(folder)
    second = sweep(repo_root, "train.max_steps=2", "train.lr=0.01", "attention=additive,dot",
                   f"hydra.sweep.dir={folder}")
    assert second.returncode == 1, second.output[-3000:]
    for job in sorted(JOBS):
        said = f"train.py: error in job #{job[0]} of the sweep ({folder / job}): job folder {folder / job} already " \
               "holds a run of other settings than this job's: train.lr=0.001 in that run, 0.01 in this command"
        assert said in second.stderr, second.output[-3000:]
    assert files(folder) == kept
    third = sweep(repo_root, "train.max_steps=4", "attention=additive,dot", f"hydra.sweep.dir={folder}")
    assert third.returncode == 0, third.output[-3000:]
    assert third.output.count("resumed at step 2") == 2
