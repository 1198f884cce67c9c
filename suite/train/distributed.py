"""All distributed set-up in one place: the process group, DDP, FSDP2 and the gradient reduce.

    d = init_distributed("auto")                     # torchrun's env:// rendezvous, or one process
    model, opt = new_model(..., shard=fsdp_shard(d, "bf16") if fsdp else None)
    wrapped, reduce = data_parallel(model, d, fsdp)  # train_step(wrapped, ..., reduce=reduce)

NCCL on GPUs, gloo on CPU. DDP: the model is wrapped in DistributedDataParallel (parameter
broadcast, the standard API), the step's backward runs under no_sync() and `all_reduce_sum` then
sums the gradients over flat buckets, so compute and collective are measured apart (the paper's
step = compute + collective + optimizer). FSDP2: fully_shard per block of model.blocks, then the
root; its reduce-scatter averages over ranks, so the reduce phase (`fsdp_sum`) multiplies the
gradient shards by the world size (a SUM, as the plan's weights ask; gloo has no pre-multiplied
reduce for a divide factor of 1); its collectives overlap forward/backward, so they sit inside
compute_s and the reduce phase is the wait for outstanding reduce-scatters. bf16 under FSDP2 is
Wan's own FSDP recipe (fp32 sharded parameters, bf16 compute, fp32 reduce, only the root casts its
inputs: `mixed_precision`; FSDP2 needs one dtype per sharded group, and diffusers keeps some of a
block's parameters fp32). Every rank must run the same number of micro-batches per step under
FSDP2 (its per-forward collectives).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from suite.model.wan import DTYPES

BUCKET_BYTES = 25 * 2**20  # all_reduce bucket, as DDP's default


@dataclass
class Dist:
    rank: int
    world: int
    device: torch.device
    initialized: bool


def init_distributed(
    device: str = "auto", *, local_rank: int | None = None, timeout_s: float | None = None
) -> Dist:
    """This process's rank: under torchrun (RANK set) one process group (NCCL on a GPU, gloo on
    CPU; `timeout_s` or torch's default), else rank 0 of 1 without a group. `device` is auto,
    cuda or cpu; `local_rank` (default LOCAL_RANK) picks the GPU."""
    if device not in ("auto", "cuda", "cpu"):
        raise ValueError(f"device must be auto, cuda or cpu, got {device!r}")
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    if "RANK" not in os.environ:
        return Dist(0, 1, torch.device("cuda" if use_cuda else "cpu"), False)
    local = int(os.environ.get("LOCAL_RANK", 0) if local_rank is None else local_rank)
    if use_cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)
    dev = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    return Dist(dist.get_rank(), dist.get_world_size(), dev, True)


def broadcast(obj):
    """rank 0's object on every rank."""
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(params: list[torch.Tensor]) -> None:
    """SUM every gradient across the process group over flat buckets of ~25 MB; a parameter with
    no gradient (a rank without samples) joins with zeros."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    bucket, size = [], 0
    grads = [p.grad for p in params]
    for g in grads + [None]:
        if g is not None:
            bucket.append(g)
            size += g.numel() * g.element_size()
        if bucket and (g is None or size >= BUCKET_BYTES):
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat)
            for t, s in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                t.copy_(s)
            bucket, size = [], 0


def ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DistributedDataParallel over the process group (its parameter broadcast at wrap time)."""
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def mixed_precision(dtype: str):
    """FSDP2's policies (blocks, root): `dtype` compute, fp32 reduce; only the root casts its
    inputs (FSDP1's default, Wan's recipe). The blocks take their inputs as the root makes them
    (hidden states and temb in `dtype`, RoPE tables fp32, as in diffusers' own bf16 forward), so a
    checkpointed block recomputes on the very inputs its forward saw: diffusers checkpoints each
    block from outside its FSDP hooks, and torch < 2.13 skips the hooks' input cast in that
    recompute (pytorch/pytorch#159359), which made bf16 RoPE tables fp32 on recompute."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = dict(param_dtype=DTYPES[dtype], reduce_dtype=torch.float32)
    return (
        MixedPrecisionPolicy(**policy, cast_forward_inputs=False),
        MixedPrecisionPolicy(**policy, cast_forward_inputs=True),
    )


def fsdp_shard(d: Dist, dtype: str) -> Callable[[torch.nn.Module], torch.nn.Module]:
    """FSDP2 as a model factory's `shard` step: fully_shard each block, then the root
    (`mixed_precision(dtype)`; the parameters, built fp32, stay fp32 shards)."""
    if not d.initialized:
        raise RuntimeError("--fsdp needs a torchrun launch (a process group)")

    def shard(model):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        # fully_shard's default mesh is CUDA whenever a GPU exists, whatever --device says
        mesh = init_device_mesh(d.device.type, (d.world,))
        block_mp, root_mp = mixed_precision(dtype)
        for block in model.blocks:
            fully_shard(block, mesh=mesh, mp_policy=block_mp)
        fully_shard(model, mesh=mesh, mp_policy=root_mp)
        return model

    return shard


def fsdp_sum(world: int, cuda: bool):
    """The FSDP2 run's reduce phase: wait for outstanding reduce-scatters (CUDA), then undo their
    average (x world): the plan's weights already sum to 1 over the ranks."""

    def reduce(params):
        if cuda:
            torch.cuda.current_stream().synchronize()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(world)

    return reduce


def data_parallel(model: torch.nn.Module, d: Dist, fsdp: bool = False):
    """(what train_step runs, its gradient reduce): the FSDP2-sharded model and `fsdp_sum`, DDP
    and `all_reduce_sum` in a process group, else the bare model and no reduce."""
    if fsdp:
        return model, fsdp_sum(d.world, d.device.type == "cuda")
    if d.initialized:
        return ddp(model, d.device), all_reduce_sum
    return model, None
