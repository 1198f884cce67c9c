"""Candidate launch configurations and kernel variants of the fused block epilogues, timed side by
side with the shipped kernels (lab only: the shipped op never runs a candidate).

    python -m lab.epilogue_variants --out DIR [--reps 20] [--ns 65536,75600] [--only bwd-pf-lb1]
    python -m lab.epilogue_variants --list

Why these: at N = 75,600 the first shipped kernels reached 28-59% of a device copy (H200, ecec5fa)
against 70-85% predicted: one row per CTA at a time with __launch_bounds__(RT, 1) (77-127
registers, 1-3 CTAs of RT = D / 8 threads per SM), so an SM had few rows' loads in flight; the
backward loads d_x_new and y only after its row reduction. Each candidate changes one thing:

  rt/2              half the threads per row, two 16-byte chunks each (more loads per thread in
                    flight, twice the rows per SM at the same registers per row)
  bwd-lb2, bwd-lb3  backward: __launch_bounds__(RT, 2 or 3): ptxas caps registers so 2-3 CTAs
                    fit per SM (spills at D = 3072 / 5120 where the cap falls under the row)
  bwd-smem-lb2      backward: per-sample operand rows in shared memory (EP_BWD_SMEM), 2 CTAs
  bwd-pf-lb1 .. lb5 backward: the next row's tensors, mean and rstd loaded packed before this
                    row's math (EP_BWD_PF: two rows of loads in flight per CTA), operand rows in
                    shared memory, __launch_bounds__(RT, 1 .. 5)
                    (predictions per width: docs/perf-notes.md, "Block epilogues")
  bwd-pfs-lb2, lb3  bwd-pf with the column sums in shared memory too (EP_BWD_SUMS), where they
                    fit: residual_norm at D = 3072 then keeps 2 CTAs at 80 registers, no spills

The ones the launch table selects (rt/2, bwd-pf-lb1 .. lb3, bwd-pfs-lb2) live in
suite.ops.epilogue.cuda.VARIANTS; the others here (LAB_VARIANTS), on the switches the shipped
kernels keep.

Retired candidates: the launch table selected none of them, so their switches left the kernels;
the kernels at 5565467 still carry them (git show 5565467:kernels/epilogue_fwd.cu):
  fwd-unpacked-lb1  forward: the prefetched row as fp32, 1 CTA per SM (EP_FWD_PACKED=0,
                    EP_FWD_MINB=1; the forward shipped before the packed prefetch)
  fwd-lb1, fwd-lb3  forward: __launch_bounds__(RT, 1 or 3) with the packed prefetch (EP_FWD_MINB)
  bwd-early         backward: d_x_new and y loaded with x_new and d_out, before the reduction
                    (EP_BWD_EARLY; bwd-pf does it with the prefetch)
  early+lb2         both of bwd-early and bwd-lb2
  onepass           forward: mean and mean of squares in one reduction (E[x^2] - mean^2, fp32;
                    EP_ONEPASS)

A candidate is timed in the passes it changes (Variant.passes) and runs the shipped kernels in
the other. Timing (lab.ops.epilogue_bench's protocol): 10 back-to-back calls between CUDA events,
median of `reps`, against a device copy of the same byte floor; the kernels are called through
suite.ops.epilogue.cuda.forward / backward with `tune`, shipped and candidates alike, and each
candidate's outputs are compared with the shipped kernels' (max abs difference). Ops: Wan's
residual_norm (bf16 x, y; fp32 gate, scale, shift rows of a [1, 6, D] table) and rms_norm
(bf16 x, fp32 weight). Writes DIR/epilogue_variants.csv.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from suite.ops.epilogue import cuda as ec

WIDTHS = (1536, 3072, 5120)
OPS = {"residual_norm": ec.RESID | ec.GATE | ec.MOD, "rms_norm": ec.RMS | ec.WEIGHT}


def _bwd(*defines: str) -> ec.Variant:
    return ec.Variant(defines=defines, passes=("bwd",))


# The candidates the launch table does not select. Shipping one is a line of
# suite.ops.epilogue.cuda.SHIPPED, its Variant moved to cuda.VARIANTS.
LAB_VARIANTS = {
    "bwd-lb2": _bwd("EP_MINB=2"),
    "bwd-lb3": _bwd("EP_MINB=3"),
    "bwd-smem-lb2": _bwd("EP_BWD_SMEM=1", "EP_MINB=2"),
    **{f"bwd-pf-lb{m}": ec.prefetch_bwd(m) for m in (4, 5)},
    "bwd-pfs-lb3": ec.prefetch_bwd(3, sums=True),
}
VARIANTS = {**ec.VARIANTS, **LAB_VARIANTS}


def _variant(v: ec.Variant):
    """The variant on its own passes, the shipped kernels on the others."""
    return lambda cfg, pass_: v.apply(cfg) if pass_ in v.passes else ec.tuned(cfg, pass_)


# name -> (rule configuration, pass) -> the configuration that pass runs
CANDIDATES = {"shipped": ec.tuned, **{k: _variant(v) for k, v in VARIANTS.items()}}
PASSES = ("fwd", "bwd")


def timed_passes(name: str) -> tuple[str, ...]:
    """The passes a candidate is timed in: those its kernels change."""
    return PASSES if name == "shipped" else VARIANTS[name].passes


def _base(op: str, D: int) -> ec.EpilogueConfig:
    return ec.EpilogueConfig("bf16", "bf16", D, OPS[op], True)


def configs(widths=WIDTHS, candidates=tuple(CANDIDATES)) -> list[ec.EpilogueConfig]:
    """Every kernel configuration the benchmark launches (bf16, vector loads), for prebuilds."""
    out = []
    for op in OPS:
        for D in widths:
            out += [CANDIDATES[c](_base(op, D), p) for c in candidates for p in timed_passes(c)]
    return list(dict.fromkeys(out))


def prebuild(cfgs: list[ec.EpilogueConfig], arch: str, workers: int = 8) -> int:
    return ec.prebuild(cfgs, arch, workers)


def _inputs(op: str, N: int, D: int):
    import torch

    x = torch.randn(1, N, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, device="cuda")
    if op == "rms_norm":
        return dict(x=x, y=None, gate=None, scale=None, shift=None, weight=w, bias=None)
    e = 0.1 * torch.randn(1, 6, D, device="cuda")
    y = torch.randn_like(x)
    return dict(x=x, y=y, gate=e[:, 2:3], scale=e[:, 1:2], shift=e[:, 0:1], weight=None, bias=None)


def _calls(op: str, a: dict, tune):
    """(forward call, backward call) of one op through epilogue_cuda with `tune`."""
    import torch

    flags = OPS[op]
    fwd_out = ec.forward(a["x"], a["y"], a["gate"], a["scale"], a["shift"], a["weight"], a["bias"],
                         1e-6, torch.bfloat16, flags, tune=tune)  # fmt: skip
    x_new, normed, mean, rstd = fwd_out
    xs = x_new if flags & ec.RESID else a["x"]
    # the same upstream gradients for every candidate (a fixed generator), so the backward's
    # outputs compare (ops32's run drew them per candidate: its bwd max-abs column is noise)
    g = torch.Generator(device=normed.device).manual_seed(7)
    d_out = torch.randn(normed.shape, generator=g, device=normed.device, dtype=normed.dtype)
    d_xnew = (torch.randn(xs.shape, generator=g, device=xs.device, dtype=xs.dtype)
              if flags & ec.RESID else None)  # fmt: skip

    def fwd():
        return ec.forward(a["x"], a["y"], a["gate"], a["scale"], a["shift"], a["weight"],
                          a["bias"], 1e-6, torch.bfloat16, flags, tune=tune)  # fmt: skip

    def bwd():
        return ec.backward(d_xnew, d_out, xs, a["y"], a["gate"], a["scale"], a["weight"],
                           a["bias"], mean, rstd, flags, tune=tune)  # fmt: skip

    return fwd, bwd


def _kernel_facts(cfgs: dict[str, ec.EpilogueConfig]) -> dict[str, dict]:
    """Per pass (cfgs: pass -> its configuration): ptxas registers, spill bytes and static shared
    memory of the kernel, and its resident CTAs per SM."""
    from suite.cuda.compile import resources
    from suite.cuda.launch import device_arch, max_blocks_per_sm

    out = {}
    for p, cfg in cfgs.items():
        name = cfg.fwd() if p == "fwd" else cfg.bwd()
        r = resources(ec.build(cfg, device_arch(0))).get(name, {})
        out[p] = dict(registers=r.get("registers"), smem_bytes=r.get("smem"),
                      spill_bytes=r.get("spill_stores", 0) + r.get("spill_loads", 0),
                      ctas_per_sm=max_blocks_per_sm(ec._fn(cfg, name, 0), cfg.threads))  # fmt: skip
    return out


def _max_diff(got, want) -> float:
    worst = 0.0
    for g, w in zip(got, want):
        if g is not None and g.numel():
            worst = max(worst, (g.float() - w.float()).abs().max().item())
    return worst


def run(candidates, ns, reps: int, out: Path) -> list[dict]:
    import torch

    from lab.ops.epilogue_bench import copy_ms, floor_bytes, timed

    rows = []
    t0 = time.time()
    gpu = torch.cuda.get_device_properties(0).name
    for op in OPS:
        for N in ns:
            for D in WIDTHS:
                a = _inputs(op, N, D)
                E = N * D
                copies = {p: copy_ms(floor_bytes(op, p, E), reps) for p in ("fwd", "bwd")}
                ref = {}
                for name in candidates:
                    tune = CANDIDATES[name]
                    cfgs = {p: tune(_base(op, D), p) for p in timed_passes(name)}
                    try:
                        calls = dict(zip(PASSES, _calls(op, a, tune)))
                        outs = {p: calls[p]() for p in PASSES}
                        res = {p: timed(calls[p], reps) for p in cfgs}
                        note = ""
                    except Exception as err:  # noqa: BLE001 - recorded, the grid goes on
                        outs, res = {}, dict.fromkeys(cfgs, [])
                        note = f"not run: {type(err).__name__}: {str(err).splitlines()[0]}"
                    if name == "shipped":
                        ref = outs
                    kern = _kernel_facts(cfgs) if not note else {}
                    for p, samples in res.items():
                        med = statistics.median(samples) if samples else float("nan")
                        diff = _max_diff(outs[p], ref[p]) if p in outs and p in ref else None
                        rows.append(dict(
                            op=op, pass_=p, candidate=name, N=N, D=D, threads=cfgs[p].threads,
                            defines=" ".join(cfgs[p].defines), median_ms=med, reps=len(samples),
                            copy_ms=copies[p], pct_copy=100 * copies[p] / med,
                            max_abs_vs_shipped=diff, **kern.get(p, {}), gpu=gpu, note=note[:200],
                            samples_ms=" ".join(f"{v:.5f}" for v in samples),
                        ))  # fmt: skip
                print(f"[{time.time() - t0:6.1f} s] {op} N={N} D={D}", flush=True)
                del a
                torch.cuda.empty_cache()
                _write(rows, out)  # after every shape: a run cut short keeps what it measured
    return rows


def _write(rows: list[dict], out: Path) -> None:
    """The CSV, with vs_shipped = shipped time / candidate time (> 1: the candidate is faster)."""
    import pandas as pd

    df = pd.DataFrame(rows).rename(columns={"pass_": "pass"})
    base = df[df.candidate == "shipped"].set_index(["op", "pass", "N", "D"]).median_ms
    key = zip(df.op, df["pass"], df.N, df.D)
    df["vs_shipped"] = [base.get(k, float("nan")) for k in key] / df.median_ms
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "epilogue_variants.csv", index=False)


def table(csv: Path) -> str:
    """% of copy per candidate (columns) and shape (rows)."""
    import pandas as pd

    df = pd.read_csv(csv)
    pct = df.pivot_table(index=["op", "pass", "N", "D"], columns="candidate", values="pct_copy")
    order = [c for c in CANDIDATES if c in pct]
    text = pct[order].round(0).to_string()
    if "ctas_per_sm" in df:
        occ = df.pivot_table(index=["op", "pass", "D"], columns="candidate", values="ctas_per_sm")
        text += "\nresident CTAs per SM:\n" + occ[order].to_string()
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument("--out", type=Path, help="folder for epilogue_variants.csv")
    ap.add_argument("--reps", type=int, default=20, help="timed samples per point (>= 20)")
    ap.add_argument("--ns", default="75600", help="comma-separated N (default 75600)")
    ap.add_argument("--only", help="comma-separated candidates (default: all; shipped first)")
    ap.add_argument("--list", action="store_true", help="print the candidates and exit")
    a = ap.parse_args(argv)
    if a.list:
        for name, tune in CANDIDATES.items():
            for p in PASSES:
                c = tune(_base("residual_norm", 1536), p)
                print(f"{name:16s} {p} threads at D=1536: {c.threads:4d}  defines: {c.defines}")
        return 0
    names = ["shipped"] + [c for c in (a.only or "").split(",") if c and c != "shipped"]
    names = names if a.only else list(CANDIDATES)
    bad = [c for c in names if c not in CANDIDATES]
    if bad:
        ap.error(f"unknown candidates {bad}; known: {list(CANDIDATES)}")
    if a.reps < 20:
        ap.error(f"--reps must be >= 20, got {a.reps}")
    try:
        ns = [int(v) for v in a.ns.split(",")]
    except ValueError:
        ap.error(f"--ns must be comma-separated integers, got {a.ns!r}")
    if a.out is None:
        ap.error("--out is required")
    import torch

    if not torch.cuda.is_available():
        print("not run: no CUDA device", file=sys.stderr)
        return 2
    run(names, ns, a.reps, a.out)
    print(table(a.out / "epilogue_variants.csv"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
