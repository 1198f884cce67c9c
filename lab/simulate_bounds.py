"""Peak memory and time per planned sample of `simulate`, the constants behind its work limit
(suite.balance.limits).

    PYTHONPATH=. python lab/simulate_bounds.py [--ranks 16,256] [--steps 1000]

For each policy, data (the default mix and a manifest of 480x832 images, the most samples per
rank-step) and rank count, one child process simulates and reports the planned samples
(steps x ranks x samples_per_rank_step), its peak RSS above a child that only loads the data,
and its wall time. Prints bytes and microseconds per planned sample, each row and the maximum.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CHILD = """
import json, resource, sys, time
import numpy as np
from suite.balance.buckets import bucket_table
from suite.balance.costmodel import default_cost_model
from suite.balance.registry import PolicyInputs, make_policy
from suite.balance.simulator import SimConfig, samples_per_rank_step, simulate
from suite.data.corpus import sample_corpus
policy, data, ranks, steps, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
cost = default_cost_model()
tokens = sample_corpus(100_000, "default").tokens if data == "mix" else np.full(1000, 1560)
buckets = bucket_table(tokens)
pol = make_policy(policy, PolicyInputs.from_cost(cost, buckets))
n = steps * ranks * samples_per_rank_step(pol, buckets)
t0 = time.perf_counter()
if run:
    simulate(buckets, pol, cost.step_model(), SimConfig(ranks=ranks, steps=steps)).metrics()
took = time.perf_counter() - t0
print(json.dumps({"n": n, "s": took, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def child(*args) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", default="16,256")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--policies", default="dual,equal-token,bucket-sync,pack-kk-flops,global")
    a = ap.parse_args(argv)
    worst_b = worst_us = 0.0
    for pol in a.policies.split(","):
        for data in ("mix", "images"):
            for r in map(int, a.ranks.split(",")):
                base = child(pol, data, r, a.steps, 0)
                run = child(pol, data, r, a.steps, 1)
                b, us = (run["rss"] - base["rss"]) / run["n"], 1e6 * run["s"] / run["n"]
                worst_b, worst_us = max(worst_b, b), max(worst_us, us)
                print(f"{pol:<14} {data:<6} {r:>5} ranks: {run['n']:.3g} samples, "
                      f"{b:6.1f} B, {us:6.2f} us per sample", flush=True)  # fmt: skip
    print(f"max: {worst_b:.1f} bytes, {worst_us:.2f} us per planned sample")
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(
        f"({time.perf_counter() - t0:.0f} s, peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} KB)"
    )
    raise SystemExit(rc)
