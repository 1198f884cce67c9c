"""lab/bwd_timeline.py: a profiled backward's kernels split into row kernel and finalize."""

import importlib.util
import math
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "bwd_timeline", Path(__file__).resolve().parent.parent / "bwd_timeline.py"
)
bt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bt)


def _k(name, t0, t1):
    return dict(name=name, t0=t0, t1=t1)


def test_each_row_kernel_takes_only_the_finalize_before_the_next_one():
    parts = bt._split(
        [
            _k("void adaln_bwd<bf16, 1536>", 0, 10),
            _k("adaln_bwd_finalize_t<1536, 96, 8>", 9, 13),  # launched early (PDL): gap -1
            _k("void adaln_bwd<bf16, 1536>", 20, 30),  # no finalize of its own
            _k("Memset", 31, 32),
            _k("void adaln_bwd<bf16, 1536>", 40, 50),
            _k("adaln_bwd_finalize_t<1536, 96, 8>", 51, 53),
        ]
    )
    assert [p["row_us"] for p in parts] == [10, 10, 10]
    assert [p["fin_us"] for p in parts] == [4, 0.0, 2]
    assert parts[0]["gap_us"] == -1 and math.isnan(parts[1]["gap_us"]) and parts[2]["gap_us"] == 1
    assert [p["span_us"] for p in parts] == [13, 10, 13]
