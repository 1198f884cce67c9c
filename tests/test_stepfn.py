"""suite.train.stepfn, the training step at (B, S) for sweeps, on diffusers'
WanTransformer3DModel: the tiny config on CPU, the 30-block Wan 2.1 1.3B on a CUDA GPU (skipped
with a reason without one)."""

import pytest
import torch

from suite.balance.shapebench import ShapeOutOfMemory
from suite.model.wan import TEXT_LENS, latent_for_tokens, token_grid
from suite.train import stepfn
from suite.train.stepfn import make_step_fn


@pytest.fixture(scope="module")
def tiny_step():
    return make_step_fn("tiny", device="cpu", dtype="fp32")


def test_token_grids_of_the_wan_buckets():
    assert token_grid(1560) == (1, 30, 52) and token_grid(32_760) == (21, 30, 52)
    assert token_grid(3600) == (1, 45, 80) and token_grid(75_600) == (21, 45, 80)
    assert token_grid(46_800) == (13, 45, 80)  # 720p 49 frames, not 480p 117
    assert token_grid(64) == (1, 8, 8)
    assert latent_for_tokens(32_760) == (16, 21, 60, 104)  # 81 frames of 480x832 after the VAE
    with pytest.raises(ValueError, match="multiple of one of"):
        token_grid(100)


def test_step_trains_the_diffusers_model_and_returns_positive_seconds(tiny_step):
    from diffusers import WanTransformer3DModel

    assert type(tiny_step.model) is WanTransformer3DModel and tiny_step.model.training
    assert tiny_step.checkpointing and tiny_step.model.is_gradient_checkpointing
    assert tiny_step.text_len == TEXT_LENS["tiny"] and tiny_step.config.num_layers == 2
    before = tiny_step.model.proj_out.weight.detach().clone()
    sec, peak, opt_s = tiny_step(2, 64)
    assert sec > 0 and peak == 0 and 0 < opt_s < sec
    assert not torch.equal(before, tiny_step.model.proj_out.weight)  # AdamW stepped
    with pytest.raises(ValueError, match="B must be a positive integer"):
        tiny_step(0, 64)


def test_the_step_is_the_trainers_forward_backward_on_the_one_batch(monkeypatch):
    """What the sweep times is what trains: suite.train.step.forward_backward on make_batch's
    samples 0..B-1 at latent_for_tokens(S), then one AdamW step that clears the gradients."""
    from suite.model.wan import describe, make_batch
    from suite.train import step as train_step_module

    step = make_step_fn("tiny", dtype="fp32", checkpointing=False)
    seen = []

    def spy(model, batch, weight=1.0):
        seen.append(batch)
        return train_step_module.forward_backward(model, batch, weight)

    monkeypatch.setattr(stepfn, "forward_backward", spy)
    step(3, 64)
    want = make_batch(describe(step.model), range(3), latent_for_tokens(64))
    assert len(seen) == 1 and (seen[0].B, seen[0].S) == (3, 64)
    for k in ("x0", "text", "t", "eps"):
        assert torch.equal(getattr(seen[0], k), getattr(want, k))
    assert all(p.grad is None for p in step.model.parameters())


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="adaln must be one of"):
        make_step_fn("tiny", adaln="eager")
    with pytest.raises(ValueError, match="dtype must be one of"):
        make_step_fn("tiny", dtype="int8")
    with pytest.raises(ValueError, match="name must be one of"):
        make_step_fn("wan-7b")


def test_fused_adaln_goes_in_through_patch_wan():
    from suite.ops.diffusers import is_patched

    step = make_step_fn("tiny", dtype="fp32", adaln="fused", checkpointing=False)
    assert is_patched(step.model)["adaln"] and step(1, 64)[0] > 0


def test_out_of_memory_becomes_shape_out_of_memory_and_frees_the_gradients(tiny_step, monkeypatch):
    from suite.train.step import forward_backward

    def oom(model, batch, weight=1.0):  # a backward that ran out of memory halfway
        forward_backward(model, batch, weight)
        assert any(p.grad is not None for p in model.parameters())
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")

    monkeypatch.setattr(stepfn, "forward_backward", oom)
    with pytest.raises(ShapeOutOfMemory, match="B=2 S=256") as e:
        tiny_step(2, 256)
    assert e.value.__context__ is None and "9.00 GiB" in e.value.reason
    assert all(p.grad is None for p in tiny_step.model.parameters())


@pytest.fixture(scope="module")
def wan_step():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch sees none)")
    step = make_step_fn("wan-1.3b", device="cuda")
    yield step
    del step
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")
def test_the_30_block_wan_1_3b_step_on_gpu(wan_step):
    assert wan_step.config.num_layers == 30 and wan_step.config.dim == 1536
    assert wan_step.text_len == 512 and wan_step.model.proj_out.weight.dtype == torch.bfloat16
    wan_step(2, 1560)
    sec, peak, opt_s = wan_step(2, 1560)
    assert 0 < sec < 30 and peak > 2 * 1.3e9  # at least the bf16 weights
    assert 0 < opt_s < sec / 2  # AdamW over 1.3B parameters, a fraction of the step


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")
def test_an_oversized_shape_is_skipped_and_the_next_one_runs(wan_step):
    wan_step(1, 1560)
    base = torch.cuda.memory_allocated()
    with pytest.raises(ShapeOutOfMemory, match="B=400 S=75600"):
        wan_step(400, 75_600)  # ~93 GB of patch embeddings alone: fails in the first block
    assert torch.cuda.memory_allocated() <= base
    assert wan_step(1, 1560)[0] > 0
