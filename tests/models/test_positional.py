"""Position-based attention (nmt.models.positional): the attention contract for local-m and location, local-m's
window by hand, and the target positions the decoder passes (stepwise search = teacher forcing = slices)."""

import functools

import pytest
import torch
from tensors import make_batch

from nmt.models import attending
from nmt.models.build import build_model
from nmt.models.positional import LocalM, Location

H = 8
FACTORIES = {"local_m_D1": functools.partial(LocalM, window=1), "local_m_D3_additive":
             functools.partial(LocalM, window=3, score="additive"), "local_m_D2_dot": functools.partial(
                 LocalM, window=2, score="dot", scaled=True), "location": Location,
             "location_short": functools.partial(Location, max_len=4)}
ALL = list(FACTORIES)
LENGTHS = [5, 2, 9, 1, 7]


def make(name, seed=0):
    torch.manual_seed(seed)
    return FACTORIES[name](query_size=H, key_size=H)


@pytest.mark.parametrize("t", [0, 3, 12])
@pytest.mark.parametrize("name", ALL)
def test_contract_shapes_padding_rows_and_prepared(name, t):
    att = make(name)
    query, keys, mask = make_batch(LENGTHS)
    context, weights = att(query, keys, mask, positions=t)
    assert context.shape == (5, H) and weights.shape == mask.shape
    assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(5))  # a window is never empty: rows sum to 1
    again, again_weights = att(query, keys, mask, prepared=att.prepare(keys), positions=t)
    torch.testing.assert_close(again_weights, weights)
    torch.testing.assert_close(again, context)


@pytest.mark.parametrize("name", ALL)
def test_k_queries_per_sentence_equal_k_copies_and_gradients_flow(name):
    att, K = make(name), 3
    _, keys, mask = make_batch(LENGTHS)
    query = torch.randn(5, K, H, requires_grad=True)
    positions = torch.tensor([2, 0, 6, 1, 4]).unsqueeze(1)  # [B, 1]: one step per sentence
    context, weights = att(query, keys, mask, positions=positions)
    rows = torch.arange(5).repeat_interleave(K)
    flat_c, flat_w = att(query.flatten(0, 1), keys[rows], mask[rows], positions=positions[rows, 0])
    torch.testing.assert_close(weights.flatten(0, 1), flat_w)
    torch.testing.assert_close(context.flatten(0, 1), flat_c)
    context.sum().backward()
    assert query.grad is not None and bool(query.grad.abs().sum() > 0)
    assert all(p.grad is not None for p in att.parameters())


@pytest.mark.parametrize("t, expected", [(0, [0, 1]), (3, [2, 3, 4]), (6, [5, 6]), (9, [5, 6]), (40, [5, 6])])
def test_local_m_window_is_centred_at_t_and_clamped_to_the_last_token(t, expected):
    att = make("local_m_D1")
    query, keys, mask = make_batch([7], S=10)
    _, weights = att(query, keys, mask, positions=t)
    assert torch.nonzero(weights[0]).flatten().tolist() == expected


def test_local_m_needs_positions():
    query, keys, mask = make_batch(LENGTHS)
    with pytest.raises(ValueError, match="local_m attention needs the target positions"):
        make("local_m_D1")(query, keys, mask)


def test_location_weights_come_from_the_query_alone():
    att = make("location_short")  # 4 positions: positions 4.. share the last score
    query, keys, mask = make_batch([9], S=9)
    _, weights = att(query, keys, mask)
    _, other = att(query, torch.randn_like(keys), mask)
    torch.testing.assert_close(weights, other)  # no key is scored
    assert torch.allclose(weights[0, 3:], weights[0, 3].expand(6))


@pytest.mark.parametrize("style, feeding", [("luong", True), ("bahdanau", True), ("conditional", True),
                                            ("luong", False)])
@pytest.mark.parametrize("attention", ["local_m", "location"])
def test_the_decoder_passes_target_positions_alike_in_search_and_teacher_forcing(compose_cfg, monkeypatch,
                                                                                 attention, style, feeding):
    cfg = compose_cfg([f"attention={attention}", f"decoder.style={style}", f"decoder.input_feeding={feeding}",
                       "model.emb_size=8", "model.hidden_size=8", "attention.window=1" if attention == "local_m"
                       else "attention.max_len=16"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.decoder, cfg.attention, 30, 30).eval()
    src = torch.randint(4, 30, (2, 9))
    mask = torch.arange(9).unsqueeze(0) < torch.tensor([[9], [6]])
    tgt_in = torch.randint(4, 30, (2, 7))
    with torch.no_grad():
        _, forced = model(src, mask, tgt_in)  # [B, T, S]
        memory, state = model.encode(src, mask)
        stepped = []
        for t in range(7):
            _, state, w = model.decoder.step(tgt_in[:, t], state, memory)
            stepped.append(w)
        monkeypatch.setattr(attending, "ATTEND_ELEMENTS", 1)  # all-at-once attention in slices of one step
        _, sliced = model(src, mask, tgt_in)
    torch.testing.assert_close(torch.stack(stepped, dim=1), forced)
    torch.testing.assert_close(sliced, forced)
    if attention == "local_m":  # window D=1 around t: step 5 of the 6-token sentence looks at 4 and 5 only
        assert torch.nonzero(forced[1, 5]).flatten().tolist() == [4, 5]
