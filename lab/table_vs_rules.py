"""Does the shipped launch table give what a revision's rule-based kernel_config.py gave? Loads
suite/ops/fused_adaln/kernel_config.py of `--base` (before the table: c7c9bfc) and compares the launch fields
tests/test_kernel_config.py snapshots for every x / modulation / output dtype, mode and width.

    python lab/table_vs_rules.py --base c7c9bfc [--step 1]

Exit status 1 when a configuration differs. --step 1 (every D = 1..8192) takes ~10 CPU minutes.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def load_base(rev: str) -> types.ModuleType:
    src = subprocess.run(
        ["git", "show", f"{rev}:suite/ops/fused_adaln/kernel_config.py"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    mod = types.ModuleType(f"kernel_config_{rev}")
    sys.modules[mod.__name__] = mod  # dataclasses resolve annotations through sys.modules
    exec(compile(src, f"{rev}:suite/ops/fused_adaln/kernel_config.py", "exec"), mod.__dict__)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision with the rule-based config")
    ap.add_argument("--step", type=int, default=1, help="compare every step-th D (1: all)")
    a = ap.parse_args(argv)

    from test_kernel_config import launch_fields

    from suite.ops.fused_adaln.kernel_config import KernelConfig

    old = load_base(a.base).KernelConfig
    dtypes, widths = ("float", "bf16", "f16"), range(1, 8193, a.step)
    n, bad = 0, []
    for tx, tm, ty, mode in itertools.product(dtypes, dtypes, dtypes, (0, 1, 2)):
        for D in widths:
            n += 1
            if launch_fields(old(tx, tm, ty, D, mode)) != launch_fields(
                KernelConfig(tx, tm, ty, D, mode)
            ):
                bad.append((tx, tm, ty, D, mode))
        print(f"{tx}/{tm}/{ty} mode {mode}: {n} compared, {len(bad)} differ", end="\r", flush=True)
    print(f"\n{n} compared, {len(bad)} differ", *bad[:10], sep="\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
