"""suite.train.step on diffusers' tiny Wan transformer (CPU, fp32): the gradient of a two-rank plan
with the real all_reduce equals the emulator's accumulated gradient and a one-batch reference;
every policy runs through train_step; noise is keyed by (seed, sample, epoch); the package has
one backward call site, forward_backward."""

import numpy as np
import pytest
import torch
import torch.distributed as dist

from suite.balance.plan import Plan
from suite.balance.registry import POLICIES, PolicyInputs, make_policy
from suite.model.wan import build_wan
from suite.train.data import load_corpus
from suite.train.distributed import all_reduce_sum
from suite.train.plan import budgets_for, training_plan
from suite.train.step import epochs_before, forward_backward, new_model, train_step


@pytest.fixture(scope="module")
def corpus():
    torch.set_num_threads(1)
    return load_corpus(300, "tiny", 0)


@pytest.fixture(scope="module")
def group():
    """A gloo process group of world 1: all_reduce_sum's real collective (SUM over one rank)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model():
    return build_wan("tiny", dtype="fp32", seed=0)


def _grads(plan, corpus, ranks, reduce=None, model=None, step=0):
    """The gradient train_step hands to the reduce (before the optimizer), flattened, and the
    record; the optimizer is SGD with lr 0 (the weights stay)."""
    model = model or _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    got = {}

    def capture(params):
        if reduce is not None:
            reduce(params)
        got["g"] = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
        )

    rec = train_step(model, opt, plan, step, corpus, ranks=ranks, seed=0, reduce=capture)
    return got["g"], rec


def _same_length(corpus, n):
    tokens = corpus.tokens.to_numpy()
    S = np.bincount(tokens).argmax()
    return [int(i) for i in np.flatnonzero(tokens == S)[:n]]


def test_two_ranks_reduced_equal_the_emulator_and_one_batch(corpus, group):
    """Two ranks of two samples each (weight 1/2) with all_reduce SUM = the emulator's two virtual
    ranks = one batch of the four samples (weight 1): the mean over 4 is the mean of two means."""
    i = _same_length(corpus, 4)
    two = Plan.from_micro_batches(2, [[[i[:2]], [i[2:]]]], [[[0.5], [0.5]]], "equal-token")
    one = Plan.from_micro_batches(1, [[[i]]], [[[1.0]]], "equal-token")
    g0, _ = _grads(two, corpus, [0], all_reduce_sum)
    g1, _ = _grads(two, corpus, [1], all_reduce_sum)
    emu, rec = _grads(two, corpus, [0, 1])
    ref, _ = _grads(one, corpus, [0])
    torch.testing.assert_close(g0 + g1, emu, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(emu, ref, rtol=1e-4, atol=1e-6)
    assert [r["rank"] for r in rec.ranks] == [0, 1] and all(r["B"] == 2 for r in rec.ranks)
    assert rec.collective_s >= 0 and rec.optimizer_s > 0


def test_global_plan_uneven_ranks_sum_to_the_step_gradient(corpus, group):
    """The global policy's step with uneven micro-batch counts (a rank may have none): the ranks'
    summed gradients are the token-weighted gradient of one batch per length in one process."""
    tokens = corpus.tokens.to_numpy()
    budgets = budgets_for(corpus, m_mem=640.0, p=2.0)
    pol = make_policy("global", PolicyInputs.from_budgets(budgets, tokens))
    plan = training_plan(corpus, pol, 2, 6, seed=0)
    counts = np.zeros((plan.steps, 2), int)
    np.add.at(counts, (plan.mb_step, plan.mb_rank), 1)
    step = int(np.flatnonzero(counts[:, 0] != counts[:, 1])[0])
    # the same step as a one-process plan: one micro-batch per length, weight tokens / step tokens
    idx = plan.step_samples(step)
    assert epochs_before(plan, step, len(corpus))[idx].max() == 0  # epoch 0 in both plans
    total = int(tokens[idx].sum())
    groups = [[int(j) for j in idx if tokens[j] == S] for S in sorted(set(tokens[idx]))]
    ref_plan = Plan.from_micro_batches(
        1, [[groups]], [[[len(g) * int(tokens[g[0]]) / total for g in groups]]], "global"
    )
    g = sum(_grads(plan, corpus, [r], all_reduce_sum, step=step)[0] for r in (0, 1))
    emu, rec = _grads(plan, corpus, [0, 1], step=step)
    ref, _ = _grads(ref_plan, corpus, [0])
    torch.testing.assert_close(g, emu, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(emu, ref, rtol=1e-4, atol=1e-6)
    assert sum(r["tokens"] for r in rec.ranks) == total == rec.ranks[0]["global_tokens"]
    assert len(rec.micro) == int(counts[step].sum())


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_runs_through_the_one_step(corpus, name):
    from suite.train.emulate import emulate

    budgets = budgets_for(corpus, p=2.0)
    pol = make_policy(name, PolicyInputs.from_budgets(budgets, corpus.tokens))
    plan = training_plan(corpus, pol, 2, 2, seed=0)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    micro: list = []
    rows = emulate(model, opt, corpus, plan, seed=0, collective_s=0.01, micro=micro)
    tokens = corpus.tokens.to_numpy()
    assert len(rows) == 2 * 2 and (rows.policy == name).all() and rows.emulated.all()
    for step, d in rows.groupby("step"):
        assert d.tokens.sum() == tokens[plan.step_samples(step)].sum()
    assert np.isfinite(rows.loss).all() and (rows.step_s >= rows.compute_s + 0.01).all()
    groups = sum(  # a varlen pack runs as its one-length groups
        len(set(tokens[plan.samples[plan.mb_start[i] : plan.mb_start[i + 1]]]))
        for i in range(plan.n_micro)
    )
    assert plan.packed == POLICIES[name].packed
    assert len(micro) == groups and {"B", "S", "compute_s", "loss"} <= set(micro[0])


def test_noise_is_keyed_by_sample_and_epoch_not_step_or_rank(corpus):
    """Common random numbers: a sample's loss (unchanged weights) is the same wherever a plan puts
    it in its first epoch; trained again (epoch 1) it gets new noise."""
    i = _same_length(corpus, 3)
    model = _model()
    a = Plan.from_micro_batches(2, [[[[i[0]]], [[i[1]]]]], [[[0.5], [0.5]]])
    b = Plan.from_micro_batches(2, [[[[i[2]]], [[i[1]]]], [[[i[0]]], [[i[2]]]]], [[[0.5]] * 2] * 2)
    loss = {}
    for name, plan in (("a", a), ("b", b)):
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        for step in range(plan.steps):
            rec = train_step(model, opt, plan, step, corpus, ranks=[0, 1], seed=0)
            for m in rec.micro:
                s = int(plan.micro_batches(step, m["rank"])[m["micro"]].indices[0])
                loss.setdefault((name, s), []).append(m["loss"])
    assert loss[("a", i[0])] == loss[("b", i[0])]  # step 0 rank 0 vs step 1 rank 0
    assert loss[("a", i[1])] == loss[("b", i[1])]
    assert loss[("b", i[2])][0] != loss[("b", i[2])][1]  # epoch 0 vs epoch 1


def test_c14_probe_runs_one_clip_through_the_step():
    """C14's probe: one 480p clip of S tokens as a one-sample corpus, one step (peak 0 on CPU)."""
    from suite.experiments.training.probes import clip_corpus, probe_peak

    c = clip_corpus(3120)
    assert c.iloc[0][["frames", "height", "width", "tokens"]].tolist() == [5, 480, 832, 3120]
    with pytest.raises(ValueError, match="multiple of 1560"):
        clip_corpus(1000)
    model = _model()
    assert probe_peak(model, torch.optim.SGD(model.parameters(), lr=0.0), 1560) == 0


def test_forward_backward_accumulates_the_weighted_loss_gradient(corpus):
    """Two calls at weights w1, w2 leave (w1 + w2) x one call's gradient; the loss is unweighted."""
    from suite.model.wan import describe
    from suite.train.data import corpus_batch

    model = _model()
    batch = corpus_batch(corpus, _same_length(corpus, 2), describe(model))
    loss = forward_backward(model, batch)
    one = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    assert torch.equal(forward_backward(model, batch, 0.25), loss)
    forward_backward(model, batch, 0.5)
    for p, g in zip(model.parameters(), one):
        torch.testing.assert_close(p.grad, 0.75 * g)


def test_new_model_is_build_wan_and_adamw_shard_first():
    a, opt = new_model("tiny", dtype="fp32", seed=1, lr=3e-4)
    b = build_wan("tiny", dtype="fp32", seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["lr"] == 3e-4
    assert opt.defaults["weight_decay"] == 0.0
    seen = []
    m, opt = new_model("tiny", dtype="fp32", shard=lambda m: seen.append(m) or m)
    assert seen == [m] and opt.param_groups[0]["params"][0] is next(m.parameters())


def test_the_package_has_one_backward_call_site():
    """Every step of suite/ (trainer, emulator, real ranks, sweep, e2e, warm-up) backpropagates
    through forward_backward; the fused ops' own autograd functions (suite/ops) do not count."""
    from pathlib import Path

    import suite

    root = Path(suite.__file__).parent
    sites = [
        f"{f.relative_to(root)}:{n}"
        for f in sorted(root.rglob("*.py"))
        if "ops" not in f.relative_to(root).parts[:1]
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if ".backward(" in line and not line.lstrip().startswith(("#", '"'))
    ]
    assert len(sites) == 1 and sites[0].startswith("train/step.py"), sites


def test_a_varlen_pack_runs_as_its_one_length_groups_with_the_packs_gradient(corpus, group):
    """A packed plan's step (mixed lengths in one micro-batch) gives the gradient of the same
    step unpacked: each one-length group weighted by its share of the pack's tokens."""
    tokens = corpus.tokens.to_numpy()
    budgets = budgets_for(corpus, m_mem=640.0, p=2.0)
    inputs = PolicyInputs.from_budgets(budgets, tokens)
    loose = training_plan(corpus, make_policy("global", inputs), 2, 4, seed=0)
    packed = training_plan(corpus, make_policy("global-packed", inputs), 2, 4, seed=0)
    assert packed.packed and np.array_equal(packed.samples, loose.samples)
    B, S, _ = packed.lengths(tokens)
    step = int(packed.mb_step[np.flatnonzero(S == 0)[0]])  # a step with a mixed pack
    g_loose, _ = _grads(loose, corpus, [0, 1], step=step)
    g_packed, rec = _grads(packed, corpus, [0, 1], step=step)
    torch.testing.assert_close(g_packed, g_loose, rtol=1e-4, atol=1e-6)
    assert sum(m["weight"] for m in rec.micro) == pytest.approx(1.0)
