"""CPU benchmarks of the load-balancing core: sampler, simulator, cost-model fit, global planner."""

from __future__ import annotations

import numpy as np

from benchmarks.common import default_buckets


class Sampler:
    """One epoch of the distributed bucket sampler over 100k samples (rank 0 of 16)."""

    version = 1
    params = (["equal-token", "dual"],)
    param_names = ["policy"]

    def setup(self, policy):
        from suite.balance.costmodel import WAN14B_M_MEM
        from suite.balance.policies import make_policy
        from suite.balance.sampler import BucketBatchSampler
        from suite.data.corpus import sample_corpus

        tokens = sample_corpus(100_000).tokens.to_numpy()
        pol = make_policy(policy, m_mem=WAN14B_M_MEM, m_comp=WAN14B_M_MEM * 20_000.0, p=2.0)
        self.sampler = BucketBatchSampler(tokens, pol, rank=0, world_size=16, seed=0)

    def time_epoch(self, policy):
        self.sampler.set_epoch(1)
        for _ in self.sampler:
            pass


class Simulator:
    """Simulated cluster, 1000 steps (issue target: 1024 ranks in under 5 s)."""

    version = 1
    params = ([64, 1024], ["equal-token", "dual", "global"])
    param_names = ["ranks", "policy"]
    timeout = 120

    def setup(self, ranks, policy):
        from suite.balance.costmodel import WAN14B_M_MEM, default_cost_model
        from suite.balance.global_policy import GlobalPolicy
        from suite.balance.policies import make_policy

        self.cost = default_cost_model()
        self.buckets = default_buckets()
        if policy == "global":
            self.policy = GlobalPolicy(m_mem=WAN14B_M_MEM)
        else:
            self.policy = make_policy(
                policy,
                m_mem=WAN14B_M_MEM,
                m_comp=WAN14B_M_MEM * 20_000.0 ** (self.cost.p - 1),
                p=self.cost.p,
            )

    def time_simulate(self, ranks, policy):
        from suite.balance.simulator import SimConfig, simulate

        simulate(self.buckets, self.policy, self.cost, SimConfig(ranks=ranks, steps=1000)).metrics()


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
    """One step of the coordinated planner at 1024 ranks (issue 7 target: <= 5 ms)."""

    version = 1
    timeout = 120

    def track_planner_ms_1024(self):
        from suite.balance.global_policy import time_planner

        return time_planner(ranks=1024, repeats=20)

    track_planner_ms_1024.unit = "ms"
