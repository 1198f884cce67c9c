"""Drive asv the way this project needs it (`nox -s asv -- ...`).

    python -m benchmarks.run_asv [BASE] [--quick] [--bench REGEX] [--machine NAME] [--threshold 1.10]

- `asv machine --yes` first (a non-interactive `asv run` fails without it).
- Without BASE: run the suite at HEAD with `--set-commit-hash` so results are saved.
- With BASE: also run it with BASE's `suite` code (a git worktree put first on PYTHONPATH, the same
  benchmark files), then compare the two result files ourselves and exit 1 on a regression beyond
  the threshold: `asv compare` prints a table but always exits 0.
- `--quick` runs each benchmark once and saves nothing: CI uses it to fail on a broken benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = json.loads((ROOT / "asv.conf.json").read_text())
RESULTS = ROOT / CONF["results_dir"]

# Direction of "better" for track_ benchmarks, by a word in the name; time_ is lower-is-better.
HIGHER_IS_BETTER = ("gbps", "pct", "throughput", "per_s", "speedup", "reduction", "saved")


def sh(cmd: list[str], env: dict | None = None, check: bool = True) -> int:
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    if check and rc != 0:
        sys.exit(f"error: {' '.join(cmd[:3])} ... exited {rc}")
    return rc


def git(*args: str) -> str:
    return subprocess.check_output(["git", *args], cwd=ROOT, text=True).strip()


def asv_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "asv", *args]


def benchmark_path(code_root: Path, environ) -> str:
    """The benchmark processes' import path: code_root's `suite` first, then these benchmark
    files, then the caller's PYTHONPATH. asv drops PYTHONPATH and honours only ASV_PYTHONPATH,
    so packages found through PYTHONPATH (asv_runner among them, where a GPU machine installs
    the wheelhouse with pip --target) must be passed on here."""
    inherited = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([str(code_root), str(ROOT), *inherited]))


def run_at(commit: str, code_root: Path, args: argparse.Namespace, save: bool) -> None:
    """Run the benchmarks importing `suite` from code_root, labelled as `commit`."""
    env = dict(os.environ, ASV_PYTHONPATH=benchmark_path(code_root, os.environ))
    cmd = asv_cmd("run", "--python=same", "--show-stderr", "--launch-method", "spawn")
    cmd += ["--machine", args.machine] if args.machine else []
    cmd += ["--bench", args.bench] if args.bench else []
    cmd += ["--quick", "--dry-run"] if not save else ["--set-commit-hash", commit]
    # asv exits 0 even when a benchmark fails; failures show as "failed" in its output
    out = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True)
    sys.stdout.write(out.stdout)
    sys.stderr.write(out.stderr)
    if out.returncode != 0 or "failed" in out.stdout.lower():
        sys.exit(f"error: asv run at {commit[:8]} had failing benchmarks (exit {out.returncode})")


def load_results(
    commit: str, machine: str, results: Path = RESULTS
) -> dict[str, tuple[float, float, float]]:
    """{benchmark name (+params): (value, ci99_low, ci99_high)} from asv's JSON for one commit
    (under `results`, asv's results folder or the committed reports/asv). track_ benchmarks have
    no interval: their bounds are the value itself."""
    folder = results / machine
    values: dict[str, tuple[float, float, float]] = {}
    for path in sorted(folder.glob(f"{commit[:8]}-*.json")):
        data = json.loads(path.read_text())
        cols = data["result_columns"]
        for name, row in data["results"].items():
            rec = dict(zip(cols, row))
            results, params = rec.get("result"), rec.get("params") or []
            if results is None:
                continue
            lows = rec.get("stats_ci_99_a") or [None] * len(results)
            highs = rec.get("stats_ci_99_b") or [None] * len(results)
            for combo, v, lo, hi in zip(_param_combos(params), results, lows, highs):
                if isinstance(v, (int, float)) and math.isfinite(v):
                    lo = lo if isinstance(lo, (int, float)) and math.isfinite(lo) else v
                    hi = hi if isinstance(hi, (int, float)) and math.isfinite(hi) else v
                    values[name + combo] = (float(v), float(lo), float(hi))
    return values


def _param_combos(params: list[list[str]]) -> list[str]:
    combos = [""]
    for p in params:
        combos = [f"{c}[{v}]" if not c else f"{c[:-1]}, {v}]" for c in combos for v in p]
    return combos


def regressions(base: dict, head: dict, threshold: float) -> list[str]:
    """Worse by more than `threshold` AND outside noise: the 99% intervals do not overlap (what
    asv compare's '+' means). A noisy 1.37x with overlapping intervals is not a regression."""
    bad = []
    for name in sorted(set(base) & set(head)):
        (b, b_lo, b_hi), (h, h_lo, h_hi) = base[name], head[name]
        if b <= 0 or h <= 0:
            continue
        short = name.split(".")[-1]
        higher = short.startswith("track_") and any(w in short for w in HIGHER_IS_BETTER)
        ratio = b / h if higher else h / b
        separated = h_hi < b_lo if higher else h_lo > b_hi
        if ratio > threshold and separated:
            bad.append(f"{name}: {b:.4g} -> {h:.4g} ({ratio:.2f}x worse)")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="nox -s asv --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("base", nargs="?", help="base commit to compare against")
    ap.add_argument("--quick", action="store_true", help="each benchmark once, nothing saved")
    ap.add_argument("--bench", help="regex of benchmarks to run")
    ap.add_argument("--machine", help="asv machine name (e.g. h200); default: this host's")
    ap.add_argument("--threshold", type=float, default=1.10, help="fail when worse by this factor")
    args = ap.parse_args(argv)

    mcmd = asv_cmd("machine", "--yes") + (["--machine", args.machine] if args.machine else [])
    sh(mcmd)
    if args.quick:
        run_at("HEAD", ROOT, args, save=False)
        return 0
    head = git("rev-parse", "HEAD")
    run_at(head, ROOT, args, save=True)
    if not args.base:
        print(f"saved results for {head[:8]} under {RESULTS}; `asv publish` builds the dashboard")
        return 0
    base = git("rev-parse", args.base)
    with tempfile.TemporaryDirectory() as tmp:
        sh(["git", "worktree", "add", "--detach", tmp, base])
        try:
            run_at(base, Path(tmp), args, save=True)
        finally:
            sh(["git", "worktree", "remove", "--force", tmp], check=False)
    machine = args.machine or _default_machine()
    sh(asv_cmd("compare", "--machine", machine, base, head), check=False)
    bad = regressions(load_results(base, machine), load_results(head, machine), args.threshold)
    for line in bad:
        print("REGRESSION", line)
    print(
        f"{len(bad)} regression(s) beyond {args.threshold:.2f}x between {base[:8]} and {head[:8]}"
    )
    return 1 if bad else 0


def _default_machine() -> str:
    data = json.loads((Path.home() / ".asv-machine.json").read_text())
    return next(k for k in data if k != "version")


if __name__ == "__main__":
    sys.exit(main())
