"""Load a CUBIN into torch's CUDA context and launch kernels on torch's current stream.

Order matters: torch must create (and make current) the device's primary context before any
cuModule call, otherwise the driver answers CUDA_ERROR_INVALID_CONTEXT. Kernel arguments are
passed with explicit ctypes types: a plain Python int would go in as 64 bits and a float as a
double, which a kernel taking int/float reads as garbage, without any error.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import torch
from cuda.bindings import driver

from suite.cuda.compile import Program

_lock = threading.Lock()
_modules: dict[tuple[int, str], object] = {}
_functions: dict[tuple[int, str, str], object] = {}


class CudaError(RuntimeError):
    pass


def _check(result, what: str):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise CudaError(f"{what} failed: {name.decode() if name else err!r}")
    return rest[0] if len(rest) == 1 else rest


@functools.cache
def has_gpu() -> bool:
    """Checked once, before any driver call (a failed driver call can leave cuda libraries stuck)."""
    return torch.cuda.is_available()


def device_arch(device: torch.device | int | None = None) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _ensure_context(index: int) -> None:
    if not has_gpu():
        raise CudaError("no CUDA device: the fused kernels need a GPU (the op falls back on CPU)")
    torch.cuda.init()
    with torch.cuda.device(index):
        torch.empty(1, device=f"cuda:{index}")  # makes torch's primary context current here
    _check(driver.cuInit(0), "cuInit")
    ctx = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(ctx) == 0:  # a thread torch never used: bind the primary context torch owns
        dev = _check(driver.cuDeviceGet(index), "cuDeviceGet")
        ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def bind_thread_context(index: int) -> None:
    """Make torch's primary context of device `index` current on this thread (once per thread
    and launch plan: the launches themselves take no context argument)."""
    with _lock:
        _ensure_context(index)


def get_function(program: Program, name: str, index: int):
    """The CUfunction for name expression `name` of `program` on device `index` (cached)."""
    fkey = (index, program.key, name)
    f = _functions.get(fkey)
    if f is not None:
        return f
    with _lock:
        _ensure_context(index)
        mkey = (index, program.key)
        mod = _modules.get(mkey)
        if mod is None:
            mod = _check(
                driver.cuModuleLoadData(program.cubin), f"cuModuleLoadData({program.arch})"
            )
            _modules[mkey] = mod
        f = _check(
            driver.cuModuleGetFunction(mod, program.names[name].encode()),
            f"cuModuleGetFunction({name})",
        )
        _functions[fkey] = f
    return f


@functools.cache  # a property of the function and the block: one driver call, not one per launch
def max_blocks_per_sm(func, threads: int, smem: int = 0) -> int:
    return int(
        _check(
            driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, threads, smem),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
    )


# (dynamic shared bytes, carveout) last set per function: the driver is called only on a change
_dynamic_smem: dict[int, tuple[int, int]] = {}


def use_dynamic_smem(func, nbytes: int, carveout: int = 100) -> None:
    """Let `func` launch with `nbytes` of dynamic shared memory, set whatever the size: the
    driver's default limit is 48 KB less the kernel's static shared memory, so 48 KB of dynamic
    beside 128 static bytes is refused without it (CUDA_ERROR_INVALID_VALUE); `carveout`: the % of the SM's unified L1 / shared memory preferred as
    shared memory (100: all of it, so several such CTAs fit on an SM; the rest stays L1)."""
    if _dynamic_smem.get(int(func)) == (nbytes, carveout):
        return
    attr = driver.CUfunction_attribute
    _check(
        driver.cuFuncSetAttribute(
            func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes
        ),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
    )
    _check(
        driver.cuFuncSetAttribute(
            func, attr.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout
        ),
        "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)",
    )
    _dynamic_smem[int(func)] = (nbytes, carveout)


@functools.cache
def sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# Typed kernel arguments: (value, ctypes type) pairs.
def ptr(t: torch.Tensor | None):
    return (0 if t is None else t.data_ptr(), ctypes.c_void_p)


def i64(v: int):
    return (int(v), ctypes.c_int64)


def i32(v: int):
    if not -(2**31) <= int(v) < 2**31:
        raise OverflowError(f"kernel argument {v} does not fit in int32")
    return (int(v), ctypes.c_int32)


def f32(v: float):
    return (float(v), ctypes.c_float)


# torch's current stream of a device as a raw handle: the private binding inductor's generated
# code uses (~0.3 us) where it exists, else the public Stream object (~6 us per call).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream_handle(index: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


@functools.cache  # one config per shape and stream (~7 us to build), never changed once built
def _dependent_config(grid: tuple[int, int, int], block: int, smem: int, stream: int):
    c = driver.CUlaunchConfig()
    c.hStream = driver.CUstream(stream)
    c.gridDimX, c.gridDimY, c.gridDimZ = grid
    c.blockDimX, c.blockDimY, c.blockDimZ = block, 1, 1
    c.sharedMemBytes = smem
    a = driver.CUlaunchAttribute()
    a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    a.value.programmaticStreamSerializationAllowed = 1
    c.attrs, c.numAttrs = [a], 1
    return c


class PackedArgs:
    """Kernel arguments packed once: every argument in its own 8-byte slot of one ctypes array,
    and the kernelParams array (void*[n]) pointing at the slots. A launch plan builds one per
    shape; a call rewrites only the pointer slots (`slots[i] = tensor.data_ptr()`, one item
    assignment each) and passes `address`, so a launch creates no ctypes objects. Slot values are
    little-endian, so an int32 or float argument reads the low 4 bytes of its slot."""

    __slots__ = ("slots", "params", "address")

    def __init__(self, args: list):
        n = len(args)
        self.slots = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.slots)
        self.params = (ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))
        self.address = ctypes.addressof(self.params)
        for i, (value, ctype) in enumerate(args):
            ctype.from_address(base + 8 * i).value = (
                (value or 0) if ctype is ctypes.c_void_p else value
            )


_SUCCESS = driver.CUresult.CUDA_SUCCESS


def launch_packed(
    func: int, grid: tuple[int, int, int], block: int, smem: int, stream: int, args: PackedArgs
) -> None:
    """cuLaunchKernel with a pre-built kernelParams array (PackedArgs) on raw `stream`; `func` is
    the CUfunction (object or int handle). The cheap launch of a cached plan."""
    (err,) = driver.cuLaunchKernel(
        func, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, args.address, 0
    )
    if err != _SUCCESS:
        _check((err,), "cuLaunchKernel")


def launch_packed_dependent(func, config, args: PackedArgs) -> None:
    """launch_packed as a programmatic dependent launch; `config` from dependent_config."""
    (err,) = driver.cuLaunchKernelEx(config, func, args.address, 0)
    if err != _SUCCESS:
        _check((err,), "cuLaunchKernelEx")


def dependent_config(grid: tuple[int, int, int], block: int, smem: int, stream: int):
    """The launch config of a programmatic dependent launch (cached per shape and stream)."""
    return _dependent_config(tuple(grid), block, smem, stream)


def launch(
    func,
    grid: tuple[int, int, int],
    block: int,
    index: int,
    args: list,
    smem: int = 0,
    dependent: bool = False,
) -> None:
    """Launch on device `index`'s current torch stream, so the kernel orders with torch's work.
    dependent: a programmatic dependent launch (sm_90+) that may start before the previous
    kernel on the stream ends (once that kernel's CTAs all ran griddepcontrol.launch_dependents
    or exited); the kernel must wait (griddepcontrol.wait) before it reads what that one wrote."""
    if min(grid) <= 0:
        return
    handle = current_stream_handle(index)
    values = tuple(a[0] for a in args)
    types = tuple(a[1] for a in args)
    if not dependent:
        stream = driver.CUstream(handle)
        _check(
            driver.cuLaunchKernel(
                func, grid[0], grid[1], grid[2], block, 1, 1, smem, stream, (values, types), 0
            ),
            "cuLaunchKernel",
        )
        return
    config = _dependent_config(tuple(grid), block, smem, handle)
    _check(driver.cuLaunchKernelEx(config, func, (values, types), 0), "cuLaunchKernelEx")
