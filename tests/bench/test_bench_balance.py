"""pytest-benchmark: CPU throughput of the sampler, simulator and planner (nox -s bench)."""

from __future__ import annotations

import pytest

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import WAN14B_M_MEM, default_cost_model
from suite.balance.global_policy import GlobalPolicy
from suite.balance.policies import make_policy
from suite.balance.sampler import BucketBatchSampler
from suite.balance.simulator import SimConfig, simulate
from suite.data.corpus import sample_corpus


@pytest.fixture(scope="module")
def corpus():
    return sample_corpus(100_000)


def _policy(name: str):
    cost = default_cost_model()
    if name == "global":
        return GlobalPolicy(m_mem=WAN14B_M_MEM)
    return make_policy(
        name, m_mem=WAN14B_M_MEM, m_comp=WAN14B_M_MEM * 20_000.0 ** (cost.p - 1), p=cost.p
    )


@pytest.mark.parametrize("policy", ["equal-token", "dual"])
def test_sampler_epoch(benchmark, corpus, policy):
    sampler = BucketBatchSampler(corpus.tokens.to_numpy(), _policy(policy), world_size=16)

    def epoch():
        sampler.set_epoch(1)
        return sum(len(b) for b in sampler)

    seen = benchmark(epoch)
    assert 0 < seen <= len(corpus)


@pytest.mark.parametrize("ranks", [64, 1024])
@pytest.mark.parametrize("policy", ["equal-token", "dual"])
def test_simulate_1000_steps(benchmark, corpus, ranks, policy):
    buckets, cost = bucket_table(corpus.tokens), default_cost_model()
    cfg = SimConfig(ranks=ranks, steps=1000)
    metrics = benchmark(lambda: simulate(buckets, _policy(policy), cost, cfg).metrics())
    assert metrics["maxmean"] >= 1.0
