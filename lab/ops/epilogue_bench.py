"""Benchmark of the fused epilogues on one GPU: forward and backward of residual_norm (Wan 2.1's
gated residual into a modulated LayerNorm, operands rows of a [1, 6, D] table) and of rms_norm
(the qk norm), beside diffusers' eager ops and torch.compile of them, and a device-to-device
copy of each op's byte floor (suite/ops/epilogue/op.py's docstring has the floors).

    python -m lab.ops.epilogue_bench --out DIR [--reps 30] [--quick | --ns 32760,75600]

Writes DIR/epilogue_bench.csv (one row per op, pass, impl and shape; every sample in the
`samples_ms` column) and prints a table of % of copy bandwidth. Timing (`timed`): the AdaLN
kernels' protocol (L2 flushed, a GPU spin covering the host's enqueueing, CUDA events) around 10
back-to-back calls, median over `reps`; the backward is timed as autograd.grad over a retained
graph of one forward. Before this protocol the events also held the host's gaps: through
autograd at D = 1536 the backward read 54-79% where the kernels alone read 83-87%.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

from suite.ops.epilogue import reference as ref
from suite.ops.epilogue import residual_norm, rms_norm

WIDTHS = (1536, 3072, 5120)
SHAPES = [(1, N, D) for N in (4096, 32760, 75600) for D in WIDTHS]
QUICK = [(1, 4096, 1536), (1, 32760, 3072)]


def floor_bytes(op: str, pas: str, E: int, s: int = 2) -> int:
    """Bytes read + written at the floor (bf16 x; per-sample operands left out)."""
    per = {("residual_norm", "fwd"): 4 * s, ("residual_norm", "bwd"): 6 * s,
           ("rms_norm", "fwd"): 2 * s, ("rms_norm", "bwd"): 3 * s}  # fmt: skip
    return per[(op, pas)] * E


INNER = 10  # calls back to back per sample, as in the AdaLN kernels' bandwidth check


@functools.cache
def _timer(reps: int):
    from suite.experiments.kernels.bench import Timer

    return Timer(reps)


def timed(fn, reps: int, warmup: int = 5) -> list[float]:
    """Raw samples (ms per call) of INNER back-to-back fn() calls, by the AdaLN kernels' protocol
    (suite.experiments.kernels.bench.Timer): L2 flushed, then a GPU spin longer than the burst's
    host time, so the CUDA events bracket the GPU's work and not the host's enqueueing (fwd+bwd
    of a trivial autograd.Function took 0.12-0.16 ms of host time on the H200 node of
    reports/reference/h200/ops-728903d, as long as a backward's kernels at D = 1536)."""

    def burst(_):
        for _ in range(INNER):
            fn()

    return [t / INNER for t in _timer(reps).time(burst, warmup=warmup)]


def copy_ms(nbytes: int, reps: int) -> float:
    """A device-to-device copy moving nbytes in all (nbytes / 2 read, nbytes / 2 written)."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return statistics.median(timed(lambda: dst.copy_(src), reps))


def _rn_fused(x, y, e):
    return residual_norm(x, y, e[:, 2:3], scale=e[:, 1:2], shift=e[:, 0:1])


def _rn_eager(x, y, e):
    return ref.diffusers_residual_norm(x, y, e[:, 2:3], e[:, 1:2], e[:, 0:1], None, None)


def _rms_eager(q, w):
    return ref.torch_rms_norm(q, w)


def impls(op: str) -> dict:
    # the backward is timed over one retained graph; inductor's donated buffers forbid that
    import torch._functorch.config

    torch._functorch.config.donated_buffer = False
    if op == "residual_norm":
        eager = _rn_eager
        return {"fused": _rn_fused, "eager": eager,
                "compile": torch.compile(eager, dynamic=True)}  # fmt: skip
    return {"fused": rms_norm, "eager": _rms_eager,
            "compile": torch.compile(_rms_eager, dynamic=True)}  # fmt: skip


def inputs(op: str, B: int, N: int, D: int):
    x = torch.randn(B, N, D, device="cuda", dtype=torch.bfloat16).requires_grad_()
    if op == "residual_norm":
        y = torch.randn_like(x).requires_grad_()
        e = (0.1 * torch.randn(B, 6, D, device="cuda")).requires_grad_()
        return (x, y, e)
    return (x, torch.randn(D, device="cuda").requires_grad_())  # fp32 weight, as in the step


def measure(op: str, impl: str, fn, args, reps: int) -> dict[str, list[float]]:
    with torch.no_grad():
        fwd = timed(lambda: fn(*args), reps)
    outs = fn(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    grads = [torch.randn_like(o) for o in outs]

    def bwd():
        torch.autograd.grad(outs, args, grads, retain_graph=True)

    return {"fwd": fwd, "bwd": timed(bwd, reps)}


def run(shapes, reps: int, out: Path) -> list[dict]:
    rows = []
    props = torch.cuda.get_device_properties(0)
    t0 = time.time()
    for op in ("residual_norm", "rms_norm"):
        fns = impls(op)
        for B, N, D in shapes:
            E = B * N * D
            copies = {p: copy_ms(floor_bytes(op, p, E), reps) for p in ("fwd", "bwd")}
            args = inputs(op, B, N, D)
            for impl, fn in fns.items():
                try:
                    res, note = measure(op, impl, fn, args, reps), ""
                except Exception as err:  # noqa: BLE001 - recorded, the grid goes on
                    res, note = {"fwd": [], "bwd": []}, f"not run: {type(err).__name__}: {err}"
                for pas, samples in res.items():
                    med = statistics.median(samples) if samples else float("nan")
                    q = statistics.quantiles(samples, n=5) if len(samples) > 1 else [med] * 4
                    fb = floor_bytes(op, pas, E)
                    rows.append(dict(
                        op=op, pass_=pas, impl=impl, B=B, N=N, D=D, dtype="bf16",
                        median_ms=med, p20_ms=q[0], p80_ms=q[3], reps=len(samples),
                        floor_bytes=fb, gbps=fb / med / 1e6, copy_ms=copies[pas],
                        pct_copy=100 * copies[pas] / med, gpu=props.name, note=note[:300],
                        samples_ms=" ".join(f"{v:.5f}" for v in samples),
                    ))  # fmt: skip
            print(f"[{time.time() - t0:6.1f} s] {op} B={B} N={N} D={D}", flush=True)
            del args
            torch.cuda.empty_cache()
            _write(rows, out)  # after every shape: a run cut short keeps what it measured
    return rows


def _write(rows: list[dict], out: Path) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows).rename(columns={"pass_": "pass"})
    df.to_csv(out / "epilogue_bench.csv", index=False)


def table(csv: Path) -> str:
    import pandas as pd

    df = pd.read_csv(csv)
    pct = df.pivot_table(index=["op", "pass", "D", "N"], columns="impl", values="pct_copy")
    ms = df.pivot_table(index=["op", "pass", "D", "N"], columns="impl", values="median_ms")
    pct = pct.round(0).add_suffix(" %copy")
    for base in ("eager", "compile"):
        if base in ms:  # a baseline that failed everywhere has no column (its rows say why)
            pct[f"x vs {base}"] = (ms[base] / ms["fused"]).round(2)
    return pct.to_string()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="Fused epilogues (residual_norm, rms_norm) vs eager and torch.compile: "
        "median time, GB/s over the byte floor and % of a device copy of those bytes."
    )
    p.add_argument("--out", type=Path, required=True, help="folder for epilogue_bench.csv")
    p.add_argument("--reps", type=int, default=30, help="timed calls per point (>= 20)")
    p.add_argument("--quick", action="store_true", help="two shapes only (a smoke run)")
    p.add_argument("--ns", help="comma-separated N of the grid (default 4096,32760,75600)")
    a = p.parse_args(argv)
    shapes = QUICK if a.quick else SHAPES
    if a.ns:
        try:
            ns = {int(v) for v in a.ns.split(",")}
        except ValueError:
            p.error(f"--ns must be comma-separated integers, got {a.ns!r}")
        shapes = [(1, N, D) for N in sorted(ns) for D in WIDTHS]
    if not torch.cuda.is_available():
        print("not run: no CUDA device", file=sys.stderr)
        return 2
    if a.reps < 20:
        p.error(f"--reps must be >= 20, got {a.reps}")
    run(shapes, a.reps, a.out)
    print(table(a.out / "epilogue_bench.csv"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
