"""pytest-benchmark: CPU throughput of the sampler, simulator and planner (nox -s bench)."""

from __future__ import annotations

import pytest

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import WAN14B_M_MEM, default_cost_model
from suite.balance.registry import PolicyInputs, make_policy
from suite.balance.sampler import PlanBatchSampler
from suite.balance.simulator import SimConfig, simulate
from suite.data.corpus import sample_corpus


@pytest.fixture(scope="module")
def corpus():
    return sample_corpus(100_000)


COST = default_cost_model().with_budgets(WAN14B_M_MEM, 20_000.0)


def _policy(name: str, corpus):
    return make_policy(name, PolicyInputs.from_cost(COST, bucket_table(corpus.tokens)))


@pytest.mark.parametrize("policy", ["equal-token", "dual", "global"])
def test_sampler_epoch(benchmark, corpus, policy):
    sampler = PlanBatchSampler(corpus.tokens.to_numpy(), _policy(policy, corpus), world_size=16)

    def epoch():
        sampler.set_epoch(1)
        return sum(len(b) for b in sampler)

    seen = benchmark(epoch)
    assert 0 < seen <= len(corpus)


@pytest.mark.parametrize("ranks", [64, 1024])
@pytest.mark.parametrize("policy", ["equal-token", "dual", "global"])
def test_simulate_steps(benchmark, corpus, ranks, policy):
    buckets, pol = bucket_table(corpus.tokens), _policy(policy, corpus)
    cfg = SimConfig(ranks=ranks, steps=1000 if policy != "global" or ranks < 1024 else 200)
    metrics = benchmark(lambda: simulate(buckets, pol, COST, cfg).metrics())
    assert metrics["maxmean_p99"] >= metrics["maxmean"] >= 1.0
