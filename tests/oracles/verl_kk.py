"""Oracle: verl's Karmarkar-Karp partition.

Source: volcengine/verl, verl/utils/seqlen_balancing.py, `karmarkar_karp` (commit
55a1e70e21bdfb87e2c07cc7b809f3ead3927d26). Copyright 2024 Bytedance Ltd. and/or its affiliates,
Apache License 2.0 (http://www.apache.org/licenses/LICENSE-2.0); this port is a derived work
under that licence, changed from the original: the classes are module-level, the asserts are
dropped and the partition is returned as lists of item indices in the source's set order.

The tie-breaks kept: items pushed in ascending (value, index) order; a state pops before another
with a larger spread, on a tie with a larger largest set (Set order: sum, then item count, then
the items list); a merge pairs the i-th set of one with the (k-1-i)-th of the other and sorts the
sets in decreasing Set order.
"""

import heapq


class Set:
    def __init__(self):
        self.sum = 0
        self.items = []

    def add(self, idx, val):
        self.items.append((idx, val))
        self.sum += val

    def merge(self, other):
        for idx, val in other.items:
            self.items.append((idx, val))
            self.sum += val

    def __lt__(self, other):
        if self.sum != other.sum:
            return self.sum < other.sum
        if len(self.items) != len(other.items):
            return len(self.items) < len(other.items)
        return self.items < other.items


class State:
    def __init__(self, items, k):
        self.k = k
        self.sets = [Set() for _ in range(k)]
        for i, (idx, val) in enumerate(items):
            self.sets[i].add(idx, val)
        self.sets = sorted(self.sets, reverse=True)

    @property
    def spread(self):
        return self.sets[0].sum - self.sets[-1].sum

    def merge(self, other):
        for i in range(self.k):
            self.sets[i].merge(other.sets[self.k - 1 - i])
        self.sets = sorted(self.sets, reverse=True)

    def __lt__(self, other):
        if self.spread != other.spread:
            return self.spread > other.spread
        return self.sets[0] > other.sets[0]


def karmarkar_karp(values, k, equal_size):
    """Partitions (lists of item indices), the largest sum first."""
    ordered = sorted((v, i) for i, v in enumerate(values))
    heap = []
    if equal_size:
        for off in range(0, len(ordered), k):
            heapq.heappush(heap, State([(i, v) for v, i in ordered[off : off + k]], k))
    else:
        for v, i in ordered:
            heapq.heappush(heap, State([(i, v)], k))
    while len(heap) > 1:
        a = heapq.heappop(heap)
        b = heapq.heappop(heap)
        a.merge(b)
        heapq.heappush(heap, a)
    return [[i for i, _ in s.items] for s in heap[0].sets]
