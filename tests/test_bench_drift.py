"""bench/drift.py: its count of subnormal numbers in Adam's moment estimates."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def drift(bench_script):
    return bench_script("drift")


def test_subnormal_share_counts_nonzero_entries_below_the_smallest_normal_number(drift):
    weight = torch.nn.Parameter(torch.zeros(4))
    optimizer = torch.optim.Adam([weight])
    assert drift.subnormal_share(optimizer) == 0.0  # no state before the first step
    weight.grad = torch.ones(4)
    optimizer.step()
    tiny = torch.finfo(torch.float32).tiny
    optimizer.state[weight]["exp_avg"].copy_(torch.tensor([tiny / 4, tiny, 0.0, -tiny / 1024]))
    optimizer.state[weight]["exp_avg_sq"].copy_(torch.tensor([1.0, 0.0, tiny / 2, 2 * tiny]))
    assert drift.subnormal_share(optimizer) == 3 / 8  # tiny/4, -tiny/1024, tiny/2; zeros and normals are not
