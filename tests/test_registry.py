"""The one policy table (suite.balance.registry): every row from both kinds of inputs, and the
Plan invariants of every policy it builds."""

import math

import numpy as np
import pandas as pd
import pytest

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import default_cost_model
from suite.balance.registry import (
    OWN,
    PACKERS,
    PEERS,
    POLICIES,
    Budgets,
    PolicyInputs,
    default_planner,
    make_policy,
)
from suite.data.corpus import sample_corpus

COST = default_cost_model()
TOK = sample_corpus(3000, seed=2).tokens.to_numpy()
W = 4


def _cost_side(name):
    return make_policy(name, PolicyInputs.from_cost(COST, bucket_table(TOK)))


def _budget_side(name, cost=None):
    b = Budgets(m_mem=float(TOK.max()) * 2, m_comp=float(TOK.max()) * 2 * 900, p=2.0)
    return make_policy(name, PolicyInputs.from_budgets(b, TOK, cost))


def test_one_table_holds_the_own_and_the_peer_policies():
    assert list(POLICIES) == [*OWN, *PEERS] and len(set(POLICIES)) == len(POLICIES)
    assert {"bucket-sync", "opensora-searched", "videosys-profiled", "pack-trim-5pct"} <= set(PEERS)


@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("side", ["cost", "budgets", "budgets+cost"])
def test_every_row_from_both_inputs_plans_every_sample_once(name, side):
    pol = {
        "cost": lambda: _cost_side(name),
        "budgets": lambda: _budget_side(name),
        "budgets+cost": lambda: _budget_side(name, COST),
    }[side]()
    assert pol.name == name
    m_mem = COST.m_mem if side == "cost" else float(TOK.max()) * 2
    plan = pol.epoch_plan(TOK, W, 3, 0)
    plan.check(TOK, max_tokens=m_mem, epoch=True)  # each sample at most once, cap held
    assert plan.steps > 0 and plan.world == W and plan.policy == name
    ran = np.sort(plan.samples)
    assert len(np.unique(ran)) == len(ran) and len(ran) >= 0.5 * len(TOK)
    again = pol.epoch_plan(TOK, W, 3, 0)  # deterministic per seed
    assert np.array_equal(again.samples, plan.samples)
    assert np.array_equal(again.mb_weight, plan.mb_weight)
    other = pol.epoch_plan(TOK, W, 4, 0)
    assert not np.array_equal(other.samples[:100], plan.samples[:100])


def test_unknown_name_lists_the_accepted_ones():
    with pytest.raises(ValueError) as e:
        make_policy("lpt", PolicyInputs.from_cost(COST, TOK))
    msg = str(e.value)
    assert "unknown policy 'lpt'" in msg and all(n in msg for n in POLICIES)


def test_make_policy_names_the_inputs_it_needs():
    with pytest.raises(TypeError, match="PolicyInputs"):
        make_policy("dual", COST)


def test_the_same_budgets_give_the_same_policy_on_both_sides():
    """from_cost(cost) and from_budgets(the cost's budgets, cost) build equal policies."""
    side_b = Budgets(COST.m_mem, COST.m_comp if math.isfinite(COST.m_comp) else math.inf, COST.p)
    for name in POLICIES:
        a = make_policy(name, PolicyInputs.from_cost(COST, TOK))
        b = make_policy(name, PolicyInputs.from_budgets(side_b, TOK, COST))
        assert np.array_equal(
            a.epoch_plan(TOK, W, 0, 0).samples, b.epoch_plan(TOK, W, 0, 0).samples
        )


def test_dual_tunes_m_comp_where_the_budgets_leave_it_unset():
    inputs = PolicyInputs.from_budgets(Budgets(COST.m_mem, math.inf, COST.p), TOK, COST)
    dual = make_policy("dual", inputs)
    assert math.isfinite(dual.m_comp) and dual.m_comp > 0


def test_a_sample_over_the_cap_is_refused_with_the_policy_named():
    small = Budgets(m_mem=float(TOK.max()) - 1)
    for name in ("global", "bucket-sync", "pack-lpt-fitted"):
        with pytest.raises(ValueError, match=f"{name}: a sample of {TOK.max()} tokens exceeds"):
            make_policy(name, PolicyInputs.from_budgets(small, TOK))


def test_bad_budgets_name_the_argument():
    with pytest.raises(ValueError, match="M_mem must be a finite number > 0, got 0"):
        Budgets(m_mem=0)
    with pytest.raises(ValueError, match="M_comp must be > 0"):
        Budgets(m_mem=10, m_comp=-1)


def test_without_a_cost_model_the_planner_is_b_s_to_the_p():
    inputs = PolicyInputs.from_budgets(Budgets(1e5, p=1.7), TOK)
    assert inputs.cost == default_planner(1.7) and inputs.cost.a == 0


def test_the_trainer_accepts_and_lists_every_registry_name():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "suite.train", "--help"], capture_output=True, text=True, check=True
    ).stdout
    choices = out[out.index("--policy {") + len("--policy {") :].split("}")[0].split(",")
    assert choices == list(POLICIES)


# ----------------------------------------------------------------------------- traits, not names


def test_every_row_is_a_frozen_record_with_its_traits():
    import dataclasses

    from suite.balance.registry import PolicySpec, baseline, names

    rows = list(POLICIES.values())
    assert all(isinstance(r, PolicySpec) and r.name == n for n, r in POLICIES.items())
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows[0].own = False
    assert OWN == names(own=True) and PEERS == names(own=False)
    assert baseline() == "equal-token" and names(baseline=True) == ("equal-token",)
    assert set(names(real_runs=True)) <= set(OWN)
    colours = [r.colour for r in rows]
    assert len(set(colours)) == len(colours)
    assert all(c.startswith("#") and len(c) == 7 for c in colours)
    assert all(r.description for r in rows)
    assert all(bool(r.max_ranks) == bool(r.max_ranks_reason) for r in rows)
    assert {"knapformer", "loongforge"} <= set(PEERS)
    assert {"global", "knapformer", "loongforge"} <= set(names(micro_batched=True))
    with pytest.raises(ValueError, match=r"unknown trait\(s\) \['kind'\]; accepted: \["):
        names(kind="own")


# Comparing a value with a registry name (== "global", != "global", in ("equal-token", ...),
# .isin([...])) or keying a table by names (a colour map) outside the registry and the modules
# that define a policy: the code must read the row's traits instead.
_DEFINING = {"suite/balance/registry.py", "suite/balance/peers_packing.py"}


def _literal_names(node) -> set:
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_literal_names(e) for e in node.elts)) if node.elts else set()
    return set()


def _name_uses(source: str) -> list[tuple[int, str, set]]:
    import ast

    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            found = set().union(*(_literal_names(x) for x in [node.left, *node.comparators]))
            hits.append((node.lineno, "comparison", found))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "isin":
            hits.append((node.lineno, "isin", set().union(*map(_literal_names, node.args))))
        elif isinstance(node, ast.Dict):
            keys = [k for k in node.keys if k is not None]
            hits.append((node.lineno, "table keyed by", set().union(*map(_literal_names, keys))))
    return [(line, kind, found & set(POLICIES)) for line, kind, found in hits if found]


def test_the_name_scan_finds_what_it_looks_for():
    src = (
        'a = p == "global"\nb = p != "dual"\nc = p in ("equal-token", "x")\n'
        'd = s.isin(["knapformer"])\ne = {"global": "#fff"}\nf = get("global")\n'
    )
    got = [(line, kind) for line, kind, found in _name_uses(src) if found]
    assert got == [
        (1, "comparison"),
        (2, "comparison"),
        (3, "comparison"),
        (4, "isin"),
        (5, "table keyed by"),
    ]  # a lookup by name (line 6, a claim's subject) is no comparison


def test_suite_compares_no_policy_names():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bad = [
        f"{f.relative_to(root)}:{line}: {kind} {sorted(found)}"
        for f in sorted((root / "suite").rglob("*.py"))
        if str(f.relative_to(root)) not in _DEFINING
        for line, kind, found in _name_uses(f.read_text())
        if found
    ]
    assert bad == [], "read the registry's traits instead:\n" + "\n".join(bad)


def test_a_registered_policy_is_simulated_compared_and_drawn_without_other_edits(
    monkeypatch, capsys
):
    """A fake peer of one row (its traits: a rank cap, a colour) reaches simulate, the balance
    comparison and its rank sweep, the figures and the trace replay's filter."""
    import json

    from suite.balance import registry
    from suite.balance.cli import simulate_main
    from suite.balance.policies import EqualToken
    from suite.balance.registry import PolicySpec
    from suite.balance.validate import _trace
    from suite.experiments.balance.runs import simulate_tables
    from suite.report.plots.balance import _colour, figures

    spec = PolicySpec(
        "halved-tokens",
        lambda x: EqualToken(m_tok=x.m_mem / 2, name="halved-tokens"),
        "equal-token at half the memory cap",
        "#123456",
        micro_batched=True,
        max_ranks=8,
        max_ranks_reason="a test's cap",
    )
    monkeypatch.setitem(registry.POLICIES, spec.name, spec)
    assert simulate_main(["--policy", spec.name, "--gpus", "4", "--steps", "30", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == spec.name

    t = simulate_tables(COST, "analytic", steps=40, scales=(8, 16), compare_steps=(20, 4))
    c = t["balance_compare"].set_index(["policy", "mix", "ranks"])
    row = c.loc[(spec.name, "default", 16)]
    assert row["steps"] == 0 and row["note"] == "not run: a test's cap, run up to 8 ranks"
    sweep = t["balance_sweep_compare"].set_index(["policy", "ranks"])
    assert sweep.loc[(spec.name, 8), "steps"] == 20
    assert np.isfinite(sweep.loc[(spec.name, 8), "gain_pct"])
    assert sweep.loc[("equal-token", 8), "gain_pct"] == 0
    assert sweep.loc[(spec.name, 16), "steps"] == 0
    assert _colour(spec.name, [spec.name]) == "#123456"
    assert "balance_sweep_compare" in [name for name, *_ in figures(t)]
    trace = pd.DataFrame({"policy": [spec.name, "dual"], "run": ["a", "b"], "S": [1, 1]})
    assert list(_trace(trace)["policy"]) == ["dual"]  # micro-batched rows are left out


def test_the_packing_rows_run_varlen_packs_and_the_bucketed_rows_do_not():
    """Trait `packed`: KnapFormer, LoongForge and the verl/slime/Megatron packers run a rank's
    share as varlen packs (fewer micro-batches, mixed lengths, one fixed cost each), the bucket
    policies one-length batches; the suite's global is shown both ways on the same assignment."""
    from suite.balance.registry import names

    packed = set(names(packed=True))
    assert {"knapformer", "loongforge", "global-packed", *PACKERS} == packed
    assert packed <= set(names(micro_batched=True))
    for name in POLICIES:
        plan = _cost_side(name).epoch_plan(TOK, W, 3, 0)
        assert plan.packed == (name in packed), name
    loose, tight = (_cost_side(n).epoch_plan(TOK, W, 3, 0) for n in ("global", "global-packed"))
    assert np.array_equal(loose.samples, tight.samples) and tight.n_micro < loose.n_micro
    assert (tight.lengths(TOK)[1] == 0).any()
