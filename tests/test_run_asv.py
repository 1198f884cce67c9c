"""The asv benchmarks: asv's calling conventions, lower-is-better everywhere, and the committed
benchmark list (reports/asv/benchmarks.json, which `asv publish` reads) matching the code."""

import importlib
import itertools
import json
import os

from benchmarks.run_asv import ROOT, _param_combos, benchmark_path, load_results

MODULES = ["bench_balance", "bench_kernels", "bench_machine", "bench_nvrtc"]
# units of the track_ benchmarks: each one's lower is better, as asv assumes
LOWER_IS_BETTER_UNITS = {"us", "x copy time", "MiB"}


def benchmarks() -> dict[str, tuple[type, str]]:
    """{asv name: (class, method)} of every benchmark in the benchmark modules."""
    out = {}
    for mod in MODULES:
        m = importlib.import_module(f"benchmarks.{mod}")
        for cls in [
            c for c in vars(m).values() if isinstance(c, type) and c.__module__ == m.__name__
        ]:
            for name in dir(cls):
                if name.startswith(("time_", "track_", "peakmem_", "mem_")):
                    out[f"{mod}.{cls.__name__}.{name}"] = (cls, name)
    return out


def test_param_combos_match_asv_names():
    assert _param_combos([["64", "1024"], ["'dual'"]]) == ["[64, 'dual']", "[1024, 'dual']"]
    assert _param_combos([]) == [""]


def test_benchmark_processes_see_the_callers_pythonpath():
    """asv drops PYTHONPATH in the benchmark processes: a wheelhouse installed with pip --target
    (asv_runner there) must reach them through ASV_PYTHONPATH, after the code under test."""
    env = {"PYTHONPATH": os.pathsep.join(["/tmp/site", "", str(ROOT)])}
    assert benchmark_path(env).split(os.pathsep) == [str(ROOT), "/tmp/site"]
    assert benchmark_path({}).split(os.pathsep) == [str(ROOT)]


def test_every_benchmark_is_lower_is_better_and_pins_its_version():
    for name, (cls, method) in benchmarks().items():
        assert isinstance(getattr(cls, "version", None), int), name
        if method.startswith("track_"):
            assert getattr(cls, method).unit in LOWER_IS_BETTER_UNITS, name


def test_the_committed_benchmark_list_is_the_codes():
    """asv publish shows a series only for the names and versions benchmarks.json lists: after
    a benchmark changes, copy .asv/results/benchmarks.json from any asv run to reports/asv/."""
    listed = json.loads((ROOT / "reports/asv/benchmarks.json").read_text())
    listed = {k: v["version"] for k, v in listed.items() if k != "version"}
    assert listed == {k: str(cls.version) for k, (cls, _) in benchmarks().items()}


def test_committed_gpu_points_hold_only_lower_is_better_tracks_of_the_listed_version():
    """The kernel points were converted from GB/s and % of copy (version 3, the same
    measurement) to us and x copy time: no series of the old, higher-is-better names is left."""
    listed = json.loads((ROOT / "reports/asv/benchmarks.json").read_text())
    for machine, commit in (("h200", "f7659905"), ("h100", "b33b3cb7")):
        saved = load_results(commit, machine, ROOT / "reports/asv")
        kernels = {k: v for k, v in saved.items() if k.startswith("bench_kernels.")}
        assert len(kernels) == 7 * 6 + 1, machine  # 7 tracks x 6 shapes, and time_fwd
        for name, v in kernels.items():
            assert v["version"] == listed[name.split("[")[0]]["version"], name
        fwd = "bench_kernels.FusedAdaLN.track_fwd_{}[1536, 'bfloat16']"
        assert 1.0 <= kernels[fwd.format("over_copy")]["value"] < 1.2  # near copy speed
        assert 50 < kernels[fwd.format("us")]["value"] < 500


def _asv_calls(cls):
    """Call every benchmark of `cls` with asv's conventions: setup_cache's result (when the class
    has one and it is not None) goes first to setup and to each benchmark, then the parameters.
    Returns how many calls ran and how many were skipped (setup raising NotImplementedError,
    asv's skip)."""
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
    """asv passes setup_cache's result to setup too, and a None cache not at all: the GPU
    benchmarks take it on both machines, and without a GPU every one skips, not fails."""
    import torch

    from benchmarks import bench_kernels

    for cls in (bench_kernels.FusedAdaLN, bench_kernels.FusedAdaLNTime):
        ran, skipped = _asv_calls(cls)
        if not torch.cuda.is_available():
            assert ran == 0 and skipped > 0, cls


def test_kernel_tracks_read_times_and_their_ratio_to_the_copy():
    """track_*_over_copy is the call's time over the copy's time for the same bytes."""
    from benchmarks import bench_kernels

    cache = {"copy_gbps": 4000.0, (1536, "bfloat16"): {"fwd": (100.0, 4e8), "peak_mib": 1.0}}
    b = bench_kernels.FusedAdaLN()
    assert b.track_fwd_us(cache, 1536, "bfloat16") == 100.0
    # 4e8 bytes at 4000 GB/s take 100 us: at copy speed
    assert b.track_fwd_over_copy(cache, 1536, "bfloat16") == 1.0
    cache[(1536, "bfloat16")]["fwd"] = (125.0, 4e8)
    assert b.track_fwd_over_copy(cache, 1536, "bfloat16") == 1.25
