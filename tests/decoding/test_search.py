"""Greedy and beam search (nmt.decoding.search) on small random models: equivalences, exact search, alignments, limits."""

import functools
import itertools
import math

import pytest
import torch

from nmt.decoding.hypothesis import BOS_ID, EOS_ID, PAD_ID, coverage_penalty, length_penalty, log_probs
from nmt.decoding.search import beam, greedy
from nmt.models.attention import Additive, Dot, General, LocalP
from nmt.models.decoder import Decoder
from nmt.models.encoder import Encoder
from nmt.models.seq2seq import Seq2Seq

E, H = 8, 16
ATTENTIONS = {
    "additive": Additive,
    "dot": Dot,
    "general": General,
    "local_p": functools.partial(LocalP, window=2),
}
LENGTHS = [4, 9, 1, 6, 3, 7]  # source lengths with EOS; one sentence is EOS alone
STYLES = ["luong", "luong_nofeed", "bahdanau", "conditional"]




def build(style="luong", attention="additive", seed=0, V=12, sharpen=3.0, eos_bias=0.0):
    """A random model in eval mode. ``sharpen`` scales the output layer so that the distributions are not flat
    (a flat model makes every search a near-tie); ``eos_bias`` is added to EOS's logit."""
    torch.manual_seed(seed)
    encoder = Encoder(V, E, H, num_layers=1, dropout=0.3, decoder_layers=1)
    feeding = style != "luong_nofeed"  # luong_nofeed: style luong with input_feeding=False
    decoder = Decoder(V, E, H, ATTENTIONS[attention], num_layers=1, dropout=0.3,
                      style="luong" if style == "luong_nofeed" else style, input_feeding=feeding)
    model = Seq2Seq(encoder, decoder).eval()
    with torch.no_grad():
        decoder.generator.weight.mul_(sharpen)
        decoder.generator.bias[EOS_ID] += eos_bias
    return model


def padded(lengths, V=12, S=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    S = S or max(lengths)
    src = torch.full((len(lengths), S), PAD_ID)
    for b, n in enumerate(lengths):
        src[b, : n - 1] = torch.randint(4, V, (n - 1,), generator=g)
        src[b, n - 1] = EOS_ID
    return src, src != PAD_ID


def teacher_forced(model, src_row, ids):
    """Score and attention of the hypothesis ``ids`` for one sentence (src_row without padding), by teacher
    forcing ``[BOS] + ids[:-1]``: (Σ log p(ids[t]), alignment [len(ids), S_b])."""
    tgt_in = torch.tensor([[BOS_ID] + ids[:-1]])
    with torch.no_grad():
        logits, align = model(src_row.unsqueeze(0), (src_row != PAD_ID).unsqueeze(0), tgt_in)
    logp = log_probs(logits[0])  # [T, V]
    return float(logp[torch.arange(len(ids)), torch.tensor(ids)].sum()), align[0]


def coverage_by_hand(rows, beta):
    """GNMT's cp (Wu et al. 2016, eq. 14) from alignment rows (lists of S floats), over the source words (the last
    column, the source </s>, left out), floored at 1e-6 before the log."""
    totals = [sum(col) for col in zip(*rows)][:-1]
    return beta * sum(math.log(min(max(x, 1e-6), 1.0)) for x in totals)


def check_hypothesis(h, s_len, max_len_a, max_len_b, alpha=0.0, beta=0.0):
    assert h.ids[-1] == EOS_ID and EOS_ID not in h.ids[:-1]
    assert PAD_ID not in h.ids and BOS_ID not in h.ids
    assert 1 <= len(h.ids) <= int(max_len_a * s_len + max_len_b)
    assert h.alignment.shape == (len(h.ids), s_len)
    cp = coverage_by_hand(h.alignment.tolist(), beta)
    assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.ids), alpha) + cp, rel=1e-6, abs=1e-5)


# ---------------------------------------------------------------- beam 1 == greedy


@pytest.mark.parametrize("attention", ["additive", "local_p"])
@pytest.mark.parametrize("style", STYLES)
def test_beam_one_equals_greedy(style, attention):
    src, mask = padded(LENGTHS, S=11)
    lengths_seen = set()
    for seed in range(4):
        model = build(style, attention, seed)
        g = greedy(model, src, mask)
        b = beam(model, src, mask, beam_size=1, length_penalty_alpha=0.0)
        for hg, (hb,) in zip(g, b):
            assert hb.ids == hg.ids
            assert hb.log_prob == pytest.approx(hg.log_prob, abs=1e-4)
            torch.testing.assert_close(hb.alignment, hg.alignment, atol=1e-6, rtol=1e-5)
            lengths_seen.add(len(hg.ids))
    assert len(lengths_seen) >= 3, "the models should produce hypotheses of various lengths"


@pytest.mark.parametrize("style", STYLES)
def test_input_gate_table_gives_the_same_search(style):
    """decoder.input_gate_table() [V, 3H] replaces the per-step gate product; it is used, and changes nothing."""
    model = build(style, "additive", seed=1)
    src, mask = padded(LENGTHS, S=11)
    table = model.decoder.input_gate_table()
    assert table.shape == (12, 3 * H)
    for plain, tabled in [(greedy(model, src, mask), greedy(model, src, mask, gate_table=table)),
                          *zip(beam(model, src, mask, 3, 0.6, n_best=2),
                               beam(model, src, mask, 3, 0.6, n_best=2, gate_table=table))]:
        for hp, ht in zip(plain, tabled):
            assert hp.ids == ht.ids
            assert hp.log_prob == pytest.approx(ht.log_prob, abs=1e-5)
            torch.testing.assert_close(hp.alignment, ht.alignment, atol=1e-6, rtol=1e-5)
    wrong = greedy(model, src, mask, gate_table=torch.zeros_like(table))
    assert [h.log_prob for h in wrong] != pytest.approx([h.log_prob for h in greedy(model, src, mask)], abs=1e-3)
    with pytest.raises(RuntimeError, match="eval"):
        model.train().decoder.input_gate_table()


# ---------------------------------------------------------------- batching does not change results


@pytest.mark.parametrize("search", ["greedy", "beam5"])
@pytest.mark.parametrize("style", STYLES)
def test_batch_of_one_equals_batch_of_many(style, search):
    model = build(style, "additive" if style == "bahdanau" else "local_p", seed=3)
    src, mask = padded(LENGTHS, S=12)  # extra padding column beyond the longest sentence

    def run(s, m):
        if search == "greedy":
            return [[h] for h in greedy(model, s, m)]
        return beam(model, s, m, beam_size=5, length_penalty_alpha=0.6, n_best=3)

    many = run(src, mask)
    for b, n in enumerate(LENGTHS):
        (one,) = run(src[b : b + 1, :n], mask[b : b + 1, :n])
        assert [h.ids for h in one] == [h.ids for h in many[b]]
        for h1, hm in zip(one, many[b]):
            assert h1.score == pytest.approx(hm.score, abs=1e-4)
            assert h1.log_prob == pytest.approx(hm.log_prob, abs=1e-4)
            torch.testing.assert_close(h1.alignment, hm.alignment, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("style", STYLES)
def test_greedy_drops_ended_sentences_from_the_batch(style, monkeypatch):
    """EOS is never chosen (its logit is lowered by 30), so each sentence ends at its length limit, its source
    length here (4, 9, 1, 6, 3, 7); a quarter of the rows ended makes the batch shrink to the open sentences, and
    every sentence gets what it gets when decoded alone."""
    model = build(style, "additive", seed=2, eos_bias=-30.0)
    rows = []
    step = model.decoder.step
    monkeypatch.setattr(model.decoder, "step", lambda y, *a: rows.append(y.size(0)) or step(y, *a))
    src, mask = padded(LENGTHS, S=10)
    many = greedy(model, src, mask, max_len_a=1.0, max_len_b=0)
    assert rows == [6, 6, 6, 4, 3, 3, 2, 1, 1]
    assert [len(h.ids) for h in many] == LENGTHS
    for b, n in enumerate(LENGTHS):
        (one,) = greedy(model, src[b : b + 1, :n], mask[b : b + 1, :n], max_len_a=1.0, max_len_b=0)
        assert one.ids == many[b].ids
        assert one.log_prob == pytest.approx(many[b].log_prob, abs=1e-4)
        torch.testing.assert_close(one.alignment, many[b].alignment, atol=1e-5, rtol=1e-4)


def test_greedy_shrinks_its_batch_under_bf16_autocast():
    """Under autocast the attention weights are bf16 while the recorded ones are float32: the rows still leave
    the batch and every sentence ends at its limit."""
    model = build("conditional", "additive", seed=2, eos_bias=-30.0)
    src, mask = padded(LENGTHS, S=10)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        hyps = greedy(model, src, mask, max_len_a=1.0, max_len_b=0)
    assert [len(h.ids) for h in hyps] == LENGTHS
    assert all(h.alignment.dtype == torch.float32 for h in hyps)


# ---------------------------------------------------------------- beam vs greedy, beam vs exact search


def test_beam_five_is_at_least_as_good_as_greedy_almost_always():
    """Beam search is not monotone in the beam size: the greedy prefix can be pruned by K better prefixes that
    later end badly, so beam-5 < greedy does happen on near-flat random models (about 1% of sentences with these
    sizes; e.g. greedy [8, 7, EOS] at -6.8 while the five prefixes that pruned "8 7" all ended near -26). So this
    checks "never below" on the large majority and "better on average", and exactness is tested below."""
    src, mask = padded([3, 5, 8, 2, 6, 4, 7, 9] * 2, seed=7)
    not_worse = better = total = 0
    gain = 0.0
    for style, attention, seed in itertools.product(STYLES, ["additive", "general"], range(3)):
        model = build(style, attention, seed)
        for hg, (hb,) in zip(greedy(model, src, mask), beam(model, src, mask, beam_size=5)):
            total += 1
            not_worse += hb.log_prob >= hg.log_prob - 1e-5
            better += hb.log_prob > hg.log_prob + 1e-5
            gain += hb.log_prob - hg.log_prob
    assert not_worse >= 0.95 * total, (not_worse, total)
    assert better >= 0.3 * total, (better, total)
    assert gain / total > 0.1


def reference_beam(model, src_row, K, alpha, n_best, max_len_a=1.5, max_len_b=10, beta=0.0):
    """The algorithm of ``beam``'s docstring, one sentence, one hypothesis at a time, in plain Python: of the 2K best
    continuations, EOS ones among the top K are finished (scored log_prob / lp + cp from their own attention
    rows), the K best non-EOS ones stay open; stop at the length limit (EOS forced) or once n_best are finished
    and the n-best-th beats the best open beam's bound."""
    mask = (src_row != PAD_ID).unsqueeze(0)
    memory, state = model.encode(src_row.unsqueeze(0), mask)
    limit = int(max_len_a * len(src_row) + max_len_b)

    def lp(n):
        return ((5 + n) / 6) ** alpha

    open_beams, finished = [(0.0, [], state, [])], []
    for t in range(limit):
        candidates = []
        for score, ids, st, rows in open_beams:
            with torch.no_grad():
                logits, new_state, w = model.decoder.step(
                    torch.tensor([ids[-1] if ids else BOS_ID]), st, memory
                )
            logp = log_probs(logits)[0].tolist()
            for v, x in enumerate(logp):
                if x != float("-inf") and (t + 1 < limit or v == EOS_ID):
                    candidates.append((score + x, ids + [v], new_state, rows + [w[0].tolist()]))
        candidates.sort(key=lambda c: -c[0])
        top = candidates[: 2 * K]
        finished += [(raw / lp(t + 1) + coverage_by_hand(rows, beta), raw, ids)
                     for raw, ids, _, rows in top[:K] if ids[-1] == EOS_ID]
        open_beams = [c for c in top if c[1][-1] != EOS_ID][:K]
        floor = sorted(f[0] for f in finished)[-n_best] if len(finished) >= n_best else float("-inf")
        if not open_beams or floor >= open_beams[0][0] / lp(limit):
            break
    return sorted(finished, key=lambda f: -f[0])[:n_best]


@pytest.mark.parametrize("alpha, n_best, beta", [(0.0, 1, 0.0), (0.6, 3, 0.0), (0.6, 3, 0.4), (0.0, 2, 2.0)])
@pytest.mark.parametrize("style", STYLES)
def test_batched_beam_equals_reference_beam(style, alpha, n_best, beta):
    src, mask = padded(LENGTHS, S=10)
    for seed in range(2):
        model = build(style, "additive", seed)
        results = beam(model, src, mask, beam_size=4, length_penalty_alpha=alpha, n_best=n_best,
                       coverage_penalty_beta=beta)
        for b, n in enumerate(LENGTHS):
            expected = reference_beam(model, src[b, :n], 4, alpha, n_best, beta=beta)
            assert [h.ids for h in results[b]] == [ids for _, _, ids in expected]
            for h, (score, raw, _) in zip(results[b], expected):
                assert h.score == pytest.approx(score, abs=1e-4)
                assert h.log_prob == pytest.approx(raw, abs=1e-4)


def score_all(model, src_row, hyps):
    """Σ log p(ids) for every hypothesis in ``hyps`` (lists of ids ending in EOS), teacher-forced in one batch."""
    N, T = len(hyps), max(len(h) for h in hyps)
    tgt_in = torch.full((N, T), PAD_ID)
    tgt_out = torch.full((N, T), PAD_ID)
    for i, ids in enumerate(hyps):
        tgt_in[i, : len(ids)] = torch.tensor([BOS_ID] + ids[:-1])
        tgt_out[i, : len(ids)] = torch.tensor(ids)
    src = src_row.unsqueeze(0).expand(N, -1)
    with torch.no_grad():
        logits, _ = model(src, src != PAD_ID, tgt_in)
    logp = log_probs(logits.reshape(N * T, -1)).view(N, T, -1)
    logp = logp.gather(2, tgt_out.unsqueeze(2)).squeeze(2).masked_fill(tgt_out == PAD_ID, 0.0)
    return logp.sum(dim=1).tolist()


def test_coverage_penalty_by_hand():
    """cp = beta * Σ_i log(min(Σ_j a_ji, 1)) over the source words i (Wu et al. 2016, eq. 14; the last column,
    the source </s>, is not one), with the floor."""
    alignment = torch.tensor([[0.6, 0.2, 0.1, 0.0, 0.1], [0.5, 0.3, 0.1, 0.0, 0.1], [0.1, 0.1, 0.7, 0.0, 0.1]])
    # word column totals 1.2 (-> 1), 0.6, 0.9, 0 (-> the 1e-6 floor); the </s> column (0.3) does not count
    assert coverage_penalty(alignment, 0.5) == pytest.approx(0.5 * (math.log(0.6) + math.log(0.9) + math.log(1e-6)))
    assert coverage_penalty(alignment[:, [0, 1, 2, 4]], 0.2) == pytest.approx(0.2 * (math.log(0.6) + math.log(0.9)))
    assert coverage_penalty(torch.eye(3), 1.0) == 0.0  # both words attended fully once; </s> never, no matter
    assert coverage_penalty(torch.tensor([[0.0, 1.0], [0.0, 1.0]]), 1.0) == pytest.approx(math.log(1e-6))
    assert coverage_penalty(torch.tensor([[1.0]]), 2.0) == 0.0  # a source of </s> alone has no word to cover
    assert coverage_penalty(alignment, 0.0) == 0.0


def test_coverage_penalty_changes_the_ranking():
    """With a large beta the beam prefers hypotheses that attend to every source token: on random models some
    sentences change their best hypothesis, and the chosen ones cover the source at least as well on average."""
    src, mask = padded([3, 5, 8, 2, 6, 4, 7, 9], seed=7)
    changed = total = 0
    cover_plain = cover_cp = 0.0
    for style, seed in itertools.product(STYLES, range(3)):
        model = build(style, "additive", seed)
        plain = beam(model, src, mask, beam_size=5, length_penalty_alpha=0.6)
        with_cp = beam(model, src, mask, beam_size=5, length_penalty_alpha=0.6, coverage_penalty_beta=5.0)
        for (hp,), (hc,) in zip(plain, with_cp):
            total += 1
            changed += hp.ids != hc.ids
            cover_plain += coverage_penalty(hp.alignment, 1.0)
            cover_cp += coverage_penalty(hc.alignment, 1.0)
            assert hc.log_prob / length_penalty(len(hc.ids), 0.6) <= hp.score + 1e-5  # plain is the best without cp
    assert changed >= 0.1 * total, (changed, total)
    assert cover_cp > cover_plain


def test_length_penalty_by_hand():
    assert length_penalty(1, 1.0) == pytest.approx(1.0)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    assert length_penalty(13, 0.5) == pytest.approx(3**0.5)
    assert length_penalty(20, 0.0) == 1.0


@pytest.mark.parametrize("n_best", [1, 5])
@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("style", STYLES)
def test_wide_beam_is_exact_search(style, alpha, n_best):
    """Vocabulary 7 (UNK, EOS and 3 more tokens can be generated), at most 5 output tokens: 341 possible
    hypotheses, all scored here by teacher forcing. A beam of 320 prunes nothing (at most 4^3 * 5 candidates
    before the last step), so its n-best must be the exact n-best. This also checks that early stopping never
    drops a hypothesis that could still win once the length penalty is applied."""
    V, max_len = 7, 5
    model = build(style, "general", seed=1, V=V, sharpen=2.0, eos_bias=0.5)
    lengths = [5, 3, 1, 6, 2, 4]
    src, mask = padded(lengths, V=V, seed=2)
    results = beam(
        model,
        src,
        mask,
        beam_size=320,
        length_penalty_alpha=alpha,
        max_len_a=0.0,
        max_len_b=max_len,
        n_best=n_best,
    )
    tokens = [1, 4, 5, 6]  # everything but PAD, BOS and EOS
    every = [list(p) + [EOS_ID] for k in range(max_len) for p in itertools.product(tokens, repeat=k)]
    assert len(every) == 341
    for b, n in enumerate(lengths):
        log_prob = score_all(model, src[b, :n], every)
        scored = sorted(
            ((lp / ((5 + len(ids)) / 6) ** alpha, ids) for lp, ids in zip(log_prob, every)),
            key=lambda x: -x[0],
        )
        assert [h.ids for h in results[b]] == [ids for _, ids in scored[:n_best]]
        for h, (score, _) in zip(results[b], scored):
            assert h.score == pytest.approx(score, abs=1e-4)
        if alpha == 0:
            (g,) = greedy(model, src[b : b + 1, :n], mask[b : b + 1, :n], max_len_a=0.0, max_len_b=max_len)
            assert g.log_prob <= results[b][0].log_prob + 1e-5


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_stops_once_no_open_beam_can_win(alpha, monkeypatch):
    """EOS is nearly certain at the first step: the finished [EOS] (log-prob ~ 0) beats every open beam even at
    the maximum length, so the search must stop after one decoder step, not run to the length limit."""
    model = build("luong", "additive", seed=0, eos_bias=30.0)
    calls = []
    step = model.decoder.step
    monkeypatch.setattr(model.decoder, "step", lambda *a: calls.append(1) or step(*a))
    src, mask = padded(LENGTHS, S=10)
    results = beam(model, src, mask, beam_size=5, length_penalty_alpha=alpha)
    assert [r[0].ids for r in results] == [[EOS_ID]] * len(LENGTHS)
    assert len(calls) == 1


# ---------------------------------------------------------------- alignments and scores of returned hypotheses


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("style", STYLES)
def test_hypothesis_alignment_and_score_equal_teacher_forcing(style, attention):
    model = build(style, attention, seed=2)
    src, mask = padded(LENGTHS, S=10)
    results = beam(model, src, mask, beam_size=4, n_best=4, length_penalty_alpha=0.6)
    results_greedy = greedy(model, src, mask)
    for b, n in enumerate(LENGTHS):
        for h in results[b] + [results_greedy[b]]:
            lp, align = teacher_forced(model, src[b, :n], h.ids)
            assert h.log_prob == pytest.approx(lp, abs=1e-4)
            torch.testing.assert_close(h.alignment, align, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- structure of hypotheses, limits, errors


@pytest.mark.parametrize("alpha, beta", [(0.0, 0.0), (0.6, 0.0), (0.6, 0.4)])
@pytest.mark.parametrize("style", STYLES)
def test_hypotheses_are_well_formed_and_sorted(style, alpha, beta):
    src, mask = padded(LENGTHS, S=10)
    for seed in range(3):
        model = build(style, "additive", seed, eos_bias=0.5)
        results = beam(model, src, mask, beam_size=5, n_best=3, length_penalty_alpha=alpha,
                       coverage_penalty_beta=beta)
        assert len(results) == len(LENGTHS)
        for b, n in enumerate(LENGTHS):
            assert len(results[b]) == 3
            scores = [h.score for h in results[b]]
            assert scores == sorted(scores, reverse=True)
            assert len({tuple(h.ids) for h in results[b]}) == 3, "n-best hypotheses must be distinct"
            for h in results[b]:
                check_hypothesis(h, n, 1.5, 10, alpha, beta)
        for h, n in zip(greedy(model, src, mask, length_penalty_alpha=alpha, coverage_penalty_beta=beta), LENGTHS):
            check_hypothesis(h, n, 1.5, 10, alpha, beta)


@pytest.mark.parametrize("max_len_a, max_len_b", [(0.0, 1), (0.0, 3), (1.0, 2), (1.5, 0)])
def test_eos_is_forced_at_the_maximum_length(max_len_a, max_len_b):
    """A model that never wants EOS (and strongly wants PAD and BOS, which must never be produced)."""
    model = build("luong", "additive", seed=0, eos_bias=-1e4)
    with torch.no_grad():
        model.decoder.generator.bias[[PAD_ID, BOS_ID]] += 1e4
    src, mask = padded(LENGTHS, S=10)
    expected = [max(1, int(max_len_a * n + max_len_b)) for n in LENGTHS]
    g = greedy(model, src, mask, max_len_a=max_len_a, max_len_b=max_len_b)
    bm = beam(model, src, mask, beam_size=3, n_best=2, max_len_a=max_len_a, max_len_b=max_len_b)
    for b, n in enumerate(LENGTHS):
        for h in [g[b]] + bm[b]:
            assert len(h.ids) == expected[b]
            check_hypothesis(h, n, max_len_a, max(max_len_b, 1))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"beam_size": 0},
        {"beam_size": -2},
        {"beam_size": 3, "n_best": 0},
        {"beam_size": 3, "n_best": 4},
        {"beam_size": 3, "length_penalty_alpha": -0.1},
        {"beam_size": 3, "coverage_penalty_beta": -0.2},
    ],
)
def test_invalid_beam_arguments_raise(kwargs):
    model = build()
    src, mask = padded([3, 2])
    with pytest.raises(ValueError):
        beam(model, src, mask, **kwargs)


@pytest.mark.parametrize("kwargs", [{"length_penalty_alpha": -0.1}, {"coverage_penalty_beta": -0.2}])
def test_invalid_greedy_arguments_raise(kwargs):
    """A negative alpha or beta would reward what it should penalize in the reported score."""
    model = build()
    src, mask = padded([3, 2])
    with pytest.raises(ValueError, match="need alpha >= 0 and beta >= 0"):
        greedy(model, src, mask, **kwargs)


def test_log_probs_masks_pad_and_bos_and_copies_unless_inplace():
    """PAD and BOS get -inf and the rest is log_softmax over the other tokens; the argument is unchanged, and
    ``inplace=True`` gives the same values written into the float32 logits themselves, and into a float32 copy of
    bfloat16 logits, which stay unchanged."""
    logits = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    before = logits.clone()
    got = log_probs(logits)
    assert torch.equal(logits, before)
    allowed = [v for v in range(7) if v not in (PAD_ID, BOS_ID)]
    assert torch.isneginf(got[:, [PAD_ID, BOS_ID]]).all()
    torch.testing.assert_close(got[:, allowed], torch.log_softmax(before[:, allowed], dim=-1))
    written = log_probs(logits, inplace=True)
    torch.testing.assert_close(written, got, rtol=0.0, atol=0.0)
    assert written.data_ptr() == logits.data_ptr() and torch.equal(logits, got)
    low = before.bfloat16()
    kept = low.clone()
    torch.testing.assert_close(log_probs(low, inplace=True), log_probs(kept), rtol=0.0, atol=0.0)
    assert torch.equal(low, kept)
