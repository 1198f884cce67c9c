"""Drive asv the way this project needs it (`nox -s asv -- ...`).

    python -m benchmarks.run_asv [--quick] [--bench REGEX] [--machine NAME]

- `asv machine --yes` first (a non-interactive `asv run` fails without it).
- Runs the benchmarks on the code in this tree, labelled with HEAD's commit
  (`--set-commit-hash`), so the results are saved under asv's results folder for `asv publish`
  and `asv compare`; with `--quick`, each benchmark once and nothing saved.
- asv exits 0 when a benchmark fails: a "failed" in its output fails this run.

Every benchmark is lower-is-better, asv's own convention, so `asv compare` and `asv publish`
mark regressions the right way round. The CPU regression gate is benchmarks/gate.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = json.loads((ROOT / "asv.conf.json").read_text())
RESULTS = ROOT / CONF["results_dir"]


def git(*args: str) -> str:
    return subprocess.check_output(["git", *args], cwd=ROOT, text=True).strip()


def asv_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "asv", *args]


def benchmark_path(environ) -> str:
    """The benchmark processes' import path: this tree first, then the caller's PYTHONPATH. asv
    drops PYTHONPATH and honours only ASV_PYTHONPATH, so packages found through PYTHONPATH
    (asv_runner among them, where a GPU machine installs the wheelhouse with pip --target) must
    be passed on here."""
    inherited = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([str(ROOT), *inherited]))


def set_machine(machine: str | None) -> None:
    cmd = asv_cmd("machine", "--yes") + (["--machine", machine] if machine else [])
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)


def run(
    bench: str | None,
    machine: str | None = None,
    quick: bool = False,
    extra: tuple[str, ...] = (),
    env: dict | None = None,
) -> str:
    """`asv run` on this tree's code, labelled HEAD; returns HEAD's commit. Exits on a failed
    benchmark."""
    head = git("rev-parse", "HEAD")
    env = dict(env or os.environ)
    env["ASV_PYTHONPATH"] = benchmark_path(env)
    cmd = asv_cmd("run", "--python=same", "--show-stderr", *extra)
    cmd += ["--machine", machine] if machine else []
    cmd += ["--bench", bench] if bench else []
    cmd += ["--quick", "--dry-run"] if quick else ["--set-commit-hash", head]
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    failed = False
    for line in proc.stdout:  # shown as asv goes: a run takes minutes
        sys.stdout.write(line)
        failed |= "failed" in line.lower()
    if proc.wait() != 0 or failed:
        sys.exit(f"error: asv run at {head[:8]} had failing benchmarks (exit {proc.returncode})")
    return head


def load_results(commit: str, machine: str, results: Path = RESULTS) -> dict[str, dict]:
    """{benchmark name + params, as asv prints them: {"value", "version"}} from asv's JSON for
    one commit and machine (under `results`: asv's results folder, or the committed reports/asv).
    A benchmark that failed or was skipped has no entry."""
    values: dict[str, dict] = {}
    for path in sorted((results / machine).glob(f"{commit[:8]}-*.json")):
        data = json.loads(path.read_text())
        cols = data["result_columns"]
        for name, row in data["results"].items():
            rec = dict(zip(cols, row))
            if rec.get("result") is None:
                continue
            for combo, v in zip(_param_combos(rec.get("params") or []), rec["result"]):
                if isinstance(v, (int, float)) and math.isfinite(v):
                    values[name + combo] = {"value": float(v), "version": rec["version"]}
    return values


def _param_combos(params: list[list[str]]) -> list[str]:
    combos = [""]
    for p in params:
        combos = [f"{c}[{v}]" if not c else f"{c[:-1]}, {v}]" for c in combos for v in p]
    return combos


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="nox -s asv --",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true", help="each benchmark once, nothing saved")
    ap.add_argument("--bench", help="regex of benchmarks to run")
    ap.add_argument("--machine", help="asv machine name (e.g. h200); default: this host's")
    args = ap.parse_args(argv)
    set_machine(args.machine)
    head = run(args.bench, args.machine, args.quick)
    if not args.quick:
        print(f"saved results for {head[:8]} under {RESULTS}; `asv publish` builds the dashboard")
    return 0


if __name__ == "__main__":
    sys.exit(main())
