"""Crash safety of training: a ``python train.py`` process killed (SIGKILL: no handler runs) while it writes a
checkpoint, while it validates, or while it writes the final evaluation, leaves a run folder that the same
command resumes to completion, with every checkpoint loadable and each validation recorded once; a full disk
during a checkpoint write keeps the previous checkpoint and ends with one line naming the file.

The faults come from ``tests/fault_hook.py`` at chosen moments (a function entered, a file's write half done).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.data import textio
from nmt.models import checkpoint
from nmt.settings import override
from nmt.training.state import Progress
from nmt.training.validation import append_record, forget_unsaved

HOOK = Path(__file__).resolve().parents[1] / "fault_hook.py"
TINY = ["data.train_limit=300", "data.eval_limit=4", "tokenizer.vocab_size=500", "model.emb_size=8",
        "model.hidden_size=16", "train.batch_tokens=150", "train.valid_every=2", "train.max_steps=6",
        "train.max_epochs=null", "decode.beam_size=2", "eval.plots=0", "device=cpu"]


def train_py(repo_root, run_dir: Path, fault: dict | None = None):
    """The same ``python train.py`` command every time, with ``fault`` injected (see fault_hook.py)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    if fault:
        hook = run_dir.parent / "hook"
        hook.mkdir(exist_ok=True)
        shutil.copyfile(HOOK, hook / "sitecustomize.py")
        env.update(PYTHONPATH=os.pathsep.join([str(hook), str(repo_root)]), NMT_FAULT=json.dumps(fault))
    return subprocess.run([sys.executable, "train.py", *TINY, override("hydra.run.dir", run_dir)], check=False,
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=180)


def progress(path: Path) -> dict:
    return torch.load(path, weights_only=True)["progress"]


def metric_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_usable(run_dir: Path) -> None:
    """Every checkpoint loads (the model rebuilds from it)."""
    for path in sorted((run_dir / "checkpoints").glob("*.pt")):
        checkpoint.load(path)


def temporary_files(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob(".*.tmp"))


def test_killed_at_chosen_moments_the_same_command_resumes_to_completion(repo_root, tmp_path):
    run_dir = tmp_path / "run"
    # 1. killed half-way through writing last.pt at the second validation (step 4): last.pt of step 2 stays
    proc = train_py(repo_root, run_dir, {"at": "nmt.data.textio:write_file", "path": "last.pt", "call": 2,
                                         "do": "kill"})
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert progress(run_dir / "checkpoints" / "last.pt")["step"] == 2
    assert_usable(run_dir)
    # 2. resumed from step 2, killed inside the validation of step 6 (the second of this process)
    proc = train_py(repo_root, run_dir, {"at": "nmt.training.validation:greedy_bleu", "call": 2, "do": "kill"})
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert "resumed at step 2" in proc.stdout + proc.stderr
    assert progress(run_dir / "checkpoints" / "last.pt")["step"] == 4
    assert metric_steps(run_dir) == [2, 4], "the step 4 record of the first attempt was kept twice"
    assert_usable(run_dir)
    # 3. resumed from step 4, killed half-way through writing the final evaluation's test alignments
    proc = train_py(repo_root, run_dir, {"at": "nmt.data.textio:write_file", "path": "test.alignments.npz",
                                         "do": "kill"})
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert progress(run_dir / "checkpoints" / "last.pt")["step"] == 6
    # 4. the same command: nothing left to train, the final evaluation, nothing left over
    proc = train_py(repo_root, run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nothing left to train at step 6" in proc.stdout + proc.stderr
    assert json.loads((run_dir / "eval" / "test.scores.json").read_text())["bleu"] >= 0
    assert metric_steps(run_dir) == [2, 4, 6]
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*.pt")) == ["step_2.pt", "step_4.pt",
                                                                                    "step_6.pt"]
    assert temporary_files(run_dir) == []
    assert_usable(run_dir)


def test_a_full_disk_during_a_checkpoint_write_keeps_the_previous_one_and_says_so(repo_root, tmp_path):
    """It used to end in a 33-line traceback, and the retry recorded the lost step's validation twice."""
    run_dir = tmp_path / "run"
    proc = train_py(repo_root, run_dir, {"at": "nmt.data.textio:write_file", "path": "last.pt", "call": 2,
                                         "do": "ENOSPC"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = run_dir / "checkpoints" / "last.pt"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0] == (f"train.py: error: cannot write {last}: No space left on device: free some space on that "
                        f"disk (df -h {last.parent}) or write elsewhere, then run the command again (no file was "
                        "replaced)")
    saved = torch.load(last, weights_only=True)
    assert saved["progress"]["step"] == 2
    step_2 = torch.load(run_dir / "checkpoints" / "step_2.pt", weights_only=True)["model"]
    assert all(torch.equal(saved["model"][k], step_2[k]) for k in step_2)  # the weights of step 2, intact
    assert temporary_files(run_dir) == []
    proc = train_py(repo_root, run_dir)  # space freed: the same command resumes
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed at step 2" in proc.stdout + proc.stderr
    assert metric_steps(run_dir) == [2, 4, 6]
    assert_usable(run_dir)


def full_disk_after_half(monkeypatch) -> None:
    """Make :func:`nmt.data.textio.write_file` write half of the bytes, then fail as a full disk does."""
    original = textio.write_file

    def half_then_enospc(fd, payload, path):
        original(fd, payload[: len(payload) // 2], path)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(textio, "write_file", half_then_enospc)


def test_write_payload_on_a_full_disk_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoints" / "last.pt"
    before = {"model": {"w": torch.arange(1000.0)}, "progress": {"step": 2}}
    checkpoint.write_payload(path, before)
    full_disk_after_half(monkeypatch)
    with pytest.raises(textio.WriteError, match=rf"^cannot write {path}: No space left on device: ") as caught:
        checkpoint.write_payload(path, {"model": {"w": torch.zeros(1000)}, "progress": {"step": 4}})
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
    after = torch.load(path, weights_only=True)
    assert torch.equal(after["model"]["w"], before["model"]["w"]) and after["progress"] == {"step": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]


def test_a_full_disk_while_appending_a_metrics_record_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """A line cut short used to stay, and the next record (after a resume) was glued to it: one broken line."""
    path = tmp_path / "metrics.jsonl"
    append_record(path, {"step": 2, "valid_bleu": 1.0})
    before = path.read_bytes()
    full_disk_after_half(monkeypatch)
    with pytest.raises(textio.WriteError, match=rf"^cannot write {path}: No space left on device: .*\(its earlier "
                                                r"records are intact\)$"):
        append_record(path, {"step": 4, "valid_bleu": 2.0})
    assert path.read_bytes() == before


@pytest.mark.parametrize("code, hint", [(errno.EDQUOT, "quota"), (errno.EROFS, "read-only"),
                                        (errno.EACCES, "permission")])
def test_other_failed_writes_say_what_to_do(tmp_path, monkeypatch, code, hint):
    def fail(fd, payload, path):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(textio, "write_file", fail)
    with pytest.raises(textio.WriteError, match=rf"^cannot write {tmp_path / 'x.txt'}: .*{hint}"):
        textio.atomic_write(tmp_path / "x.txt", "x\n")
    assert list(tmp_path.iterdir()) == []


def test_a_resume_drops_what_the_lost_attempt_wrote_after_its_checkpoint(tmp_path, caplog):
    """Killed between the metrics record of step 4 (its last line half-written) and last.pt: the resume at step
    2 forgets the record and the step checkpoint of step 4, which the resumed run writes again."""
    (tmp_path / "checkpoints").mkdir()
    for step in (2, 4):
        (tmp_path / "checkpoints" / f"step_{step}.pt").write_bytes(b"x")
    (tmp_path / "checkpoints" / ".last.pt.k2j4_x9q.tmp").write_bytes(b"half")
    records = [json.dumps({"step": step, "valid_bleu": 1.0}) + "\n" for step in (2, 4)]
    (tmp_path / "metrics.jsonl").write_text("".join(records) + '{"step": 6, "val', encoding="utf-8")
    caplog.set_level("INFO", logger="nmt")
    forget_unsaved(tmp_path, Progress(step=2))
    assert (tmp_path / "metrics.jsonl").read_text(encoding="utf-8") == records[0]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_2.pt"]
    assert "after step 2" in caplog.text
    forget_unsaved(tmp_path, Progress(step=0))  # a first attempt that died before its first last.pt
    assert not (tmp_path / "metrics.jsonl").exists() and not list((tmp_path / "checkpoints").iterdir())
