"""Structural alignment biases (nmt.models.biases, Cohn et al. 2016): the attention contract around every score
model, the features by hand, zero weights = the unbiased model, search (greedy, beam) = teacher forcing for every
decoder style, the settings, checkpoints and gradients."""

import functools
import math

import pytest
import torch
from tensors import make_batch, teacher_forced
from tensors import padded as _padded

from nmt.decoding.search import beam, greedy
from nmt.models import attending, checkpoint
from nmt.models import decoder as decoder_module
from nmt.models.attention import Additive, Dot, General, LocalP
from nmt.models.biases import Biased, with_biases
from nmt.models.build import build_model
from nmt.models.decoder import Decoder
from nmt.models.encoder import Encoder
from nmt.models.multihead import MultiHead
from nmt.models.positional import LocalM, Location
from nmt.models.seq2seq import Seq2Seq

H = 8
SCORES = {"additive": Additive, "dot": functools.partial(Dot, scaled=True), "general": General,
          "multihead": functools.partial(MultiHead, heads=2), "local_m": functools.partial(LocalM, window=2),
          "local_p": functools.partial(LocalP, window=3), "location": functools.partial(Location, max_len=16)}
ALL = list(SCORES)
LENGTHS = [5, 2, 9, 1, 7]
BIASES = {"position": True, "markov": 1, "fertility": 2}


def make(name, seed=0, randomize=True, **biases):
    """The score model ``name`` with the biases (all three by default), its bias weights drawn at random."""
    torch.manual_seed(seed)
    att = Biased(H, H, SCORES[name], **(biases or BIASES))
    if randomize:
        with torch.no_grad():
            for weight in (att.w_position, att.w_markov, att.w_fertility):
                if weight is not None:
                    weight.normal_()
    return att


def history(mask, seed=2):
    """A previous row and a coverage ``[B, S]``: random non-negative values, zero on padding."""
    g = torch.Generator().manual_seed(seed)
    previous = torch.softmax(torch.randn(mask.shape, generator=g).masked_fill(~mask, -math.inf), -1).nan_to_num(0.0)
    return previous, 3 * previous + torch.rand(mask.shape, generator=g) * mask


# ---------------------------------------------------------------- the contract


@pytest.mark.parametrize("name", ALL)
def test_contract_shapes_padding_rows_and_prepared(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    previous, coverage = history(mask)
    context, weights = att(query, keys, mask, positions=3, previous=previous, coverage=coverage)
    assert context.shape == (5, H) and weights.shape == mask.shape
    assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    if name != "local_p":  # local-p's rows sum to at most 1 (the Gaussian, as in the paper)
        torch.testing.assert_close(weights.sum(dim=1), torch.ones(5))
    again = att(query, keys, mask, prepared=att.prepare(keys), positions=3, previous=previous, coverage=coverage)
    torch.testing.assert_close(again[1], weights)
    torch.testing.assert_close(again[0], context)
    plain = att.inner(query, keys, mask, positions=3)[1]  # the biases move the weights
    assert (plain - weights).abs().max() > 1e-3


@pytest.mark.parametrize("name", ALL)
def test_k_queries_per_sentence_equal_k_copies_and_gradients_reach_the_bias_weights(name):
    att, K = make(name), 3
    _, keys, mask = make_batch(LENGTHS)
    rows = torch.arange(5).repeat_interleave(K)
    previous, coverage = history(mask[rows])  # [B*K, S]: one history per hypothesis
    query = torch.randn(5, K, H, requires_grad=True)
    context, weights, _ = att.attend(query, keys, mask, positions=4, previous=previous.view(5, K, -1),
                                     coverage=coverage.view(5, K, -1))
    flat_c, flat_w, _ = att.attend(query.flatten(0, 1), keys[rows], mask[rows], positions=4, previous=previous,
                                   coverage=coverage)
    torch.testing.assert_close(weights.flatten(0, 1), flat_w)
    torch.testing.assert_close(context.flatten(0, 1), flat_c)
    (context.sum() + (weights * torch.randn_like(weights)).sum()).backward()
    assert query.grad is not None and bool(query.grad.abs().sum() > 0)
    for weight in (att.w_position, att.w_markov, att.w_fertility):
        assert weight.grad is not None and bool(weight.grad.abs().sum() > 0)


# ---------------------------------------------------------------- the features by hand


def test_the_bias_term_by_hand():
    att = make("dot", position=True, markov=1, fertility=0)
    w_pos, w_mar, w_fer = att.w_position.detach(), att.w_markov.detach(), att.w_fertility.detach()
    query, _, mask = make_batch([3], S=4)  # 3 real tokens, one padding position
    previous = torch.tensor([[0.5, 0.3, 0.2, 0.0]])
    coverage = torch.tensor([[1.5, 0.25, 0.75, 0.0]])
    t, S_b = 2, 3
    expected = []
    for s in range(4):
        l_s, l_t, l_S = math.log(1 + s), math.log(1 + t), math.log(1 + S_b)
        position = w_pos @ torch.tensor([l_s, l_s * l_s, l_s * l_t, l_s * l_S])
        window = [float(previous[0, s + d]) if 0 <= s + d < 4 else 0.0 for d in (-1, 0, 1)]
        markov = w_mar @ torch.tensor(window)
        expected.append(float(position + markov + w_fer[0] * coverage[0, s]))
    with torch.no_grad():
        term = att.bias_term(query, mask, t, previous, coverage)
    torch.testing.assert_close(term, torch.tensor([expected]))
    with torch.no_grad():  # at the first step there is no history: the position term alone
        first = att.bias_term(query, mask, 0)
    l_s = torch.log1p(torch.arange(4.0))
    torch.testing.assert_close(first[0], w_pos[0] * l_s + w_pos[1] * l_s**2 + w_pos[3] * l_s * math.log(4))
    assert make("dot", markov=1).bias_term(query, mask, 0) is None


def test_a_learned_diagonal_prior():
    """Weights -c, 2c on l_s², l_s·l_t give -c (l_s - l_t)² up to a per-row constant: the row peaks at s = t."""
    att = make("location", randomize=False, position=True)
    with torch.no_grad():
        att.w_position.copy_(torch.tensor([0.0, -20.0, 40.0, 0.0]))
        att.inner.W_a.weight.zero_()
        att.inner.W_a.bias.zero_()
    query, keys, mask = make_batch([9], S=9)
    for t in range(9):
        _, weights = att(query, keys, mask, positions=t)
        assert int(weights.argmax()) == t


def test_refusals_and_the_settings_factory():
    with pytest.raises(ValueError, match="markov must be null"):
        Biased(H, H, Additive, markov=-1)
    with pytest.raises(ValueError, match="fertility must be null"):
        Biased(H, H, Additive, fertility=True)
    with pytest.raises(ValueError, match="position must be true or false"):
        Biased(H, H, Additive, position=1)
    with pytest.raises(ValueError, match="without a bias"):
        Biased(H, H, Additive)
    with pytest.raises(ValueError, match="unknown: coverage"):
        with_biases(Additive, {"coverage": 1})
    with pytest.raises(ValueError, match="needs the target positions"):
        make("dot")(*make_batch(LENGTHS))
    assert with_biases(Additive, {"position": False, "markov": None}) is Additive  # all off: the score model
    att = with_biases(Additive, {"markov": 0})(query_size=H, key_size=H)
    assert type(att) is Biased and att.uses_history and att.w_markov.shape == (1,) and att.w_position is None
    assert not with_biases(Additive, {"position": True})(query_size=H, key_size=H).uses_history


# ---------------------------------------------------------------- through the decoder and the search

E, HD, V = 8, 16, 12
STYLES = ["luong", "luong_nofeed", "bahdanau", "conditional"]


def build(style="luong", score="additive", biases=None, seed=0, randomize=True, sharpen=3.0):
    """A random model in eval mode with the biases (all three by default) around ``score``."""
    torch.manual_seed(seed)
    factory = SCORES[score] if biases == {} else functools.partial(Biased, score=SCORES[score],
                                                                    **(biases or BIASES))
    encoder = Encoder(V, E, HD, num_layers=1, dropout=0.3, decoder_layers=1)
    decoder = Decoder(V, E, HD, factory, num_layers=1, dropout=0.3,
                      style="luong" if style == "luong_nofeed" else style, input_feeding=style != "luong_nofeed")
    model = Seq2Seq(encoder, decoder).eval()
    with torch.no_grad():
        decoder.generator.weight.mul_(sharpen)
        if randomize and biases != {}:
            for weight in (decoder.attention.w_position, decoder.attention.w_markov, decoder.attention.w_fertility):
                if weight is not None:
                    weight.normal_(std=2.0)
    return model


@pytest.mark.parametrize("score", ["additive", "multihead", "local_m"])
@pytest.mark.parametrize("style", STYLES)
def test_stepwise_search_equals_teacher_forcing(style, score, monkeypatch):
    model = build(style, score)
    src, mask = padded([9, 6])
    tgt_in = torch.randint(4, V, (2, 7))
    with torch.no_grad():
        logits, weights = model(src, mask, tgt_in)  # [B, T, V], [B, T, S]
        memory, state = model.encode(src, mask)
        stepped, stepped_logits = [], []
        for t in range(7):
            step_logits, state, w = model.decoder.step(tgt_in[:, t], state, memory)
            stepped.append(w)
            stepped_logits.append(step_logits)
            torch.testing.assert_close(state.previous, w)
        torch.testing.assert_close(state.coverage, torch.stack(stepped, dim=1).sum(dim=1))
        monkeypatch.setattr(attending, "ATTEND_ELEMENTS", 1)  # the sliced all-at-once path, if it ran
        _, sliced = model(src, mask, tgt_in)
    torch.testing.assert_close(torch.stack(stepped, dim=1), weights)
    torch.testing.assert_close(torch.stack(stepped_logits, dim=1), logits)
    torch.testing.assert_close(sliced, weights)


def test_luong_without_feeding_attends_step_by_step_only_with_history(monkeypatch):
    """Position bias alone: all T queries at once; Markov or fertility: one step after another."""
    calls = []
    original = decoder_module.attend_all
    monkeypatch.setattr(decoder_module, "attend_all", lambda *a: calls.append(1) or original(*a))
    src, mask = padded([6, 4])
    tgt_in = torch.randint(4, V, (2, 5))
    with torch.no_grad():
        build("luong_nofeed", biases={"position": True})(src, mask, tgt_in)
        assert calls == [1]
        build("luong_nofeed", biases={"markov": 1})(src, mask, tgt_in)
        build("luong_nofeed", biases={"fertility": 0})(src, mask, tgt_in)
    assert calls == [1]


@pytest.mark.parametrize("score", ["additive", "multihead"])
@pytest.mark.parametrize("style", STYLES)
def test_beam_and_greedy_alignments_equal_teacher_forcing_of_their_hypotheses(style, score):
    lengths = [4, 9, 1, 6, 3, 7]
    model = build(style, score, seed=2)
    src, mask = padded(lengths, S=10)
    results = beam(model, src, mask, beam_size=4, n_best=4)
    results_greedy = greedy(model, src, mask)
    reordered = 0
    for b, n in enumerate(lengths):
        for h in results[b] + [results_greedy[b]]:
            expected = teacher_forced(model, src[b, :n], h.ids)[0]
            torch.testing.assert_close(h.alignment, expected, atol=1e-5, rtol=1e-4)
        reordered += sum(h.ids[: len(h.ids) - 2] != results[b][0].ids[: len(h.ids) - 2] for h in results[b])
    assert reordered > 0  # hypotheses that left the best one's path early: their history rows were reordered
    top = beam(model, src, mask, beam_size=1)
    assert [hyps[0].ids for hyps in top] == [h.ids for h in results_greedy]  # beam 1 = greedy


@pytest.mark.parametrize("score", ["additive", "general", "multihead", "local_p"])
@pytest.mark.parametrize("style", STYLES)
def test_zero_bias_weights_give_exactly_the_unbiased_model(style, score):
    plain, biased = build(style, score, biases={}), build(style, score, randomize=False)
    plain_weights = plain.state_dict()
    for key, value in biased.state_dict().items():  # the same initial weights from the same seed
        if not key.startswith("decoder.attention.w_"):
            assert torch.equal(value, plain_weights[key.replace("attention.inner.", "attention.")]), key
    src, mask = padded([7, 4, 5])
    tgt_in = torch.randint(4, V, (3, 6))
    with torch.no_grad():
        want, got = plain(src, mask, tgt_in), biased(src, mask, tgt_in)
    if style == "luong_nofeed":  # stepwise vs all-at-once attention: the same sums, maybe in another order
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    else:
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert [h.ids for h in greedy(biased, src, mask)] == [h.ids for h in greedy(plain, src, mask)]


# ---------------------------------------------------------------- settings and checkpoints


@pytest.mark.parametrize("attention", ["additive_biased", "dot", "multihead", "local_p"])
def test_the_settings_build_a_biased_model_and_it_round_trips_a_checkpoint(compose_cfg, tokenizer, tmp_path,
                                                                           attention):
    overrides = [f"attention={attention}", "model.emb_size=8", "model.hidden_size=8", "decoder.input_feeding=false"]
    if attention != "additive_biased":
        overrides += ["+attention.bias.markov=1", "+attention.bias.position=true"]
    cfg = compose_cfg(overrides)
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer)).eval()
    att = model.decoder.attention
    assert type(att) is Biased and att.uses_history and att.w_position is not None
    assert (att.w_fertility is not None) == (attention == "additive_biased")
    with torch.no_grad():
        att.w_markov.normal_()
    path = tmp_path / "biased.pt"
    checkpoint.save(path, model, cfg, tokenizer, tokenizer)
    loaded, loaded_cfg, *_ = checkpoint.load(path)
    assert loaded_cfg.attention.bias.markov == 1
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    src, mask = padded([5, 3])
    assert [h.ids for h in greedy(loaded, src, mask)] == [h.ids for h in greedy(model, src, mask)]


def test_a_checkpoint_with_a_foreign_bias_node_is_refused(compose_cfg, tokenizer, tmp_path):
    cfg = compose_cfg(["attention=additive_biased", "model.emb_size=8", "model.hidden_size=8"])
    model = build_model(cfg.model, cfg.decoder, cfg.attention, len(tokenizer), len(tokenizer))
    path = tmp_path / "evil.pt"
    checkpoint.save(path, model, cfg, tokenizer, tokenizer)
    payload = torch.load(path, weights_only=True)
    payload["config"]["attention"]["bias"]["_target_"] = "os.system"
    checkpoint.write_payload(path, payload)
    with pytest.raises(checkpoint.CheckpointError, match="refused"):
        checkpoint.load(path)


def padded(lengths, S=None, seed=1):
    return _padded(lengths, V, S, seed)
