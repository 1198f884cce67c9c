"""CPU benchmarks of the load-balancing core: sampler, simulator, cost-model fit, global planner."""

from __future__ import annotations

import numpy as np

from benchmarks.common import default_buckets
from suite.balance.registry import POLICIES

PLANNER_STEPS = 4  # steps a planner benchmark plans: enough to amortise its per-epoch set-up


def _policy(name: str):
    """The benchmarked policies, from the registry with the analytic Wan-14B model (dual's
    M_comp fixed at a crossover of 20,000 tokens, so nothing is tuned inside a timing)."""
    from suite.balance.costmodel import WAN14B_M_MEM, default_cost_model
    from suite.balance.registry import PolicyInputs, make_policy

    cost = default_cost_model().with_budgets(WAN14B_M_MEM, 20_000.0)
    return cost, make_policy(name, PolicyInputs.from_cost(cost, default_buckets()))


class Sampler:
    """One epoch of the plan batch sampler over 100k samples (rank 0 of 16)."""

    version = 2
    params = (["equal-token", "dual", "global"],)
    param_names = ["policy"]

    def setup(self, policy):
        from suite.balance.sampler import PlanBatchSampler
        from suite.data.corpus import sample_corpus

        tokens = sample_corpus(100_000).tokens.to_numpy()
        self.sampler = PlanBatchSampler(tokens, _policy(policy)[1], rank=0, world_size=16)

    def time_epoch(self, policy):
        self.sampler.set_epoch(1)
        for _ in self.sampler:
            pass


class Simulator:
    """Simulated cluster: plan_steps + simulate_plan, 1000 steps (200 for the global policy at
    1024 ranks, whose plan costs ~10-20 ms a step on one core)."""

    version = 2
    params = ([64, 1024], ["equal-token", "dual", "global"])
    param_names = ["ranks", "policy"]
    timeout = 120

    def setup(self, ranks, policy):
        self.cost, self.policy = _policy(policy)
        self.buckets = default_buckets()

    def time_simulate(self, ranks, policy):
        from suite.balance.simulator import SimConfig, simulate

        steps = 200 if policy == "global" and ranks >= 1024 else 1000  # as the balance experiment
        simulate(
            self.buckets, self.policy, self.cost, SimConfig(ranks=ranks, steps=steps)
        ).metrics()

    def track_planner_ms(self, ranks, policy):
        from suite.balance.simulator import SimConfig, simulate

        cfg = SimConfig(ranks=ranks, steps=200)
        return simulate(self.buckets, self.policy, self.cost, cfg).metrics()["planner_ms"]

    track_planner_ms.unit = "ms"


class Planner:
    """Planner time per step (ms, this machine, one core) of every registry policy at 16, 256 and
    1024 ranks: one epoch planned on a corpus of the default mix sized for PLANNER_STEPS steps, as
    `simulate` plans it (the cost model's budgets, so ~M_mem tokens a rank a step)."""

    version = 1
    params = ([16, 256, 1024], list(POLICIES))
    param_names = ["ranks", "policy"]
    timeout = 300

    def setup(self, ranks, policy):
        from suite.balance.simulator import draw_corpus, samples_per_rank_step

        _, self.policy = _policy(policy)
        buckets = default_buckets()
        n = int(1.1 * PLANNER_STEPS * ranks * samples_per_rank_step(self.policy, buckets)) + 64
        self.tokens = draw_corpus(buckets, n, seed=0)

    def track_planner_ms(self, ranks, policy):
        import time

        t0 = time.perf_counter()
        plan = self.policy.epoch_plan(self.tokens, ranks, 0, 0)
        return 1e3 * (time.perf_counter() - t0) / max(1, plan.steps)

    track_planner_ms.unit = "ms"


class CostFit:
    """Non-linear fit of a + b*B*S^p on a 200-point noisy sweep."""

    version = 1

    def setup(self):
        rng = np.random.default_rng(0)
        self.S = rng.choice([1560, 4096, 8190, 16380, 32760, 75600], 200).astype(float)
        self.B = np.maximum(1, (80_000 // self.S)).astype(float)
        self.t = (0.01 + 3e-10 * self.B * self.S**1.8) * rng.lognormal(0, 0.03, 200)

    def time_fit(self):
        from suite.balance.costmodel import fit_cost

        fit_cost(self.B, self.S, self.t)

    def track_fitted_p(self):
        from suite.balance.costmodel import fit_cost

        return fit_cost(self.B, self.S, self.t).p

    track_fitted_p.unit = "exponent"


class GlobalPlanner:
    """One step of the coordinated planner at 1024 ranks (target: <= 5 ms)."""

    version = 1
    timeout = 120

    def track_planner_ms_1024(self):
        from suite.balance.global_policy import time_planner

        return time_planner(ranks=1024, repeats=20)

    track_planner_ms_1024.unit = "ms"
