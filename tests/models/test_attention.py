"""The attention contract (nmt.attention), checked on every score class, plus local-p's window by hand."""

import functools
import math

import pytest
import torch

from nmt.models.attention import Additive, Dot, General, LocalP

H = 8  # query_size == key_size, so Dot is legal
FACTORIES = {
    "additive": Additive,
    "dot": Dot,
    "general": General,
    "local_p_D1": functools.partial(LocalP, window=1),
    "local_p_D2": functools.partial(LocalP, window=2),
    "local_p_D3_dot": functools.partial(LocalP, window=3, score="dot"),
    "local_p_D4_additive": functools.partial(LocalP, window=4, score="additive"),
    "local_p_D10": functools.partial(LocalP, window=10),
}
GLOBAL = ["additive", "dot", "general"]
LOCAL = [name for name in FACTORIES if name.startswith("local_p")]
ALL = list(FACTORIES)
LENGTHS = [5, 2, 9, 1, 7]  # padded to S = 11: every row has padding, one has a single token




def make(name: str, seed: int = 0):
    torch.manual_seed(seed)
    return FACTORIES[name](query_size=H, key_size=H)


def make_batch(lengths, S=None, seed=1, hq=H, hk=H):
    """Random query [B, Hq], keys [B, S, Hk] (garbage, not zeros, on padding) and mask [B, S]."""
    g = torch.Generator().manual_seed(seed)
    S = S or max(lengths) + 2
    query = torch.randn(len(lengths), hq, generator=g)
    keys = torch.randn(len(lengths), S, hk, generator=g)
    mask = torch.arange(S).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return query, keys, mask


def saturate_centre(att: LocalP, query: torch.Tensor, sign: float):
    """Set W_p, v_p so that sigmoid(v_pᵀ tanh(W_p q)) saturates: p_t = 0 (sign < 0) or S_b (sign > 0).

    The query must be positive: tanh(10 q) ~ 1 on every unit, and v_p = ±50 gives a logit of about ±400.
    """
    assert bool((query > 0).all())
    with torch.no_grad():
        att.W_p.weight.copy_(10 * torch.eye(H))
        att.v_p.weight.fill_(50.0 * sign)


# ---------------------------------------------------------------- the contract, every class


@pytest.mark.parametrize("name", ALL)
def test_shapes_and_zero_weights_on_padding(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    context, weights = att(query, keys, mask)
    assert context.shape == (len(LENGTHS), H)
    assert weights.shape == mask.shape
    assert bool((weights[~mask] == 0).all()), "weights must be exactly 0 on padding"
    assert bool((weights >= 0).all()) and bool(torch.isfinite(weights).all())
    assert bool((weights.sum(dim=1) > 0).all()), "every row must attend somewhere"
    # The returned weights are exactly the ones that multiply the keys.
    torch.testing.assert_close(context, torch.einsum("bs,bsh->bh", weights, keys), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_padding_keys_are_ignored(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    other = keys.clone()
    other[~mask] = 1e3 * torch.randn_like(other[~mask])
    c1, w1 = att(query, keys, mask)
    c2, w2 = att(query, other, mask)
    torch.testing.assert_close(w1, w2, atol=0, rtol=0)
    torch.testing.assert_close(c1, c2, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", GLOBAL)
def test_global_rows_sum_to_one_over_real_tokens(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    _, weights = att(query, keys, mask)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(len(LENGTHS)), atol=1e-6, rtol=0)
    assert bool((weights[mask] > 0).all())


@pytest.mark.parametrize("name", ALL)
def test_prepared_keys_give_the_same_result(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    c1, w1 = att(query, keys, mask)
    c2, w2 = att(query, keys, mask, prepared=att.prepare(keys))
    torch.testing.assert_close(c1, c2, atol=0, rtol=0)
    torch.testing.assert_close(w1, w2, atol=0, rtol=0)


@pytest.mark.parametrize("name", ALL)
def test_k_queries_per_sentence_equal_k_copies_of_the_keys(name):
    """A query [B, K, Hq] (the K beams of a sentence) gives what K copied keys rows give to [B*K, Hq] rows."""
    att, K = make(name), 3
    _, keys, mask = make_batch(LENGTHS)
    query = torch.randn(len(LENGTHS), K, H, generator=torch.Generator().manual_seed(7))
    if name.startswith("local_p"):
        query = query.abs()  # a spread of centres: some windows are cut by the sentence edges
    c, w = att(query, keys, mask)
    assert c.shape == (len(LENGTHS), K, H) and w.shape == (len(LENGTHS), K, keys.size(1))
    rows = torch.arange(len(LENGTHS)).repeat_interleave(K)
    c_rows, w_rows = att(query.flatten(0, 1), keys[rows], mask[rows])
    torch.testing.assert_close(c.flatten(0, 1), c_rows, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w.flatten(0, 1), w_rows, atol=1e-6, rtol=1e-5)
    assert bool((w.masked_select(~mask.unsqueeze(1).expand_as(w)) == 0).all())
    assert bool((w.sum(-1) > 0.01).all())  # not a row of zeros: the check above compares real weights


@pytest.mark.parametrize("name", ALL)
def test_gradients_reach_every_parameter_and_the_query(name):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    query.requires_grad_(True)
    keys.requires_grad_(True)
    context, weights = att(query, keys, mask)
    g = torch.Generator().manual_seed(5)
    loss = (context * torch.randn(context.shape, generator=g)).sum() + (
        weights * torch.randn(weights.shape, generator=g)
    ).sum()
    loss.backward()
    params = dict(att.named_parameters())
    if name.startswith("local_p"):
        assert {"W_p.weight", "v_p.weight"} <= set(params)
    for pname, p in params.items():
        assert p.grad is not None, f"no gradient for {pname}"
        assert bool(torch.isfinite(p.grad).all()), pname
        assert float(p.grad.abs().sum()) > 0, f"zero gradient for {pname}"
    assert float(query.grad.abs().sum()) > 0
    assert float(keys.grad[mask].abs().sum()) > 0
    assert bool((keys.grad[~mask] == 0).all()), "padding keys must get no gradient"


def test_dot_needs_equal_sizes():
    with pytest.raises(ValueError, match="general") as info:
        Dot(query_size=8, key_size=6)
    assert "additive" in str(info.value)
    with pytest.raises(ValueError, match="additive"):
        LocalP(query_size=8, key_size=6, window=3, score="dot")
    # general and additive project, so unequal sizes are fine there
    query, keys, mask = make_batch([3, 2], hq=8, hk=6)
    for cls in (General, Additive, functools.partial(LocalP, window=2)):
        context, weights = cls(query_size=8, key_size=6)(query, keys, mask)
        assert context.shape == (2, 6) and weights.shape == mask.shape


@pytest.mark.parametrize("window", [0, -1, -10])
def test_local_p_window_below_one_raises(window):
    with pytest.raises(ValueError, match="window"):
        LocalP(query_size=H, key_size=H, window=window)


def test_local_p_scaled_scales_its_inner_score():
    assert LocalP(query_size=H, key_size=H, window=2, scaled=True).inner.scale == pytest.approx(H**-0.5)
    assert LocalP(query_size=H, key_size=H, window=2, score="dot", scaled=True).inner.scale == pytest.approx(H**-0.5)
    assert LocalP(query_size=H, key_size=H, window=2).inner.scale == 1.0
    assert not hasattr(LocalP(query_size=H, key_size=H, window=2, score="additive", scaled=True).inner, "scale")


def test_local_p_unknown_score_raises():
    with pytest.raises(ValueError, match="score"):
        LocalP(query_size=H, key_size=H, window=2, score="cosine")


def test_scaled_dot_divides_by_sqrt_d():
    query, keys, mask = make_batch([4, 3])
    _, plain = Dot(H, H)(query / math.sqrt(H), keys, mask)
    _, scaled = Dot(H, H, scaled=True)(query, keys, mask)
    torch.testing.assert_close(plain, scaled, atol=1e-6, rtol=1e-5)


def test_scaled_general_divides_by_sqrt_d():
    query, keys, mask = make_batch([4, 3])
    torch.manual_seed(3)
    general = General(H, H)
    torch.manual_seed(3)
    scaled = General(H, H, scaled=True)
    _, w_plain = general(query / math.sqrt(H), keys, mask)
    _, w_scaled = scaled(query, keys, mask)
    torch.testing.assert_close(w_plain, w_scaled, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(w_scaled, general(query, keys, mask)[1])  # the scale does change the weights


# ---------------------------------------------------------------- local-p


def window_of(p_t: torch.Tensor, mask: torch.Tensor, D: float) -> torch.Tensor:
    positions = torch.arange(mask.size(1)).unsqueeze(0).float()
    return mask & ((positions - p_t.unsqueeze(1)).abs() <= D)


@pytest.mark.parametrize("name", LOCAL)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_local_p_weights_zero_outside_window(name, seed):
    att = make(name, seed)
    lengths = [1, 2, 3, 4, 6, 9, 13, 17, 20, 25]
    query, keys, mask = make_batch(lengths, seed=seed + 10)
    query = 3 * query  # spread the centres over the sentence
    p_t = att.centre(query, mask)
    lens = mask.sum(dim=1).float()
    assert bool((p_t >= 0).all()) and bool((p_t <= lens).all())
    _, weights = att(query, keys, mask)
    inside = window_of(p_t, mask, att.window)
    assert bool((weights[~inside] == 0).all()), "weights outside |s - p_t| <= D (or on padding) must be 0"
    assert bool((weights[inside] > 0).all()), "every real token inside the window gets some weight"
    sums = weights.sum(dim=1)
    assert bool((sums <= 1 + 1e-6).all()) and bool((sums > 0).all())


@pytest.mark.parametrize("D", [1, 2, 3, 10])
@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_local_p_window_cut_by_sentence_edges(D, sign):
    """p_t forced to 0 (left edge) or to S_b (right edge); windows must be cut by the sentence, not the batch."""
    att = LocalP(query_size=H, key_size=H, window=D)
    lengths = [1, 2, 5, 12, 30]
    query, keys, mask = make_batch(lengths)
    query = query.abs() + 0.5
    saturate_centre(att, query, sign)
    p_t = att.centre(query, mask)
    lens = torch.tensor(lengths, dtype=torch.float)
    torch.testing.assert_close(p_t, lens if sign > 0 else torch.zeros(len(lengths)), atol=1e-5, rtol=0)
    _, weights = att(query, keys, mask)
    for b, n in enumerate(lengths):
        expected = [s for s in range(n) if (s <= D if sign < 0 else s >= n - D)]
        nonzero = weights[b].nonzero().flatten().tolist()
        assert nonzero == expected, (b, n, nonzero, expected)
        # align (softmax over the cut window only) times the Gaussian centred on the edge
        scores = att.inner.score(query[b : b + 1], att.inner.prepare(keys[b : b + 1]))[0, expected]
        gauss = torch.exp(-((torch.tensor(expected, dtype=torch.float) - p_t[b]) ** 2) / (2 * (D / 2) ** 2))
        torch.testing.assert_close(
            weights[b, expected], torch.softmax(scores, 0) * gauss, atol=1e-6, rtol=1e-5
        )
    assert bool((weights.sum(dim=1) <= 1 + 1e-6).all())


@pytest.mark.parametrize("D", [3, 10])
def test_local_p_sentence_shorter_than_window(D):
    att = make("local_p_D10" if D == 10 else "local_p_D3_dot")
    lengths = [1, 2, 3]  # all <= D: every real token is in the window wherever p_t falls
    query, keys, mask = make_batch(lengths, S=6)
    _, weights = att(query, keys, mask)
    assert bool((weights[mask] > 0).all())
    assert bool((weights[~mask] == 0).all())
    torch.testing.assert_close(
        weights[0, 0],
        torch.exp(-(att.centre(query, mask)[0] ** 2) / (2 * att.sigma**2)),
        atol=1e-6,
        rtol=1e-5,
    )  # one token: align = 1, only the Gaussian is left


@pytest.mark.parametrize("name", LOCAL)
def test_local_p_uses_the_sentence_length_not_the_padded_length(name):
    att = make(name)
    query, keys, mask = make_batch([4, 15, 9, 24], S=26, seed=3)
    alone_q, alone_k, alone_m = query[:1], keys[:1, :4], mask[:1, :4]
    p_alone = att.centre(alone_q, alone_m)
    p_batch = att.centre(query, mask)
    torch.testing.assert_close(p_alone, p_batch[:1], atol=1e-6, rtol=0)
    c_alone, w_alone = att(alone_q, alone_k, alone_m)
    c_batch, w_batch = att(query, keys, mask)
    torch.testing.assert_close(w_batch[0, :4], w_alone[0], atol=1e-6, rtol=1e-6)
    assert bool((w_batch[0, 4:] == 0).all())
    torch.testing.assert_close(c_batch[0], c_alone[0], atol=1e-6, rtol=1e-5)


def test_local_p_by_hand():
    """A 2-d example worked out with plain floats: p_t (eq. 9), the window, softmax over it, the Gaussian (eq. 10)."""
    att = LocalP(query_size=2, key_size=2, window=2, score="dot")  # sigma = 1
    with torch.no_grad():
        att.W_p.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
        att.v_p.weight.copy_(torch.tensor([[2.0, 1.0]]))
    query = torch.tensor([[0.5, -1.0], [1.0, 1.0]])
    rows = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 2.0], [0.5, 0.5], [2.0, -1.0]]
    keys = torch.tensor([rows, rows])
    lengths = [6, 3]
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    with torch.no_grad():
        _, weights = att(query, keys, mask)
        p_t = att.centre(query, mask)

    for b, n in enumerate(lengths):
        q = query[b].tolist()
        hidden = [math.tanh(q[0]), math.tanh(-q[1])]  # tanh(W_p q)
        p = n / (1 + math.exp(-(2 * hidden[0] + hidden[1])))  # S_b * sigmoid(v_p . h)
        window = [s for s in range(n) if abs(s - p) <= 2]
        scores = {s: rows[s][0] * q[0] + rows[s][1] * q[1] for s in window}
        z = sum(math.exp(v) for v in scores.values())
        expected = [
            math.exp(scores[s]) / z * math.exp(-((s - p) ** 2) / 2) if s in scores else 0.0 for s in range(6)
        ]
        assert float(p_t[b]) == pytest.approx(p, abs=1e-6)
        torch.testing.assert_close(weights[b], torch.tensor(expected), atol=1e-6, rtol=1e-5)
    assert float(weights[0].sum()) < 1.0  # not renormalised after the Gaussian


def test_local_p_centre_is_trained_through_the_gaussian():
    """Dot inside has no parameters and the window is a hard cut, so W_p, v_p get gradient only from the Gaussian."""
    att = LocalP(query_size=H, key_size=H, window=3, score="dot")
    query, keys, mask = make_batch([8, 6])
    _, weights = att(query, keys, mask)
    weights.sum().backward()
    assert float(att.v_p.weight.grad.abs().sum()) > 0
    assert float(att.W_p.weight.grad.abs().sum()) > 0


@pytest.mark.parametrize("name", ALL)
def test_gradients_match_finite_differences(name):
    """torch.autograd.gradcheck in float64 through query, keys and the prepared keys (additive's in-place sigmoid
    must not corrupt what its backward reads)."""
    att = make(name).double()
    query, keys, mask = make_batch(LENGTHS)
    query, keys = query.double().requires_grad_(True), keys.double().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q, k: att(q, k, mask), (query, keys), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_additive_score_is_the_tanh_formula(dtype, tol):
    """Additive computes v_aᵀ tanh(W_a q + U_a h̄_s + b) through 2 v_aᵀ sigmoid(2e) - Σ v_a: same scores, and
    the same gradients for every parameter, query and keys, as the formula written with tanh."""
    torch.manual_seed(3)
    att = Additive(query_size=6, key_size=5, hidden_size=7).to(dtype)
    with torch.no_grad():  # large energies too, where tanh saturates
        att.U_a.weight.mul_(4.0)
    query, keys, _ = make_batch(LENGTHS, hq=6, hk=5)
    query, keys = query.to(dtype).requires_grad_(True), keys.to(dtype).requires_grad_(True)
    got = att.score(query, att.prepare(keys))
    energy = att.W_a(query).unsqueeze(1) + att.U_a(keys)
    want = torch.tanh(energy) @ att.v_a.weight.squeeze(0)
    assert got.shape == want.shape == keys.shape[:2]
    assert float(energy.detach().abs().max()) > 5.0
    torch.testing.assert_close(got, want, rtol=0.0, atol=tol)
    params = [query, keys, *att.parameters()]
    upstream = torch.randn_like(want)
    for g_got, g_want in zip(torch.autograd.grad(got, params, upstream), torch.autograd.grad(want, params, upstream)):
        torch.testing.assert_close(g_got, g_want, rtol=0.0, atol=10 * tol)


@pytest.mark.parametrize("name", ALL)
def test_an_all_padding_row_gets_zero_weights_and_context_not_nan(name):
    att = make(name)
    query, keys, mask = make_batch([3, 0, 5], S=6)  # the middle source has no real token
    query.requires_grad_(True)
    context, weights = att(query, keys, mask)
    assert bool(torch.isfinite(weights).all()) and bool(torch.isfinite(context).all())
    assert torch.equal(weights[1], torch.zeros(6)) and torch.equal(context[1], torch.zeros(H))
    alone, alone_weights = att(query[[0, 2]], keys[[0, 2]], mask[[0, 2]])  # the other rows are unaffected
    torch.testing.assert_close(weights[[0, 2]], alone_weights)
    torch.testing.assert_close(context[[0, 2]], alone)
    context.sum().backward()
    assert bool(torch.isfinite(query.grad).all())
    assert all(bool(torch.isfinite(p.grad).all()) for p in att.parameters() if p.grad is not None)
    beam_context, beam_weights = att(query.detach().unsqueeze(1).expand(3, 2, H), keys, mask)  # [B, K, Hq] queries
    assert torch.equal(beam_weights[1], torch.zeros(2, 6)) and bool(torch.isfinite(beam_context).all())
