"""The global policy in the trainer, on CPU with gloo: a two-process run that logs every
rank, the emulator's agreement with it, and the warm-up of its plan's shapes (its gradient
equality with one process: tests/test_train_step.py)."""

import numpy as np
import pytest
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


def test_two_rank_gloo_global_run_logs_every_rank_and_trains(tmp_path):
    real, emu = tmp_path / "real", tmp_path / "emu"
    torchrun(
        ["-m", "suite.train", *COMMON, "--policy", "global", "--out", str(real)],
        2,
        timeout=180,
    )
    ranks = read_logs(real)
    assert sorted(ranks["rank"].unique()) == [0, 1] and len(ranks) == 2 * 3
    assert (ranks.policy == "global").all() and (ranks.world == 2).all()
    assert {"micro_batches", "global_tokens"} <= set(ranks.columns)
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


def test_warmup_covers_the_shapes_of_a_global_plans_steps():
    """The training experiment warms every (B, S) shape of each plan's steps, the global plan's
    model batches included (its first two H200 steps were 3.3x and 1.8x the later ones; warming
    only the first step's shapes left step 1 at 2x): later steps bring shapes step 0 lacks."""
    from suite.balance.registry import PolicyInputs, make_policy
    from suite.train.data import load_corpus
    from suite.train.plan import budgets_for, training_plan
    from suite.train.warmup import model_batches, warm_batches

    corpus = load_corpus(200, "tiny", 0)
    tokens = corpus.tokens.to_numpy()
    inputs = PolicyInputs.from_budgets(budgets_for(corpus, m_mem=400, p=2), tokens)
    plan = training_plan(corpus, make_policy("global", inputs), 4, 3, 1)
    steps = model_batches(plan)
    assert len(steps) == 3
    for k, batches in enumerate(steps):
        ran = sorted(i for b in batches for i in b)
        assert ran == sorted(plan.step_samples(k).tolist())
        assert all(len(set(tokens[b])) == 1 for b in batches)
    assert [len(b) for b in model_batches(plan, rank=1)] == [
        len(plan.micro_batches(k, 1)) for k in range(3)
    ]
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
    per_rank = [model_batches(plan, rank=r) for r in range(4)]
    for k in range(3):
        mine = sorted(i for r in per_rank for b in r[k] for i in b)
        assert mine == sorted(i for b in steps[k] for i in b)


def test_fsdp_refuses_a_plan_of_uneven_micro_batch_counts(tmp_path):
    from suite.train.trainer import TrainArgs, _equal_micro_counts, run_setup

    args = TrainArgs(model="tiny", mix="tiny", steps=3, corpus_size=400, dtype="fp32",
                     policy="global", device="cpu")  # fmt: skip
    plan = run_setup(args, torch.device("cpu"), 2)[-1]
    assert not _equal_micro_counts(plan)
    args.policy = "dual"
    assert _equal_micro_counts(run_setup(args, torch.device("cpu"), 2)[-1])
    from suite.balance.registry import make_policy

    with pytest.raises(ValueError, match="unknown policy 'lpt'; accepted: equal-token"):
        make_policy("lpt", None)
