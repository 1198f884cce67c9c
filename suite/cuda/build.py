"""One fused op's kernels as NVRTC programs: the width check, the build of one configuration, the
per-device function lookup and the parallel prebuild of the on-disk CUBIN cache. Both fused ops
(suite/ops/fused_adaln/cuda.py, suite/ops/epilogue/cuda.py) describe themselves with an OpKernels.

A configuration is any hashable object with `D` (the row width) and `names()` (the C++ name
expressions its program instantiates); lab candidates may add `defines` (-D switches).
"""

from __future__ import annotations

import functools

import torch

from suite.cuda.compile import DEFAULT_OPTIONS, Program, compile_program, read_sources


class OpKernels:
    """op: the op's name in errors; sources: its files under kernels/; main: the source that
    includes the kernels; max_d: the widest row it holds (in registers)."""

    def __init__(self, op: str, sources: tuple[str, ...], main: str, max_d: int):
        self.op, self.sources, self.main, self.max_d = op, tuple(sources), main, max_d
        # per-process caches: one program per (config, arch), one lookup per (program, kernel,
        # device) rather than per launch; cache_clear() drops them (lab stubs launches)
        self.program = functools.cache(self.build)
        self.function = functools.cache(self._function)

    def check_d(self, D: int) -> None:
        if not 1 <= D <= self.max_d:
            raise ValueError(
                f"{self.op} supports 1 <= D <= {self.max_d} (the row is held in registers), "
                f"got D={D}"
            )

    def _job(self, cfg, arch: str) -> tuple:
        options = DEFAULT_OPTIONS + tuple(f"-D{d}" for d in getattr(cfg, "defines", ()))
        return self.main, self.sources, tuple(cfg.names()), arch, options

    def build(self, cfg, arch: str, use_cache: bool = True) -> Program:
        """Compile every kernel of `cfg` for `arch` (NVRTC only: works without a GPU)."""
        self.check_d(cfg.D)
        return _compile(self._job(cfg, arch), use_cache)

    def _function(self, cfg, name: str, index: int):
        from suite.cuda.launch import device_arch, get_function

        return get_function(self.program(cfg, device_arch(index)), name, index)

    def prebuild(self, configs: list, arch: str, workers: int = 8) -> int:
        """Fill the on-disk CUBIN cache for `configs` in parallel processes (NVRTC is
        single-threaded per program); later processes load the CUBINs instead of compiling."""
        from concurrent.futures import ProcessPoolExecutor

        for cfg in configs:
            self.check_d(cfg.D)
        with ProcessPoolExecutor(workers) as ex:
            return len(list(ex.map(_prebuild_one, [self._job(c, arch) for c in configs])))


def _compile(job: tuple, use_cache: bool = True) -> Program:
    main, sources, names, arch, options = job
    return compile_program(
        main, read_sources(list(sources)), list(names), arch, options, use_cache=use_cache
    )


def _prebuild_one(job: tuple) -> str:
    _compile(job)
    return job[3]  # the arch: the CUBIN stays in the cache, not in the parent process


def check_rows(D: int, **tensors: torch.Tensor) -> None:
    """The kernels read a row as D consecutive elements: a tensor whose last dimension is strided
    would be read wrong, silently. Checked when a launch plan is built (its key holds the
    strides), so it costs nothing per call; the public ops make such tensors contiguous first."""
    for name, t in tensors.items():
        if D > 1 and t.stride(-1) != 1:
            raise ValueError(
                f"{name}: the fused kernels need a contiguous last dimension (stride 1), got "
                f"strides {tuple(t.stride())}; pass {name}.contiguous()"
            )


def same_strides(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether one set of strides addresses both tensors (the kernels read shift with scale's):
    one shape, and one stride in every dimension longer than 1 (a length-1 dimension's stride
    is never used, and .contiguous() leaves it as it was: a [1, 1, D] tensor and row 0 of a
    [1, 6, D] table differ there and nowhere else)."""
    return a.shape == b.shape and all(
        n == 1 or sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride())
    )
