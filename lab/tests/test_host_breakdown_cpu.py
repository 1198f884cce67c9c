"""CPU tests of the host-path diagnostics (driver stubbed, no GPU): lab.ops.host_breakdown's
pieces and its fwd+bwd split at the autograd engine's seams, and lab.ops.graph_check's
process isolation (a case whose child dies is recorded and the next case still runs)."""

from __future__ import annotations

import pytest
import torch

from lab.ops import graph_check, host_bench
from lab.ops import host_breakdown as hbd
from suite.ops.fused_adaln import op as A


@pytest.fixture(scope="module")
def rows():
    return hbd.cpu_rows(calls=5, reps=3, shapes=((2, 8, 1536),))


def test_every_piece_and_segment_is_timed(rows):
    pieces = {r["part"] for r in rows if r["kind"] == "piece"}
    assert {"bwd:     torch.empty dx [B, N, D] bf16", "bwd:     launch_packed (row kernel)",
            "fwd+bwd: autograd floor (autograd.grad of _Floor)"} <= pieces  # fmt: skip
    for impl in ("op", "floor", "op, 1 core", "floor, 1 core", "op, 1 autograd thread"):
        split = {r["part"]: r for r in rows if r["kind"] == "split" and r["impl"] == impl}
        assert set(split) == {*hbd.SEGMENTS, "total (fwd+bwd)"}
        assert all(r["us_min"] > 0 for r in split.values())
        # total = the sum of the segments, call by call: its median bounds each segment's
        total = split["total (fwd+bwd)"]["us_median"]
        assert all(split[s]["us_median"] <= total for s in hbd.SEGMENTS)
    assert {r["device"] for r in rows} == {"cpu (driver stubbed)"}


def test_stamped_backward_restores_the_function():
    before = A._EagerAdaLNRows.__dict__["backward"]
    stamps: list[int] = []
    with host_bench.stub_launches(), hbd.stamped_backward(A._EagerAdaLNRows, stamps):
        x = torch.randn(2, 4, 64, dtype=torch.bfloat16, requires_grad=True)
        e = torch.randn(2, 6, 64, requires_grad=True)
        torch.autograd.grad(A.adaln(x, e[:, 1:2], e[:, 0:1]), (x, e), torch.ones_like(x))
    assert len(stamps) == 2 and stamps[0] <= stamps[1]
    assert A._EagerAdaLNRows.__dict__["backward"] is before


def test_graph_check_records_a_dead_child_and_goes_on():
    if torch.cuda.is_available():
        pytest.skip("on a GPU the cases run (lab/tests/test_graph_check_gpu.py)")
    cases = [[[1, 8, 64], "floor", "global"], [[1, 8, 64], "op", "global"]]
    rows = graph_check.run_all(cases, timeout=60)
    assert [r["impl"] for r in rows] == ["floor", "op"]
    assert all(not r["captured"] and r["error"].startswith("child died") for r in rows)


def test_default_cases_cover_every_impl_at_every_shape():
    cases = graph_check.default_cases()
    assert {(tuple(s), i) for s, i, m in cases if m == "global"} == {
        (s, i) for s in graph_check.SHAPES for i in graph_check.IMPLS
    }
