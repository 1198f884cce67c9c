"""End-to-end training step of diffusers' Wan 2.1 1.3B with and without the fused ops (C17).

The real model (suite.model.wan: `WanTransformer3DModel`, 30 blocks, D = 1536, random init, bf16
with diffusers' fp32 modules, per-block gradient checkpointing), one fwd+bwd per step: the
training step's own (suite.train.step.forward_backward: the flow-matching loss) on one batch of
the one batch builder (suite.model.wan.make_batch), five variants on the same weights and the same
inputs:

    eager              diffusers as shipped
    eager-adaln        + patch_wan(adaln=True): fused AdaLN / affine LayerNorm
    eager-epilogues    + patch_wan(epilogues=True): also the fused residual epilogues, qk RMSNorm
    compile            diffusers' regional compile (`compile_repeated_blocks`, inductor)
    compile-fused      regional compile of the patched model (epilogues too when present:
                       e2e_memory's `ops` column says which ops it ran)

Per shape the variants are warmed up (compile included), then timed interleaved: repeat r runs
every variant once, in an order rotated by r, CUDA-synchronised, so drift cancels in the paired
ratios. Peak memory is max_memory_allocated over each timed step, less the other variants'
parameters (every gradient is freed between steps, so only parameters stay resident). One extra
step per variant under torch.profiler gives GPU time per kernel, classified into families.

Tables: e2e_steps (every timed sample), e2e_memory (per variant and shape; status says why a
variant did not run), e2e_profile (GPU time per kernel name and family). summarize() gives C17's
alternative metrics `e2e_gain_<variant>_<shape>` (% throughput gain: the median over repeats of
the paired ratio eager / variant step time, - 1; 95% CI: paired percentile bootstrap of that median
over repeats) and `e2e_gain_fused_over_compile_<shape>`. The median, not a ratio of means: one slow
repeat of either arm (a host stall in one step) moves a mean ratio by its whole size, and a run's
interval then misses the next run's value. Each process also lands at its own level: where committed repeat runs give the GPU model's between-run spread,
suite.spread widens each side of the interval to it.

Budget: the quick profile runs the 81-frame
480p clip only, the three eager variants, 1 warm-up + 6 timed steps, no profiler (~60 s). The full
profile and the standalone run (`python -m suite.experiments.e2e --help`) run all three shapes and
five variants with 3 timed steps and the profiler step (tools/device/e2e.sh profiles the two 480p
shapes only, to fit its time).
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite import spread
from suite.experiments import metric_rows

NAME = "e2e"
NEEDS = "cuda"
EVIDENCE = {"e2e_steps": "measured", "e2e_memory": "measured"}  # suite.evidence
# seconds on one H200 (reproduce --budget defers it when they do not fit): quick measured 40 s;
# full 5 variants x 5 steps per shape, ~11 s a step at 75,600 tokens, compiles: ~415 s
SECONDS = {"quick": 60, "full": 430}
MODEL = "wan-1.3b"
GIB = 2**30


@dataclass(frozen=True)
class Shape:
    batch: int
    frames: int
    height: int
    width: int


@dataclass(frozen=True)
class Variant:
    compiled: bool
    adaln: bool
    epilogues: bool | None  # None: when suite.ops.epilogue is present, else without them


SHAPES: dict[str, Shape] = {
    "img480x8": Shape(8, 1, 480, 832),  # 8 x 1,560 tokens
    "v81x480": Shape(1, 81, 480, 832),  # 32,760 tokens
    "v81x720": Shape(1, 81, 720, 1280),  # 75,600 tokens
}
VARIANTS: dict[str, Variant] = {
    "eager": Variant(compiled=False, adaln=False, epilogues=False),
    "eager-adaln": Variant(compiled=False, adaln=True, epilogues=False),
    "eager-epilogues": Variant(compiled=False, adaln=True, epilogues=True),
    "compile": Variant(compiled=True, adaln=False, epilogues=False),
    "compile-fused": Variant(compiled=True, adaln=True, epilogues=None),
}
BASELINE = "eager"


@dataclass(frozen=True)
class Plan:
    shapes: tuple[str, ...]
    variants: tuple[str, ...]
    warmup: int
    repeats: int
    profile: tuple[str, ...]  # shapes that get the torch.profiler step
    layers: int | None = None  # None: the config's 30 blocks
    model: str = MODEL  # a suite.model.wan config ("tiny" runs the loop on CPU in tests)


PLANS = {
    "cpu": Plan(("img480x8",), ("eager", "eager-adaln"), 1, 2, ()),  # never run: NEEDS cuda
    # 6 repeats: a median's bootstrap interval reaches past the middle pairs only from ~6
    "quick": Plan(("v81x480",), ("eager", "eager-adaln", "eager-epilogues"), 1, 6, ()),
    "full": Plan(tuple(SHAPES), tuple(VARIANTS), 1, 3, tuple(SHAPES)),
}

# Kernel families by name, first match wins (inductor names its kernels triton_poi_ / triton_per_
# / triton_red_ + the ops it fused; the suite's NVRTC kernels start with adaln).
KERNEL_FAMILIES: tuple[tuple[str, str], ...] = (
    ("adaln/epilogue", r"adaln|epilogue|residual_norm|fused_rms"),
    ("attention", r"flash|fmha|attention|attn|sdpa|mha"),
    ("gemm", r"gemm|cutlass|nvjet|xmma|cublas|matmul|splitk|wgrad|dgrad|conv[23]d|convolve|cudnn"),
    ("reduction/norm", r"^triton_(per|red)_"),  # inductor's kind beats the ops it fused
    ("elementwise", r"^triton_poi_"),
    ("copy/cast", r"copy|memcpy|memset|fill|catarray|cat_|cast"),
    ("reduction/norm", r"reduce|norm|softmax|welford|sum_"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|gelu|silu|mul|add"),
)
FAMILIES = tuple(dict.fromkeys(f for f, _ in KERNEL_FAMILIES)) + ("other",)


def kernel_family(name: str) -> str:
    """The family of a CUDA kernel name (KERNEL_FAMILIES, case-insensitive), else "other"."""
    low = name.lower()
    for family, pattern in KERNEL_FAMILIES:
        if re.search(pattern, low):
            return family
    return "other"


def epilogue_available() -> str | None:
    """None when suite.ops.epilogue imports, else the reason it does not."""
    try:
        import suite.ops.epilogue  # noqa: F401
    except ImportError as e:
        return f"not run: suite.ops.epilogue missing ({e})"
    return None


def ops_label(v: Variant) -> str:
    ops = [
        n
        for n, on in (("compile", v.compiled), ("adaln", v.adaln), ("epilogues", v.epilogues))
        if on
    ]
    return "+".join(ops) or "diffusers"


def build_variant(v: Variant, plan: Plan, device: str):
    """A fresh model for variant `v` (seed 0: every variant has the same weights)."""
    from suite.model.wan import build_wan
    from suite.ops.diffusers import patch_wan

    model = build_wan(plan.model, layers=plan.layers, device=device, checkpointing=True, seed=0)
    if v.adaln or v.epilogues:
        patch_wan(model, adaln=v.adaln, epilogues=v.epilogues)
    if v.compiled:
        model.compile_repeated_blocks(dynamic=False)
    return model


def _timed_step(model, batch, own_param_bytes: int) -> tuple[float, float]:
    """(seconds, own peak GiB) of one synchronised training step's forward + backward; frees the
    gradients after. Off CUDA (tests) the peak is NaN."""
    import torch

    from suite.train.step import forward_backward

    cuda = batch.x0.is_cuda
    if cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    forward_backward(model, batch)
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() - before + own_param_bytes if cuda else np.nan
    model.zero_grad(set_to_none=True)
    return dt, peak / GIB


def profile_step(model, batch) -> pd.DataFrame:
    """GPU time per kernel name of one training step's forward + backward (torch.profiler),
    with its family."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from suite.train.step import forward_backward

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        forward_backward(model, batch)
        torch.cuda.synchronize()  # profile() is only called on CUDA
    model.zero_grad(set_to_none=True)
    agg: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            a = agg.setdefault(e.name, [0, 0.0])
            a[0] += 1
            a[1] += e.time_range.elapsed_us()
    rows = [
        dict(kernel=n[:160], family=kernel_family(n), calls=c, gpu_us=us)
        for n, (c, us) in agg.items()
    ]
    return pd.DataFrame(rows, columns=["kernel", "family", "calls", "gpu_us"])


def run_shape(ctx, shape_name: str, plan: Plan, models: dict, skipped: dict) -> dict:
    """Warm-up, interleaved timed repeats, and the profiler step of every variant at one shape."""
    import torch

    from suite.model.wan import describe, latent_shape, make_batch

    sh = SHAPES[shape_name]
    first = next(iter(models.values()))[0]
    latent = latent_shape(sh.frames, sh.height, sh.width)
    batch = make_batch(describe(first), range(sh.batch), latent, device=ctx.device)
    common = dict(model=plan.model, shape=shape_name, batch=sh.batch, frames=sh.frames, height=sh.height,
                  width=sh.width, S=batch.S, layers=len(first.blocks))  # fmt: skip
    steps, memory, prof = [], [], []
    graphs, warm_s = {}, {}
    for name, (model, pbytes, _) in models.items():
        from torch._dynamo.utils import counters

        g0 = counters["stats"]["unique_graphs"]
        t0 = time.perf_counter()
        for _ in range(plan.warmup):
            _timed_step(model, batch, pbytes)
        warm_s[name], graphs[name] = (
            time.perf_counter() - t0,
            counters["stats"]["unique_graphs"] - g0,
        )
        ctx.log(f"e2e {shape_name}: {name} warmed up in {warm_s[name]:.1f} s")
    names = list(models)
    for r in range(plan.repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for pos, name in enumerate(order):
            model, pbytes, _ = models[name]
            dt, peak = _timed_step(model, batch, pbytes)
            steps.append(common | dict(variant=name, rep=r, order=pos, seconds=dt, peak_gib=peak))
        ctx.log(f"e2e {shape_name}: repeat {r + 1}/{plan.repeats} " + ", ".join(
            f"{s['variant']} {s['seconds']:.3f}s" for s in steps[-len(order):]))  # fmt: skip
    df = pd.DataFrame(steps)
    for name in plan.variants:
        if name in skipped:
            memory.append(common | dict(variant=name, status=skipped[name]))
            continue
        own = df[df.variant == name]
        memory.append(
            common
            | dict(
                variant=name,
                status="ok",
                ops=models[name][2],
                peak_gib=own.peak_gib.max(),
                param_gib=models[name][1] / GIB,
                warmup_s=warm_s[name],
                compiled_graphs=graphs[name],
            )
        )
        if shape_name in plan.profile and ctx.device == "cuda":
            p = profile_step(models[name][0], batch)
            prof.append(p.assign(**common, variant=name))
    if ctx.device == "cuda":
        torch.cuda.empty_cache()
    return dict(steps=df, memory=pd.DataFrame(memory), profile=prof)


def run(ctx) -> dict[str, pd.DataFrame]:
    import torch

    opts = dict(ctx.options.get(NAME, {})) if ctx.options else {}
    base = PLANS[ctx.profile]
    plan = Plan(
        shapes=tuple(opts.get("shapes", base.shapes)),
        variants=tuple(opts.get("variants", base.variants)),
        warmup=int(opts.get("warmup", base.warmup)),
        repeats=int(opts.get("repeats", base.repeats)),
        profile=tuple(opts.get("profile", base.profile)),
        layers=opts.get("layers", base.layers),
        model=opts.get("model", base.model),
    )
    for k, allowed in (("shapes", SHAPES), ("variants", VARIANTS), ("profile", SHAPES)):
        bad = [x for x in getattr(plan, k) if x not in allowed]
        if bad:
            raise ValueError(f"e2e {k} must be among {list(allowed)}, got {bad}")
    if BASELINE not in plan.variants or plan.repeats < 1 or plan.warmup < 1:
        raise ValueError(
            f"e2e needs the {BASELINE!r} variant, repeats >= 1 and warmup >= 1: {plan}"
        )
    no_epi = epilogue_available()
    skipped = {v: no_epi for v in plan.variants if VARIANTS[v].epilogues and no_epi}
    models = {}
    for name in plan.variants:
        if name in skipped:
            ctx.log(f"e2e {name}: {skipped[name]}")
            continue
        v = VARIANTS[name]
        if v.epilogues is None:
            v = dataclasses.replace(v, epilogues=no_epi is None)
        model = build_variant(v, plan, ctx.device)
        pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        models[name] = (model, pbytes, ops_label(v))
    where = torch.cuda.get_device_name() if ctx.device == "cuda" else ctx.device
    ctx.log(f"e2e: {len(models)} models of {plan.model} on {where}")
    out = {"steps": [], "memory": [], "profile": []}
    for shape_name in plan.shapes:
        res = run_shape(ctx, shape_name, plan, models, skipped)
        out["steps"].append(res["steps"])
        out["memory"].append(res["memory"])
        out["profile"] += res["profile"]
        if hook := opts.get("on_shape"):  # the CLI writes its tables after every shape
            hook(_tables(out))
    return _tables(out)


def _tables(out: dict) -> dict[str, pd.DataFrame]:
    def cat(frames):
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    return {f"e2e_{k}": cat(v) for k, v in out.items()}


def paired_speedup(base: np.ndarray, new: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """median over paired repeats of base / new, with a seeded paired percentile-bootstrap 95% CI of
    that median (NaN with fewer than 3 pairs). Pairs: repeat r of both arms, timed in one rotated
    round, so drift of the machine cancels in each ratio."""
    from suite.stats import percentile_ci

    ratio = np.asarray(base, float) / np.asarray(new, float)
    value = float(np.median(ratio))
    if len(ratio) < 3:
        return value, float("nan"), float("nan")
    lo, hi = percentile_ci((ratio,), np.median, paired=True, seed=seed, n_resamples=2000)
    return value, lo, hi


def _metric_key(variant: str, shape: str) -> str:
    return f"{variant.replace('-', '_')}_{shape}"


def _gain(speedup: tuple[float, float, float]) -> tuple[float, ...]:
    """A speedup and its CI as % throughput gain, C17's unit (so the ledger judges it as C17)."""
    return tuple((v - 1.0) * 100.0 for v in speedup)


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    steps = tables.get("e2e_steps")
    if steps is None or steps.empty:
        return metric_rows([])
    between, model = spread.between(tables, "e2e_steps", "e2e")
    rows = []
    for shape, g in steps.groupby("shape", sort=False):
        t = g.pivot(index="rep", columns="variant", values="seconds").dropna()
        if BASELINE not in t:
            continue
        first = g.iloc[0]
        cond = (
            f"diffusers WanTransformer3DModel {first.get('model', MODEL)}, {int(first.layers)} blocks, bf16, gradient "
            f"checkpointing, fwd+bwd; B={int(first.batch)} x S={int(first.S)} "
            f"({int(first.frames)} frames {int(first.height)}x{int(first.width)}); "
            f"{len(t)} paired repeats; 95% CI: paired percentile bootstrap of the median ratio, "
            f"{model}"
        )
        for variant in [v for v in t.columns if v != BASELINE]:
            value, lo, hi = _gain(paired_speedup(t[BASELINE].to_numpy(), t[variant].to_numpy()))
            lo, hi = spread.widen_in("e2e", value, lo, hi, between)
            rows.append(dict(claim="C17", metric=f"e2e_gain_{_metric_key(variant, shape)}",
                             value=value, ci_low=lo, ci_high=hi, baseline=t[BASELINE].mean(),
                             unit="%", conditions=f"{cond}; {variant} over {BASELINE}",
                             evidence="e2e_steps; figure e2e_steps"))  # fmt: skip
        if {"compile", "compile-fused"} <= set(t.columns):
            value, lo, hi = _gain(
                paired_speedup(t["compile"].to_numpy(), t["compile-fused"].to_numpy())
            )
            lo, hi = spread.widen_in("e2e", value, lo, hi, between)
            rows.append(dict(claim="C17", metric=f"e2e_gain_fused_over_compile_{shape}", value=value,
                             ci_low=lo, ci_high=hi, baseline=t["compile"].mean(), unit="%",
                             conditions=f"{cond}; compile-fused over compile",
                             evidence="e2e_steps; figure e2e_steps"))  # fmt: skip
    return metric_rows(rows)


def main(argv: list[str] | None = None) -> None:
    """Standalone run: python -m suite.experiments.e2e --out DIR (see --help)."""
    import argparse
    from pathlib import Path

    from suite.rundir import RunContext, RunDir, atomic_write_text

    full = PLANS["full"]
    p = argparse.ArgumentParser(
        prog="python -m suite.experiments.e2e",
        description="End-to-end fwd+bwd step of diffusers' Wan 2.1 1.3B (bf16, gradient "
        "checkpointing) with and without the suite's fused ops and regional torch.compile. "
        "Writes DIR/e2e_steps.csv, e2e_memory.csv, e2e_profile.csv (after every shape) and "
        "prints the speedups and peak memory. Needs a CUDA GPU.",
    )
    p.add_argument("--out", type=Path, required=True, help="directory for the tables")
    p.add_argument("--shapes", default=",".join(full.shapes),
                   help=f"comma list of {list(SHAPES)} (default all)")  # fmt: skip
    p.add_argument("--variants", default=",".join(full.variants),
                   help=f"comma list of {list(VARIANTS)} (default all)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=full.repeats, help="timed steps per variant")
    p.add_argument("--warmup", type=int, default=full.warmup, help="warm-up steps per variant")
    p.add_argument("--layers", type=int, default=None, help="blocks (default the config's 30)")
    p.add_argument("--profile-shapes", default=",".join(full.profile),
                   help="comma list of shapes that get the torch.profiler step ('' for none)")  # fmt: skip
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("e2e: not run: needs a CUDA GPU")
    a.out.mkdir(parents=True, exist_ok=True)

    def write(tables):
        for name, df in tables.items():
            atomic_write_text(a.out / f"{name}.csv", df.to_csv(index=False, lineterminator="\n"))

    profile = [x for x in a.profile_shapes.split(",") if x]
    opts = dict(shapes=a.shapes.split(","), variants=a.variants.split(","), repeats=a.repeats,
                warmup=a.warmup, profile=profile, layers=a.layers, on_shape=write)  # fmt: skip
    ctx = RunContext(
        run=RunDir(a.out / ".run"), profile="full", device="cuda", options={NAME: opts}
    )
    t0 = time.time()
    ctx.log = lambda m: print(f"[{time.time() - t0:6.1f}s] {m}", flush=True)  # type: ignore[method-assign]
    tables = run(ctx)
    write(tables)
    print_tables(tables)


def print_tables(tables: dict[str, pd.DataFrame]) -> None:
    """Speedups, peak memory and the GPU-time split by kernel family, as text."""
    pd.set_option("display.width", 200)
    m = tables.get("e2e_memory", pd.DataFrame())
    if not m.empty:
        cols = [c for c in ("shape", "S", "variant", "ops", "status", "peak_gib", "warmup_s",
                            "compiled_graphs") if c in m]  # fmt: skip
        print(m[cols].round(2).to_string(index=False))
    p = tables.get("e2e_profile", pd.DataFrame())
    if not p.empty:
        share = p.groupby(["shape", "variant", "family"]).gpu_us.sum().unstack("family").fillna(0)
        print((100 * share.div(share.sum(axis=1), axis=0)).round(1).to_string())
    s = summarize(tables)
    if not s.empty:
        print(
            s[["metric", "value", "ci_low", "ci_high", "baseline"]].round(3).to_string(index=False)
        )


if __name__ == "__main__":
    main()
