"""Bad input, odd paths and scoring: a clear error or a documented, lossless behaviour, never a silent wrong answer."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest

from nmt.decoding.scoring import score
from nmt.decoding.translation import translate
from nmt.models import checkpoint
from nmt.models.device import pick_device
from nmt.training.run import train

TINY = ["data.train_limit=400", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=200", "train.max_steps=3", "train.valid_every=3",
        "decode.beam_size=2", "eval.plots=0", "device=cpu"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, compose_cfg):
    run_dir = tmp_path_factory.mktemp("tiny") / "a=b"  # '=' in the path: see the quoting test
    train(compose_cfg(TINY), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def loaded(tiny_run):
    return checkpoint.load(tiny_run / "checkpoints" / "best.pt")


def run_script(args, cwd, timeout=300):
    return subprocess.run([sys.executable, *args], check=False, cwd=cwd, env=ENV, capture_output=True, timeout=timeout)


def test_very_long_line_is_cut_with_a_warning_and_keeps_line_count(loaded, compose_cfg, caplog):
    model, _, src_tok, tgt_tok, _ = loaded
    decode = compose_cfg(["decode=greedy", "decode.max_src_len=50"]).decode
    lines = ["Ein Hund läuft.", "Hund " * 2000, "", "Zwei Männer."]
    with caplog.at_level(logging.WARNING):
        out = translate(model, src_tok, tgt_tok, lines, decode)
    assert len(out) == 4
    assert "line 2" in caplog.text and "max_src_len=50" in caplog.text
    assert len(out[1].src_pieces) == 50 and out[1].src_pieces[-1] == "</s>"
    assert out[1].alignment.shape == (len(out[1].hyp_pieces), 50)
    assert out[2].text == "" and out[2].alignment.shape == (0, 0)


def test_latin1_input_stops_with_file_line_and_byte_and_writes_no_output(tiny_run, repo_root, tmp_path):
    bad = tmp_path / "latin1.de"
    bad.write_bytes("Ein Hund.\nEin Mädchen.\n".encode("latin-1"))
    out = tmp_path / "out.en"
    proc = run_script(["translate.py", f"checkpoint='{tiny_run}/checkpoints/best.pt'", f"input={bad}",
                       f"output={out}"], repo_root)
    stderr = proc.stderr.decode()
    assert proc.returncode != 0
    assert "latin1.de: line 2" in stderr and "0xe4" in stderr and "UTF-8" in stderr
    assert not out.exists()


def test_bom_and_crlf_input_translate_like_clean_input(tiny_run, repo_root, tmp_path):
    """Also: relative paths resolve against the caller's folder, and a quoted checkpoint path with '=' works."""
    (tmp_path / "clean.de").write_text("Ein Hund läuft.\nZwei Männer.\n", encoding="utf-8")
    (tmp_path / "dos.de").write_bytes(b"\xef\xbb\xbf" + "Ein Hund läuft.\r\nZwei Männer.\r\n".encode())
    for name in ("clean", "dos"):
        proc = run_script([str(repo_root / "translate.py"), f"checkpoint='{tiny_run}/checkpoints/best.pt'",
                           f"input={name}.de", f"output={name}.en", "hydra.job.chdir=true"], tmp_path)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    clean, dos = (tmp_path / "clean.en").read_text(), (tmp_path / "dos.en").read_text()
    assert clean == dos and clean.count("\n") == 2 and "\r" not in dos


def test_unquoted_path_with_equals_sign_is_refused_with_the_quoted_form_that_works(tiny_run, repo_root, tmp_path):
    (tmp_path / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    proc = run_script(["translate.py", f"checkpoint={tiny_run}/checkpoints/best.pt", f"input={tmp_path}/in.de",
                       "output=-"], repo_root)
    stderr = proc.stderr.decode()
    # refused before Hydra's parser sees it, with the form to write (docs/translating.md: quote such a path)
    assert proc.returncode == 1 and f"cannot read 'checkpoint={tiny_run}/checkpoints/best.pt'" in stderr
    assert "Traceback" not in stderr and "mismatched input" not in stderr and proc.stdout == b""
    (suggested,) = shlex.split(stderr.strip().rsplit(": ", 1)[1])  # as the shell passes it on
    proc = run_script(["translate.py", suggested, f"input={tmp_path}/in.de", "output=-"], repo_root)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert proc.stdout.decode().count("\n") == 1  # one translation for the one input line


def test_training_files_with_crlf_bom_empty_lines_and_relative_paths(repo_root, tmp_path):
    """data=files from the caller's folder with hydra.job.chdir=true: CRLF/BOM are cleaned, empty pairs dropped."""
    src = ["Ein Hund läuft.", "", "Zwei Männer spielen.", "Eine Frau singt."] * 40
    tgt = ["A dog runs.", "Nothing.", "Two men play.", ""] * 40
    (tmp_path / "train.de").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(src).encode() + b"\r\n")
    (tmp_path / "train.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    proc = run_script([str(repo_root / "train.py"), "data=files", "data.train_src=train.de", "data.train_tgt=train.en",
                       "data.valid_src=train.de", "data.valid_tgt=train.en", "data.eval_limit=4",
                       "tokenizer.vocab_size=300", "model.emb_size=16", "model.hidden_size=32",
                       "train.max_steps=2", "train.valid_every=2", "decode.beam_size=2", "eval.plots=0",
                       "hydra.run.dir=run", "hydra.job.chdir=true"], tmp_path)
    output = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, output[-3000:]
    assert "dropped 80 pairs with an empty side" in (tmp_path / "run" / "train.log").read_text()
    pieces = (tmp_path / "run" / "spm" / "joint.vocab").read_text(encoding="utf-8")
    assert "\r" not in pieces and "\ufeff" not in pieces


def test_mismatched_training_files_stop_before_training(repo_root, tmp_path):
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("one\ntwo\n", encoding="utf-8")
    proc = run_script(["train.py", "data=files", f"data.train_src={tmp_path}/a.de", f"data.train_tgt={tmp_path}/a.en",
                       f"data.valid_src={tmp_path}/a.de", f"data.valid_tgt={tmp_path}/a.en",
                       f"hydra.run.dir={tmp_path}/run"], repo_root)
    output = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in output  # one line naming both files, not a traceback
    last = proc.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("train.py: error: ") and "a.de has 3 lines" in last and "a.en has 2" in last
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_refused_setting_leaves_no_run_folder_but_keeps_one_in_use(repo_root, tmp_path):
    """model.dropout=1.5 is refused before any work: the folder Hydra made for it under outputs/ goes, and
    outputs/ too when the command made it; in a folder named by hydra.run.dir (perhaps the user's) only Hydra's
    files go; a folder that already held something (a user's file, a log with lines in it) stays as it was.
    A missing corpus is refused after its first log lines, and leaves no folder either."""
    proc = run_script([str(repo_root / "train.py"), "model.dropout=1.5"], tmp_path)
    assert proc.returncode == 1, proc.stderr.decode()[-2000:]
    assert proc.stderr.decode().strip().splitlines()[-1] == "train.py: error: model.dropout=1.5 must be below 1"
    assert not (tmp_path / "outputs").exists()
    (tmp_path / "outputs").mkdir()  # the user's (empty) outputs/ stays
    proc = run_script([str(repo_root / "train.py"), "train.max_minutes=abc"], tmp_path)
    assert proc.returncode == 1 and list((tmp_path / "outputs").iterdir()) == []
    (tmp_path / "corpora").mkdir()  # no multi30k/ in it: refused when the corpus is loaded, after a logged warning
    proc = subprocess.run([sys.executable, str(repo_root / "train.py"), "threads=1"], check=False, cwd=tmp_path,
                          env={**ENV, "NMT_DATA_DIR": str(tmp_path / "corpora")}, capture_output=True, timeout=300)
    assert proc.returncode == 1 and f"{tmp_path / 'corpora' / 'multi30k'}" in proc.stderr.decode().splitlines()[-1]
    assert list((tmp_path / "outputs").iterdir()) == []  # its log held only lines the console showed
    proc = run_script(["train.py", "model.dropout=1.5", f"hydra.run.dir={tmp_path}/run"], repo_root)
    assert proc.returncode == 1 and list((tmp_path / "run").iterdir()) == []
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine\n", encoding="utf-8")
    (tmp_path / "logged").mkdir()
    (tmp_path / "logged" / "train.log").write_text("step 100 (epoch 0)\n", encoding="utf-8")
    for folder in ("used", "logged"):
        proc = run_script(["train.py", "model.dropout=1.5", f"hydra.run.dir={tmp_path}/{folder}"], repo_root)
        assert proc.returncode == 1
        assert (tmp_path / folder / ".hydra").is_dir()  # nothing removed, not even Hydra's own files
    assert (tmp_path / "used" / "notes.txt").read_text(encoding="utf-8") == "mine\n"
    assert (tmp_path / "logged" / "train.log").read_text(encoding="utf-8").startswith("step 100 (epoch 0)\n")


def test_score_refuses_mismatch_and_handles_empty_hypotheses():
    with pytest.raises(ValueError, match="2 hypotheses but 3 references"):
        score(["a", "b"], ["a", "b", "c"])
    result = score(["", "a dog runs in the park"], ["a cat sits", "a dog runs in the park"])
    assert 0 < result["bleu"] < 100 and result["bleu_signature"].startswith("nrefs:1")
    assert score(["a dog runs ."], ["a dog runs ."])["bleu"] == pytest.approx(100.0)


def test_saved_alignments_are_float32_with_matching_tokens(loaded, compose_cfg, tmp_path):
    from nmt.decoding.artifacts import save_results

    model, _, src_tok, tgt_tok, _ = loaded
    out = translate(model, src_tok, tgt_tok, ["Ein Hund.", "  "], compose_cfg(["decode=greedy"]).decode)
    save_results(tmp_path / "x", out)
    arrays = np.load(tmp_path / "x.alignments.npz")
    assert arrays["0"].dtype == np.float32 and arrays["0"].shape == (len(out[0].hyp_pieces), len(out[0].src_pieces))
    assert arrays["1"].shape == (0, 0)
    assert (tmp_path / "x.align").read_text().count("\n") == 2


def test_checkpoint_with_wrong_or_broken_sentencepiece_model_says_so(tiny_run, tmp_path):
    import torch

    from nmt.data.tokenizer import train_spm
    from nmt.models.checkpoint import CheckpointError, bytes_tensor

    payload = torch.load(tiny_run / "checkpoints" / "best.pt", weights_only=True)
    other = train_spm(["ein kleiner Hund läuft schnell über die Wiese"] * 50, tmp_path / "other.model", vocab_size=290)
    payload["spm"]["tgt"] = bytes_tensor(other.read_bytes())
    torch.save(payload, tmp_path / "foreign.pt")  # its restricted target vocabulary names ids the model lacks
    with pytest.raises(CheckpointError, match=r"foreign\.pt.*unusable.*restricted vocabulary"):
        checkpoint.load(tmp_path / "foreign.pt")
    del payload["spm"]["tgt_vocab"]
    torch.save(payload, tmp_path / "mismatch.pt")
    with pytest.raises(CheckpointError, match=r"mismatch\.pt.*sentencepiece vocabularies"):
        checkpoint.load(tmp_path / "mismatch.pt")
    payload["spm"]["tgt"] = bytes_tensor(b"not a sentencepiece model")
    torch.save(payload, tmp_path / "broken.pt")
    with pytest.raises(CheckpointError, match=r"broken\.pt.*sentencepiece model stored in it is unusable"):
        checkpoint.load(tmp_path / "broken.pt")


@pytest.mark.parametrize("attention", [
    {"_target_": "builtins.exec", "_args_": ["open('PWNED', 'w').close()"]},  # not an attention model
    {"_target_": "nmt.attention.Additive", "_partial_": True, "_args_": ["x"]},  # extra positional arguments
    {"_target_": "nmt.attention.Additive", "_partial_": True,  # a nested node Hydra would instantiate
     "hidden_size": {"_target_": "builtins.exec", "_args_": ["open('PWNED', 'w').close()"]}},
    {"_target_": "nmt.attention.Attention", "_partial_": True},  # the abstract base, not a score model
])
def test_a_checkpoint_cannot_make_loading_run_code(tiny_run, tmp_path, monkeypatch, attention):
    """The stored config is data from whoever wrote the file: its attention node may only name an attention
    model with plain settings, or ``build_model``'s ``instantiate`` would call anything it names."""
    import torch

    from nmt.models.checkpoint import CheckpointError

    monkeypatch.chdir(tmp_path)
    payload = torch.load(tiny_run / "checkpoints" / "best.pt", weights_only=True)
    payload["config"]["attention"] = attention
    torch.save(payload, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match=r"evil\.pt: refused: its config (names|holds) attention\."):
        checkpoint.load(tmp_path / "evil.pt")
    assert not (tmp_path / "PWNED").exists()
    # an ordinary attention node with different plain settings is still loaded (and then fails on the weights)
    payload["config"]["attention"] = {"_target_": "nmt.attention.Dot", "_partial_": True, "scaled": False}
    torch.save(payload, tmp_path / "dot.pt")
    with pytest.raises(CheckpointError, match=r"dot\.pt: weights do not fit the architecture"):
        checkpoint.load(tmp_path / "dot.pt")


@pytest.mark.parametrize("where", ["attention", "model"])
def test_a_checkpoint_cannot_make_loading_run_code_through_an_interpolation(tiny_run, tmp_path, monkeypatch, where):
    """A plain-looking string setting ``"${x}"`` passed the attention check, and Hydra's ``instantiate`` then
    resolved it to a top-level node ``x`` and built whatever that named (found by a review: it created a file)."""
    import torch

    from nmt.models.checkpoint import CheckpointError

    monkeypatch.chdir(tmp_path)
    payload = torch.load(tiny_run / "checkpoints" / "best.pt", weights_only=True)
    payload["config"]["x"] = {"_target_": "pathlib.Path.touch", "_args_": [{"_target_": "pathlib.Path",
                                                                           "_args_": [str(tmp_path / "PWNED")]}]}
    if where == "attention":
        payload["config"]["attention"]["scaled"] = "${x}"
    else:
        payload["config"]["model"]["dropout"] = "${oc.env:HOME}"
    torch.save(payload, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match=rf"evil\.pt: refused: config\.{where}\.\w+ holds the interpolation"):
        checkpoint.load(tmp_path / "evil.pt")
    assert not (tmp_path / "PWNED").exists()


def test_translate_with_a_missing_checkpoint_says_so_in_one_line(repo_root, tmp_path):
    (tmp_path / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    proc = run_script([str(repo_root / "translate.py"), f"checkpoint={tmp_path}/nope.pt", "input=in.de",
                       "output=out.en"], tmp_path)
    stderr = proc.stderr.decode()
    assert proc.returncode == 1
    assert stderr.strip() == (f"translate.py: error: checkpoint not found: {tmp_path}/nope.pt ({tmp_path} holds no "
                              "checkpoint and no run folder: train.py writes each run to a folder of its own under "
                              "outputs/ of the folder it was started in, and prints it as 'run folder ...')")
    assert not (tmp_path / "out.en").exists()


def test_translate_names_a_missing_checkpoint_before_a_missing_input(repo_root, tmp_path):
    """The README's line pasted as it is, in a folder with neither its run folder nor its input."""
    proc = run_script([str(repo_root / "translate.py"), "checkpoint=outputs/RUN", "input=news.de",
                       "output=news.en"], tmp_path)
    stderr = proc.stderr.decode()
    assert proc.returncode == 1
    assert stderr.startswith(f"translate.py: error: checkpoint not found: {tmp_path}/outputs/RUN"), stderr
    assert "news.de" not in stderr
    assert not (tmp_path / "news.en").exists()


def test_a_missing_checkpoint_names_the_run_folder_or_file_meant(tmp_path):
    """The README's placeholder ``outputs/RUN`` pasted as it is gets the newest run folder; a typo of a run folder
    or of a checkpoint file gets the one it is like, not the newest."""
    from nmt.models.checkpoint import CheckpointError

    older, newer = "2026-01-01_10-00-00_additive_luong", "2026-01-02_10-00-00_dot_luong"
    for name, age in ((older, 100), (newer, 10)):
        (tmp_path / "outputs" / name / "checkpoints").mkdir(parents=True)
        os.utime(tmp_path / "outputs" / name / "checkpoints", (time.time() - age,) * 2)
    (tmp_path / "outputs" / "notes").mkdir()  # not a run folder
    outputs, newest = tmp_path / "outputs", tmp_path / "outputs" / newer

    def message(given):
        with pytest.raises(FileNotFoundError) as err:
            checkpoint.load_payload(tmp_path / given)
        return str(err.value)

    for given in ("outputs/RUN", "outputs/RUN/checkpoints/best.pt"):
        assert message(given) == (f"checkpoint not found: {tmp_path / given} (the newest run folder in {outputs} "
                                  f"is {newest}; 2 run folders there)")
    typo = "2026-01-01_10-00-00_additive_loung"
    assert message(f"outputs/{typo}").endswith(f"(did you mean the run folder {outputs / older}?)")
    assert message(f"outputs/{typo}/checkpoints/best.pt").endswith(f"(did you mean the run folder {outputs / older}?)")
    files = outputs / older / "checkpoints"
    for name in ("best.pt", "last.pt", "step_143.pt"):
        (files / name).write_bytes(b"x")
    os.utime(files, (time.time() - 100,) * 2)  # (writing them made it the newest)
    assert message(f"outputs/{older}/checkpoints/bst.pt").endswith(f"(did you mean {files / 'best.pt'}?)")
    assert message(f"outputs/{older}/checkpoints/model.pt").endswith(f"({files} holds best.pt, last.pt, step_143.pt)")
    with pytest.raises(CheckpointError, match=rf"checkpoints is a folder, not a checkpoint file: a folder of "
                       rf"checkpoints \(best\.pt, last\.pt, step_143\.pt\); pass one of them, e\.g\. "
                       rf"{re.escape(str(files / 'best.pt'))}$"):
        checkpoint.load_payload(files)
    with pytest.raises(CheckpointError, match=rf"outputs is a folder, not a checkpoint file: a folder of 2 run "
                       rf"folders; pass one of them, e\.g\. the newest, {re.escape(str(newest))}$"):
        checkpoint.load_payload(outputs)
    assert checkpoint.run_model(files) == files / "best.pt"  # RUN/checkpoints/ stands for RUN


def test_a_missing_checkpoint_without_its_folder_says_where_runs_are_written(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"^checkpoint not found: {re.escape(str(tmp_path))}/outputs/RUN "
                       rf"\(there is no folder {re.escape(str(tmp_path))}/outputs: train\.py writes each run"):
        checkpoint.load_payload(tmp_path / "outputs" / "RUN")
    (tmp_path / "outputs" / "2026-01-01_10-00-00_additive_luong").mkdir(parents=True)  # a refused run's, say
    with pytest.raises(FileNotFoundError, match=rf"^checkpoint not found: {re.escape(str(tmp_path))}/outputs/RUN "
                       rf"\({re.escape(str(tmp_path))}/outputs holds no checkpoint and no run folder: train\.py "):
        checkpoint.load_payload(tmp_path / "outputs" / "RUN")


@pytest.mark.parametrize("key", ["input", "reference"])
def test_translate_with_a_missing_input_or_reference_names_the_key(repo_root, tmp_path, key):
    (tmp_path / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    (tmp_path / "model.pt").write_bytes(b"not opened")  # the checkpoint must exist, and is not read before the input
    given = {"input": "in.de", "reference": None, key: "missing.txt"}
    proc = run_script([str(repo_root / "translate.py"), f"checkpoint={tmp_path}/model.pt", "output=out.en",
                       *(f"{k}={v}" for k, v in given.items() if v)], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == f"translate.py: error: {key}={tmp_path}/missing.txt: file not found"
    assert not (tmp_path / "out.en").exists()


def test_translate_without_input_names_the_missing_key_in_one_line(repo_root, tmp_path):
    proc = run_script([str(repo_root / "translate.py"), f"checkpoint={tmp_path}/model.pt"], tmp_path)
    stderr = proc.stderr.decode()
    assert proc.returncode == 1
    assert stderr.strip().startswith("translate.py: error: missing input=...; usage: python translate.py")
    assert "Traceback" not in stderr


def test_a_run_folder_or_a_text_file_given_as_checkpoint_is_named_for_what_it_is(tiny_run, tmp_path):
    """A run folder gets the path of its checkpoint to pass; a file torch.save did not write is called that, not
    'pickled objects' with torch's advice to load it unsafely."""
    from nmt.models.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"is a folder, not a checkpoint file: a run folder; pass one of its "
                                              r"checkpoints, e\.g\. .*checkpoints/best\.pt"):
        checkpoint.load(tiny_run)
    (tmp_path / "notes.txt").write_text("a text file\n", encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"notes\.txt is not a checkpoint: it is not a file written by "
                                              r"torch\.save \(it starts with b'a te'\)") as err:
        checkpoint.load(tmp_path / "notes.txt")
    assert "weights_only" not in str(err.value)


def test_a_truncated_checkpoint_is_named_in_one_line_with_what_to_use_instead(tiny_run, tmp_path):
    from nmt.models.checkpoint import CheckpointError

    cut = tmp_path / "cut.pt"
    cut.write_bytes((tiny_run / "checkpoints" / "best.pt").read_bytes()[:100_000])  # a copy that stopped short
    with pytest.raises(CheckpointError) as err:
        checkpoint.load(cut)
    message = str(err.value)
    assert message.startswith(f"{cut} is not a readable checkpoint (truncated or not a torch file: ")
    assert message.endswith("copy it again, or use another checkpoint of the run (checkpoints/last.pt, step_N.pt)")
    assert "\n" not in message
    reason = message.split("torch file: ", 1)[1].split("); copy it again", 1)[0]
    assert reason and ". " not in reason  # torch's first sentence, not its advice cut short


def test_a_run_folder_means_the_model_its_final_evaluation_scored(tmp_path):
    """checkpoint=RUN (translate.py, nmt.align): the checkpoint named in eval/test.scores.json (looked up by name,
    so a moved run folder still works), else valid's, else best.pt; a folder without a finished model is an error
    that points to last.pt; a file path is returned unchanged."""
    from nmt.models.checkpoint import CheckpointError, run_model

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"run is a run folder without a finished model \(no .*best\.pt\)$"):
        run_model(run)
    (run / "checkpoints" / "last.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"without a finished model .*; its training state .*last\.pt translates too: give checkpoint=.*last\.pt$"):
        run_model(run)
    for name in ("best.pt", "averaged.pt"):
        (run / "checkpoints" / name).write_bytes(b"x")
    assert run_model(run) == run / "checkpoints" / "best.pt"  # no eval/ yet
    (run / "eval").mkdir()
    (run / "eval" / "valid.scores.json").write_text(json.dumps({"checkpoint": "/gone/run/checkpoints/averaged.pt"}))
    assert run_model(run) == run / "checkpoints" / "averaged.pt"
    (run / "eval" / "test.scores.json").write_text(json.dumps({"checkpoint": "/gone/run/checkpoints/best.pt"}))
    assert run_model(run) == run / "checkpoints" / "best.pt"
    (run / "eval" / "test.scores.json").write_text("{not json")  # unreadable: the next record decides
    assert run_model(run) == run / "checkpoints" / "averaged.pt"
    os.utime(run / "checkpoints" / "best.pt", (2e9, 2e9))  # resumed in the folder: best.pt newer than the record
    assert run_model(run) == run / "checkpoints" / "best.pt"
    assert run_model(run / "checkpoints" / "last.pt") == run / "checkpoints" / "last.pt"
    assert run_model(tmp_path) == tmp_path  # not a run folder: checkpoint.load names it
    with pytest.raises(CheckpointError, match=r"is a folder, not a checkpoint file \(nor a run folder: it has no "
                                              r"checkpoints/\); give a \.pt file written by train\.py or its run folder"):
        checkpoint.load(run / "eval")


def test_translate_checks_the_reference_line_count_before_translating(repo_root, tmp_path):
    """reference= with another line count than input= fails at once, naming both files, and writes nothing (the
    checkpoint is not even opened: this one is not a checkpoint at all)."""
    (tmp_path / "in.de").write_text("Ein Hund.\nZwei Katzen.\n", encoding="utf-8")
    (tmp_path / "ref.en").write_text("A dog.\n", encoding="utf-8")
    (tmp_path / "model.pt").write_bytes(b"not opened")
    proc = run_script([str(repo_root / "translate.py"), "checkpoint=model.pt", "input=in.de", "output=out.en",
                       "reference=ref.en"], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == (f"translate.py: error: {tmp_path}/ref.en has 1 line but {tmp_path}/in.de "
                                            "has 2: reference= needs one reference line per input line")
    assert not (tmp_path / "out.en").exists()


@pytest.mark.parametrize("alignments", ["align", "-"])
def test_translate_refuses_an_alignments_path_without_npz_before_translating(repo_root, tmp_path, alignments):
    """The tokens go to the .jsonl beside the .npz (where nmt.plot looks for them): a path without .npz, or
    stdout, would lose them or write binary to the terminal, so it is refused before any work."""
    (tmp_path / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    proc = run_script([str(repo_root / "translate.py"), "checkpoint=nope.pt", "input=in.de", "output=out.en",
                       f"alignments={alignments}"], tmp_path)
    assert proc.returncode == 1
    shown = alignments if alignments == "-" else f"{tmp_path}/{alignments}"
    assert proc.stderr.decode().strip() == (f"translate.py: error: alignments={shown} must end in .npz (its tokens "
                                            "go to the .jsonl beside it)")
    assert not (tmp_path / "out.en").exists()


@pytest.mark.parametrize("args, message", [
    (["beam_size=0"], "beam_size=0 must be a whole number >= 1 (1 = greedy search)"),  # was silently beam 5
    (["decode.beam_size=-1"], "decode.beam_size=-1 must be a whole number >= 1 (1 = greedy search)"),
    (["output=sub"], "output={tmp}/sub is a folder: give a file name for the output"),  # was a traceback at the end
    (["plots=pics"], "plots={tmp}/pics draws the alignments: add alignments=FILE.npz"),  # was silently nothing
    (["plots=pics", "alignments=a.npz", "plot_first=-1"],  # was silently nothing
     "plot_first=-1 must be a whole number >= 1 (how many of the first lines plots= draws)"),
    (["threads=0"], "threads=0 must be a whole number of CPU threads >= 1 (or null: all cores)"),
    (["input=sub"], "input={tmp}/sub is a folder, not a file"),
    # was: every output line empty, rc 0
    (["decode.batch_size=-1"], "decode.batch_size=-1 must be a whole number >= 1 (sentences per batch)"),
    (["decode.n_best=1.5", "nbest=n.txt"], ("decode.n_best=1.5 must be a whole number between 1 and the beam size "
                                            "(5): a beam of K keeps K hypotheses; raise beam_size")),  # a traceback
    (["decode.max_src_len=null"], ("decode.max_src_len=None must be a whole number >= 2 (subwords kept of a source, "
                                   "</s> included)")),
    (["input=-", "reference=-"], "input=- and reference=- would both read stdin: give the reference as a file"),
    # was a traceback after translating everything
    (["output=in.de/out.en"], "output={tmp}/in.de/out.en: {tmp}/in.de is a file, not a folder"),
    (["alignments=in.de/x/a.npz"], "alignments={tmp}/in.de/x/a.npz: {tmp}/in.de is a file, not a folder"),
])
def test_translate_refuses_bad_settings_in_one_line_before_translating(repo_root, tmp_path, args, message):
    (tmp_path / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "model.pt").write_bytes(b"not opened")  # refused before the checkpoint is read
    proc = run_script([str(repo_root / "translate.py"), "checkpoint=model.pt", "input=in.de", "output=out.en", *args],
                      tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == "translate.py: error: " + message.format(tmp=tmp_path)
    assert not (tmp_path / "out.en").exists()


def test_lines_of_characters_that_normalization_removes_are_empty(loaded, compose_cfg):
    """U+200E, U+200B, U+FEFF: Python's strip() keeps them, SentencePiece's NFKC rule drops them, so the line
    encodes to </s> alone. It is an empty line, not a prompt for the model to invent a sentence."""
    model, _, src_tok, tgt_tok, _ = loaded
    lines = ["\u200e", "Ein Hund.", "\ufeff\u200b ", ""]
    assert [len(ids) for ids in src_tok.encode_batch(lines[:3])] == [1, len(src_tok.encode("Ein Hund.")), 1]
    for beam_size in (1, 3):
        out = translate(model, src_tok, tgt_tok, lines, compose_cfg(TINY).decode, "cpu", beam_size=beam_size)
        assert [t.text for t in out] == ["", out[1].text, "", ""] and out[1].text
        assert [t.src_pieces for t in out[::2]] == [[], []] and out[0].alignment.shape == (0, 0)


def test_an_unreadable_input_or_unwritable_output_is_named(tmp_path):
    from nmt.data.textio import TextFileError, check_writable, read_lines

    if os.geteuid() == 0:
        pytest.skip("root reads and writes regardless of permissions")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    (locked / "in.de").chmod(0)
    locked.chmod(0o500)
    try:
        with pytest.raises(TextFileError, match=r"input=.*in\.de: cannot be read \(Permission denied\)"):
            read_lines(locked / "in.de", key="input")
        with pytest.raises(TextFileError, match=rf"output={locked}/new/out.en: no permission to write in {locked}$"):
            check_writable(locked / "new" / "out.en", "output")
    finally:
        locked.chmod(0o700)
    check_writable(tmp_path / "a" / "b" / "out.en", "output")  # missing folders are created later: fine
    check_writable("/dev/null", "output")


def test_an_output_where_no_file_can_be_created_is_refused_even_for_root(monkeypatch):
    """/sys refuses new files even to root, whom os.access lets pass: the check must try, not trust the
    permission bits (a translate.py run with output=/sys/x.en used to fail only after decoding, before
    this). os.access is made to say yes here, as it does for root, so the test holds for any user."""
    from nmt.data.textio import TextFileError, check_writable

    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs Linux's sysfs")
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: True)
    with pytest.raises(TextFileError, match=r"^alignments=/sys/a\.npz: cannot create files in /sys \("):
        check_writable("/sys/a.npz", "alignments")
    with pytest.raises(TextFileError, match=r"^plots=/sys/new/plots: cannot create files in /sys \("):
        check_writable("/sys/new/plots", "plots", folder=True)


def test_decoding_settings_are_checked_with_the_shortest_source_in_mind():
    from omegaconf import OmegaConf

    from nmt.decoding.options import check_decoding

    base = {"batch_size": 64, "max_src_len": 250, "length_penalty": 0.6}
    # the limit max_len_a * S + max_len_b is truncated to whole subwords; S >= 2 (a subword and </s>)
    for a, b in ((1.5, 10), (2, -2), (1, 0), (0, 2), (1.5, 10.0)):  # room for a subword and </s>
        check_decoding(5, 1, decode=OmegaConf.create({**base, "max_len_a": a, "max_len_b": b}))
    for a, b in ((0, 1), (0.8, 0), (1.2, -1), (0, -3)):  # </s> first for a short source: an empty translation
        with pytest.raises(ValueError, match=rf"decode.max_len_a={a} with decode.max_len_b={b} leaves no room"):
            check_decoding(5, 1, decode=OmegaConf.create({**base, "max_len_a": a, "max_len_b": b}))


def test_mbr_settings_are_checked():
    """decode.mbr takes null or a utility; decode.mbr_temperature a number > 0 (.inf: uniform weights); a config
    from before these settings (no keys) decodes without MBR."""
    from omegaconf import OmegaConf

    from nmt.decoding.options import check_decoding

    base = {"batch_size": 64, "max_src_len": 250, "length_penalty": 0.6, "max_len_a": 1.5, "max_len_b": 10}
    for ok in ({}, {"mbr": None}, {"mbr": "bleu", "mbr_temperature": 2}, {"mbr": "bleu", "mbr_temperature": float("inf")}):
        check_decoding(5, 1, decode=OmegaConf.create({**base, **ok}))
    for bad, message in (({"mbr": "chrF"}, r"decode.mbr=chrF must be null \(off\) or bleu"),
                         ({"mbr": True}, r"decode.mbr=True must be null"),
                         ({"mbr_temperature": 0}, r"decode.mbr_temperature=0 must be a number > 0"),
                         ({"mbr_temperature": -1.0}, r"decode.mbr_temperature=-1.0 must be a number > 0"),
                         ({"mbr_temperature": float("nan")}, r"decode.mbr_temperature=nan must be a number > 0"),
                         ({"mbr_temperature": "warm"}, r"decode.mbr_temperature=warm must be a number > 0")):
        with pytest.raises(ValueError, match=message):
            check_decoding(5, 1, decode=OmegaConf.create({**base, **bad}))


def test_mbr_settings_in_scores_files_are_json():
    """What scores.json records about MBR: nothing for greedy search or with it off, "inf" for uniform weights
    (json.dumps would write Infinity, which is not JSON)."""
    import json

    from omegaconf import OmegaConf

    from nmt.decoding.options import mbr_settings

    on = OmegaConf.create({"mbr": "bleu", "mbr_temperature": float("inf")})
    assert mbr_settings(on, 5) == {"mbr": "bleu", "mbr_temperature": "inf"}
    assert mbr_settings(OmegaConf.merge(on, {"mbr_temperature": 2}), 5) == {"mbr": "bleu", "mbr_temperature": 2.0}
    off = {"mbr": None, "mbr_temperature": None}
    assert mbr_settings(on, 1) == off and mbr_settings(OmegaConf.create({"mbr": None}), 5) == off
    assert mbr_settings(OmegaConf.create({}), 5) == off  # a config from before MBR existed
    json.loads(json.dumps(mbr_settings(on, 5), allow_nan=False))


def test_translations_that_stop_at_the_length_limit_are_flagged(loaded, compose_cfg):
    """translate.py warns about them (lines cut short by max_len_a / max_len_b used to pass silently)."""
    from nmt.decoding.translation import Translation, at_length_limit

    model, _, src_tok, tgt_tok, _ = loaded
    lines = ["Ein Hund läuft über die Wiese.", "", "Zwei Männer spielen Fußball im Park."]
    decode = compose_cfg([*TINY, "decode.max_len_a=0", "decode.max_len_b=2"]).decode
    out = translate(model, src_tok, tgt_tok, lines, decode, "cpu", beam_size=1)
    assert [at_length_limit(t, decode) for t in out] == [True, False, True]
    assert [len(t.hyp_pieces) for t in out[::2]] == [2, 2]  # one subword and the forced </s>
    decode = compose_cfg([*TINY, "decode.max_len_a=1.5", "decode.max_len_b=1"]).decode  # limit int(1.5*4+1) = 7
    src = ["▁Ein", "▁Hund", ".", "</s>"]
    for n, flagged in ((6, False), (7, True)):
        hyp = Translation("x", src, ["▁a"] * (n - 1) + ["</s>"], np.zeros((n, 4), dtype=np.float32), 0.0)
        assert at_length_limit(hyp, decode) is flagged


def test_output_to_dev_stdout_on_a_pipe(repo_root):
    """/dev/stdout resolves to a name like pipe:[123] that does not exist; it is written to, not refused."""
    code = ("from nmt.data.textio import atomic_write, check_writable; check_writable('/dev/stdout', 'output'); "
            "atomic_write('/dev/stdout', 'Ein Hund.\\n')")
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=repo_root, capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == b"Ein Hund.\n", proc.stderr.decode()


def test_a_bad_threads_setting_is_named():
    from nmt.models.device import set_threads

    for bad in ("abc", 0, -2, 1.5, True):
        with pytest.raises(ValueError, match=rf"threads={bad} must be a whole number"):
            set_threads(bad)


def test_save_alignments_puts_the_tokens_beside_the_npz(loaded, compose_cfg, tmp_path):
    from nmt.decoding.artifacts import save_alignments

    model, _, src_tok, tgt_tok, _ = loaded
    hyps = translate(model, src_tok, tgt_tok, ["Ein Hund."], compose_cfg(TINY).decode, "cpu", beam_size=1)
    save_alignments(tmp_path / "a.b.npz", hyps)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.b.jsonl", "a.b.npz"]
    with pytest.raises(ValueError, match=r"must end in \.npz"):
        save_alignments(tmp_path / "align", hyps)


@pytest.mark.parametrize("name, message", [("gpu", "is not a device: use device=auto, cpu, cuda or cuda:N"),
                                           ("cuda", "has no usable CUDA GPU; use device=cpu or device=auto")])
def test_an_unusable_device_is_named(name, message):
    import torch

    if name == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match=rf"device={name}\W.*{message}"):
        pick_device(name)


def test_a_checkpoint_from_before_the_package_layout_translates_identically(loaded, tiny_run, tmp_path, compose_cfg):
    """Checkpoints written while the score models lived in ``nmt.attention`` name that module in their config:
    they load, name the new module, and translate exactly as the same weights under the new name."""
    import torch

    payload = torch.load(tiny_run / "checkpoints" / "best.pt", weights_only=True)
    target = payload["config"]["attention"]["_target_"]
    assert target.startswith("nmt.models.attention.")
    payload["config"]["attention"]["_target_"] = target.replace("nmt.models.attention.", "nmt.attention.")
    torch.save(payload, tmp_path / "old.pt")
    old_model, old_cfg, old_src, old_tgt, _ = checkpoint.load(tmp_path / "old.pt")
    assert old_cfg.attention._target_ == target
    model, _, src_tok, tgt_tok, _ = loaded
    decode = compose_cfg(["decode.beam_size=2"]).decode
    sentences = ["Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball.", ""]
    before = translate(old_model, old_src, old_tgt, sentences, decode)
    after = translate(model, src_tok, tgt_tok, sentences, decode)
    assert [t.text for t in before] == [t.text for t in after]
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a.alignment, b.alignment)


def test_translate_refuses_to_write_over_a_file_it_reads(tiny_run, repo_root, tmp_path):
    """An output over the input, the reference, the checkpoint, or the tokens file written beside alignments=:
    refused before any work, and the file read is left as it was."""
    source, model = tmp_path / "in.jsonl", tmp_path / "model.pt"
    source.write_text("Ein Hund läuft .\n", encoding="utf-8")
    model.write_bytes((tiny_run / "checkpoints" / "best.pt").read_bytes())
    cases = {"output": [f"output={source}"],
             "alignments": [f"output={tmp_path / 'out.en'}", f"alignments={tmp_path / 'in.npz'}"],  # in.jsonl
             "nbest": [f"output={tmp_path / 'out.en'}", f"nbest={model}", "decode.n_best=2"]}
    for key, args in cases.items():
        proc = run_script([str(repo_root / "translate.py"), f"checkpoint={model}", f"input={source}", *args], tmp_path)
        err = proc.stderr.decode()
        assert proc.returncode == 1 and f"error: {key}=" in err and " would write " in err, err
        assert "give the output another file name" in err, err
    assert source.read_text(encoding="utf-8") == "Ein Hund läuft .\n"
    assert model.read_bytes() == (tiny_run / "checkpoints" / "best.pt").read_bytes()
