"""Where does a small fused backward's time go? (lab/LOG.md, Next measurements 1)

For each width and N (bf16 x and dy, B = 1, Wan's per-sample modulation), times the fused
backward L2-cold with the suite's Timer (CUDA events, as kernels.csv), then again under
torch.profiler (CUPTI kernel records), and splits each repetition into the row kernel, the
finalize, and the gap between them (negative: the finalize, a programmatic dependent launch,
started before the row kernel ended). A same-size copy is timed the same way beside it: the part
of a small call that is launch and ramp rather than bytes.

    python lab/bwd_timeline.py [--widths 1536,3072,5120] [--ns 4096,16384] [--reps 30] [--out DIR]
Prints a table; DIR/bwd_timeline.csv has every repetition.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _kernels(prof) -> list[dict]:
    """The profiler's GPU kernel records (name, start and end in us), in start order."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    ks = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
    return sorted(
        (dict(name=e["name"], t0=e["ts"], t1=e["ts"] + e["dur"]) for e in ks), key=lambda k: k["t0"]
    )


def _split(kernels: list[dict]) -> list[dict]:
    """Per backward: the row kernel (adaln_bwd<...>) and the finalize that follows it before the
    next row kernel; a backward without one (a variant that adds its partial rows in the row
    kernel, as round 37's did) has finalize 0 us and no gap."""
    out = []
    rows = [i for i, k in enumerate(kernels) if "adaln_bwd<" in k["name"]]
    for i, nxt in zip(rows, rows[1:] + [len(kernels)]):
        k = kernels[i]
        fin = next((f for f in kernels[i + 1 : nxt] if "adaln_bwd_finalize" in f["name"]), None)
        end = fin["t1"] if fin else k["t1"]
        out.append(
            dict(
                row_us=k["t1"] - k["t0"],
                fin_us=fin["t1"] - fin["t0"] if fin else 0.0,
                gap_us=fin["t0"] - k["t1"] if fin else float("nan"),
                span_us=end - k["t0"],
            )
        )
    return out


def _copy(timer, nbytes: int):
    """A device copy moving nbytes (half read, half written): event ms and profiled kernel us."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ev = timer.time(lambda _: dst.copy_(src))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        timer.time(lambda _: dst.copy_(src))
    ks = [k for k in _kernels(prof) if "memcpy" in k["name"].lower()]
    return ev, [k["t1"] - k["t0"] for k in ks][-timer.reps :]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="1536,3072,5120")
    ap.add_argument("--ns", default="4096,16384")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)

    import pandas as pd
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        raise SystemExit("bwd_timeline.py: needs a CUDA GPU (torch sees none)")
    from lab.variant_sweep import _impl  # "fused" honours $ADAPTIVELOAD_ADALN_VARIANT
    from suite.experiments.kernels.bench import Timer, _time_one

    timer = Timer(a.reps)
    fn = _impl("fused")
    rows = []
    for D in (int(d) for d in a.widths.split(",")):
        for N in (int(n) for n in a.ns.split(",")):
            g = torch.Generator(device="cuda").manual_seed(N + D)
            x = torch.randn(1, N, D, device="cuda", generator=g).to(torch.bfloat16)
            e = torch.randn(1, 6, D, device="cuda", generator=g) * 0.5
            ev = _time_one(timer, fn, "bwd", x, e)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                _time_one(timer, fn, "bwd", x, e)
            parts = _split(_kernels(prof))[-a.reps :]  # after the warm-up calls
            cev, cdur = _copy(timer, 3 * N * D * 2)  # x, dy read, dx written (bf16)
            for i, p in enumerate(parts):
                cu = cdur[i] if i < len(cdur) else float("nan")
                rows.append(
                    dict(D=D, N=N, rep=i, event_us=ev[i] * 1e3, **p)
                    | dict(copy_event_us=cev[i] * 1e3, copy_kernel_us=cu)
                )

            def med(k, parts=parts):
                return statistics.median(p[k] for p in parts)

            print(
                f"D={D:5d} N={N:6d}  event {statistics.median(ev) * 1e3:7.1f} us | profiled: "
                f"row {med('row_us'):6.1f}  finalize {med('fin_us'):5.1f}  gap {med('gap_us'):5.1f}"
                f"  span {med('span_us'):6.1f} | same-bytes copy: event "
                f"{statistics.median(cev) * 1e3:6.1f}  kernel "
                f"{statistics.median(cdur) if cdur else float('nan'):6.1f} us",
                flush=True,
            )
            del x, e
            torch.cuda.empty_cache()
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(a.out / "bwd_timeline.csv", index=False)


if __name__ == "__main__":
    main()
