"""The global policy in the trainer (issue 7), on CPU with gloo: gradient equality with one process,
a two-process run that logs every rank, and the emulator's agreement with it."""

import numpy as np
import torch
from launch_ranks import torchrun

from suite.train.logs import read_logs, step_table

COMMON = [
    "--model",
    "tiny",
    "--mix",
    "tiny",
    "--steps",
    "3",
    "--corpus-size",
    "400",
    "--dtype",
    "fp32",
    "--device",
    "cpu",  # gloo on CPU even where a GPU exists (auto would take NCCL: two ranks, one GPU)
]


def _two_gloo_ranks(corpus, st, step):
    """Two gloo ranks (threads sharing a HashStore) run their micro-batches of one global step with
    the trainer's functions, then all_reduce(SUM) the gradients: rank 0's summed gradients."""
    import threading

    import torch.distributed as dist

    from suite.train import globalstep as gs
    from suite.train.trainer import TrainArgs, build_model

    store = dist.HashStore()
    models = [
        build_model(TrainArgs(model="tiny", dtype="fp32"), torch.device("cpu")) for _ in range(2)
    ]
    grads, errors = {}, []

    def rank(r):
        try:
            pg = dist.ProcessGroupGloo(store, r, 2)
            model, cfg = models[r], models[r].cfg
            batches = gs.rank_batches(
                corpus,
                st.ranks[r],
                text_len=cfg.text_len,
                text_dim=cfg.text_dim,
                seed=0,
                device="cpu",
            )
            gs.rank_backward(
                model, batches, seed=0, step=step, global_tokens=st.global_tokens, dtype="fp32"
            )
            params = [p for p in model.parameters() if p.requires_grad]
            gs.ensure_grads(params)
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            pg.allreduce([flat]).wait()
            grads[r] = flat
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    torch.testing.assert_close(grads[0], grads[1])
    return grads[0]


def test_global_gradient_equals_one_process():
    """Two gloo ranks with uneven micro-batches, loss weights tokens / global tokens, gradients
    summed: the same gradient as one process over the step's samples (one batch per length)."""
    from suite.train import globalstep as gs
    from suite.train.data import load_corpus, make_batch
    from suite.train.trainer import TrainArgs, build_model

    torch.set_num_threads(1)
    corpus = load_corpus(300, "tiny", 0)
    plan = gs.global_plan(corpus, gs.planner_cost(None, 2.0), 640.0, 2, 6, seed=0)
    step = next(k for k, st in enumerate(plan) if len(st.ranks[0]) != len(st.ranks[1]))
    st = plan[step]  # uneven micro-batch counts
    got = _two_gloo_ranks(corpus, st, step)
    model = build_model(TrainArgs(model="tiny", dtype="fp32"), torch.device("cpu"))
    idx = [i for r in st.ranks for mb in r for i in mb]
    tokens = corpus.tokens.to_numpy()
    total = int(tokens[idx].sum())
    assert total == st.global_tokens
    loss = 0.0
    for S in sorted(set(tokens[idx].tolist())):  # standard data parallelism: one batch per S
        grp = [i for i in idx if tokens[i] == S]
        x0, ctx, _ = make_batch(
            corpus, grp, text_len=model.cfg.text_len, text_dim=model.cfg.text_dim, seed=0
        )
        t, eps = gs.sample_noise(x0, grp, 0, step)
        loss = loss + gs.weighted_loss(model, x0, ctx, t, eps, "fp32") * (S * len(grp) / total)
    loss.backward()
    ref = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad])
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)


def test_two_rank_gloo_global_run_logs_every_rank_and_trains(tmp_path):
    real, emu = tmp_path / "real", tmp_path / "emu"
    torchrun(
        ["-m", "suite.train", *COMMON, "--policy", "global", "--out", str(real)],
        2,
        29000,
        timeout=180,
    )
    ranks = read_logs(real)
    assert sorted(ranks["rank"].unique()) == [0, 1] and len(ranks) == 2 * 3
    assert (ranks.policy == "global").all() and (ranks.world == 2).all()
    assert {"micro_batches", "sub_batches", "global_tokens"} <= set(ranks.columns)
    # every sample of the step runs on exactly one rank
    assert (ranks.groupby("step").tokens.sum() == ranks.groupby("step").global_tokens.first()).all()
    assert (ranks.bucket <= 320).all() and (ranks.samples == ranks.B).all()
    parts = ranks.compute_s + ranks.collective_wait_s + ranks.optimizer_s
    np.testing.assert_allclose(parts, ranks.step_s, rtol=1e-6, atol=1e-6)
    steps = step_table(ranks)
    assert np.isfinite(steps.loss).all() and len(steps) == 3
    # the emulator (virtual ranks, same plan and loss weights) trains exactly like the real ranks
    from suite.train.__main__ import main

    torch.set_num_threads(1)
    assert main([*COMMON, "--policy", "global", "--emulate-ranks", "2", "--out", str(emu)]) == 0
    e = step_table(read_logs(emu))
    np.testing.assert_array_equal(e.tokens, steps.tokens)
    np.testing.assert_allclose(e.loss, steps.loss, rtol=1e-4)
    assert steps.loss.iloc[0] != steps.loss.iloc[-1]  # parameters moved


def test_global_plan_is_deterministic_and_covers_samples():
    from suite.train import globalstep as gs
    from suite.train.data import load_corpus

    corpus = load_corpus(200, "tiny", 0)
    cost = gs.planner_cost(None, 2.0)
    a = gs.global_plan(corpus, cost, 400, 4, 5, seed=1)
    b = gs.global_plan(corpus, cost, 400, 4, 5, seed=1)
    assert [st.ranks for st in a] == [st.ranks for st in b]
    tokens = corpus.tokens.to_numpy()
    for st in a:
        idx = [i for r in st.ranks for mb in r for i in mb]
        assert len(idx) == len(set(idx)) and int(tokens[idx].sum()) == st.global_tokens
        assert all(tokens[mb].sum() <= 400 for r in st.ranks for mb in r)
        for r in st.ranks:
            for mb in r:
                groups = gs.sub_batches(mb, tokens)
                assert sorted(i for g in groups for i in g) == sorted(mb)
                assert all(len(set(tokens[g])) == 1 for g in groups)
        for r in st.ranks:
            batches = gs.same_length_batches(r, tokens)
            assert sorted(i for b in batches for i in b) == sorted(i for mb in r for i in mb)
            assert all(len(set(tokens[b])) == 1 and tokens[b].sum() <= 400 for b in batches)
            assert len(batches) <= sum(len(gs.sub_batches(mb, tokens)) for mb in r)


def test_warmup_covers_the_shapes_of_a_global_plans_steps():
    """The training experiment warms every (B, S) shape of each plan's steps, the global plan's
    model batches included (its first two H200 steps were 3.3x and 1.8x the later ones; warming
    only the first step's shapes left step 1 at 2x): later steps bring shapes step 0 lacks."""
    from suite.train import globalstep as gs
    from suite.train.data import load_corpus
    from suite.train.warmup import model_batches, warm_batches

    corpus = load_corpus(200, "tiny", 0)
    tokens = corpus.tokens.to_numpy()
    plan = gs.global_plan(corpus, gs.planner_cost(None, 2.0), 400, 4, 3, seed=1)
    steps = model_batches(corpus, plan)
    assert len(steps) == 3
    for st, batches in zip(plan, steps):
        ran = sorted(i for b in batches for i in b)
        assert ran == sorted(i for r in st.ranks for mb in r for i in mb)
        assert all(len(set(tokens[b])) == 1 for b in batches)
    first = {(len(b), int(tokens[b[0]])) for b in steps[0]}
    every = {(len(b), int(tokens[b[0]])) for st in steps for b in st}
    assert len(first) > 1 and every > first  # several shapes, and new ones after step 0
    # what gets warmed: every shape (limit permitting), the heaviest batches first
    warmed = warm_batches(corpus, steps)
    assert {(len(b), int(tokens[b[0]])) for b in warmed} == every
    assert max(int(tokens[b].sum()) for b in warmed) == int(tokens[warmed[0]].sum())
    assert len(warm_batches(corpus, steps, limit=1)) == 3  # 2 heaviest + 1 shape
    # a shape warmed already (another plan, another model of the process) is not warmed again;
    # the two heaviest batches are, for the allocator peak of each model
    seen: set = set()
    assert len(warm_batches(corpus, steps, seen=seen)) == len(warmed)
    again = warm_batches(corpus, steps, seen=seen)
    assert again == warmed[:2] and len(seen) == len(every)
    # a real rank warms its own batches only, which together are the whole plan's
    per_rank = [model_batches(corpus, plan, rank=r) for r in range(4)]
    for k in range(3):
        mine = sorted(i for r in per_rank for b in r[k] for i in b)
        assert mine == sorted(i for b in steps[k] for i in b)
