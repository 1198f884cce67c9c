"""tools/kernels_summary.py: the kernel issue's targets counted shape by shape from kernels.csv."""

import importlib.util
from pathlib import Path

import pandas as pd

_spec = importlib.util.spec_from_file_location(
    "kernels_summary", Path(__file__).resolve().parent.parent / "tools" / "kernels_summary.py"
)
ks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ks)


def _row(impl, op, N, D, pct, ms, dtype="bfloat16", out="bfloat16", B=1, same=None):
    return dict(
        impl=impl, op=op, B=B, N=N, D=D, dtype=dtype, out_dtype=out, ms_median=ms,
        pct_copy_bw=pct, pct_copy_same=same if same is not None else pct + 5,
    )  # fmt: skip


def test_targets_count_met_shapes_and_name_the_worst():
    t = pd.DataFrame(
        [
            _row("fused", "fwd", 16384, 1536, 88.0, 1.0),
            _row("fused", "fwd", 65536, 1536, 91.0, 3.0),
            _row("fused", "fwd", 4096, 1536, 60.0, 0.5, same=85.0),
            _row("fused-f32out", "fwd", 65536, 1536, 92.0, 4.0, out="float32"),
            _row("wan-eager", "fwd", 65536, 1536, 9.0, 39.0, out="float32"),  # 9.75x: missed
            _row("compile-eager", "fwd", 65536, 1536, 40.0, 4.0),
            _row("compile-eager", "fwd", 16384, 1536, 40.0, 0.9),  # faster than fused: missed
        ]
    )
    lines = {
        tuple(c.strip() for c in ln.strip("|").split("|")[:2]): ln
        for ln in ks.targets_table(t).splitlines()[2:]
    }
    fwd90 = lines[("forward >= 90% of the copy, N >= 16384 (2 GB copy)", "bfloat16")]
    # three shapes at N >= 16384 (bf16 and fp32 y), two meet 90%, the worst is N = 16384
    assert "| 3 | 2 | 88.0%: bf16 y, B = 1, N = 16384, D = 1536 |" in fwd90
    same = lines[("forward >= 90% of the copy, N >= 16384 (same-size copy)", "bfloat16")]
    assert "| 3 | 3 |" in same
    small = lines[("forward >= 80% of the copy, N = 4096 (2 GB copy)", "bfloat16")]
    assert "| 1 | 0 | 60.0%" in small
    assert (
        "| 1 | 1 | 85.0%"
        in lines[("forward >= 80% of the copy, N = 4096 (same-size copy)", "bfloat16")]
    )
    wan = lines[("forward >= 10x over the Wan path, N = 65536", "bfloat16")]
    assert "| 1 | 0 | 9.75x: fp32 y" in wan
    comp = lines[("forward faster than torch.compile of eager", "bfloat16")]
    assert "| 2 | 1 | 0.90x: bf16 y, B = 1, N = 16384" in comp
    assert not any(k[1] == "float32" for k in lines)  # no fp32-x rows in this table


def test_misses_are_binned_by_what_a_same_size_copy_can_do():
    """A miss against the 2 GB copy needs target / (same-size copy's % of the 2 GB copy) of a
    copy of its own bytes: over 100% not even a copy meets it; under 95% is a kernel's gap."""

    def row(op, N, pct, copy_ratio, out="bfloat16"):
        r = _row("fused", op, N, 1536, pct, 1.0, out=out)
        return r | dict(copy_gbps=4000.0, copy_same_gbps=4000.0 * copy_ratio)

    t = pd.DataFrame(
        [
            row("fwd", 16384, 80.0, 0.85),  # needs 105.9%: not even a copy
            row("fwd", 65536, 88.0, 0.92),  # needs 97.8%
            row("fwd", 65536, 91.0, 0.92),  # meets 90%: not a miss
            row("bwd", 4096, 60.0, 0.95),  # needs 84.2%: the kernel's gap
            row("bwd", 4096, 85.0, 0.60),  # meets 80%
        ]
    )
    table, reachable = ks.misses_table(t)
    lines = table.splitlines()
    assert "| fwd | 2 | 1 | 1 | 0 |" in lines and "| bwd | 1 | 0 | 0 | 1 |" in lines
    assert list(reachable.op) == ["bwd"] and abs(reachable.need.iloc[0] - 80 / 0.95) < 1e-9


def test_speed_targets_name_what_a_same_size_copy_would_reach():
    """fp32 x against the Wan path: a copy of the fused op's bytes is only ~4x faster than Wan,
    so the 10x target reads as unreachable, not as a kernel's gap."""
    fused = _row("fused-f32out", "fwd", 65536, 1536, 95.0, 1.0, dtype="float32", out="float32")
    fused |= dict(bytes=4e9, copy_same_gbps=4000.0)  # a copy of these bytes takes 1.0 ms
    wan = _row("wan-eager", "fwd", 65536, 1536, 23.0, 4.2, dtype="float32", out="float32")
    table = ks.targets_table(pd.DataFrame([fused, wan]))
    row = next(ln for ln in table.splitlines() if ln.startswith("| forward >= 10x"))
    assert "| 1 | 0 | 4.20x: fp32 y, B = 1, N = 65536, D = 1536 (a same-size copy: 4.20x) |" in row


def test_beside_table_puts_every_impl_of_a_shape_in_one_row():
    impls = ["fused", "eager", "compile-eager", "fused-f32out", "fused-dtile-f32out", "wan-eager"]
    rows = [
        _row(impl, "bwd", n, 1536, 10.0 * i + n / 4096, 1.0) | dict(gbps=100.0 * i + n / 4096)
        for i, impl in enumerate(impls)
        for n in (4096, 65536)
    ]
    lines = ks.beside_table(pd.DataFrame(rows), "bwd").splitlines()
    assert lines[0].split("|")[3:-1] == [
        " fused ", " eager ", " compile(eager) ", " fused, fp32 out ", " D-tile, fp32 out ",
        " Wan path ", " compile(Wan) ",
    ]  # fmt: skip
    assert (
        lines[2]
        == "| 1536 | 4096 | 1 (1.0) | 101 (11.0) | 201 (21.0) | 301 (31.0) | 401 (41.0) | 501 (51.0) | - |"
    )
    assert lines[3].startswith("| 1536 | 65536 | 16 (16.0) |") and len(lines) == 4
