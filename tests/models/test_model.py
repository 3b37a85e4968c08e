"""Encoder, decoder and Seq2Seq (nmt.models): padding invariance, shapes, teacher forcing == stepping, overfitting."""

import functools

import pytest
import torch
from torch.nn import functional as F

from nmt.models.attention import Additive, Dot, General, LocalP
from nmt.models.decoder import Decoder
from nmt.models.encoder import Encoder
from nmt.models.layers import Dropout, WordDropout
from nmt.models.seq2seq import Seq2Seq

PAD, BOS, EOS = 0, 2, 3
V, E, H = 15, 6, 8
ATTENTIONS = {
    "additive": Additive,
    "dot": Dot,
    "general": General,
    "local_p": functools.partial(LocalP, window=2),
}




STYLES = ["luong", "luong_nofeed", "bahdanau", "conditional"]  # luong_nofeed: style luong with input_feeding=False


def decoder_style(style):
    """A test style name -> Decoder keyword arguments."""
    return {"style": "luong", "input_feeding": False} if style == "luong_nofeed" else {"style": style}


def build(style="luong", num_layers=1, attention="additive", enc_layers=1, dropout=0.3, seed=0, h=H, e=E):
    torch.manual_seed(seed)
    encoder = Encoder(V, e, h, num_layers=enc_layers, dropout=dropout, decoder_layers=num_layers)
    decoder = Decoder(V, e, h, ATTENTIONS[attention], num_layers=num_layers, dropout=dropout,
                      **decoder_style(style))
    return Seq2Seq(encoder, decoder)


def padded(lengths, S=None, seed=1, low=4):
    """Random ids in [low, V) ending in EOS, padded with PAD to S: src [B, S], mask [B, S]."""
    g = torch.Generator().manual_seed(seed)
    S = S or max(lengths)
    src = torch.full((len(lengths), S), PAD)
    for b, n in enumerate(lengths):
        src[b, : n - 1] = torch.randint(low, V, (n - 1,), generator=g)
        src[b, n - 1] = EOS
    return src, src != PAD


def random_tgt_in(B, T, seed=2):
    g = torch.Generator().manual_seed(seed)
    tgt = torch.randint(4, V, (B, T), generator=g)
    tgt[:, 0] = BOS
    return tgt


# ---------------------------------------------------------------- encoder


@pytest.mark.parametrize("enc_layers", [1, 2])
@pytest.mark.parametrize("decoder_layers", [1, 2])
def test_encoder_sentence_alone_equals_sentence_in_padded_batch(enc_layers, decoder_layers):
    torch.manual_seed(0)
    enc = Encoder(V, E, H, num_layers=enc_layers, dropout=0.3, decoder_layers=decoder_layers).eval()
    src, mask = padded([6, 3, 8, 1], S=10)  # the short one sits between longer ones, with extra padding
    with torch.no_grad():
        keys, hidden = enc(src, mask)
        for b, n in enumerate([6, 3, 8, 1]):
            keys_alone, hidden_alone = enc(src[b : b + 1, :n], mask[b : b + 1, :n])
            torch.testing.assert_close(keys[b, :n], keys_alone[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(hidden[:, b], hidden_alone[:, 0], atol=1e-5, rtol=0)
    assert keys.shape == (4, 10, H)
    assert hidden.shape == (decoder_layers, 4, H)
    assert bool((keys[~mask] == 0).all()), "keys must be exactly 0 on padding"
    assert bool((keys[mask].abs().sum(dim=-1) > 0).all())


def test_encoder_bridge_reads_final_forward_and_backward_states():
    """Documented bridge: tanh(W_b [→h_{S_b}; ←h_1]) from the top layer, one H-vector per decoder layer."""
    torch.manual_seed(0)
    enc = Encoder(V, E, H, num_layers=2, dropout=0.0, decoder_layers=2).eval()
    lengths = [5, 2, 7]
    src, mask = padded(lengths, S=9)
    with torch.no_grad():
        keys, hidden = enc(src, mask)
        for b, n in enumerate(lengths):
            final = torch.cat([keys[b, n - 1, : H // 2], keys[b, 0, H // 2 :]])  # [→h_{S_b}; ←h_1]
            expected = torch.tanh(enc.bridge(final)).view(2, H)
            torch.testing.assert_close(hidden[:, b], expected, atol=1e-6, rtol=1e-5)


def test_odd_hidden_size_raises():
    with pytest.raises(ValueError, match="even"):
        Encoder(V, E, 7)


def test_unknown_decoder_style_raises():
    with pytest.raises(ValueError, match="style"):
        Decoder(V, E, H, Additive, style="transformer")


# ---------------------------------------------------------------- Seq2Seq


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("style", STYLES)
def test_forward_shapes_and_zero_alignment_on_padding(style, num_layers, attention):
    model = build(style, num_layers, attention).eval()
    lengths = [4, 7, 2]
    src, mask = padded(lengths, S=8)
    tgt_in = random_tgt_in(3, 5)
    with torch.no_grad():
        logits, align = model(src, mask, tgt_in)
    assert logits.shape == (3, 5, V)
    assert align.shape == (3, 5, 8)
    assert bool(torch.isfinite(logits).all())
    pad = ~mask.unsqueeze(1).expand_as(align)
    assert bool((align[pad] == 0).all())
    sums = align.sum(dim=-1)
    if attention == "local_p":
        assert bool((sums <= 1 + 1e-6).all()) and bool((sums > 0).all())
    else:
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-6, rtol=0)


@pytest.mark.parametrize("attention", ["additive", "local_p"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("style", STYLES)
def test_teacher_forcing_equals_stepping(style, num_layers, attention):
    model = build(style, num_layers, attention).eval()
    src, mask = padded([5, 3, 8], S=9)
    tgt_in = random_tgt_in(3, 6)
    with torch.no_grad():
        logits, align = model(src, mask, tgt_in)
        memory, state = model.encode(src, mask)
        for t in range(tgt_in.size(1)):
            step_logits, state, weights = model.decoder.step(tgt_in[:, t], state, memory)
            torch.testing.assert_close(logits[:, t], step_logits, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(align[:, t], weights, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("style", ["luong", "bahdanau"])
def test_search_steps_under_bf16_cast_the_fed_weights_once_until_they_change(style, monkeypatch):
    """Under bf16 autocast a search step casts the fed part of W_ih once and keeps it (autocast would cast that
    view at every step): the logits equal those of the step that casts every time, and an update of the weights
    (a new version) is cast again."""
    model = build(style, 2, "additive").eval()
    src, mask = padded([5, 3, 8], S=9)
    y = random_tgt_in(3, 2)

    def steps():
        memory, state = model.encode(src, mask)
        return [model.decoder.step(y[:, t], state, memory)[0] for t in range(2)]

    def every_step():  # the view itself: autocast casts it at each call
        with monkeypatch.context() as patch:
            patch.setattr(model.decoder, "_search_feed_weight", lambda: model.decoder._feed_weight)
            return steps()

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cached = steps()
        kept = model.decoder._low_feed[1]
        assert kept.dtype == torch.bfloat16 and steps() and model.decoder._low_feed[1] is kept
        for a, b in zip(cached, every_step()):
            assert torch.equal(a, b)
        model.decoder.cells[0].weight_ih.mul_(1.5)
        updated = steps()
        assert model.decoder._low_feed[1] is not kept
        for a, b, old in zip(updated, every_step(), cached):
            assert torch.equal(a, b) and not torch.equal(a, old)
    with torch.no_grad():
        assert model.decoder._search_feed_weight().dtype == torch.float32  # no autocast: the weight itself


@pytest.mark.parametrize("attention", list(ATTENTIONS))
@pytest.mark.parametrize("style", STYLES)
def test_step_with_shared_memory_equals_step_with_copied_memory(style, attention):
    """K decoder rows per sentence can share its memory (beam search) instead of K copies of it."""
    model, K = build(style, 1, attention).eval(), 4
    src, mask = padded([5, 3, 8], S=9)
    with torch.no_grad():
        memory, state = model.encode(src, mask)
        rows = torch.arange(3).repeat_interleave(K)
        state = state.select(rows)
        y = torch.randint(4, V, (3 * K,), generator=torch.Generator().manual_seed(3))
        shared = model.decoder.step(y, state, memory)
        copied = model.decoder.step(y, state, memory.select(rows))
        shared_2 = model.decoder.step(shared[0].argmax(-1), shared[1], memory)
        copied_2 = model.decoder.step(copied[0].argmax(-1), copied[1], memory.select(rows))
    for a, b in [(shared[0], copied[0]), (shared[2], copied[2]), (shared_2[0], copied_2[0]),
                 (shared_2[2], copied_2[2]), (shared_2[1].hidden, copied_2[1].hidden)]:
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert not torch.equal(shared[2][0], shared[2][K])  # rows of different sentences see different keys
    with pytest.raises(ValueError, match="multiple"):
        model.decoder.step(y[:-1], state.select(torch.arange(3 * K - 1)), memory)


@pytest.mark.parametrize("style", STYLES)
def test_query_is_the_state_the_style_prescribes(style):
    """Luong attends with h_t (which has read y_{t-1}); Bahdanau with s_{t-1} (which has not)."""
    model = build(style, 1, "additive", dropout=0.0).eval()
    src, mask = padded([6, 4], S=6)
    tgt_a = random_tgt_in(2, 4)
    tgt_b = tgt_a.clone()
    tgt_b[:, 2] = (tgt_a[:, 2] - 4 + 1) % (V - 4) + 4  # a different token fed at step 2
    with torch.no_grad():
        _, align_a = model(src, mask, tgt_a)
        _, align_b = model(src, mask, tgt_b)
    torch.testing.assert_close(align_a[:, :2], align_b[:, :2], atol=0, rtol=0)
    step2_moves = float((align_a[:, 2] - align_b[:, 2]).abs().max()) > 1e-6
    assert step2_moves == (style != "bahdanau")
    assert float((align_a[:, 3] - align_b[:, 3]).abs().max()) > 1e-6  # both see y_2 one step later


@pytest.mark.parametrize("style", STYLES)
def test_dropout_is_off_in_eval_and_on_in_train(style):
    model = build(style, 2, "additive", dropout=0.5)
    src, mask = padded([5, 3], S=5)
    tgt_in = random_tgt_in(2, 4)
    model.eval()
    with torch.no_grad():
        a, _ = model(src, mask, tgt_in)
        b, _ = model(src, mask, tgt_in)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    model.train()
    with torch.no_grad():
        c, _ = model(src, mask, tgt_in)
    assert float((a - c).abs().max()) > 1e-4


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_drops_a_fraction_p_and_scales_the_rest(p):
    """The uniform-draw mask has nn.Dropout's distribution: a fraction p of zeros (4 standard deviations of the
    binomial over 10^6 elements), the kept values scaled by 1/(1-p), the gradient the same mask."""
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 0.5  # no zeros of its own
    x.requires_grad_(True)
    y = Dropout(p).train()(x)
    dropped = y == 0
    n = x.numel()
    assert abs(float(dropped.float().mean()) - p) < 4 * (p * (1 - p) / n) ** 0.5
    torch.testing.assert_close(y[~dropped], x[~dropped] / (1 - p))
    y.sum().backward()
    torch.testing.assert_close(x.grad, (~dropped).float() / (1 - p))


def test_dropout_follows_the_torch_seed_and_is_the_identity_in_eval():
    x = torch.randn(50, 40)
    drop = Dropout(0.3).train()
    torch.manual_seed(7)
    a = drop(x)
    torch.manual_seed(7)
    b = drop(x)
    c = drop(x)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert not torch.equal(b, c)
    torch.manual_seed(7)  # the mask is the uniform draw of this generator state (not torch.bernoulli's)
    torch.testing.assert_close(a, x * ((torch.rand_like(x) >= 0.3).float() / 0.7), atol=0, rtol=0)
    assert drop.eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    assert torch.count_nonzero(Dropout(1.0).train()(x)) == 0


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_word_dropout_zeros_whole_token_embeddings(p):
    """A fraction p of the tokens (4 standard deviations over 10^5 tokens) lose their whole embedding; no row is
    partly zeroed; the kept rows are scaled by 1/(1-p) and so is their gradient; eval and p=0 are the identity."""
    torch.manual_seed(0)
    x = (torch.rand(200, 500, 8) + 0.5).requires_grad_(True)  # [B, L, E], no zeros of its own
    y = WordDropout(p).train()(x)
    zero = y == 0
    dropped = zero.all(-1)  # [B, L]
    assert torch.equal(dropped, zero.any(-1))
    n = dropped.numel()
    assert abs(float(dropped.float().mean()) - p) < 4 * (p * (1 - p) / n) ** 0.5
    torch.testing.assert_close(y[~dropped], x[~dropped] / (1 - p))
    y.sum().backward()
    torch.testing.assert_close(x.grad, (~dropped).float().unsqueeze(-1).expand_as(x) / (1 - p))
    assert WordDropout(p).eval()(x) is x
    assert WordDropout(0.0).train()(x) is x
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"word dropout probability must be in \[0, 1\)"):
            WordDropout(bad)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("style", STYLES)
def test_word_dropout_is_one_mask_per_token_on_that_sides_embeddings(side, style):
    """With word dropout on one side only (and no other dropout), a training forward pass equals the plain model's
    with the seeded mask ``[B, L, 1]`` multiplied into that side's embedding lookup, and nothing else: so it
    reaches everything that reads those embeddings (for the decoder: the GRU input, and Bahdanau's readout) but
    not the tied output layer. The decoder's single ``step`` does the same. In eval it is the plain model."""
    p = 0.4
    src, mask = padded([7, 5, 6], S=7)
    tgt_in = random_tgt_in(3, 6)

    def tied(word_dropout=0.0):  # tied embeddings, like the presets
        torch.manual_seed(0)
        return Seq2Seq(Encoder(V, E, H, dropout=0.0, word_dropout=word_dropout if side == "encoder" else 0.0),
                       Decoder(V, E, H, ATTENTIONS["additive"], dropout=0.0, tie_embeddings=True,
                               word_dropout=word_dropout if side == "decoder" else 0.0, **decoder_style(style)))

    plain, model, plain_eval = tied(), tied(p), tied()
    shape = (3, 7, 1) if side == "encoder" else (3, 6, 1)
    torch.manual_seed(5)
    keep = (torch.rand(shape) >= p).float() / (1 - p)
    assert 0 < float((keep == 0).float().mean()) < 1
    getattr(plain, side).embed.register_forward_hook(
        lambda module, args, out: out * keep)  # (the keep of the moment: [B, L, 1], later [B, 1] for step)
    model.train()
    plain.train()
    with torch.no_grad():
        torch.manual_seed(5)
        got, got_align = model(src, mask, tgt_in)
        want, want_align = plain(src, mask, tgt_in)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_align, want_align)
        if side == "decoder":  # one step from the same start: the mask of step 0
            memory, state = plain.encode(src, mask)
            torch.manual_seed(5)
            keep = (torch.rand(3, 1) >= p).float() / (1 - p)
            assert 0 < float((keep == 0).float().mean()) < 1
            want_step = plain.decoder.step(tgt_in[:, 0], state, memory)[0]
            torch.manual_seed(5)
            torch.testing.assert_close(model.decoder.step(tgt_in[:, 0], state, memory)[0], want_step)
    model.eval()
    plain_eval.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(src, mask, tgt_in)[0], plain_eval(src, mask, tgt_in)[0], atol=0, rtol=0)
        assert not torch.allclose(got, plain_eval(src, mask, tgt_in)[0])


@pytest.mark.parametrize("style", STYLES)
def test_one_small_batch_overfits(style):
    model = build(style, 1, "additive", dropout=0.0, h=32, e=16, seed=0)
    lengths = [6, 4, 7, 3, 5, 7, 2, 6]
    src, mask = padded(lengths, seed=3)
    tgt, _ = padded([n + 1 for n in lengths], seed=4)  # targets with EOS, padded with PAD
    tgt_in = torch.cat([torch.full((len(lengths), 1), BOS), tgt[:, :-1]], dim=1)
    tgt_in[tgt_in == EOS] = PAD
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(100):
        logits, _ = model(src, mask, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 2.0  # about log(V) at the start
    assert losses[-1] < losses[0] / 20, losses[::10]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("style", STYLES)
def test_deferred_weight_gradients_equal_plain_autograd(style, num_layers, tie, precision, monkeypatch):
    """Training computes the recurrent weights' gradients in one product over all steps (StepLinears); they equal
    those of plain per-step autograd, and so do all other gradients. Under bf16 autocast (the weights cast once
    per sequence instead of at every step) they agree to bf16's precision, 8 bits of mantissa."""
    import nmt.models.layers

    def grads(use_deferred):
        original = nmt.models.layers.StepLinears.__init__
        monkeypatch.setattr(nmt.models.layers.StepLinears, "__init__",
                            lambda self, deferred=True: original(self, deferred and use_deferred))
        torch.manual_seed(0)
        enc = Encoder(V, E, H, dropout=0.0, decoder_layers=num_layers)
        dec = Decoder(V, E, H, functools.partial(Additive), num_layers=num_layers, dropout=0.0,
                      tie_embeddings=tie, **decoder_style(style))
        model = Seq2Seq(enc, dec).train()
        src, mask = padded([5, 3, 4])
        tgt_in = random_tgt_in(3, 6)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits, _ = model(src, mask, tgt_in)
        logits = logits.float()
        (logits.log_softmax(-1)[..., 4].sum() + logits.square().mean()).backward()
        monkeypatch.setattr(nmt.models.layers.StepLinears, "__init__", original)
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    plain, deferred = grads(False), grads(True)
    assert plain.keys() == deferred.keys()
    for name in plain:
        assert deferred[name].dtype == torch.float32, name
        if precision == "fp32":
            torch.testing.assert_close(deferred[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)
        else:  # bf16 rounds each product to 8 bits: compare the whole gradient, relative to its size
            error = (deferred[name] - plain[name]).norm() / plain[name].norm().clamp_min(1e-6)
            assert error < 0.03, (name, float(error))
    assert plain["decoder.cells.0.weight_hh"].abs().sum() > 0


def test_without_input_feeding_the_recurrence_ignores_attention():
    """Luong without input feeding (§3 without §3.3): the decoder GRU reads only y_{t-1}, so its states do not
    depend on the source beyond the initial state (teacher forcing == stepping is tested above)."""
    model = build("luong_nofeed", 2, "additive").eval()
    assert not model.decoder.input_feeding and model.decoder.cells[0].input_size == E  # y_{t-1} only
    src_a, mask_a = padded([5, 3], S=6, seed=1)
    src_b, mask_b = padded([6, 2], S=6, seed=7)
    tgt_in = random_tgt_in(2, 5)
    with torch.no_grad():
        mem_a, state = model.encode(src_a, mask_a)
        mem_b, _ = model.encode(src_b, mask_b)
        state_a = state_b = state
        for t in range(5):
            logits_a, state_a, w_a = model.decoder.step(tgt_in[:, t], state_a, mem_a)
            logits_b, state_b, w_b = model.decoder.step(tgt_in[:, t], state_b, mem_b)
            torch.testing.assert_close(state_a.hidden, state_b.hidden, atol=0, rtol=0)
            assert state_a.input_feed.shape == (2, 0)
        assert float((w_a[:, :2] - w_b[:, :2]).abs().max()) > 1e-4  # other sources, other alignments
        assert float((logits_a - logits_b).abs().max()) > 1e-4  # and the output still depends on attention


def test_conditional_gru_attends_between_its_two_transitions():
    """Nematus' cGRU (Sennrich et al. 2017, §2), from nn.GRUCell and the attention alone: s'_t = GRU_1(E y_{t-1},
    s_{t-1}), c_t = attention(s'_t), s_t = GRU_2(c_t, s'_t), logits W_s tanh(W_o [s_t; c_t; E y_{t-1}])."""
    model = build("conditional", 1, "additive", dropout=0.0).eval()
    decoder = model.decoder
    assert decoder.cells[0].input_size == E and decoder.transition.input_size == H  # GRU_1 reads E y alone
    src, mask = padded([5, 3], S=6)
    tgt_in = random_tgt_in(2, 4)
    with torch.no_grad():
        memory, state = model.encode(src, mask)
        s_prev = state.hidden[0]
        for t in range(4):
            emb = decoder.embed(tgt_in[:, t])
            proposal = decoder.cells[0](emb, s_prev)  # s'_t
            context, weights = decoder.attention(proposal, memory.keys, memory.mask)
            s_t = decoder.transition(context, proposal)
            expected = decoder.generator(torch.tanh(decoder.combine(torch.cat([s_t, context, emb], dim=-1))))
            logits, state, stepped = decoder.step(tgt_in[:, t], state, memory)
            torch.testing.assert_close(state.hidden[0], s_t, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(stepped, weights, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
            assert state.input_feed.shape == (2, 0)  # what was attended passes on through s_t
            assert float((s_t - proposal).abs().max()) > 1e-3  # the second transition moves the state
            s_prev = s_t


def test_input_feeding_false_needs_luong():
    with pytest.raises(ValueError, match="input_feeding=false needs decoder.style=luong"):
        Decoder(V, E, H, ATTENTIONS["additive"], style="bahdanau", input_feeding=False)
    with pytest.raises(ValueError, match="the conditional decoder feeds the context vector"):
        Decoder(V, E, H, ATTENTIONS["additive"], style="conditional", input_feeding=False)
    with pytest.raises(ValueError, match="true or false"):
        Decoder(V, E, H, ATTENTIONS["additive"], input_feeding="no")


@pytest.mark.parametrize("attention", ["additive", "local_p"])
def test_without_input_feeding_attention_in_slices_equals_all_at_once(attention, monkeypatch):
    """Without autograd the T queries attend in slices (memory); the result is the same."""
    import nmt.models.attending

    model = build("luong_nofeed", 1, attention).eval()
    src, mask = padded([5, 3, 8], S=9)
    tgt_in = random_tgt_in(3, 7)
    with torch.no_grad():
        whole = model(src, mask, tgt_in)
        monkeypatch.setattr(nmt.models.attending, "ATTEND_ELEMENTS", 3 * 9 * H * 2)  # slices of 2 target steps
        sliced = model(src, mask, tgt_in)
    for a, b in zip(whole, sliced):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
