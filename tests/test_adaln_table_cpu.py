"""The shipped launch table (suite/ops/fused_adaln/kernel_config.py FORWARD, BACKWARD): every dtype
combination, mode and width 1 <= D <= 8192 finds a row, every row is the first match somewhere
(no dead data), and each design is one the kernels can run (shared arrays within the shared
memory a CTA has, recomputation only from a prefetched row)."""

import itertools

import pytest

from suite.ops.fused_adaln import kernel_config as kc
from suite.ops.fused_adaln.kernel_config import ALL_MODES, BACKWARD, FORWARD, KernelConfig, lookup

DTYPES = ("float", "bf16", "f16")
KEYS = list(itertools.product(DTYPES, DTYPES, DTYPES, ALL_MODES))
# each row's two ends and their neighbours, and a stride through the rest
EDGES = {d for r in FORWARD + BACKWARD for d in (r.above, r.above + 1, r.upto, r.upto + 1)}
WIDTHS = sorted(d for d in EDGES | set(range(1, 8193, 127)) if 1 <= d <= 8192)


@pytest.mark.parametrize("table", [FORWARD, BACKWARD], ids=["forward", "backward"])
def test_every_configuration_finds_a_row_and_every_row_is_used(table):
    used = set()
    for tx, tm, ty, mode in KEYS:
        for D in WIDTHS:
            used.add(table.index(lookup(table, tx, tm, ty, D, mode)))
    assert used == set(range(len(table))), f"rows never matched: {set(range(len(table))) - used}"


def test_a_width_past_the_table_is_a_clear_error():
    with pytest.raises(ValueError, match="no fused AdaLN launch configuration for bf16/float/bf16"):
        KernelConfig("bf16", "float", "bf16", 8193, 0).names()


def test_designs_fit_the_hardware():
    for tx, tm, ty, mode in KEYS:
        for D in WIDTHS:
            c = KernelConfig(tx, tm, ty, D, mode)
            arrays = 4 * c.bwd_slots * (2 * c.bwd_sacc_on + c.bwd_msh_on)
            static = c.bwd_red_bytes + (0 if c.bwd_dyn_on else arrays)
            assert static <= 48 * 1024, c  # the static shared memory a CTA may declare
            assert c.bwd_dyn_bytes(True) <= 100 * 1024, c  # two such CTAs per 228 KB SM
            assert not c.bwd_remat_on(True) or c.bwd_prefetch, c  # recomputes the packed row
            assert not c.bwd_svec_on(True) or c.bwd_sacc_on or c.bwd_msh_on, c  # words of those
            assert not c.bwd_dyn_on or mode == kc.MODE_SAMPLE, c  # per-sample arrays only
            assert c.fwd_threads <= 1024 and c.bwd_threads <= 1024, c
            many = c.fwd_many
            assert many is None or (many.fwd_pair(True) and mode == kc.MODE_SAMPLE), c
