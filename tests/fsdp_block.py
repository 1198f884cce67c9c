"""A Wan-style block around the fused op, and a one-process torch.distributed group, for the FSDP2
tests of tests/test_adaln.py (gloo on the CPU, NCCL on the GPU)."""

from __future__ import annotations

import contextlib
import os
import socket

import torch
import torch.distributed as dist

from suite.ops import AdaLN


class Block(torch.nn.Module):
    def __init__(self, D: int):
        super().__init__()
        self.mod = torch.nn.Parameter(torch.randn(1, 6, D) * 0.1)
        self.norm = AdaLN(D, out_dtype=torch.float32)
        self.lin = torch.nn.Linear(D, D)

    def forward(self, x, e):
        e = (self.mod + e).chunk(6, dim=1)  # Wan: [B, 1, D] views of a [B, 6, D] tensor
        return self.lin(self.norm(x, e[1], e[0]))


def plain_and_sharded(D: int, device: str) -> tuple[Block, Block]:
    """Two blocks with the same weights on `device` ("cpu" or "cuda"); the second wrapped by
    FSDP2's fully_shard on a mesh of that device type (its default is CUDA whenever there is a
    GPU, which moved a CPU test's block onto the GPU)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    plain = Block(D).to(device)
    sharded = Block(D).to(device)
    sharded.load_state_dict(plain.state_dict())
    fully_shard(sharded, mesh=init_device_mesh(device, (1,)))
    return plain, sharded


@contextlib.contextmanager
def one_process_group(backend: str, **kwargs):
    """A world of one rank on a free local port, destroyed on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=0, world_size=1, **kwargs)
    try:
        yield
    finally:
        dist.destroy_process_group()
