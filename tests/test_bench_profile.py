"""bench/step_profile.py: the FLOPs it reads from a product's recorded shapes and its grouping of a profile."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture(scope="module")
def step_profile(bench_script):
    return bench_script("step_profile")


@pytest.mark.parametrize("name, shapes, flops", [
    ("aten::mm", [[64, 512], [512, 1536]], 2 * 64 * 512 * 1536),
    ("aten::addmm", [[1536], [64, 512], [512, 1536], [], []], 2 * 64 * 512 * 1536),
    ("aten::bmm", [[64, 1, 20], [64, 20, 512]], 2 * 64 * 20 * 512),
    ("aten::addmv_", [[20], [20, 512], [512], [], []], 2 * 20 * 512),
    ("aten::mm", [[], []], 0),  # recorded without shapes
])
def test_product_flops_from_shapes(step_profile, name, shapes, flops):
    assert step_profile.product_flops(name, shapes) == flops


def test_breakdown_groups_operators_and_leaves_the_rest_to_the_framework(step_profile):
    def event(key, ms, count, shapes):
        return SimpleNamespace(key=key, self_cpu_time_total=1000 * ms, count=count, input_shapes=shapes)

    events = [event("aten::mm", 400, 100, [[64, 512], [512, 1536]]), event("aten::sigmoid_", 100, 100, [[64, 512]]),
              event("aten::cat", 50, 10, [[], []]), event("aten::_fused_adam_", 50, 2, []),
              event("aten::weird_new_op", 100, 1, [])]
    report = step_profile.breakdown(events, wall=1.0, steps=2)  # 1 s for 2 steps; operators account for 0.7 s
    groups = report["groups"]
    assert report["ms_per_step"] == 500
    assert groups["matrix products"]["share"] == pytest.approx(0.4)
    assert groups["element-wise (gates, attention energies, residual sums)"]["ms_per_step"] == pytest.approx(50)
    assert groups["memory traffic (copies, cat, fill, casts, lookups)"]["share"] == pytest.approx(0.05)
    assert groups["optimizer and clipping"]["share"] == pytest.approx(0.05)
    assert groups["other"]["share"] == pytest.approx(0.1)
    assert groups["Python, dispatcher and autograd engine"]["share"] == pytest.approx(0.3)
    assert sum(g["share"] for g in groups.values()) == pytest.approx(1.0)
    assert report["products_gflops"] == pytest.approx(100 * 2 * 64 * 512 * 1536 / 0.4 / 1e9)
    assert report["top"][0]["op"] == "aten::mm" and report["top"][0]["calls_per_step"] == 50
