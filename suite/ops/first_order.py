"""First-order autograd for the fused ops: a double backward is refused by name.

The ops' backward formulas treat the saved fp32 mean and rstd as constants and, on CUDA, run a
kernel that autograd cannot see into. A graph built through them (create_graph=True) would give
torch's generic "element 0 of tensors does not require grad" on CUDA and silently wrong
second derivatives on CPU. So the first backward runs without a graph and its gradients carry a
node that raises, when differentiated, an error naming the op and the eager function to use
instead (as torch.autograd.function.once_differentiable does, but with the saved tensors as the
node's inputs: a gradient depends on x through them even where dy is a constant, and
once_differentiable's node is then never reached).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


class _Refuse(torch.autograd.Function):
    """Identity on `outs` whose backward raises `msg`; `anchors` (the tensors the gradients
    depend on) are inputs only so that a second backward reaches this node."""

    @staticmethod
    def forward(ctx, msg: str, n_anchors: int, *tensors):
        ctx.msg = msg
        return tuple(t.view_as(t) for t in tensors[n_anchors:])

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(ctx.msg)


def first_order(op: str, instead: str):
    """Decorate an autograd backward `(ctx, *grads) -> grads of the inputs` of the op `op`;
    `instead` names the eager, twice-differentiable function with the same formula."""
    msg = (
        f"{op} has no double backward (its backward is a fused kernel with constant saved "
        f"statistics): for gradients of gradients use {instead}"
    )

    def wrap(backward):
        @functools.wraps(backward)
        def run(ctx, *grads):
            if not torch.is_grad_enabled() or torch.compiler.is_compiling():
                return backward(ctx, *grads)
            with torch.no_grad():  # create_graph=True: a graph through it would be wrong
                out = backward(ctx, *grads)
            seen = (*ctx.saved_tensors, *grads)
            anchors = [t for t in seen if isinstance(t, Tensor) and t.requires_grad]
            outs = out if isinstance(out, tuple) else (out,)
            at = [i for i, t in enumerate(outs) if isinstance(t, Tensor)]
            if not anchors or not at:
                return out
            marked = _Refuse.apply(msg, len(anchors), *anchors, *(outs[i] for i in at))
            outs = list(outs)
            for i, t in zip(at, marked):
                outs[i] = t
            return tuple(outs) if isinstance(out, tuple) else outs[0]

        return run

    return wrap
