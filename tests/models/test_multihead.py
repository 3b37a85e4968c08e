"""Multi-head attention (nmt.models.multihead): the attention contract, every head's weights, known answers (one
head = scaled dot attention; per-head loops by hand), and per-head weights through the decoder and the search
(stepwise = teacher forcing; beam hypotheses = teacher forcing of their ids)."""

import functools
import math

import pytest
import torch
from tensors import make_batch as _make_batch
from tensors import padded as _padded
from tensors import teacher_forced

from nmt.decoding.search import beam, greedy
from nmt.models import attending
from nmt.models.attention import Additive, Dot
from nmt.models.build import build_model
from nmt.models.decoder import Decoder
from nmt.models.encoder import Encoder
from nmt.models.multihead import MultiHead
from nmt.models.seq2seq import Seq2Seq

H = 8
FACTORIES = {
    "dot_4": functools.partial(MultiHead, heads=4),
    "dot_2_unscaled": functools.partial(MultiHead, heads=2, scaled=False),
    "dot_3_head_size_5": functools.partial(MultiHead, heads=3, head_size=5),
    "additive_2": functools.partial(MultiHead, heads=2, score="additive"),
    "additive_1": functools.partial(MultiHead, heads=1, score="additive"),
}
ALL = list(FACTORIES)
LENGTHS = [5, 2, 9, 1, 7]


def make(name, seed=0):
    torch.manual_seed(seed)
    return FACTORIES[name](query_size=H, key_size=H)


# ---------------------------------------------------------------- the contract


@pytest.mark.parametrize("name", ALL)
def test_contract_shapes_padding_rows_and_prepared(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    context, weights = att(query, keys, mask)
    assert context.shape == (5, H) and weights.shape == mask.shape
    assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(5))
    prepared = att.prepare(keys)
    assert prepared.shape == (5, keys.size(1), 2 * att.heads * att.head_size)
    again, again_weights = att(query, keys, mask, prepared=prepared)
    torch.testing.assert_close(again_weights, weights)
    torch.testing.assert_close(again, context)


@pytest.mark.parametrize("name", ALL)
def test_every_head_is_a_distribution_and_their_mean_is_the_weights(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    context, weights, heads = att.attend(query, keys, mask)
    assert heads.shape == (5, att.heads, keys.size(1))
    padding = ~mask.unsqueeze(1).expand_as(heads)
    assert torch.equal(heads[padding], torch.zeros_like(heads[padding]))
    torch.testing.assert_close(heads.sum(dim=2), torch.ones(5, att.heads))
    assert torch.equal(weights, heads.mean(dim=1))
    assert torch.equal(context, att(query, keys, mask)[0])
    if att.heads > 1:  # the heads really differ: the mean is not one of them
        assert (heads[:, 0] - heads[:, 1]).abs().max() > 1e-3


@pytest.mark.parametrize("name", ALL)
def test_k_queries_per_sentence_equal_k_copies_and_gradients_flow(name):
    att, K = make(name), 3
    _, keys, mask = make_batch(LENGTHS)
    query = torch.randn(5, K, H, requires_grad=True)
    context, weights, heads = att.attend(query, keys, mask)
    assert context.shape == (5, K, H) and weights.shape == (5, K, keys.size(1))
    assert heads.shape == (5, K, att.heads, keys.size(1))
    rows = torch.arange(5).repeat_interleave(K)
    flat_c, flat_w, flat_h = att.attend(query.flatten(0, 1), keys[rows], mask[rows])
    torch.testing.assert_close(weights.flatten(0, 1), flat_w)
    torch.testing.assert_close(heads.flatten(0, 1), flat_h)
    torch.testing.assert_close(context.flatten(0, 1), flat_c)
    (context.sum() + (weights * torch.randn_like(weights)).sum()).backward()
    assert query.grad is not None and bool(query.grad.abs().sum() > 0)
    for parameter_name, parameter in att.named_parameters():
        assert parameter.grad is not None and bool(parameter.grad.abs().sum() > 0), parameter_name


@pytest.mark.parametrize("name", ALL)
def test_an_empty_source_gets_zero_weights_and_a_zero_context(name):
    att = make(name)
    query, keys, mask = make_batch([3, 1])
    mask[1] = False
    context, weights, heads = att.attend(query, keys, mask)
    assert torch.equal(weights[1], torch.zeros_like(weights[1]))
    assert torch.equal(heads[1], torch.zeros_like(heads[1]))
    assert torch.equal(context[1], torch.zeros_like(context[1]))
    assert not torch.isnan(context).any()


# ---------------------------------------------------------------- known answers


@pytest.mark.parametrize("scaled", [True, False])
def test_one_head_with_identity_projections_is_dot_attention(scaled):
    att = MultiHead(H, H, heads=1, scaled=scaled)
    with torch.no_grad():
        att.W_q.weight.copy_(torch.eye(H))
        att.W_kv.weight.copy_(torch.cat([torch.eye(H), torch.eye(H)]))
        att.W_o.weight.copy_(torch.eye(H))
    query, keys, mask = make_batch(LENGTHS, scale=1.0)
    context, weights, heads = att.attend(query, keys, mask)
    expected_context, expected_weights = Dot(H, H, scaled=scaled)(query, keys, mask)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(context, expected_context)
    torch.testing.assert_close(heads[:, 0], expected_weights)


def by_hand(att, query, keys, mask):
    """Context ``[B, Hk]`` and per-head weights ``[B, heads, S]`` with plain loops over sentences and heads: head
    i softmaxes ``(W_i^Q q)ᵀ (W_i^K h̄_s) / √d`` (dot) or ``v_iᵀ tanh(W_i^Q q + W_i^K h̄_s)`` (additive) over the
    real tokens, its context is ``Σ_s a_i(s) W_i^V h̄_s``, and the output is ``W^O [c_1; ...; c_H]``."""
    d, n_heads = att.head_size, att.heads
    W_k, W_v = att.W_kv.weight[: n_heads * d], att.W_kv.weight[n_heads * d :]
    contexts, all_heads = [], []
    for b in range(query.size(0)):
        n = int(mask[b].sum())
        per_head, parts = [], []
        for i in range(n_heads):
            rows = slice(i * d, (i + 1) * d)
            q = att.W_q.weight[rows] @ query[b]  # [d]
            k, v = keys[b, :n] @ W_k[rows].T, keys[b, :n] @ W_v[rows].T  # [n, d]
            if att.kind == "dot":
                energy = k @ q * (att.scale)
            else:
                energy = torch.tanh(q + k) @ att.v[i]
            a = torch.softmax(energy, dim=0)
            per_head.append(torch.cat([a, a.new_zeros(keys.size(1) - n)]))
            parts.append(a @ v)
        contexts.append(att.W_o.weight @ torch.cat(parts))
        all_heads.append(torch.stack(per_head))
    return torch.stack(contexts), torch.stack(all_heads)


@pytest.mark.parametrize("name", ALL)
def test_heads_by_hand(name):
    att = make(name).double()
    query, keys, mask = make_batch(LENGTHS)
    query, keys = query.double(), keys.double()
    with torch.no_grad():
        context, weights, heads = att.attend(query, keys, mask)
        expected_context, expected_heads = by_hand(att, query, keys, mask)
    torch.testing.assert_close(heads, expected_heads)
    torch.testing.assert_close(weights, expected_heads.mean(dim=1))
    torch.testing.assert_close(context, expected_context)
    if att.kind == "dot":
        assert att.scale == (1.0 if name.endswith("unscaled") else pytest.approx(1 / math.sqrt(att.head_size)))


def test_sizes_and_refusals():
    assert make("dot_4").head_size == 2 and make("dot_3_head_size_5").W_o.in_features == 15
    with pytest.raises(ValueError, match="3 heads do not divide the key size 8"):
        MultiHead(H, H, heads=3)
    with pytest.raises(ValueError, match="score must be one of dot, additive"):
        MultiHead(H, H, score="general")
    with pytest.raises(ValueError, match="heads must be >= 1"):
        MultiHead(H, H, heads=0)
    with pytest.raises(ValueError, match="head_size must be >= 1"):
        MultiHead(H, H, heads=2, head_size=0)


def test_other_score_models_have_no_heads():
    query, keys, mask = make_batch(LENGTHS)
    att = Additive(H, H)
    context, weights, heads = att.attend(query, keys, mask)
    assert heads is None
    expected_context, expected_weights = att(query, keys, mask)
    assert torch.equal(context, expected_context) and torch.equal(weights, expected_weights)


# ---------------------------------------------------------------- through the decoder and the search

E, HD, V = 8, 16, 12
STYLES = ["luong", "luong_nofeed", "bahdanau", "conditional"]


def build(style="luong", score="dot", seed=0, sharpen=3.0):
    """A random multi-head model in eval mode (2 heads), its output layer scaled so that searches are not ties."""
    torch.manual_seed(seed)
    encoder = Encoder(V, E, HD, num_layers=1, dropout=0.3, decoder_layers=1)
    decoder = Decoder(V, E, HD, functools.partial(MultiHead, heads=2, score=score), num_layers=1, dropout=0.3,
                      style="luong" if style == "luong_nofeed" else style, input_feeding=style != "luong_nofeed")
    model = Seq2Seq(encoder, decoder).eval()
    with torch.no_grad():
        decoder.generator.weight.mul_(sharpen)
        for name, parameter in decoder.attention.named_parameters():  # sharper, distinct heads
            parameter.mul_(3.0)
    return model


@pytest.mark.parametrize("style", STYLES)
def test_stepwise_heads_equal_teacher_forced_heads(style, monkeypatch):
    model = build(style)
    src, mask = padded([9, 6])
    tgt_in = torch.randint(4, V, (2, 7))
    with torch.no_grad():
        _, weights, heads = model.teacher_force(src, mask, tgt_in)  # [B, T, S], [B, T, heads, S]
        assert heads.shape == (2, 7, 2, 9)
        assert torch.equal(weights, heads.mean(dim=2))
        assert torch.equal(model(src, mask, tgt_in)[1], weights)  # forward = teacher_force without the heads
        memory, state = model.encode(src, mask)
        stepped = []
        for t in range(7):
            _, state, w = model.decoder.step(tgt_in[:, t], state, memory)
            stepped.append(state.heads)
            torch.testing.assert_close(w, state.heads.mean(dim=1))
        monkeypatch.setattr(attending, "ATTEND_ELEMENTS", 1)  # all-at-once attention in slices of one step
        _, _, sliced = model.teacher_force(src, mask, tgt_in)
    torch.testing.assert_close(torch.stack(stepped, dim=1), heads)
    torch.testing.assert_close(sliced, heads)
    assert (heads[..., 0, :] - heads[..., 1, :]).abs().max() > 1e-2  # two different heads


@pytest.mark.parametrize("score", ["dot", "additive"])
@pytest.mark.parametrize("style", STYLES)
def test_beam_and_greedy_heads_equal_teacher_forcing_of_their_hypotheses(style, score):
    lengths = [4, 9, 1, 6, 3, 7]
    model = build(style, score, seed=2)
    src, mask = padded(lengths, S=10)
    results = beam(model, src, mask, beam_size=4, n_best=4, length_penalty_alpha=0.6)
    results_greedy = greedy(model, src, mask)
    reordered = 0
    for b, n in enumerate(lengths):
        assert len({tuple(h.ids) for h in results[b]}) == len(results[b])
        for h in results[b] + [results_greedy[b]]:
            assert h.heads.shape == (2, len(h.ids), n)
            expected = teacher_forced(model, src[b, :n], h.ids)[1]
            torch.testing.assert_close(h.heads, expected, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(h.alignment, h.heads.mean(dim=0), atol=1e-6, rtol=1e-5)
        reordered += sum(h.ids[:1] != results[b][0].ids[:1] for h in results[b])
    assert reordered > 0  # hypotheses that left the best one's path early: their rows were reordered


def test_single_head_models_carry_no_heads(compose_cfg):
    cfg = compose_cfg(["attention=additive", "model.emb_size=8", "model.hidden_size=8"])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, 20, 20).eval()
    src, mask = padded([5, 3])
    assert model.teacher_force(src, mask, torch.randint(4, V, (2, 4)))[2] is None
    assert all(h.heads is None for h in greedy(model, src, mask))
    assert all(h.heads is None for hyps in beam(model, src, mask, beam_size=3, n_best=2) for h in hyps)


@pytest.mark.parametrize("score", ["dot", "additive"])
def test_the_config_builds_a_multihead_decoder(compose_cfg, score):
    cfg = compose_cfg(["attention=multihead", f"attention.score={score}", "attention.heads=2", "model.emb_size=8",
                       "model.hidden_size=8"])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, 20, 20).eval()
    att = model.decoder.attention
    assert type(att) is MultiHead and (att.heads, att.head_size, att.kind) == (2, 4, score)
    assert att.W_o.out_features == 8  # the context has the width the decoder's W_c expects


def padded(lengths, S=None, seed=1):
    return _padded(lengths, V, S, seed)


def make_batch(lengths, S=None, seed=1, scale=3.0):
    """Scaled up so that the rows are far from uniform."""
    return _make_batch(lengths, S, seed, H, scale)
