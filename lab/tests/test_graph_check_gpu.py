"""GPU test of lab/ops/graph_check.py: every impl's fwd+bwd captured in a CUDA graph, each case in
a fresh process (the op's own capture behaviour is tests/test_adaln_graph_gpu.py)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_graph_check_captures_every_impl_in_fresh_processes(tmp_path):
    from lab.ops import graph_check

    cases = [[[8, 1560, 1536], impl, "global"] for impl in ("op", "floor")]
    rows = graph_check.run_all(cases)
    assert [r["impl"] for r in rows] == ["op", "floor"]
    for r in rows:
        assert r["captured"], r
    assert rows[0]["bitwise"], rows[0]  # the floor's gradients are uninitialised: not compared
    assert "bitwise" not in rows[1]
    assert rows[0]["bwd_stream_capturing"]  # the op's backward ran on the capturing stream
