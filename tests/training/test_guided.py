"""Guided alignment (train.guided_alignment): the guiding distribution from word links and pieces, the table that
finds a batch's links by its ids, a known-answer task where the term teaches the attention a reversal, tiny real
runs with given links and with eflomal's, and refusals naming the setting."""

from __future__ import annotations

import json
import random

import pytest
import torch

from nmt.data.batches import collate
from nmt.data.corpus import DataError
from nmt.data.tokenizer import EOS_ID
from nmt.models.build import build_model
from nmt.training.guided import GuidedLinks, GuidedObjective, guided_loss, piece_targets
from nmt.training.run import train
from nmt.training.step import batch_loss, train_step

TINY = ["data.train_limit=300", "data.eval_limit=5", "tokenizer.vocab_size=500", "model.emb_size=16",
        "model.hidden_size=32", "train.batch_tokens=300", "train.valid_every=5", "train.max_steps=5",
        "decode=greedy", "eval.plots=0", "device=cpu", "train.keep_best=0", "train.max_epochs=null"]


def test_each_target_piece_spreads_its_row_over_the_pieces_of_its_linked_source_words():
    src = ["▁a", "▁bc", "d", "</s>"]  # words: a (piece 0), bcd (pieces 1, 2)
    tgt = ["▁x", "y", "▁z", "▁w", "</s>"]  # words: xy (pieces 0, 1), z (2), w (3, unlinked)
    rows, cols, values = piece_targets(src, tgt, [(1, 0), (0, 1), (1, 1), (7, 1), (0, 9)])  # (7, 1), (0, 9): no word
    dense = torch.zeros(5, 4)
    dense[torch.from_numpy(rows), torch.from_numpy(cols)] = torch.from_numpy(values)
    torch.testing.assert_close(dense, torch.tensor([
        [0.0, 0.5, 0.5, 0.0],  # x: linked to bcd alone, equally over its two pieces
        [0.0, 0.5, 0.5, 0.0],  # y: the same word
        [0.5, 0.25, 0.25, 0.0],  # z: linked to a and bcd, half each
        [0.0, 0.0, 0.0, 0.0],  # w: no link, no row
        [0.0, 0.0, 0.0, 0.0],  # </s>: never a row or a column
    ]))


def reversal_task(n: int = 12, seed: int = 0):
    """Sentences of 4-7 tokens whose target is the source reversed (token v -> v + 20): target piece t is linked to
    source piece len - 1 - t. Returns the batch, its guiding links and the gold source position of every row."""
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        words = [rng.randrange(5, 25) for _ in range(rng.randrange(4, 8))]
        src.append(words + [EOS_ID])
        tgt.append([w + 20 for w in reversed(words)] + [EOS_ID])
    batch = collate(src, tgt, list(range(n)))
    table = GuidedLinks()
    gold = []
    for s, t in zip(src, tgt):
        size = len(s) - 1
        links = [(size - 1 - j, j) for j in range(size)]
        pieces = lambda ids: [f"▁w{i}" for i in ids[:-1]] + ["</s>"]
        table.add(s, t, piece_targets(pieces(s), pieces(t), links))
        gold.append([size - 1 - j for j in range(size)])
    return batch, table, gold


def argmax_agreement(model, batch, gold) -> float:
    """The share of target words whose most attended source piece is the gold one."""
    with torch.no_grad():
        _, attention = model(batch.src, batch.src_mask, batch.tgt_in)  # [B, T, S]
    hits = [int(attention[b, j].argmax()) == s for b, row in enumerate(gold) for j, s in enumerate(row)]
    return sum(hits) / len(hits)


def trained(compose_cfg, objective, steps: int = 60):
    torch.manual_seed(0)
    cfg = compose_cfg(["model.emb_size=16", "model.hidden_size=32", "model.dropout=0.0"])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, 30, 50)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    batch, _, _ = reversal_task()
    settings = cfg.train
    for _ in range(steps):
        train_step(model, optimizer, batch, settings, objective=objective)
    return model


def test_the_guided_term_teaches_the_attention_a_known_alignment(compose_cfg):
    batch, table, gold = reversal_task()
    guided = GuidedObjective(table, 1.0)
    assert table.targets(batch)[1] == 12
    plain, steered = trained(compose_cfg, batch_loss), trained(compose_cfg, guided)
    with torch.no_grad():
        before = guided_loss(build_model(*_parts(compose_cfg), 30, 50)(batch.src, batch.src_mask, batch.tgt_in)[1],
                             table.targets(batch)[0])
        after = guided_loss(steered(batch.src, batch.src_mask, batch.tgt_in)[1], table.targets(batch)[0])
    assert float(after) < 0.1 * float(before)
    assert argmax_agreement(steered, batch, gold) >= 0.95
    assert argmax_agreement(plain, batch, gold) < argmax_agreement(steered, batch, gold) - 0.3


def _parts(compose_cfg):
    cfg = compose_cfg(["model.emb_size=16", "model.hidden_size=32", "model.dropout=0.0"])
    return cfg.model, cfg.decoder, cfg.attention


def test_pairs_without_links_get_zero_rows_and_the_nll_alone(compose_cfg):
    batch, table, _ = reversal_task()
    empty = GuidedLinks()
    targets, count = empty.targets(batch)
    assert count == 0 and float(targets.sum()) == 0
    model = build_model(*_parts(compose_cfg), 30, 50)
    objective, nll = GuidedObjective(empty, 1.0)(model, batch, 0.1)
    torch.testing.assert_close(objective, nll)
    steered = GuidedObjective(table, 2.0)
    objective, nll = steered(model, batch, 0.1)
    term = float((objective - nll).detach()) / 2.0  # the term without its weight, per target token: metrics.jsonl's guided_term
    assert term > 0 and steered.window() == pytest.approx({"guided_term": term / batch.num_tgt_tokens}, rel=1e-4)
    assert steered.window() == {}  # a new window
    order = [3, 0, 7]  # a batch of some of the pairs, in another order: each finds its own links
    sub = collate([batch.src[i][batch.src_mask[i]].tolist() for i in order],
                  [batch.tgt_out[i][batch.tgt_out[i] != 0].tolist() for i in order], order)
    full, _ = table.targets(batch)
    part, count = table.targets(sub)
    assert count == 3
    for k, i in enumerate(order):
        torch.testing.assert_close(part[k, : sub.tgt_out.size(1), : sub.src.size(1)],
                                   full[i, : sub.tgt_out.size(1), : sub.src.size(1)])


def test_a_run_with_given_links_writes_its_text_and_trains(compose_cfg, tmp_path, caplog):
    first = tmp_path / "first"
    with pytest.raises(DataError, match="pip install eflomal"):  # no eflomal (hidden): the text is written first
        _without_eflomal(lambda: train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5"]), first))
    src = (first / "guided" / "train.src").read_text().splitlines()
    tgt = (first / "guided" / "train.tgt").read_text().splitlines()
    assert len(src) == len(tgt) == 300
    links = tmp_path / "diagonal.align"  # the diagonal as links: one per word of the shorter side
    links.write_text("".join(" ".join(f"{i}-{i}" for i in range(min(len(s.split()), len(t.split())))) + "\n"
                             for s, t in zip(src, tgt)))
    caplog.set_level("INFO")
    results = train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", f"train.guided_alignment.links={links}"]),
                    tmp_path / "run")
    assert results["steps"] == 5
    assert "guided alignment: links for 300 of 300 training pairs" in caplog.text
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    terms = [r["guided_term"] for r in records if "train_loss" in r]
    assert terms and all(0 < term < 20 for term in terms) and "guided term" in caplog.text


def _without_eflomal(call):
    import builtins
    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "eflomal":
            raise ImportError(name)
        return real(name, *args, **kwargs)
    builtins.__import__ = refuse
    try:
        return call()
    finally:
        builtins.__import__ = real


def test_eflomal_links_are_computed_once_and_kept_for_a_resumed_run(compose_cfg, tmp_path, caplog):
    pytest.importorskip("eflomal")
    run = tmp_path / "run"
    caplog.set_level("INFO")
    train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5"]), run)
    links = (run / "guided" / "train.links").read_text().splitlines()
    assert len(links) == 300 and sum(bool(line) for line in links) > 290
    assert caplog.text.count("eflomal aligns the 300 training pairs") == 1
    stamp = (run / "guided" / "train.links").stat().st_mtime_ns
    train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", "train.max_steps=8"]), run)
    assert (run / "guided" / "train.links").stat().st_mtime_ns == stamp
    assert caplog.text.count("eflomal aligns") == 1


@pytest.mark.parametrize("override, error, message", [
    ("train.guided_alignment.weight=-1", ValueError, r"train.guided_alignment.weight=-1 must be a number >= 0"),
    ("train.guided_alignment.aligner=giza", ValueError, r"aligner='giza'; valid: eflomal"),
    ("train.guided_alignment.links=/nonexistent.align", FileNotFoundError, r"links=/nonexistent.align: no such file"),
    ("train.agreement.weight=1.0", ValueError, r"does not combine with train.agreement"),
    ("tokenizer.sample_alpha=0.1", ValueError, r"set tokenizer.sample_alpha=0"),
])
def test_bad_settings_are_refused_before_any_work(compose_cfg, tmp_path, override, error, message):
    weight = [] if "weight=" in override and "guided" in override else ["train.guided_alignment.weight=0.5"]
    with pytest.raises(error, match=message):
        train(compose_cfg([*TINY, *weight, override]), tmp_path / "run")
    assert not (tmp_path / "run" / "spm").exists()


def test_links_of_other_sentences_or_read_with_the_wrong_origin_are_refused(compose_cfg, tmp_path):
    base = tmp_path / "base"
    with pytest.raises(DataError):
        _without_eflomal(lambda: train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5"]), base))
    src = (base / "guided" / "train.src").read_text().splitlines()
    tgt = (base / "guided" / "train.tgt").read_text().splitlines()
    short = tmp_path / "short.align"
    short.write_text("0-0\n" * 299)
    with pytest.raises(DataError, match=r"short.align has 299 sentences \(lines\) but the sentence files have 300"):
        train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", f"train.guided_alignment.links={short}"]),
              tmp_path / "a")
    one_based = tmp_path / "one_based.align"  # the diagonal written 1-based, read as 0-based
    one_based.write_text("".join(" ".join(f"{i}-{i}" for i in range(1, min(len(s.split()), len(t.split())) + 1))
                                 + "\n" for s, t in zip(src, tgt)))
    with pytest.raises(DataError, match=r"looks 1-based; give train.guided_alignment.one_based=true"):
        train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", f"train.guided_alignment.links={one_based}"]),
              tmp_path / "b")
    results = train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", f"train.guided_alignment.links={one_based}",
                                 "train.guided_alignment.one_based=true"]), tmp_path / "c")
    assert results["steps"] == 5
    shuffled = tmp_path / "shuffled.align"  # the diagonal of the pairs in reverse order: links of other sentences
    shuffled.write_text("".join(reversed(one_based.read_text().splitlines(keepends=True))))
    with pytest.raises(DataError, match=r"lie outside the sentences of .*train.src .*links of other sentences"):
        train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", f"train.guided_alignment.links={shuffled}",
                           "train.guided_alignment.one_based=true"]), tmp_path / "d")
    empty = tmp_path / "empty.align"
    empty.write_text("\n" * 300)
    with pytest.raises(DataError, match=r"empty.align: no training pair has a link"):
        train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", f"train.guided_alignment.links={empty}"]),
              tmp_path / "e")


def test_aligner_none_writes_the_text_and_stops_naming_it(compose_cfg, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(DataError, match=r"aligner=none: the training text is in .*train.src and .*train.tgt; align"):
        train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", "train.guided_alignment.aligner=none"]), run)
    assert len((run / "guided" / "train.src").read_text().splitlines()) == 300


def test_a_run_resumed_by_its_folder_stays_guided_and_links_alone_warn(compose_cfg, tmp_path, caplog):
    links = tmp_path / "diagonal.align"
    run = tmp_path / "run"
    with pytest.raises(DataError):
        train(compose_cfg([*TINY, "train.guided_alignment.weight=0.5", "train.guided_alignment.aligner=none"]), run)
    src = (run / "guided" / "train.src").read_text().splitlines()
    links.write_text("".join(" ".join(f"{i}-{i}" for i in range(min(3, len(line.split())))) + "\n" for line in src))
    guided = ["train.guided_alignment.weight=0.5", f"train.guided_alignment.links={links}"]
    train(compose_cfg([*TINY, *guided]), run)
    caplog.set_level("INFO")
    results = train(compose_cfg([*TINY, "train.max_steps=8"]), run, overrides=["train.max_steps=8"])
    assert results["steps"] == 8
    assert "guided alignment: links for 300 of 300 training pairs" in caplog.text
    caplog.clear()
    train(compose_cfg([*TINY, f"train.guided_alignment.links={links}"]), tmp_path / "plain")
    assert "train.guided_alignment.weight is null: no guided alignment" in caplog.text
    assert "guided alignment: links for" not in caplog.text
