"""The policy registry: every batching policy of the suite, by name, in one table.

One row per policy (PolicySpec): its name, its constructor(PolicyInputs) and its traits (own or a
peer's, needs a cost model, micro-batched, run as varlen packs, the baseline, trained on real
ranks, a rank cap, a slow planner, its colour, a one-line description). The code reads traits,
never names: a new policy is its module and one row of _ROWS. A PolicyInputs carries the same three things on every path:
    budgets   Budgets: M_mem (tokens per model batch; equal-token's M_tok), M_comp (B*S^p; inf:
              dual tunes s_cross on the buckets), p
    buckets   the data's bucket table (S, count, share): the lengths a policy tunes on
    cost      the planner's / pricer's model (cost.predict(B, S), fixed_s; a CostModel)
built either from a fitted CostModel and the data (`PolicyInputs.from_cost`: suite simulate,
forecast, the balance experiment) or from explicit budgets (`PolicyInputs.from_budgets`: the
trainer, its emulation and real-rank runs; without a cost model the planner is b * S^p, a = 0).
A constructor raises ValueError where its policy does not apply (e.g. a sample longer than the
memory cap); callers skip it with the reason.

Rows: the suite's own (equal-token, dual, global; OWN) and the peers public training stacks
ship (suite.balance.peers, peers_packing, peers_dit; PEERS): Open-Sora's searched per-bucket
batches (dealt round-robin, and bucket-synchronous), VideoSys's profiled-rescale baseline and
DCP's per-bucket gradient accumulation, cost-aware packing as verl / slime / Megatron-LM do it,
KnapFormer's compute bags and LoongForge's DP balance. Each peer is checked against an
independent implementation of its project's behaviour (tests/oracles, tests/test_peer_oracles.py);
a peer's description names every deviation from that behaviour that remains.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.balance.buckets import bucket_table


@dataclass(frozen=True)
class Budgets:
    """A policy's budgets: m_mem tokens per model batch (also equal-token's M_tok), m_comp the
    B * S^p budget (inf: not set, dual tunes it), p the compute exponent."""

    m_mem: float
    m_comp: float = math.inf
    p: float = 2.0
    source: str = ""

    def __post_init__(self) -> None:
        if not (self.m_mem > 0 and math.isfinite(self.m_mem)):
            raise ValueError(f"M_mem must be a finite number > 0, got {self.m_mem}")
        if not self.m_comp > 0:
            raise ValueError(f"M_comp must be > 0 (inf: not set), got {self.m_comp}")


def default_planner(p: float):
    """The planner without a fitted cost model: b * S^p with a = 0, b = 1."""
    from suite.balance.costmodel import CostModel

    return CostModel(a=0.0, b=1.0, p=float(p), source="b*S^p, a=0 (no cost model)")


def _as_buckets(data) -> pd.DataFrame:
    """A bucket table (S, share, ...) as given, or built from per-sample token counts."""
    if isinstance(data, pd.DataFrame):
        if not {"S", "share"} <= set(data.columns):
            raise ValueError(f"a bucket table needs columns S and share, got {list(data.columns)}")
        return data
    return bucket_table(np.asarray(data, np.int64))


@dataclass(frozen=True)
class PolicyInputs:
    """What every policy constructor is given (module doc)."""

    budgets: Budgets
    buckets: pd.DataFrame
    cost: object

    @classmethod
    def from_cost(cls, cost, data) -> PolicyInputs:
        """From a fitted CostModel (its M_mem, M_comp where finite, p) and the data (per-sample
        token counts or a bucket table)."""
        m_comp = cost.m_comp if math.isfinite(cost.m_comp) else math.inf
        b = Budgets(float(cost.m_mem), m_comp, float(cost.p), cost.source)
        return cls(b, _as_buckets(data), cost)

    @classmethod
    def from_budgets(cls, budgets: Budgets, data, cost=None) -> PolicyInputs:
        """From explicit budgets and the data; `cost` the planner (None: b * S^p, a = 0)."""
        return cls(budgets, _as_buckets(data), cost or default_planner(budgets.p))

    @property
    def m_mem(self) -> float:
        return self.budgets.m_mem

    @property
    def s_max(self) -> int:
        return int(self.buckets["S"].max())


def _fits(x: PolicyInputs, name: str) -> None:
    if x.s_max > x.m_mem:
        raise ValueError(f"{name}: a sample of {x.s_max} tokens exceeds M_mem = {x.m_mem:.0f}")


def _equal_token(x: PolicyInputs):
    from suite.balance.policies import EqualToken

    return EqualToken(m_tok=x.m_mem)  # the same memory cap as dual: M_tok = M_mem


def _dual(x: PolicyInputs):
    """B*S <= M_mem and B*S^p <= M_comp; without a finite M_comp, s_cross is tuned on the
    buckets by simulated throughput with the cost's step model (its quadratic form where it has
    one), keeping p."""
    from suite.balance.policies import DualConstraint, m_comp_for_crossover
    from suite.balance.simulator import tune_s_cross

    b = x.budgets
    m_comp = b.m_comp
    if not math.isfinite(m_comp):
        step = x.cost.step_model() if hasattr(x.cost, "step_model") else x.cost
        s_cross, _ = tune_s_cross(x.buckets, step, b.m_mem, p=b.p)
        m_comp = m_comp_for_crossover(b.m_mem, b.p, s_cross)
    return DualConstraint(m_mem=b.m_mem, m_comp=m_comp, p=b.p)


def _global(x: PolicyInputs):
    from suite.balance.global_policy import GlobalPolicy

    _fits(x, "global")
    return GlobalPolicy(m_mem=x.m_mem, planner=x.cost)


def _opensora(x: PolicyInputs):
    from suite.balance.peers import SearchedBucketBatches

    _fits(x, "opensora-searched")
    return SearchedBucketBatches(x.cost, x.m_mem, x.s_max)


def _bucket_sync(x: PolicyInputs):
    from suite.balance.peers import BucketSynchronous

    _fits(x, "bucket-sync")
    return BucketSynchronous(x.cost, x.m_mem, x.s_max)


def _videosys(x: PolicyInputs):
    from suite.balance.peers import ProfiledRescale

    _fits(x, "videosys-profiled")
    return ProfiledRescale.profile(x.cost, x.buckets, x.m_mem)


def _videosys_dcp(x: PolicyInputs):
    from suite.balance.peers import DCPGradAccumulation

    _fits(x, "videosys-dcp")
    return DCPGradAccumulation.profile(x.cost, x.m_mem)


def _packing(name: str) -> Callable[[PolicyInputs], object]:
    def make(x: PolicyInputs):
        from suite.balance.peers_packing import PACKING_VARIANTS, CostAwarePacking

        _fits(x, name)
        return CostAwarePacking.make(x.cost, x.m_mem, name=name, **PACKING_VARIANTS[name])

    return make


def _knapformer(x: PolicyInputs):
    from suite.balance.peers_dit import KnapFormerBags

    _fits(x, "knapformer")
    return KnapFormerBags.fit(x.cost, x.buckets, x.m_mem)


def _loongforge(x: PolicyInputs):
    from suite.balance.peers_dit import FittedRankCost

    _fits(x, "loongforge")
    return FittedRankCost.fit(x.cost, x.buckets, x.m_mem)


@dataclass(frozen=True)
class PolicySpec:
    """One registry row: how to build the policy and what the code needs to know about it.

    own               the suite's own policy (claims are judged on these) or a peer's
    needs_cost_model  plans with the run's fitted cost model, not the budgets alone (the trainer
                      hands it the run's cost model; without one, b * S^p with a = 0)
    micro_batched     a rank may run several micro-batches of different lengths in a step (its
                      rank rows in a trace carry no single length)
    packed            its plans run each rank's share of a step as varlen packs under M_mem
                      (plan.Packed: one fixed cost a pack, not one per length), as the packing
                      stacks run theirs (make_policy wraps the row's policy)
    baseline          the policy gains are measured against (one row)
    real_runs         trained on real data-parallel ranks by the training experiment
    tunes_s_cross     its M_comp comes from a crossover length tuned on the buckets (the dual
                      constraint): experiments tune it on the run's step model before building it
    max_ranks         the most ranks it is simulated at (None: any), with the reason
    slow_planner      left out of the cpu profile's comparison (its planner is too slow for CI)
    colour            its colour in every figure
    """

    name: str
    build: Callable[[PolicyInputs], object]
    description: str
    colour: str
    own: bool = False
    needs_cost_model: bool = False
    micro_batched: bool = False
    packed: bool = False
    baseline: bool = False
    real_runs: bool = False
    tunes_s_cross: bool = False
    max_ranks: int | None = None
    max_ranks_reason: str = ""
    slow_planner: bool = False


_KK = "verl's karmarkar_karp (its loads; equal sums may hold other items)"
_PACKING = {  # name -> (description, colour)
    "pack-kk-flops": (f"{_KK} on slime's c*L + L^2 FLOPs", "#884ea0"),
    "pack-kkeq-flops": (
        f"{_KK}, equal_size=True, on c*L + L^2; n % ranks != 0 padded with zero-cost items "
        "where verl asserts",
        "#5b2c6f",
    ),
    "pack-lpt-flops": (
        "LPT (each sample, largest first, to the least-loaded rank) on c*L + L^2",
        "#af7ac5",
    ),
    "pack-kk-fitted": (f"{_KK} on the fitted b*S^p + a/M_mem", "#117864"),
    "pack-lpt-fitted": (
        "LPT (each sample, largest first, to the least-loaded rank) on the fitted b*S^p + a/M_mem",
        "#48c9b0",
    ),
    "pack-trim-5pct": (
        "Megatron-LM's hybrid-CP scheduler without CP: LPT groups on L^2, trim_overload to 5% "
        "into the step's next group; no barrier between groups, and a group's idle GPUs stay "
        "idle (Megatron splits a sample across them by CP)",
        "#1f618d",
    ),
}

# The table. A new policy: its module and one row here.
_ROWS = (
    PolicySpec("equal-token", _equal_token, "B = floor(M_tok / S) per bucket (the baseline)",
               "#c0392b", own=True, baseline=True, real_runs=True),
    PolicySpec("dual", _dual, "AdaptiveLoad: B*S <= M_mem and B*S^p <= M_comp per bucket",
               "#2e86c1", own=True, real_runs=True, tunes_s_cross=True),
    PolicySpec("global", _global, "per-step global LPT on the cost model, one-length micro-batches under M_mem",
               "#1b7f3b", own=True, needs_cost_model=True, micro_batched=True, real_runs=True),
    PolicySpec("global-packed", _global, "global, each rank's share of a step run as varlen "
               "packs under M_mem", "#52be80", own=True, needs_cost_model=True,
               micro_batched=True, packed=True),
    PolicySpec("opensora-searched", _opensora, "Open-Sora's search_bs.py B per bucket, dealt "
               "round-robin; searched in [1, B that fits] (not the config's bounds), and each "
               "bucket's last partial batch runs where drop_last=True drops it", "#d68910",
               needs_cost_model=True),
    PolicySpec("bucket-sync", _bucket_sync, "Open-Sora's searched B, every rank one bucket a "
               "step (a reading of Open-Sora, not its sampler)", "#b9770e",
               needs_cost_model=True),
    PolicySpec("videosys-profiled", _videosys, "VideoSys's bucket-parallel baseline (not DCP): "
               "profiled max power-of-two batch, rescaled to the median time", "#566573",
               needs_cost_model=True),
    PolicySpec("videosys-dcp", _videosys_dcp, "VideoSys DCP's data-parallel balance: a random "
               "bucket per rank, its profiled batch gradient-accumulated per rank to even "
               "the step times; numpy's generator where VideoSys draws with torch's",
               "#2c3e50", needs_cost_model=True),
    *(
        PolicySpec(n, _packing(n), d, c, needs_cost_model=True, micro_batched=True, packed=True)
        for n, (d, c) in _PACKING.items()
    ),
    PolicySpec("knapformer", _knapformer, "KnapFormer (Adobe Research): plan_routing on "
               "24*S*d^2 + gamma*4*S^2*d, one GPU per bag; gamma by its lstsq sweep, timed by "
               "the cost model's one-sample step (float64, clipped at 0)", "#f1c40f",
               needs_cost_model=True, micro_batched=True, packed=True),
    PolicySpec("loongforge", _loongforge, "LoongForge's DP balance: x*L^2 + y*L + z per "
               "sample, skip under 20% imbalance, LPT under a 1.2x token cap, 20 move/swap "
               "steps; x, y, z by its softmax-max warm-up fit, on 8 ranks before the world is "
               "known", "#e91e63", needs_cost_model=True, micro_batched=True, packed=True),
)  # fmt: skip

# name -> PolicySpec; spec.build(PolicyInputs) -> a policy with .name and .epoch_plan(tokens,
# world, seed, epoch) (suite.balance.plan)
POLICIES: dict[str, PolicySpec] = {r.name: r for r in _ROWS}


TRAITS = tuple(PolicySpec.__dataclass_fields__)


def _known(keys) -> None:
    unknown = sorted(set(keys) - set(TRAITS))
    if unknown:
        raise ValueError(f"unknown trait(s) {unknown}; accepted: {list(TRAITS)}")


def names(**traits) -> tuple[str, ...]:
    """The registry's names (in table order) whose traits equal `traits`, e.g. names(own=True)."""
    _known(traits)
    return tuple(
        n for n, r in POLICIES.items() if all(getattr(r, k) == v for k, v in traits.items())
    )


def trait(name: str, key: str, default=None):
    """A policy's trait; `default` for a name the registry does not hold (e.g. an older run's)."""
    _known([key])
    row = POLICIES.get(name)
    return default if row is None else getattr(row, key)


def baseline() -> str:
    """The one policy gains are measured against."""
    (name,) = names(baseline=True)
    return name


OWN = names(own=True)
PEERS = names(own=False)
PACKERS = tuple(_PACKING)


def make_policy(name: str, inputs: PolicyInputs):
    """The policy `name` of POLICIES; ValueError names the accepted ones."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(POLICIES)}")
    if not isinstance(inputs, PolicyInputs):
        raise TypeError(
            f"make_policy needs a PolicyInputs (PolicyInputs.from_cost / from_budgets), got "
            f"{type(inputs).__name__}"
        )
    spec = POLICIES[name]
    policy = spec.build(inputs)
    if spec.packed:
        from suite.balance.plan import Packed

        return Packed(policy, inputs.m_mem, name)
    return policy


def budgets(policy) -> dict:
    """The budgets a policy carries (for reports): m_mem / m_tok, m_comp, p, where it has them."""
    return {k: getattr(policy, k) for k in ("m_tok", "m_mem", "m_comp", "p") if hasattr(policy, k)}
