"""The machine's speed, for the CPU gate's normalisation (benchmarks/gate.py).

A fixed workload that uses no project code: its time moves with the machine (a slower CI runner,
a busier core), never with a commit, so a benchmark's time over this one's, in the same run,
compares across machines of the same kind. It mixes what the CPU benchmarks spend their time on:
interpreted Python, many small NumPy calls, and large vectorised array passes.

Never edit `fixed_workload`: the committed baseline's ratios are to this exact code.
"""

from __future__ import annotations

import numpy as np


def fixed_workload() -> float:
    rng = np.random.default_rng(0)
    x = rng.random(200_000)
    acc = float(np.sort(x)[1000] + np.cumsum(np.argsort(x))[-1])  # large array passes
    for _ in range(2_000):  # per-call overhead, as in the planners' step loops
        acc += float(np.maximum(x[:256], 0.5).sum())
    table = {}
    for i in range(100_000):  # the interpreter: loops, ints, a dict
        table[i % 977] = table.get(i % 977, 0) + i
    return acc + sum(table.values())


class MachineSpeed:
    version = 1
    repeat = (5, 10, 4.0)

    def time_fixed_workload(self):
        fixed_workload()
