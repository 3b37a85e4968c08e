"""Which decoder step's attention belongs to target word t, for each decoder style: tiny models trained on a
synthetic task whose word alignment is known, then read as aligners by the extraction of ``nmt.align``
(:func:`nmt.analysis.forced.force_align`, :func:`nmt.analysis.forced.links`, :func:`nmt.analysis.aer.aer`).

The task: a source sentence of 3-8 words over ``a..j``, its target the same sentence reversed over the disjoint
vocabulary ``k..t`` (source word ``c`` becomes target word ``m``), so target word t of an n-word sentence is the
translation of source word n-1-t and nothing else. Every word is one SentencePiece piece, so the word merge is the
identity and the scores measure the attention rows themselves.

Run as a script to print the table of docs/alignment.md ("Which step belongs to target word t")::

    python tests/analysis/test_extraction.py [--seeds 1 2 3] [--steps 200] [--decoders conditional ...]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import pytest
import torch

from nmt.analysis.aer import aer
from nmt.analysis.forced import force_align, links
from nmt.data.batches import collate
from nmt.data.spm_training import train_spm
from nmt.data.tokenizer import PAD_ID, Tokenizer
from nmt.models.build import build_model
from nmt.training.loss import loss_fn

CONF = Path(__file__).resolve().parents[2] / "conf"
SOURCE_WORDS, TARGET_WORDS = "abcdefghij", "klmnopqrst"
TRAIN_PAIRS, TEST_PAIRS = 2000, 100
STEPS, BATCH, LR = 200, 64, 3e-3  # about 3 s per model on one CPU thread
TINY = ["model.emb_size=32", "model.hidden_size=64", "model.dropout=0.0"]
DECODERS = {"bahdanau": ["decoder.style=bahdanau"], "conditional": ["decoder.style=conditional"],
            "luong": ["decoder.style=luong"],
            "luong, no input feeding": ["decoder.style=luong", "decoder.input_feeding=false"]}
SCORE_MODELS = ("additive", "dot", "general", "location")  # the table's rows (the test trains the default, additive)


def reversal_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` (source, target) sentence pairs: 3-8 source words over ``a..j``, the target the same words reversed
    and spelt over ``k..t``."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        digits = [rng.randrange(10) for _ in range(rng.randint(3, 8))]
        pairs.append((" ".join(SOURCE_WORDS[d] for d in digits), " ".join(TARGET_WORDS[d] for d in reversed(digits))))
    return pairs


def reversal_links(source: str) -> set[tuple[int, int]]:
    """The true alignment of a reversed sentence: ``(source word n-1-t, target word t)`` for every t."""
    n = len(source.split())
    return {(n - 1 - t, t) for t in range(n)}


def word_tokenizer(pairs: list[tuple[str, str]], folder: Path) -> Tokenizer:
    """A joint BPE model in which every word of the task is one piece (``▁a`` ... ``▁t``).

    Raises:
        AssertionError: when SentencePiece split a word (the word merge would then average pieces).
    """
    path = train_spm([side for pair in pairs for side in pair], folder / "words.model", vocab_size=45,
                     byte_fallback=False)
    tok = Tokenizer.load(path)
    for word in SOURCE_WORDS + TARGET_WORDS:
        assert tok.pieces(tok.encode(word)) == [f"\u2581{word}", "</s>"], f"{word!r} is not one piece"
    return tok


def compose(overrides: list[str]):
    """The composed training config of ``conf/`` with ``overrides`` (Hydra's compose API)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


def train_tiny(cfg, tok: Tokenizer, pairs: list[tuple[str, str]], steps: int = STEPS, seed: int = 1):
    """A model built from ``cfg`` (:func:`nmt.models.build.build_model`) trained with Adam on random batches of
    ``pairs`` for ``steps`` updates (cross-entropy per target token, no label smoothing); returned in eval mode."""
    torch.manual_seed(seed)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(tok), len(tok))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    src, tgt = tok.encode_batch([s for s, _ in pairs]), tok.encode_batch([t for _, t in pairs])
    rng = random.Random(seed)
    model.train()
    for _ in range(steps):
        index = rng.sample(range(len(pairs)), BATCH)
        batch = collate([src[i] for i in index], [tgt[i] for i in index], index)
        logits, _ = model(batch.src, batch.src_mask, batch.tgt_in)  # [B, T, V]
        loss = loss_fn(logits, batch.tgt_out) / (batch.tgt_out != PAD_ID).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def extraction_aer(model, tok: Tokenizer, pairs: list[tuple[str, str]], **extract) -> float:
    """Corpus AER of the links ``nmt.align`` extracts (``extract``: ``shift``, ``method``, ...; its defaults when
    empty) from the forced alignment of ``pairs``, against their true alignment."""
    forced = force_align(model, tok, tok, [s for s, _ in pairs], [t for _, t in pairs])
    return aer([reversal_links(s) for s, _ in pairs], None, [links(t, **extract) for t in forced]).aer


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """Training pairs, held-out test pairs and the word-level tokenizer of the reversal task."""
    train = reversal_pairs(TRAIN_PAIRS, seed=0)
    return train, reversal_pairs(TEST_PAIRS, seed=99), word_tokenizer(train, tmp_path_factory.mktemp("words"))


@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_default_extraction_recovers_the_known_alignment(compose_cfg, task, decoder):
    """Every decoder style's attention row t (the attention computed for emitting target word t: from h_t in
    Luong's decoder, from s_{t-1} in Bahdanau's) is target word t's alignment: the default extraction (shift 0)
    recovers the reversal, reading one step late (shift 1) does not."""
    train, test, tok = task
    model = train_tiny(compose_cfg([*TINY, *DECODERS[decoder]]), tok, train)
    default, late = extraction_aer(model, tok, test), extraction_aer(model, tok, test, shift=1)
    assert default < 0.1, f"{decoder}: AER {default:.3f} with the default extraction"
    assert late > default + 0.5, f"{decoder}: AER {late:.3f} with shift=1 against {default:.3f} with shift=0"


def lagging_share(model, tok: Tokenizer, pairs: list[tuple[str, str]]) -> float:
    """The share of default-extraction links ``(s, t)`` on the source word of target word t-1 (s = n-t): rows that
    stay where the previous step attended."""
    forced = force_align(model, tok, tok, [s for s, _ in pairs], [t for _, t in pairs])
    found = [(s, t, len(source.split())) for (source, _), sentence in zip(pairs, forced) for s, t in links(sentence)]
    return sum(s == n - t for s, t, n in found) / max(len(found), 1)


def main(argv: list[str] | None = None) -> None:
    """Print the markdown table: AER (mean over seeds, and its range) per score model, decoder style and shift, and
    the share of shift-0 links that lag one step behind."""
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--decoders", nargs="+", choices=sorted(DECODERS), default=list(DECODERS),
                        help="the decoder styles of the table's rows (default: all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train, test = reversal_pairs(TRAIN_PAIRS, seed=0), reversal_pairs(TEST_PAIRS, seed=99)
    tok = word_tokenizer(train, Path(tempfile.mkdtemp()))
    print("| score model | decoder | AER, shift 0 (the default) | AER, shift 1 | shift-0 links on word t-1's source |\n"
          "|---|---|---|---|---|")
    for attention in SCORE_MODELS:
        for decoder in args.decoders:
            overrides = DECODERS[decoder]
            scores, lagging, began = {0: [], 1: []}, [], time.perf_counter()
            for seed in args.seeds:
                model = train_tiny(compose([*TINY, *overrides, f"attention={attention}"]), tok, train, args.steps, seed)
                for shift, values in scores.items():
                    values.append(100 * extraction_aer(model, tok, test, shift=shift))
                lagging.append(100 * lagging_share(model, tok, test))
            cells = [f"{sum(v) / len(v):.1f} ({min(v):.1f}-{max(v):.1f})" for v in scores.values()]
            seconds = (time.perf_counter() - began) / len(args.seeds)
            print(f"| {attention} | {decoder} | {cells[0]} | {cells[1]} | {sum(lagging) / len(lagging):.1f}% | "
                  f"<!-- {seconds:.1f} s per model -->", flush=True)


if __name__ == "__main__":
    main()
