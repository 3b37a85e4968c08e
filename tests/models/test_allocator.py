"""nmt.models.allocator: freed tensor memory is reused instead of returned to the kernel and faulted in again."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from nmt.models.allocator import reuse_freed_memory, user_choice

# Ten rounds of the pattern of a training step: 30 tensors of 4 MB written, then all freed. Prints the minor page
# faults of rounds 2-10 (the first round faults in any case) and what reuse_freed_memory() said.
ROUNDS = """
import resource, torch
from nmt.models.allocator import reuse_freed_memory
said = reuse_freed_memory()
def round_():
    held = [torch.empty(1024, 1024).fill_(1.0) for _ in range(30)]
    del held
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(9):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(said)
"""


def faults(**env) -> tuple[int, str]:
    """Page faults of ROUNDS in a fresh process, and the allocator's phrase."""
    clean = {k: v for k, v in os.environ.items() if k not in ("NMT_MALLOC", "LD_PRELOAD", "GLIBC_TUNABLES")
             and not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", ROUNDS], env={**clean, **env}, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return int(out[0]), out[1]


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_freed_blocks_are_reused_without_page_faults():
    tuned, said = faults(NMT_MALLOC="reuse")
    default, said_default = faults()
    assert said.startswith("glibc") and "256 MB" in said
    assert said_default == "malloc as it comes (NMT_MALLOC=reuse not set)"
    # one round writes 30,720 pages; glibc's default trims the freed heap and faults them back in in some or all
    # of the 9 later rounds (31,000-276,000 faults measured), the tuned heap keeps them (5,000-7,000)
    assert tuned < 15_000, tuned
    assert default > 2 * tuned, (tuned, default)


def test_only_nmt_malloc_reuse_asks_for_the_tuning():
    assert user_choice({"NMT_MALLOC": " Reuse "}) is None
    for environ in ({}, {"NMT_MALLOC": ""}):
        assert user_choice(environ) == "NMT_MALLOC=reuse not set"
    assert user_choice({"NMT_MALLOC": "Default"}) == "NMT_MALLOC=default"


def test_a_command_that_reuses_by_default_keeps_glibc_with_nmt_malloc_default():
    """translate.py's default (``default="reuse"``): tuned when NMT_MALLOC is unset or empty, not with
    NMT_MALLOC=default."""
    for environ in ({}, {"NMT_MALLOC": " "}, {"NMT_MALLOC": "reuse"}):
        assert user_choice(environ, default="reuse") is None
    assert user_choice({"NMT_MALLOC": "default"}, default="reuse") == "NMT_MALLOC=default"


def test_a_misspelt_nmt_malloc_is_refused_by_name():
    with pytest.raises(ValueError, match="NMT_MALLOC=resue: use NMT_MALLOC=reuse .* or NMT_MALLOC=default"):
        user_choice({"NMT_MALLOC": "resue"})


def test_train_py_refuses_a_misspelt_nmt_malloc_in_one_line(repo_root, tmp_path):
    env = {**os.environ, "NMT_MALLOC": "resue"}
    proc = subprocess.run([sys.executable, str(repo_root / "train.py"), "device=cpu"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("train.py: error: NMT_MALLOC=resue: use NMT_MALLOC=reuse")
    assert not (tmp_path / "outputs").exists()  # refused before the run folder was used


JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


@pytest.mark.skipif(not os.path.exists(JEMALLOC), reason="needs jemalloc (apt-get install libjemalloc2; .ci/run does)")
def test_a_preloaded_allocator_is_found_by_its_malloc_not_by_its_name(tmp_path):
    """jemalloc under a name without 'malloc' in it: the process's malloc is not glibc's, nothing is changed."""
    renamed = tmp_path / "libje.so.2"
    renamed.symlink_to(JEMALLOC)
    said = subprocess.run([sys.executable, "-c", "from nmt.models.allocator import reuse_freed_memory as r; print(r())"],
                          env={**os.environ, "LD_PRELOAD": str(renamed), "NMT_MALLOC": "reuse"}, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert said == f"allocator left as it is (malloc is not glibc's, LD_PRELOAD={renamed})"


def test_the_answer_is_given_once_per_process():
    assert reuse_freed_memory() == reuse_freed_memory()
