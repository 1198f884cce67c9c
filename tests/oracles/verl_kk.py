"""Oracle: verl's Karmarkar-Karp (largest differencing) partition.

Specifies the behaviour of `karmarkar_karp` in volcengine/verl, verl/utils/seqlen_balancing.py
(commit 55a1e70e21bdfb87e2c07cc7b809f3ead3927d26; Apache-2.0), read for its observable results.
This is an independent implementation of the behaviour described; no source code copied.

Behaviour reproduced, tie-breaks included:
- items enter in ascending (value, index) order; each starts a partial partition of k parts
  (with equal_size, k consecutive items of that order start one, one item per part);
- a part ranks by (total, item count, its (index, value) list in insertion order); a partial
  partition keeps its parts ranked high to low (a stable sort);
- the binary heap (heapq) pops first the partial partition of largest spread (top part total
  minus bottom part total), on equal spread the one whose top part ranks higher; fully tied
  entries keep whatever order heapq's sift gives them;
- the two popped are combined part by part, the i-th of the first with the (k-1-i)-th of the
  second (totals grown item by item), re-ranked, and pushed back.
Returns the parts of the last partition as lists of item indices, highest ranked first.
"""

import heapq
from dataclasses import dataclass


def _rank(part):
    total, members = part
    return total, len(members), members


def _ordered(parts):
    return sorted(parts, key=_rank, reverse=True)


@dataclass
class _HeapEntry:
    """A partial partition under heapq: `key` alone orders it (smaller pops first)."""

    key: tuple
    parts: list

    def __lt__(self, other):
        return self.key < other.key


def _entry(parts):
    total, members = parts[0]
    # Negated so heapq's min pops the widest spread, then the higher-ranked top part; the
    # member lists compared here always have equal lengths, so negating each pair reverses them.
    spread = parts[0][0] - parts[-1][0]
    flipped = [(-i, -v) for i, v in members]
    return _HeapEntry((-spread, -total, -len(members), flipped), parts)


def _combine(big, small):
    out = []
    for (total, members), (_, extra) in zip(big, reversed(small)):
        for item in extra:
            total += item[1]
        out.append((total, members + extra))
    return _ordered(out)


def _start(chunk, k):
    parts = [(0, [])] * k
    for slot, (value, index) in enumerate(chunk):
        parts[slot] = (0 + value, [(index, value)])
    return _ordered(parts)


def karmarkar_karp(values, k, equal_size):
    """Partitions (lists of item indices), the highest-ranked part first."""
    order = sorted((v, i) for i, v in enumerate(values))
    step = k if equal_size else 1
    heap = []
    for lo in range(0, len(order), step):
        heapq.heappush(heap, _entry(_start(order[lo : lo + step], k)))
    while len(heap) > 1:
        first = heapq.heappop(heap)
        second = heapq.heappop(heap)
        heapq.heappush(heap, _entry(_combine(first.parts, second.parts)))
    return [[i for i, _ in members] for _, members in heap[0].parts]
