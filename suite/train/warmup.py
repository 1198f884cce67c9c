"""Warm-up before timed training steps: run the batches of a plan's distinct (B, S) shapes once.

The first batch of a new shape pays for allocator growth and per-shape library set-up (attention
kernel selection): on the H200 an un-warmed run was ~10% slower than a later run of the same
batches, and the global policy's first two steps (shapes no bucket plan has) took 3.3x and 1.8x
its later steps; warming only the first step's shapes left step 1 at 2x. So every step's shapes
are warmed, emulated ranks and real ranks alike.
"""

from __future__ import annotations

import numpy as np

WARM_SHAPES = 64  # at most this many distinct (B, S) shapes of a plan are warmed, in plan order


def model_batches(plan, rank: int | None = None) -> list[list[list[int]]]:
    """The Plan's model batches (micro-batches: one sequence length each), step by step: every
    rank's, or with `rank` only that rank's."""
    out = []
    for step in range(plan.steps):
        ranks = range(plan.world) if rank is None else [rank]
        out.append([mb.indices.tolist() for r in ranks for mb in plan.micro_batches(step, r)])
    return out


def shape_key(corpus, batch: list[int]) -> tuple:
    """What a batch's kernels and allocations depend on: B and the latent shape of its samples
    (one length per model batch; frames x height x width where the corpus has them)."""
    row = corpus.iloc[batch[0]]
    dims = [int(row[c]) for c in ("frames", "height", "width") if c in corpus.columns]
    return (len(batch), *(dims or [int(row["tokens"])]))


def warm_batches(
    corpus, steps: list[list[list[int]]], limit: int = WARM_SHAPES, seen: set | None = None
) -> list[list[int]]:
    """The batches to warm: the most token-heavy and the most attention-heavy (allocator peak),
    then the first batch of each distinct shape in plan order, at most `limit` of them. Shapes in
    `seen` (warmed already, by another plan or model of this process: kernel selection and the
    caching allocator are per process) are left out, and the new ones are added to it."""
    flat = [b for step in steps for b in step]
    if not flat:
        return []
    tokens = corpus.tokens.to_numpy()
    tok = [int(tokens[b].sum()) for b in flat]
    bs2 = [float(tokens[b[0]]) * t for b, t in zip(flat, tok)]
    shapes: dict[tuple, list[int]] = {}
    for b in flat:
        shapes.setdefault(shape_key(corpus, b), b)
    picks = [flat[int(np.argmax(tok))], flat[int(np.argmax(bs2))]]
    new = [(k, b) for k, b in list(shapes.items())[:limit] if seen is None or k not in seen]
    if seen is not None:
        seen.update(k for k, _ in new)
    return picks + [b for _, b in new]


def warm(model, corpus, batches, *, seed: int) -> None:
    """The training step's forward + backward (suite.train.step.forward_backward) of each batch
    on `model`, with its data and noise (epoch 0); gradients left for the caller to clear."""
    from suite.model.wan import describe
    from suite.train.data import corpus_batch
    from suite.train.step import forward_backward

    info = describe(model)
    device = next(model.parameters()).device
    for batch in batches:
        forward_backward(model, corpus_batch(corpus, batch, info, seed=seed, device=device))
