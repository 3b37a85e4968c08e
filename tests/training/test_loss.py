"""The fused label-smoothed cross-entropy (nmt.training.loss) against PyTorch's own, in float64, and by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from nmt.training.loss import label_smoothed_cross_entropy

PAD = 0


def _batch(seed: int, rows: int = 40, vocab: int = 23):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, dtype=torch.float64, generator=gen) * 3
    target = torch.randint(1, vocab, (rows,), generator=gen)
    target[::5] = PAD  # some padding rows
    return logits.requires_grad_(), target


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
def test_matches_pytorch_values_and_gradients(eps):
    logits, target = _batch(1)
    ours = label_smoothed_cross_entropy(logits, target, eps, ignore_index=PAD)
    ref = F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=eps, reduction="sum")
    (g_ours,) = torch.autograd.grad(ours * 0.37, logits)  # an upstream gradient other than 1
    (g_ref,) = torch.autograd.grad(ref * 0.37, logits)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-12)
    assert torch.allclose(g_ours, g_ref, rtol=0, atol=1e-12)


def test_gradcheck():
    logits, target = _batch(2, rows=9, vocab=7)
    assert torch.autograd.gradcheck(lambda z: label_smoothed_cross_entropy(z, target, 0.1, PAD), (logits,))


def test_by_hand_uniform_logits():
    """Uniform logits: log p = -log V everywhere, so the loss per kept row is log V for any eps, and the
    gradient row is 1/V - q: 1/V - (1-eps) - eps/V on the target, 1/V - eps/V elsewhere."""
    vocab, eps = 4, 0.2
    logits = torch.zeros(3, vocab, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([2, PAD, 1])
    loss = label_smoothed_cross_entropy(logits, target, eps, ignore_index=PAD)
    assert loss.item() == pytest.approx(2 * math.log(vocab))
    loss.backward()
    other = 1 / vocab - eps / vocab
    expected = torch.tensor([[other, other, other - (1 - eps), other],
                             [0.0, 0.0, 0.0, 0.0],  # the padding row gets no gradient
                             [other, other - (1 - eps), other, other]], dtype=torch.float64)
    assert torch.allclose(logits.grad, expected, atol=1e-12)


def test_all_rows_ignored_gives_zero():
    logits, _ = _batch(3, rows=4)
    loss = label_smoothed_cross_entropy(logits, torch.full((4,), PAD), 0.1, ignore_index=PAD)
    loss.backward()
    assert loss.item() == 0.0 and not logits.grad.any()


def test_float32_close_to_pytorch():
    logits, target = _batch(4, rows=300, vocab=500)
    logits = logits.detach().float().requires_grad_()
    ours = label_smoothed_cross_entropy(logits, target, 0.1, PAD)
    ref = F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=0.1, reduction="sum")
    assert ours.item() == pytest.approx(ref.item(), rel=1e-5)


def test_second_derivatives_refused():
    """The closed-form backward is first-order only: asking for a Hessian raises rather than dropping terms."""
    logits, target = _batch(7, rows=6, vocab=5)
    loss = label_smoothed_cross_entropy(logits, target, 0.1, PAD) + (logits**2).sum()
    with pytest.raises(RuntimeError, match="first derivatives only"):
        torch.autograd.grad(loss, logits, create_graph=True)


@pytest.mark.parametrize("eps", [-0.1, 1.0])
def test_rejects_smoothing_outside_range(eps):
    logits, target = _batch(5)
    with pytest.raises(ValueError, match=r"label smoothing must be in \[0, 1\)"):
        label_smoothed_cross_entropy(logits, target, eps, PAD)


def test_rejects_mismatched_shapes():
    logits, target = _batch(6)
    with pytest.raises(ValueError, match="expected logits"):
        label_smoothed_cross_entropy(logits.unsqueeze(0), target, 0.1, PAD)
    with pytest.raises(ValueError, match="expected logits"):
        label_smoothed_cross_entropy(logits, target[:-1], 0.1, PAD)
