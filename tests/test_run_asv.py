"""The asv regression gate: a slowdown beyond the threshold and outside the noise fails."""

import os
from pathlib import Path

from benchmarks.run_asv import ROOT, _param_combos, benchmark_path, regressions


def test_param_combos_match_asv_names():
    assert _param_combos([["64", "1024"], ["'dual'"]]) == ["[64, 'dual']", "[1024, 'dual']"]
    assert _param_combos([]) == [""]


def test_benchmark_processes_see_the_callers_pythonpath():
    """asv drops PYTHONPATH in the benchmark processes: a wheelhouse installed with pip --target
    (asv_runner there) must reach them through ASV_PYTHONPATH, after the code under test."""
    env = {"PYTHONPATH": os.pathsep.join(["/tmp/site", "", str(ROOT)])}
    assert benchmark_path(Path("/w"), env).split(os.pathsep) == ["/w", str(ROOT), "/tmp/site"]
    assert benchmark_path(Path("/w"), {}).split(os.pathsep) == ["/w", str(ROOT)]


def test_time_regression_needs_ratio_and_separated_intervals():
    base = {"b.S.time_x": (0.10, 0.09, 0.11), "b.S.time_noisy": (0.25, 0.20, 0.30)}
    head = {"b.S.time_x": (0.15, 0.14, 0.16), "b.S.time_noisy": (0.35, 0.25, 0.45)}
    bad = regressions(base, head, 1.10)
    assert len(bad) == 1 and "time_x" in bad[0]


def test_track_direction_by_name():
    base = {"k.F.track_fwd_gbps": (3000.0, 3000.0, 3000.0), "k.F.track_peak_mem_mib": (100.0,) * 3}
    head = {"k.F.track_fwd_gbps": (2000.0, 2000.0, 2000.0), "k.F.track_peak_mem_mib": (90.0,) * 3}
    bad = regressions(base, head, 1.10)
    assert len(bad) == 1 and "gbps" in bad[0]  # lower GB/s is worse; lower memory is better


def _asv_calls(cls):
    """Call every benchmark of `cls` with asv's conventions: setup_cache's result (when the class
    has one and it is not None) goes first to setup and to each benchmark, then the parameters. Returns how many
    calls ran and how many were skipped (setup raising NotImplementedError, asv's skip)."""
    import itertools

    params = (
        cls.params
        if isinstance(getattr(cls, "params", None), tuple)
        else ([cls.params] if hasattr(cls, "params") else [])
    )
    result = cls().setup_cache() if hasattr(cls, "setup_cache") else None
    cache = () if result is None else (result,)  # asv_runner passes a cache only if not None
    ran = skipped = 0
    for combo in itertools.product(*params) if params else [()]:
        for name in [n for n in dir(cls) if n.startswith(("time_", "track_", "peakmem_"))]:
            b = cls()
            try:
                if hasattr(b, "setup"):
                    b.setup(*cache, *combo)
            except NotImplementedError:
                skipped += 1
                continue
            getattr(b, name)(*cache, *combo)
            ran += 1
    return ran, skipped


def test_gpu_benchmarks_take_asv_arguments_and_skip_without_gpu():
    """The H200 asv run of 2026-12-01 failed on setup(D, dtype) of a class with setup_cache: asv
    passes the cache to setup too; CI then failed on setup(cache, D, dtype) because a None cache
    is not passed. Without a GPU every GPU benchmark must skip, not fail."""
    import torch

    from benchmarks import bench_kernels

    for cls in (bench_kernels.FusedAdaLN, bench_kernels.FusedAdaLNTime):
        ran, skipped = _asv_calls(cls)
        if not torch.cuda.is_available():
            assert ran == 0 and skipped > 0, cls
