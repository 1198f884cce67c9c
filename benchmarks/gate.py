"""The CPU regression gate: asv's CPU benchmarks on this tree against a committed baseline.

    python -m benchmarks.gate check       # CI: exit 1 on a slowdown beyond a benchmark's threshold
    python -m benchmarks.gate calibrate   # re-measure the noise and rewrite BASELINE (~5 runs)
    python -m benchmarks.gate show        # the baseline's noise and threshold per benchmark

Normalised time: a benchmark's time over bench_machine's fixed workload timed in the same asv
run. A uniformly slower or busier machine moves both alike and leaves the ratio alone; a slower
benchmark moves only its own. A check's ratio is its normalised time over the baseline's.

calibrate runs the CPU benchmarks RUNS times on one machine. A benchmark's noise is the
max / min of its normalised times over those runs; its threshold is noise ** 1.5 (a single
run's ratio to the median of RUNS runs seldom leaves the range RUNS runs span, and the exponent
widens it to about three standard deviations), clipped to [FLOOR, CEILING]: FLOOR for what
differs between machines of one kind beyond a uniform speed, CEILING so that a 2x slowdown
always fails even with the check run's own noise on top. A benchmark noisier than that is named.

check fails a benchmark only when a confirming run of the benchmarks over their thresholds
shows it again: a noisy run seldom repeats, a regression does. A benchmark the baseline lacks,
or whose asv `version` changed, fails too: recalibrate after changing what a benchmark measures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

from benchmarks import run_asv

BASELINE = Path(__file__).with_name("gate_baseline.json")
CPU_BENCHMARKS = r"^bench_(balance|nvrtc|machine)\."
MACHINE_SPEED = "bench_machine.MachineSpeed.time_fixed_workload"
ASV_MACHINE = "cpu-gate"
RUNS = 5
EXPONENT, FLOOR, CEILING = 1.5, 1.25, 1.6
# one process per benchmark and parameter (the calibration's runs are the repeats); forkserver
# imports the benchmark modules once (CPU only: nothing here touches CUDA); one thread each
ASV_ARGS = ("--launch-method", "forkserver", "-a", "rounds=1")
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def measure(bench: str = CPU_BENCHMARKS) -> dict[str, dict]:
    """One asv run of `bench` (and the machine workload) on this tree: {name: {value, version}}."""
    if not re.search(bench, MACHINE_SPEED):
        bench = f"{bench}|^{re.escape(MACHINE_SPEED)}$"
    head = run_asv.git("rev-parse", "HEAD")
    for old in (run_asv.RESULTS / ASV_MACHINE).glob(f"{head[:8]}-*.json"):
        old.unlink()  # asv merges into an existing file: keep only this run's values
    run_asv.run(bench, ASV_MACHINE, extra=ASV_ARGS, env=os.environ | ONE_THREAD)
    return run_asv.load_results(head, ASV_MACHINE)


def normalised(values: dict[str, dict]) -> dict[str, float]:
    speed = values[MACHINE_SPEED]["value"]
    return {k: v["value"] / speed for k, v in values.items() if k != MACHINE_SPEED}


def threshold(noise: float) -> float:
    return min(max(noise**EXPONENT, FLOOR), CEILING)


def summarise(runs: list[dict[str, dict]]) -> dict[str, dict]:
    """Per benchmark: the raw seconds of each run, the median normalised time (the baseline),
    its noise (max / min of the normalised times, and of the raw ones) and its threshold."""
    norm = [normalised(r) for r in runs]
    out = {}
    for name in sorted(set.intersection(*(set(n) for n in norm))):
        ratios = [n[name] for n in norm]
        raw = [r[name]["value"] for r in runs]
        noise = max(ratios) / min(ratios)
        out[name] = {
            "version": runs[0][name]["version"],
            "seconds": raw,
            "ratio": statistics.median(ratios),
            "noise": noise,
            "raw_noise": max(raw) / min(raw),
            "threshold": threshold(noise),
        }
    return out


def judge(values: dict[str, dict], baseline: dict, names=None) -> tuple[list[str], list[str]]:
    """(lines of a table, names over their threshold or not comparable) for one run, of every
    benchmark or of `names`."""
    now, base = normalised(values), baseline["benchmarks"]
    lines, bad = [], []
    for name in sorted(names or set(base) | set(now) | {MACHINE_SPEED}):
        why = _not_comparable(name, values, baseline)
        if why:
            lines.append(f"FAIL  {name}: {why}; run `python -m benchmarks.gate calibrate`")
            bad.append(name)
        elif name != MACHINE_SPEED:
            ratio = now[name] / base[name]["ratio"]
            over = ratio > base[name]["threshold"]
            bad += [name] if over else []
            mark = "SLOW" if over else "ok  "
            lines.append(
                f"{mark}  {ratio:5.2f}x (threshold {base[name]['threshold']:.2f}x)  {name}"
            )
    return lines, bad


def _not_comparable(name: str, values: dict, baseline: dict) -> str | None:
    """Why `name` cannot be judged against the baseline, or None."""
    want = baseline["machine_version"] if name == MACHINE_SPEED else None
    if name != MACHINE_SPEED:
        if name not in baseline["benchmarks"]:
            return "not in the baseline"
        want = baseline["benchmarks"][name]["version"]
    if name not in values:
        return "did not run"
    if values[name]["version"] != want:
        return f"version {want} -> {values[name]['version']}"
    return None


def check(baseline_path: Path = BASELINE) -> int:
    baseline = json.loads(baseline_path.read_text())
    t0 = time.perf_counter()
    lines, bad = judge(measure(), baseline)
    print("\n".join(lines))
    if bad:
        print(f"confirming the {len(bad)} over their threshold")
        # asv matches a parameterised benchmark's regex against "name(param, ...)"
        asv_names = [re.sub(r"\[(.*)\]$", r"(\1)", n) for n in bad]
        lines, bad = judge(measure("|".join(f"^{re.escape(n)}$" for n in asv_names)), baseline, bad)
        print("\n".join(lines))
    took = time.perf_counter() - t0
    n = len(baseline["benchmarks"])
    if bad:
        print(f"FAILED: {len(bad)} of {n} CPU benchmarks slower than their threshold twice")
        for name in bad:
            print(f"  {name}")
        return 1
    print(f"passed: {n} CPU benchmarks within their thresholds ({took:.0f} s)")
    return 0


def calibrate(runs: int = RUNS, baseline_path: Path = BASELINE) -> int:
    t0 = time.perf_counter()
    measured = []
    for i in range(runs):
        print(f"calibration run {i + 1} of {runs}", flush=True)
        measured.append(measure())
    bench = summarise(measured)
    baseline = {
        "about": "benchmarks/gate.py's baseline; rewrite with `python -m benchmarks.gate calibrate`",
        "commit": run_asv.git("rev-parse", "HEAD")
        + ("+dirty" if run_asv.git("status", "--porcelain") else ""),
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "system": platform.platform()},
        "runs": runs,
        "machine_version": measured[0][MACHINE_SPEED]["version"],
        "machine_seconds": [r[MACHINE_SPEED]["value"] for r in measured],
        "rule": f"threshold = clip(noise ** {EXPONENT}, {FLOOR}, {CEILING}); noise = max / min "
        f"of the normalised times over the runs; normalised = seconds / {MACHINE_SPEED}",
        "benchmarks": bench,
    }
    baseline_path.write_text(json.dumps(baseline, indent=1) + "\n")
    show(baseline_path)
    print(f"wrote {baseline_path} from {runs} runs in {time.perf_counter() - t0:.0f} s")
    return 0


def show(baseline_path: Path = BASELINE) -> int:
    """The baseline's noise (normalised, and raw for comparison) and threshold per benchmark."""
    data = json.loads(baseline_path.read_text())
    bench = data["benchmarks"]
    print(f"{data['runs']} runs at {data['commit'][:12]} on {data['machine']['cpu']}")
    print(f"{'noise':>6} {'raw':>6} {'thresh':>6}  benchmark")
    for name, b in bench.items():
        print(f"{b['noise']:6.3f} {b['raw_noise']:6.3f} {b['threshold']:6.2f}  {name}")
    noisy = [n for n, b in bench.items() if b["noise"] ** EXPONENT > CEILING]
    if noisy:
        print(
            f"noisier than the gate can judge (threshold clipped to {CEILING}): {', '.join(noisy)}"
        )
    return 0


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if "model name" in ln), "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.gate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("command", choices=["check", "calibrate", "show"])
    ap.add_argument("--runs", type=int, default=RUNS, help="calibrate: runs to measure")
    args = ap.parse_args(argv)
    if args.runs < 3:
        ap.error(f"--runs must be a whole number of at least 3, got {args.runs}")
    if args.command == "show":
        return show()
    run_asv.set_machine(ASV_MACHINE)
    return check() if args.command == "check" else calibrate(args.runs)


if __name__ == "__main__":
    sys.exit(main())
