"""CPU benchmarks of the load-balancing core: every registry policy's planner, and the simulator.

Each is a `time_` benchmark (seconds, lower is better) of a fixed, seeded input; the CPU gate
(benchmarks/gate.py) judges them against its committed baseline.
"""

from __future__ import annotations

from benchmarks.common import default_buckets
from suite.balance.registry import POLICIES

PLANNER_RANKS = 1024  # the scale the paper's planner must keep up with
PLANNER_STEPS = 4  # steps a planner benchmark plans: enough to amortise its per-epoch set-up
SIMULATOR_STEPS = 200


def _policy(name: str):
    """The benchmarked policy, from the registry with the analytic Wan-14B model (dual's M_comp
    fixed at a crossover of 20,000 tokens, so nothing is tuned inside a timing)."""
    from suite.balance.costmodel import WAN14B_M_MEM, default_cost_model
    from suite.balance.registry import PolicyInputs, make_policy

    cost = default_cost_model().with_budgets(WAN14B_M_MEM, 20_000.0)
    return cost, make_policy(name, PolicyInputs.from_cost(cost, default_buckets()))


class Planner:
    """One epoch of PLANNER_STEPS steps planned at PLANNER_RANKS ranks, as `simulate` plans it:
    a corpus of the default mix sized for those steps (the cost model's budgets, so ~M_mem
    tokens a rank a step). Per-step time is this over PLANNER_STEPS."""

    version = 2  # 1 tracked ms per step at 16, 256 and 1024 ranks from one call
    params = (list(POLICIES),)
    param_names = ["policy"]
    repeat = (3, 10, 2.0)
    timeout = 300

    def setup(self, policy):
        from suite.balance.simulator import draw_corpus, samples_per_rank_step

        _, self.policy = _policy(policy)
        buckets = default_buckets()
        per_rank = samples_per_rank_step(self.policy, buckets)
        n = int(1.1 * PLANNER_STEPS * PLANNER_RANKS * per_rank) + 64
        self.tokens = draw_corpus(buckets, n, seed=0)

    def time_epoch_plan(self, policy):
        self.policy.epoch_plan(self.tokens, PLANNER_RANKS, 0, 0)


class Simulator:
    """The simulated cluster: `simulate` (plan the steps, then cost them) for SIMULATOR_STEPS
    steps, with the metrics the balance experiment reads."""

    version = 3  # 2 ran 1000 steps (200 for the global policy at 1024 ranks)
    params = ([64, 1024], ["equal-token", "dual", "global"])
    param_names = ["ranks", "policy"]
    repeat = (3, 10, 4.0)
    timeout = 300

    def setup(self, ranks, policy):
        from suite.balance.simulator import SimConfig

        self.cost, self.policy = _policy(policy)
        self.buckets = default_buckets()
        self.cfg = SimConfig(ranks=ranks, steps=SIMULATOR_STEPS)

    def time_simulate(self, ranks, policy):
        from suite.balance.simulator import simulate

        simulate(self.buckets, self.policy, self.cost, self.cfg).metrics()
