"""pytest-benchmark: fused AdaLN and its baselines, forward and backward, on the GPU.

Run through `nox -s bench`, whose timer (suite.timing.cuda_synced_perf_counter) synchronises CUDA
before reading the clock. GB/s from the explicit bytes model go into each benchmark's extra_info.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

IMPLS = ["fused", "eager", "wan-eager", "compile-eager", "compile-wan"]
N = 65_536


@pytest.fixture(scope="module", params=[1536, 5120], ids=lambda d: f"D{d}")
def inputs(request):
    D = request.param
    x = torch.randn(1, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mod = torch.randn(1, 6, D, device="cuda")  # Wan's [B, 6, D]; the impls take strided views
    dy = torch.randn(1, N, D, device="cuda", dtype=torch.bfloat16)
    return x, mod, dy


@pytest.mark.parametrize("impl", IMPLS)
def test_forward(benchmark, inputs, impl):
    from suite.experiments.kernels.bench import _impl
    from suite.experiments.kernels.traffic import bytes_model

    x, mod, _ = inputs
    fn = _impl(impl)
    with torch.no_grad():
        y = fn(x, mod)  # warm-up (compiles the torch.compile baselines)
        benchmark(lambda: fn(x, mod))
    B, n, D = x.shape
    nbytes = bytes_model("fwd", B, n, D, x.element_size(), y.element_size())
    benchmark.extra_info.update(bytes=nbytes, impl=impl, D=D, N=n)
    if benchmark.stats:
        benchmark.extra_info["gbps"] = nbytes / benchmark.stats["median"] / 1e9


@pytest.mark.parametrize("impl", ["fused", "fused-dtile", "eager", "wan-eager", "compile-wan"])
def test_backward(benchmark, inputs, impl):
    from suite.experiments.kernels.bench import _impl
    from suite.experiments.kernels.traffic import bytes_model

    x, mod, dy = inputs
    fn = _impl(impl)

    def setup():
        y = fn(x, mod)
        return (y, dy.to(y.dtype)), {}

    benchmark.pedantic(lambda y, g: y.backward(g), setup=setup, rounds=20, warmup_rounds=2)
    B, n, D = x.shape
    benchmark.extra_info.update(bytes=bytes_model("bwd", B, n, D, x.element_size(), 2), impl=impl)
