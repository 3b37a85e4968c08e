"""One tiny real run, end to end (design.md §2, §4.10): ``python train.py`` on a Multi30k slice -> metrics,
checkpoints, eval/ artifacts, plots -> ``python translate.py`` from a file and through stdin/stdout, whose output
and alignments must agree with what training wrote.

About 40-60 s on two CPU cores: the train/translate subprocesses are pinned to one thread each (on a shared
machine two OpenMP threads spin against other jobs and run several times slower), and ``data.eval_limit``
keeps validation and evaluation to the first 100 sentences.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import sacrebleu
import torch

from nmt.analysis import curves
from nmt.data.tokenizer import fits_other_side
from nmt.decoding.word_alignment import words_from_pieces
from nmt.models import checkpoint

EVAL_LIMIT = 100
MAX_STEPS, VALID_EVERY, BEAM = 150, 50, 3
TRAIN_OVERRIDES = [
    "data.train_limit=3000", f"data.eval_limit={EVAL_LIMIT}", "tokenizer.vocab_size=1000",
    "model.emb_size=64", "model.hidden_size=128", f"train.max_steps={MAX_STEPS}",
    f"train.valid_every={VALID_EVERY}", "train.batch_tokens=400", f"decode.beam_size={BEAM}", "eval.plots=2",
    "threads=1", "device=cpu",
]
METRIC_KEYS = {"step", "epoch", "train_loss", "valid_loss", "valid_ppl", "valid_bleu", "lr", "tokens_per_sec",
               "elapsed_sec"}
SCORE_KEYS = {"bleu", "chrf", "bleu_signature", "chrf_signature", "num_sentences", "beam_size", "length_penalty", "coverage_penalty",
              "mbr", "mbr_temperature",
              "attention", "decoder_style", "input_feeding", "checkpoint"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVAL_DIRS = {"eval": BEAM, "eval/greedy": 1}
STEMS = {"valid": "val", "test": "test_2016_flickr"}


def env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1",
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def run(args, cwd, stdin=None, timeout=300):
    proc = subprocess.run([sys.executable, *args], check=False, cwd=cwd, env=env(), input=stdin, capture_output=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{args[0]} failed ({proc.returncode}):\n{proc.stderr.decode()[-4000:]}"
    return proc


def gz_lines(path, n=None):
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as handle:
        lines = handle.read().split("\n")[:-1]
    return lines[:n]


def read_text_lines(path):
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") or text == ""
    return text.split("\n")[:-1]


def load_alignments(npz_path):
    with np.load(npz_path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    jsonl = npz_path.with_suffix(".jsonl")
    records = [json.loads(line) for line in read_text_lines(jsonl)]
    return arrays, records


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, repo_root, multi30k_dir):
    out = tmp_path_factory.mktemp("train_run")
    proc = run(["train.py", *TRAIN_OVERRIDES, f"hydra.run.dir={out}"], cwd=repo_root, timeout=400)
    out.with_name(out.name + ".stderr").write_bytes(proc.stderr)
    return out


@pytest.fixture(scope="module")
def references(multi30k_dir):
    return {split: {side: gz_lines(multi30k_dir / f"{stem}.{lang}.gz", EVAL_LIMIT)
                    for side, lang in (("src", "de"), ("tgt", "en"))} for split, stem in STEMS.items()}


@pytest.fixture(scope="module")
def final_checkpoint(run_dir):
    """The checkpoint final evaluation used: best.pt, or averaged.pt when averaging did not lose validation BLEU."""
    path = json.loads((run_dir / "eval" / "test.scores.json").read_text(encoding="utf-8"))["checkpoint"]
    assert path.endswith(("best.pt", "averaged.pt"))
    return path


@pytest.fixture(scope="module")
def toks(run_dir):
    """Source and target tokenizers as the checkpoint stores them (each side's restricted vocabulary)."""
    _, _, src_tok, tgt_tok, _ = checkpoint.load(run_dir / "checkpoints" / "best.pt")
    assert src_tok.model_proto == tgt_tok.model_proto == (run_dir / "spm" / "joint.model").read_bytes()
    return src_tok, tgt_tok


def test_run_layout(run_dir):
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert sorted(p.name for p in (run_dir / "spm").iterdir()) == ["joint.model", "joint.vocab", "settings.json"]
    leftovers = [p for p in run_dir.rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, f"temporary files left behind: {leftovers}"
    # the log names the run folder when training starts and again, with the test BLEU, at the end
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    scores = json.loads((run_dir / "eval" / "test.scores.json").read_text(encoding="utf-8"))
    assert f"run folder {run_dir.resolve()}" in log
    assert "done: test BLEU " in log and f"{scores['bleu']:.2f} beam{BEAM} in {run_dir.resolve()}" in log
    done = next(line for line in log.splitlines() if "done: test BLEU" in line)
    for name in ("test.hyp", "test.scores.json", "test.alignments.npz", "test.alignments.jsonl", "test.align"):
        assert name in done and (run_dir / "eval" / name).is_file()  # the files the last line names are there


def test_progress_lines_without_terminal(run_dir):
    """stderr is a pipe here: no tqdm bar (carriage returns) but a plain line every train.log_every=100 steps."""
    stderr = run_dir.with_name(run_dir.name + ".stderr").read_text(encoding="utf-8")
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert "\r" not in stderr and "train: " not in stderr
    lines = re.findall(r"step (\d+) \(epoch \d+, [\d.]+ min\): train loss ([\d.]+), (\d+) tok/s, lr ([\d.e-]+)", log)
    assert [int(step) for step, *_ in lines] == [100]
    assert 0 < float(lines[0][1]) < 10 and int(lines[0][2]) > 0 and float(lines[0][3]) > 0


def test_metrics(run_dir):
    records = [json.loads(line) for line in read_text_lines(run_dir / "metrics.jsonl")]
    assert [r["step"] for r in records] == list(range(VALID_EVERY, MAX_STEPS + 1, VALID_EVERY))
    for r in records:
        assert METRIC_KEYS <= set(r), METRIC_KEYS - set(r)
        assert all(math.isfinite(r[k]) for k in METRIC_KEYS)
        assert r["valid_ppl"] == pytest.approx(math.exp(r["valid_loss"]))
        assert r["tokens_per_sec"] > 0 and 0 <= r["valid_bleu"] <= 100 and r["lr"] > 0
    assert records[-1]["valid_loss"] < records[0]["valid_loss"]
    assert records[-1]["train_loss"] < records[0]["train_loss"]
    assert [r["elapsed_sec"] for r in records] == sorted(r["elapsed_sec"] for r in records)


def test_learning_curves_of_the_run(run_dir, tmp_path):
    """python -m nmt.curves reads the run's metrics.jsonl: one point per validation, the best one is best.pt's."""
    out = tmp_path / "curves.png"
    result = run(["-m", "nmt.curves", str(run_dir), f"out={out}"], cwd=run_dir)
    steps = list(range(VALID_EVERY, MAX_STEPS + 1, VALID_EVERY))
    assert result.stdout.decode().count("\n") >= len(steps) + 3 and out.stat().st_size > 10_000
    curve = curves.read_curve(run_dir)
    assert curve.column("step") == steps
    best_step = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)["progress"]["best_step"]
    assert curve.best()["step"] == best_step


def test_checkpoints(run_dir):
    payloads = {name: torch.load(run_dir / "checkpoints" / f"{name}.pt", weights_only=True) for name in ("best", "last")}
    last, best = payloads["last"], payloads["best"]
    assert {"model", "config", "spm", "optimizer", "progress", "rng"} <= set(last)
    assert last["progress"]["step"] == MAX_STEPS
    assert best["progress"]["step"] == last["progress"]["best_step"]
    assert last["config"]["model"]["hidden_size"] == 128 and last["config"]["data"]["eval_limit"] == EVAL_LIMIT
    assert last["config"]["data"]["dir"].endswith("multi30k") and "${" not in json.dumps(last["config"])
    spm_bytes = (run_dir / "spm" / "joint.model").read_bytes()
    assert last["spm"]["src"].numpy().tobytes() == spm_bytes == last["spm"]["tgt"].numpy().tobytes()
    target_vocab = last["spm"]["tgt_vocab"]  # tokenizer.restrict_vocab: the pieces English uses
    assert 300 < len(target_vocab) < 1000 and len(last["spm"]["src_vocab"]) < 1000
    assert last["model"]["decoder.generator.weight"].shape == (len(target_vocab), 64)  # tied: W_s = embeddings
    assert torch.equal(last["model"]["decoder.generator.weight"], last["model"]["decoder.embed.weight"])
    kept = sorted((run_dir / "checkpoints").glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    assert [p.name for p in kept] == [f"step_{s}.pt" for s in range(VALID_EVERY, MAX_STEPS + 1, VALID_EVERY)]


@pytest.mark.parametrize("split", ["valid", "test"])
@pytest.mark.parametrize("folder", list(EVAL_DIRS))
def test_eval_artifacts(run_dir, references, toks, final_checkpoint, folder, split):
    src_tok, tgt_tok = toks
    prefix = run_dir / folder / split
    hyps = read_text_lines(prefix.with_name(f"{split}.hyp"))
    assert len(hyps) == len(references[split]["tgt"]) == EVAL_LIMIT

    scores = json.loads(prefix.with_name(f"{split}.scores.json").read_text(encoding="utf-8"))
    assert SCORE_KEYS <= set(scores), SCORE_KEYS - set(scores)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [references[split]["tgt"]]).score, abs=0.01)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|") and "tok:13a" in scores["bleu_signature"]
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|")
    lowercased = sacrebleu.corpus_bleu(hyps, [references[split]["tgt"]], lowercase=True).score
    assert scores["bleu_lowercase"] == pytest.approx(lowercased, abs=0.01) and scores["bleu_lowercase"] >= scores["bleu"]
    assert scores["bleu_lowercase_signature"].startswith("nrefs:1|case:lc|")
    assert scores["num_sentences"] == EVAL_LIMIT and scores["beam_size"] == EVAL_DIRS[folder]
    assert (scores["attention"], scores["decoder_style"], scores["input_feeding"]) == ("Additive", "luong", True)
    assert scores["checkpoint"] == final_checkpoint

    arrays, records = load_alignments(prefix.with_name(f"{split}.alignments.npz"))
    assert sorted(arrays, key=int) == [str(i) for i in range(EVAL_LIMIT)]
    assert [r["index"] for r in records] == list(range(EVAL_LIMIT))
    aligns = read_text_lines(prefix.with_name(f"{split}.align"))
    assert len(aligns) == EVAL_LIMIT
    for i, (record, hyp, align) in enumerate(zip(records, hyps, aligns)):
        src_tokens, hyp_tokens = record["source_tokens"], record["hypothesis_tokens"]
        assert src_tokens == src_tok.pieces(src_tok.encode(references[split]["src"][i]))
        assert hyp_tokens[-1] == "</s>" and "</s>" not in hyp_tokens[:-1]
        assert tgt_tok.decode([tgt_tok.piece_to_id(p) for p in hyp_tokens]) == hyp
        matrix = arrays[str(i)]
        assert matrix.dtype == np.float32 and matrix.shape == (len(hyp_tokens), len(src_tokens))
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-4)  # global attention
        assert (matrix >= 0).all()
        n_src, n_hyp = max(words_from_pieces(src_tokens)) + 1, max(words_from_pieces(hyp_tokens), default=-1) + 1
        links = [tuple(map(int, link.split("-"))) for link in align.split()]
        assert all(0 <= s < n_src and 0 <= t < n_hyp for s, t in links), (align, n_src, n_hyp)
        targets = [t for _, t in links]
        assert len(targets) == len(set(targets)) == n_hyp  # argmax_target: one link per target word


def test_plots(run_dir):
    pngs = sorted((run_dir / "plots").glob("*.png"))
    assert [p.name for p in pngs] == ["test_0.png", "test_1.png"]
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in pngs)


def test_translate_file(run_dir, references, repo_root, final_checkpoint, tmp_path):
    """Empty, whitespace-only and CRLF lines: one output line per input line; the rest is exactly what
    final evaluation produced with the same checkpoint and decoder (blank lines do not change the batches)."""
    sources = references["test"]["src"]
    blanks = {1: "", 4: "   ", 7: "\t", 8: ""}
    lines, where = [], []
    for source in sources:
        while len(lines) in blanks:
            lines.append(blanks[len(lines)])
        where.append(len(lines))
        lines.append(source)
    lines.append(" ")
    source_file = tmp_path / "in.de"
    source_file.write_bytes("".join(line + "\r\n" for line in lines).encode("utf-8"))
    out, npz = tmp_path / "out" / "in.en", tmp_path / "out" / "in.alignments.npz"
    proc = run(["translate.py", f"checkpoint={final_checkpoint}", f"input={source_file}",
                f"output={out}", f"beam_size={BEAM}", f"alignments={npz}", f"plots={tmp_path / 'plots'}",
                "plot_first=3", "device=cpu"], cwd=repo_root)

    outputs = read_text_lines(out)
    assert len(outputs) == len(lines)
    blank = [i for i, line in enumerate(lines) if not line.strip()]
    # success is reported on stderr: line counts, speed, beam size and where the translations went
    empty_out = sum(not o for o in outputs)
    many = lambda n: "" if n == 1 else "s"
    assert re.search(rf"translated {len(lines)} lines \({len(blank)} empty input line{many(len(blank))}; {empty_out} "
                     rf"empty translation{many(empty_out)} in all\) in [\d.]+ s \([\d.]+ sentences/s; "
                     rf"{re.escape(final_checkpoint)} loaded in [\d.]+ s\)", proc.stderr.decode())
    assert f"beam size {BEAM}, fp32: {out}, {npz}, {npz.with_suffix('.jsonl')}\n" in proc.stderr.decode()  # all written
    assert [outputs[i] for i in blank] == [""] * len(blank)
    assert [outputs[i] for i in where] == read_text_lines(run_dir / "eval" / "test.hyp")
    assert all(outputs[i] for i in where) and not any("\r" in o for o in outputs)

    arrays, records = load_alignments(npz)
    eval_arrays, eval_records = load_alignments(run_dir / "eval" / "test.alignments.npz")
    assert sorted(arrays, key=int) == [str(i) for i in range(len(lines))]
    assert [r["index"] for r in records] == list(range(len(lines)))
    for i in blank:
        assert arrays[str(i)].shape == (0, 0)
        assert records[i]["source_tokens"] == records[i]["hypothesis_tokens"] == []
    for k, i in enumerate(where):
        assert {key: records[i][key] for key in ("source_tokens", "hypothesis_tokens")} == \
            {key: eval_records[k][key] for key in ("source_tokens", "hypothesis_tokens")}
        np.testing.assert_allclose(arrays[str(i)], eval_arrays[str(k)], atol=1e-5)
    assert sorted(p.name for p in (tmp_path / "plots").glob("*.png")) == ["in_0.png", "in_2.png"]  # 1 is blank
    assert f"drew 2 alignment heatmaps: {tmp_path / 'plots' / 'in_0.png'}, {tmp_path / 'plots' / 'in_2.png'}" \
        in proc.stderr.decode()


def test_input_in_the_target_language_is_named(toks, references, caplog):
    """English given to the de->en model splits into more pieces per word with the German vocabulary than with
    the English one: translate.py warns, naming the file, both figures and the model's direction."""
    from nmt.translate import warn_other_language

    src_tok, tgt_tok = toks
    assert fits_other_side(src_tok, tgt_tok, references["test"]["src"]) is None
    data = SimpleNamespace(src_lang="de", tgt_lang="en")
    with caplog.at_level("WARNING", logger="nmt.translate"):
        warn_other_language("in.de", data, src_tok, tgt_tok, references["test"]["src"])
        assert not caplog.records
        warn_other_language("in.en", data, src_tok, tgt_tok, references["test"]["tgt"])
    [record] = caplog.records
    assert re.fullmatch(r"in\.en looks like en text, not de: ([\d.]+) subword pieces per word with the model's de "
                        r"vocabulary, ([\d.]+) with its en one \(this model translates de->en\)", record.getMessage())


def test_translate_stdin_stdout(run_dir, references, repo_root, final_checkpoint, tmp_path):
    """input=- / output=-: stdout carries the translations and nothing else; greedy == eval/greedy. The run
    folder given as checkpoint= means the model its final evaluation scored (best.pt or averaged.pt)."""
    reference = tmp_path / "ref.en"
    reference.write_text("".join(line + "\n" for line in references["test"]["tgt"]), encoding="utf-8")
    stdin = "".join(line + "\n" for line in references["test"]["src"]).encode("utf-8")
    # run from another folder with relative paths: they resolve against the cwd, and nothing else lands there
    proc = run([str(repo_root / "translate.py"), f"checkpoint={run_dir}", "input=-",
                "output=-", "beam_size=1", "alignments=stdin.alignments.npz", "reference=ref.en", "device=cpu"],
               cwd=tmp_path, stdin=stdin)
    expected = (run_dir / "eval" / "greedy" / "test.hyp").read_bytes()
    assert proc.stdout == expected
    stderr = proc.stderr.decode()
    assert f"; {final_checkpoint} loaded in " in stderr
    report = json.loads(stderr[stderr.rindex("{\n"):])  # the reference's scores, printed last
    greedy_scores = json.loads((run_dir / "eval" / "greedy" / "test.scores.json").read_text(encoding="utf-8"))
    assert report["bleu"] == greedy_scores["bleu"] and report["bleu_signature"] == greedy_scores["bleu_signature"]
    # the report says how it was decoded, with the same keys and values as the final evaluation's greedy file
    settings = ("beam_size", "length_penalty", "coverage_penalty", "mbr", "mbr_temperature", "precision",
                "checkpoint")
    assert {k: report[k] for k in settings} == {k: greedy_scores[k] for k in settings}
    assert report["beam_size"] == 1 and report["checkpoint"] == str(final_checkpoint)
    arrays, _ = load_alignments(tmp_path / "stdin.alignments.npz")
    eval_arrays, _ = load_alignments(run_dir / "eval" / "greedy" / "test.alignments.npz")
    assert arrays.keys() == eval_arrays.keys()
    for key in arrays:
        np.testing.assert_allclose(arrays[key], eval_arrays[key], atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.en", "stdin.alignments.jsonl", "stdin.alignments.npz"]


@pytest.mark.parametrize("beam_size", [1, BEAM])
def test_coverage_penalty_reaches_the_search(references, final_checkpoint, beam_size):
    """decode.coverage_penalty=beta through translate_nbest (greedy and beam): every score is log_prob / lp +
    beta * Σ_i log min(Σ_j a_ji, 1) of the returned alignment; the trained model leaves some source words
    under-covered, so the penalty is not 0 everywhere (the check could not fail if it were)."""
    from omegaconf import OmegaConf

    from nmt.decoding.hypothesis import coverage_penalty, length_penalty
    from nmt.decoding.translation import translate_nbest

    model, cfg, src_tok, tgt_tok, _ = checkpoint.load(final_checkpoint)
    beta, alpha = 5.0, 0.6
    decode = OmegaConf.merge(cfg.decode, {"coverage_penalty": beta, "length_penalty": alpha})
    n_best = 1 if beam_size == 1 else 2
    results = translate_nbest(model, src_tok, tgt_tok, references["test"]["src"][:20], decode, "cpu",
                              beam_size=beam_size, n_best=n_best)
    penalties = []
    for block in results:
        assert len(block) == n_best
        for t in block:
            cp = coverage_penalty(torch.from_numpy(t.alignment), beta)
            penalties.append(cp)
            expected = t.log_prob / length_penalty(len(t.hyp_pieces), alpha) + cp
            assert t.score == pytest.approx(expected, abs=1e-3)
    assert sum(cp < -1e-3 for cp in penalties) >= 5, penalties


def test_mbr_reaches_the_search(references, final_checkpoint):
    """decode.mbr=bleu through translate_nbest: each line's block is the plain beam's n-best list (the same
    hypotheses, scores and alignments) reordered by expected utility, which equals nmt.decoding.mbr.expected_utility of
    the block; with uniform weights the choice differs from the beam's on some lines (the check could not fail
    otherwise); greedy search is unchanged."""
    from omegaconf import OmegaConf

    from nmt.decoding.mbr import expected_utility
    from nmt.decoding.translation import translate_nbest

    model, cfg, src_tok, tgt_tok, _ = checkpoint.load(final_checkpoint)
    sources = references["test"]["src"][:30]
    mbr = OmegaConf.merge(cfg.decode, {"mbr": "bleu", "mbr_temperature": float("inf")})
    plain = translate_nbest(model, src_tok, tgt_tok, sources, cfg.decode, "cpu", beam_size=BEAM, n_best=BEAM)
    ranked = translate_nbest(model, src_tok, tgt_tok, sources, mbr, "cpu", beam_size=BEAM, n_best=BEAM)
    first = translate_nbest(model, src_tok, tgt_tok, sources, mbr, "cpu", beam_size=BEAM)
    changed = 0
    for before, after, one in zip(plain, ranked, first):
        key = {tuple(t.hyp_pieces): i for i, t in enumerate(before)}  # the beam's hypotheses are distinct pieces
        assert len(key) == len(before) == len(after) and sorted(key) == sorted(tuple(t.hyp_pieces) for t in after)
        expected = expected_utility([t.text for t in before], [t.log_prob for t in before], float("inf"))
        for t in after:
            own = before[key[tuple(t.hyp_pieces)]]
            assert t.score == own.score and t.log_prob == own.log_prob
            assert np.array_equal(t.alignment, own.alignment)
            assert t.expected_utility == pytest.approx(expected[key[tuple(t.hyp_pieces)]])
        gains = [t.expected_utility for t in after]
        assert gains == sorted(gains, reverse=True)
        assert len(one) == 1 and one[0].text == after[0].text
        changed += after[0].text != before[0].text
    assert changed >= 1
    greedy = translate_nbest(model, src_tok, tgt_tok, sources, mbr, "cpu", beam_size=1)
    assert [b[0].text for b in greedy] == [b[0].text for b in translate_nbest(
        model, src_tok, tgt_tok, sources, cfg.decode, "cpu", beam_size=1)]
    assert all(b[0].expected_utility is None for b in greedy)


def test_translate_nbest_list(run_dir, references, repo_root, final_checkpoint, tmp_path):
    """decode.n_best=K with nbest=FILE: one Moses-format block of K distinct hypotheses per line, best first, whose
    scores are log_prob / GNMT length penalty; output= keeps the best one (the same as eval/test.hyp); an empty
    line gets one empty entry. Without nbest=, or with K above the beam size, nothing is translated."""
    sources = references["test"]["src"][:20]
    source_file = tmp_path / "in.de"
    source_file.write_text("".join(line + "\n" for line in [*sources[:10], "", *sources[10:]]), encoding="utf-8")
    out, nbest = tmp_path / "out.en", tmp_path / "out.nbest"
    common = [f"checkpoint={final_checkpoint}", f"input={source_file}", f"output={out}", "device=cpu"]
    run(["translate.py", *common, f"beam_size={BEAM}", f"decode.n_best={BEAM}", f"nbest={nbest}"], cwd=repo_root)

    outputs = read_text_lines(out)
    best = read_text_lines(run_dir / "eval" / "test.hyp")[:20]
    assert outputs == [*best[:10], "", *best[10:]]
    entries = [line.split(" ||| ") for line in read_text_lines(nbest)]
    assert all(len(e) == 4 for e in entries)
    blocks: dict[int, list] = {}
    for index, text, features, total in entries:
        log_prob, length = re.fullmatch(r"log_prob= (\S+) length= (\d+)", features).groups()
        blocks.setdefault(int(index), []).append((text, float(log_prob), int(length), float(total)))
    assert list(blocks) == list(range(21))  # every line, in order, one block each
    assert blocks[10] == [("", 0.0, 0, 0.0)]
    alpha = 0.6  # conf/decode/beam.yaml
    for i, block in blocks.items():
        if i == 10:
            continue
        assert len(block) == BEAM and block[0][0] == outputs[i]
        totals = [b[3] for b in block]
        assert totals == sorted(totals, reverse=True)
        assert len({b[:3] for b in block}) == BEAM  # distinct hypotheses (text, log-prob, length)
        for _, log_prob, length, total in block:
            assert log_prob < 0 and length >= 1
            assert total == pytest.approx(log_prob / ((5 + length) / 6) ** alpha, abs=2e-4)

    for extra, message in [([f"decode.n_best={BEAM}", f"beam_size={BEAM}"], "needs nbest=FILE"),
                           ([f"decode.n_best={BEAM + 1}", f"beam_size={BEAM}", f"nbest={nbest}"],
                            f"must be a whole number between 1 and the beam size \\({BEAM}\\)")]:
        proc = subprocess.run([sys.executable, "translate.py", *common[:2], f"output={tmp_path / 'x.en'}",
                               "device=cpu", *extra], check=False, cwd=repo_root, env=env(), capture_output=True,
                              timeout=120)
        assert proc.returncode == 1 and re.search(message, proc.stderr.decode()), proc.stderr.decode()
        assert not (tmp_path / "x.en").exists()
