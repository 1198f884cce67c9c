"""bf16 training with diffusers' gradient checkpointing under DDP and FSDP2, on two gloo ranks.

Every run goes through tests/train_torch211_recompute.py: FSDP2's recompute behaves as in torch
< 2.13 (the GPU machine's 2.11), where the block's pre-forward hook skips the mixed-precision
input cast; the old FSDP2 wrap then failed torch.utils.checkpoint's metadata check (RoPE tables
bf16 in the forward, fp32 in the recompute), as it did on the H200.
"""

import numpy as np
import pytest
from launch_ranks import torchrun

from suite.train.logs import read_logs, step_table

ARGS = ["tests/train_torch211_recompute.py", "--model", "tiny", "--mix", "tiny", "--steps", "3",
        "--corpus-size", "400", "--dtype", "bf16", "--device", "cpu", "--policy", "dual"]  # fmt: skip
RUNS = {
    "fsdp+ckpt": ["--fsdp", "--checkpointing"],
    "fsdp": ["--fsdp"],
    "ddp+ckpt": ["--checkpointing"],
    "ddp": [],
}


@pytest.fixture(scope="module")
def losses(tmp_path_factory):
    out = {}
    for name, extra in RUNS.items():
        d = tmp_path_factory.mktemp(name.replace("+", "_"))
        torchrun([*ARGS, *extra, "--out", str(d)], 2, timeout=180)
        steps = step_table(read_logs(d))
        assert len(steps) == 3 and np.isfinite(steps.loss).all()
        out[name] = steps.loss.to_numpy()
    return out


@pytest.mark.parametrize("wrap", ["fsdp", "ddp"])
def test_checkpointing_trains_exactly_like_storing_activations(losses, wrap):
    """The recompute is the forward again: on CPU the losses of 3 steps are bit for bit equal."""
    np.testing.assert_array_equal(losses[f"{wrap}+ckpt"], losses[wrap])


def test_bf16_fsdp2_trains_like_bf16_ddp(losses):
    """The same plan and weights: FSDP2 (fp32 shards, bf16 compute, diffusers' fp32-kept modules
    in bf16 too) and DDP (bf16 parameters, fp32-kept modules) agree to bf16 rounding."""
    np.testing.assert_allclose(losses["fsdp+ckpt"], losses["ddp+ckpt"], rtol=1e-2)
    assert not np.array_equal(losses["fsdp"], losses["ddp"])  # two different dtype recipes


def test_fsdp2_blocks_take_inputs_as_the_root_makes_them():
    """Only the root casts its inputs to the compute dtype; the blocks' inputs (RoPE tables fp32)
    pass uncast, so a recompute outside the blocks' hooks sees the forward's dtypes."""
    import torch

    from suite.train.distributed import mixed_precision

    block, root = mixed_precision("bf16")
    assert block.param_dtype == root.param_dtype == torch.bfloat16
    assert block.reduce_dtype == root.reduce_dtype == torch.float32
    assert root.cast_forward_inputs and not block.cast_forward_inputs
