"""Can fwd+bwd of the fused AdaLN op be captured in one CUDA graph and replayed? A diagnosis.

    python -m lab.ops.graph_check [--out DIR] [--shapes 8x1560x1536,1x4096x1536]

Per case (shape, impl, capture_error_mode): bf16 x [B, N, D], Wan's fp32 [B, 6, D] table,
`torch.autograd.grad(impl(x, e[:, 1:2], e[:, 0:1]), (x, e), dy)` warmed up 3 times on a side
stream, captured once, replayed; the replay's dx and de against eager's (max abs difference,
bitwise equal or not) and the replay's GPU time. impls: floor (host_bench._Floor: allocations
only, its gradients uninitialised: not compared), eager (F.layer_norm + modulate), op
(suite.ops.adaln), op-nopdl (the op with its backward's finalize launched without programmatic
dependent launch).

Why a child process per failure: a capture that fails leaves torch's CUDA state broken for the
rest of the process (on the H200 every later fwd+bwd capture of that shape failed, and torch's
CUDA generator refused to draw), so each case that fails ends its child and the next case runs
in a fresh one. The error torch.cuda.graph raises at capture_end ("operation failed due to a
previous error during capture") hides the first one; each case records the first exception
raised inside the capture too, and, at the backward's entry, the thread, its current stream and
whether that stream is capturing.

Writes DIR/graph_check.csv; prints it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import torch

IMPLS = ("floor", "eager", "op", "op-nopdl")
SHAPES = ((8, 1560, 1536), (1, 4096, 1536))


def _impl(name: str):
    from lab.ops import host_bench
    from suite.ops.baselines import eager_adaln
    from suite.ops.fused_adaln import cuda as fused_cuda
    from suite.ops.fused_adaln import op as A

    if name == "floor":
        return host_bench.autograd_floor, host_bench._Floor
    if name == "eager":
        return eager_adaln, None
    if name == "op-nopdl":
        fused_cuda._sm90 = lambda index: False  # plans built after this launch without PDL
        fused_cuda.clear_plans()
    elif name != "op":
        raise ValueError(f"impl must be one of {IMPLS}, got {name!r}")
    return A.adaln, A._EagerAdaLNRows


def _probe(cls, seen: list):
    """Wrap cls.backward: record (thread, current stream, capturing?) at its entry."""
    if cls is None:
        return lambda: None
    inner = cls.__dict__["backward"]

    def backward(ctx, *grads):
        s = torch.cuda.current_stream()
        seen.append(dict(thread=threading.get_ident(), stream=s.cuda_stream,
                         capturing=torch.cuda.is_current_stream_capturing()))  # fmt: skip
        return inner.__func__(ctx, *grads)

    cls.backward = staticmethod(backward)
    return lambda: setattr(cls, "backward", inner)


def run_case(shape: tuple[int, int, int], impl: str, mode: str, reps: int = 20) -> dict:
    """One capture + replay (module docstring); never raises: errors are the result."""
    from lab.ops.host_bench import _inputs, replay_us

    B, N, D = shape
    row = dict(shape=f"{B}x{N}x{D}", impl=impl, mode=mode, main_thread=threading.get_ident())
    fn_impl, cls = _impl(impl)
    x, e, dy = _inputs(B, N, D, "cuda", True)

    def step():  # rows sliced inside: see host_bench._calls
        return torch.autograd.grad(fn_impl(x, e[:, 1:2], e[:, 0:1]), (x, e), dy)

    want = [g.clone() for g in step()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    seen: list[dict] = []
    inside: list[str] = []

    def captured():
        try:
            return step()
        except Exception:
            inside.append(traceback.format_exc(limit=6))
            raise

    restore = _probe(cls, seen)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g, capture_error_mode=mode):
            got = captured()
        g.replay()
        torch.cuda.synchronize()
        row.update(captured=True, replay_us=replay_us(g, reps))
        if impl != "floor":  # the floor's gradients are uninitialised memory: nothing to compare
            diffs = [(a.float() - b.float()).abs().max().item() for a, b in zip(got, want)]
            row.update(dx_max_abs=diffs[0], de_max_abs=diffs[1],
                       bitwise=all(torch.equal(a, b) for a, b in zip(got, want)))  # fmt: skip
    except Exception as err:  # the failure is the result
        row.update(captured=False, error=f"{type(err).__name__}: {str(err).splitlines()[0]}")
    finally:
        restore()
    row["first_error_inside"] = inside[0] if inside else ""
    if seen:
        row.update(bwd_thread=seen[-1]["thread"], bwd_stream=seen[-1]["stream"],
                   bwd_stream_capturing=seen[-1]["capturing"])  # fmt: skip
    return row


def _child(cases: list) -> None:
    """Run cases in order, one JSON line each; stop after the first that fails to capture."""
    for shape, impl, mode in cases:
        row = run_case(tuple(shape), impl, mode)
        print("CASE " + json.dumps(row), flush=True)
        if not row.get("captured"):
            return


def run_all(cases: list, timeout: float = 120) -> list[dict]:
    """Every case, in child processes; a case that fails ends its child (module docstring)."""
    rows: list[dict] = []
    todo = list(cases)
    while todo:
        cmd = [sys.executable, "-m", "lab.ops.graph_check", "--child", json.dumps(todo)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            out, err = p.stdout, p.stderr
        except subprocess.TimeoutExpired as t:
            out, err = t.stdout or "", f"timed out after {timeout} s"
            out = out.decode() if isinstance(out, bytes) else out
        done = [json.loads(line[5:]) for line in out.splitlines() if line.startswith("CASE ")]
        rows += done
        todo = todo[len(done) :]
        if not done and todo:  # the child died before its first case ended: record, go on
            shape, impl, mode = todo.pop(0)
            tail = (err or "").strip().splitlines()[-3:]
            rows.append(dict(shape="x".join(map(str, shape)), impl=impl, mode=mode,
                             captured=False, error="child died: " + " | ".join(tail)))  # fmt: skip
    return rows


def default_cases(shapes=SHAPES) -> list:
    cases = [[list(s), impl, "global"] for s in shapes for impl in IMPLS]
    return cases + [[list(shapes[0]), "op", "thread_local"]]


def _shape(text: str) -> tuple[int, int, int]:
    try:
        B, N, D = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a shape is BxNxD like 8x1560x1536, got {text!r}"
        ) from None
    return B, N, D


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument("--out", type=Path, help="folder for graph_check.csv")
    ap.add_argument(
        "--shapes",
        type=lambda v: [_shape(s) for s in v.split(",")],
        default=list(SHAPES),
        help="comma-separated BxNxD (default: the burst benchmark's 8x1560x1536,1x4096x1536)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(json.loads(a.child))
        return 0
    if not torch.cuda.is_available():
        print("not run: no CUDA device", file=sys.stderr)
        return 2
    import pandas as pd

    rows = run_all(default_cases(a.shapes))
    df = pd.DataFrame(rows)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out / "graph_check.csv", index=False)
    cols = [c for c in ("shape", "impl", "mode", "captured", "bitwise", "replay_us", "error",
                        "bwd_stream_capturing") if c in df]  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_colwidth", 90):
        print(df[cols].to_string(index=False))
    for r in rows:
        if r.get("first_error_inside"):
            print(f"--- first error inside the capture ({r['shape']} {r['impl']} {r['mode']}):")
            print(r["first_error_inside"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
