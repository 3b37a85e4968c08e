"""``translate.py`` stopped by a signal or a full disk: one line, the conventional exit status, and no output file
half-written or replaced alone. Each case is a real ``python translate.py`` subprocess whose fault comes from
``tests/fault_hook.py`` at a chosen moment (a function entered, a file's write half done), not after a sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.training.run import train

HOOK = Path(__file__).resolve().parents[1] / "fault_hook.py"
TINY = ["data.train_limit=300", "data.eval_limit=4", "tokenizer.vocab_size=500", "model.emb_size=8",
        "model.hidden_size=16", "train.batch_tokens=150", "train.max_steps=2", "train.valid_every=2",
        "train.keep_best=0", "decode.beam_size=2", "eval.plots=0", "device=cpu"]
LINES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.", "", "Eine Frau liest ein Buch."] * 3


@pytest.fixture(scope="module")
def model_file(tmp_path_factory, compose_cfg) -> Path:
    run_dir = tmp_path_factory.mktemp("tiny")
    train(compose_cfg(TINY), run_dir)
    return run_dir / "checkpoints" / "best.pt"


def translate_py(repo_root, tmp_path, model_file, fault: dict | None, *extra):
    """``python translate.py`` on LINES into ``tmp_path/out/``, with ``fault`` injected (see fault_hook.py)."""
    (tmp_path / "in.de").write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    if fault:
        (tmp_path / "hook").mkdir()
        shutil.copyfile(HOOK, tmp_path / "hook" / "sitecustomize.py")
        env.update(PYTHONPATH=os.pathsep.join([str(tmp_path / "hook"), str(repo_root)]), NMT_FAULT=json.dumps(fault))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    args = [f"checkpoint={model_file}", f"input={tmp_path / 'in.de'}", f"output={out / 'out.en'}", *extra]
    return subprocess.run([sys.executable, "translate.py", *args], check=False, cwd=repo_root, env=env,
                          capture_output=True, text=True, timeout=120)


def last_lines(proc, count: int = 1) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()][-count:]


@pytest.mark.parametrize("signal_name, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_while_translating_writes_nothing_and_says_so_in_one_line(repo_root, tmp_path, model_file,
                                                                           signal_name, status):
    """Ctrl-C used to end in a 36-line KeyboardInterrupt traceback; SIGTERM killed the process on the spot."""
    proc = translate_py(repo_root, tmp_path, model_file, {"at": "nmt.decoding.translation:beam", "do": signal_name},
                        f"nbest={tmp_path / 'out' / 'out.nbest'}", f"alignments={tmp_path / 'out' / 'a.npz'}")
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    out = tmp_path / "out"
    assert last_lines(proc) == [(f"translate.py: interrupted by {signal_name} while translating: nothing was "
                                 f"written to output={out / 'out.en'}, nbest={out / 'out.nbest'}, "
                                 f"alignments={out / 'a.npz'}")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_sigterm_while_writing_the_nbest_list_leaves_the_old_output_and_no_temporary_file(repo_root, tmp_path,
                                                                                          model_file):
    """The signal lands when half of the n-best list is written: the output written just before it must not
    have replaced the old one, and the temporary files go."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "out.en").write_text("old\n", encoding="utf-8")
    proc = translate_py(repo_root, tmp_path, model_file, {"at": "nmt.data.textio:write_file", "path": "out.nbest",
                                                          "do": "SIGTERM"},
                        f"nbest={tmp_path / 'out' / 'out.nbest'}")
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert last_lines(proc)[0].startswith("translate.py: interrupted by SIGTERM while writing: nothing was written")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["out.en"]
    assert (tmp_path / "out" / "out.en").read_text(encoding="utf-8") == "old\n"


@pytest.mark.parametrize("failing", ["out.nbest", "a.jsonl"])
def test_a_full_disk_for_any_output_replaces_none_and_names_the_file_in_one_line(repo_root, tmp_path, model_file,
                                                                                failing):
    """``output=`` used to be replaced before ``nbest=`` or ``alignments=`` failed; and the error
    (``[Errno 28] No space left on device``) did not say which file."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("out.en", "out.nbest", "a.npz", "a.jsonl"):
        (out / name).write_text(f"old {name}\n", encoding="utf-8")
    proc = translate_py(repo_root, tmp_path, model_file, {"at": "nmt.data.textio:write_file", "path": failing,
                                                          "do": "ENOSPC"},
                        f"nbest={out / 'out.nbest'}", f"alignments={out / 'a.npz'}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert last_lines(proc) == [(f"translate.py: error: cannot write {out / failing}: No space left on device: "
                                 f"free some space on that disk (df -h {out}) or write elsewhere, then run the "
                                 "command again (no file was replaced)")]
    for name in ("out.en", "out.nbest", "a.npz", "a.jsonl"):
        assert (out / name).read_text(encoding="utf-8") == f"old {name}\n", name
    assert sorted(p.name for p in out.iterdir()) == ["a.jsonl", "a.npz", "out.en", "out.nbest"]  # no temp file


def test_the_outputs_written_together_still_translate_every_line(repo_root, tmp_path, model_file):
    proc = translate_py(repo_root, tmp_path, model_file, None, f"nbest={tmp_path / 'out' / 'out.nbest'}",
                        f"alignments={tmp_path / 'out' / 'a.npz'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    assert len((out / "out.en").read_text(encoding="utf-8").splitlines()) == len(LINES)
    assert sorted(p.name for p in out.iterdir()) == ["a.jsonl", "a.npz", "out.en", "out.nbest"]
