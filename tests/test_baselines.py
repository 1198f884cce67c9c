"""The compiled baselines' shape policy: sequence length dynamic, batch and width static.

Dynamo's automatic dynamic shapes would otherwise make the width symbolic at the first recompile
for a new D, and every later width would be timed on a dynamic-width kernel (1.6-2.5x slower on
the H200: lab/LOG.md, round 6), flattering the fused op."""

import pytest
import torch

from suite.experiments.kernels.bench import _dynamic
from suite.ops.baselines import eager_adaln, pin_width

SHAPES = [(1, 64, 32), (1, 96, 32), (1, 64, 48), (2, 64, 32), (2, 80, 48), (1, 128, 48)]


class Recorder:
    """A torch.compile backend that keeps, per compiled graph, which input dims are symbolic."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        fakes = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
        tensors = [t for t in fakes if isinstance(t, torch.Tensor) and t.dim() == 3]
        self.graphs.append([[isinstance(s, torch.SymInt) for s in t.shape] for t in tensors])
        return gm.forward


def _symbolic_dims(graphs):
    return {(i, d) for g in graphs for i, t in enumerate(g) for d, sym in enumerate(t) if sym}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_bench_baseline_keeps_width_and_batch_static():
    rec = Recorder()
    f = _dynamic.__wrapped__("compile-eager", backend=rec)
    for B, N, D in SHAPES:
        x, e = torch.randn(B, N, D), torch.randn(B, 6, D)
        torch.testing.assert_close(f(x, e), eager_adaln(x, e[:, 1:2], e[:, 0:1]))
    # one graph per (B, D) pair, none per N; only x's sequence dim is ever symbolic
    assert len(rec.graphs) == len({(B, D) for B, _, D in SHAPES})
    assert _symbolic_dims(rec.graphs) <= {(0, 1), (1, 1)}  # inputs: (e, x) or (x, e)
    assert all(any(any(t) for t in g) for g in rec.graphs)  # N dynamic in every graph


def test_without_the_policy_dynamo_makes_the_width_symbolic():
    """The failure the policy prevents, so the test above cannot pass vacuously."""
    rec = Recorder()
    g = torch.compile(lambda x, s, b: eager_adaln(x, s, b), backend=rec, fullgraph=True)
    for B, N, D in SHAPES[:3]:
        x = torch.randn(B, N, D)
        torch._dynamo.mark_dynamic(x, 1)
        g(x, torch.randn(B, D), torch.randn(B, D))
    assert any(sym for t in rec.graphs[-1] for sym in t[-1:])  # the last dim went symbolic


def test_pin_width_on_per_token_and_strided_modulation():
    rec = Recorder()
    g = torch.compile(eager_adaln, backend=rec, fullgraph=True)
    for B, N, D in SHAPES:
        x, tok = torch.randn(B, N, D), torch.randn(B, N, D)
        scale = torch.randn(B, 6, D)[:, 1:2]  # Wan's strided [B, 1, D] chunk
        pin_width(x, scale, tok)
        torch.testing.assert_close(g(x, scale, tok), eager_adaln(x, scale, tok))
    widths = [t[-1] for gr in rec.graphs for t in gr]
    assert not any(widths)
