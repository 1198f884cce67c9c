"""NVRTC: CUDA C++ source -> CUBIN for one architecture, with an on-disk cache.

Why CUBIN and never PTX: PTX from a newer NVRTC than the driver is refused at load time
(CUDA_ERROR_UNSUPPORTED_PTX_VERSION); a CUBIN for the device's own sm_XY loads on any driver of
the same major version. Template kernels are fetched by "name expression" (as TransformerEngine
does): NVRTC gives back the mangled ("lowered") name of each instantiation we ask for.

Cache key: sha256 of the sources, the name expressions, the arch, the options and the NVRTC
version. An unreadable or corrupt entry is recompiled, never a crash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    from cuda.bindings import nvrtc
except ImportError:  # no [ops] extra (macOS has no wheels): the ops import and run their CPU path
    nvrtc = None

DEFAULT_OPTIONS = ("-std=c++17", "-lineinfo", "--ptxas-options=-v")


class CompileError(RuntimeError):
    """NVRTC failed; the message carries the full program log (file:line diagnostics)."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(f"{message}\n--- NVRTC log ---\n{log}" if log else message)
        self.log = log


@dataclass(frozen=True)
class Program:
    """A compiled program: the CUBIN, the lowered name of each name expression, the ptxas log."""

    cubin: bytes
    names: dict[str, str]
    log: str
    arch: str
    key: str
    from_cache: bool = field(default=False, compare=False)


def kernel_source_dir() -> Path:
    """Where the .cu/.cuh sources live: $ADAPTIVELOAD_KERNELS, the package copy suite/_kernels
    (a non-editable install ships them there), or the repository's kernels/ folder."""
    env = os.environ.get("ADAPTIVELOAD_KERNELS")
    here = Path(__file__).resolve().parent.parent  # .../suite
    candidates = ([Path(env)] if env else []) + [here / "_kernels", here.parent / "kernels"]
    for c in candidates:
        if (c / "adaln_common.cuh").is_file():
            return c
    raise FileNotFoundError(
        "CUDA kernel sources not found; looked in "
        + ", ".join(str(c) for c in candidates)
        + " (set ADAPTIVELOAD_KERNELS to the folder holding adaln_common.cuh)"
    )


def read_sources(files: list[str]) -> dict[str, str]:
    root = kernel_source_dir()
    return {f: (root / f).read_text() for f in files}


def nvrtc_version() -> tuple[int, int]:
    if nvrtc is None:  # every compile asks this first (the cache key holds it)
        raise ModuleNotFoundError(
            "the fused CUDA kernels need NVRTC: pip install 'adaptiveload-suite[ops]' "
            "(cuda-bindings and nvidia-cuda-nvrtc; Linux or Windows)"
        )
    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


def cache_dir() -> Path:
    env = os.environ.get("ADAPTIVELOAD_CUBIN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "adaptiveload" / "cubin"


def _check(err, what: str, prog=None) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = _log(prog) if prog is not None else ""
        raise CompileError(f"{what} failed: {err!r}", log)


def _log(prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00").decode(errors="replace")


def _key(main: str, headers: dict[str, str], names: list[str], arch: str, options) -> str:
    h = hashlib.sha256()
    for part in [main, *sorted(headers.items()), *names, arch, *options, repr(nvrtc_version())]:
        h.update(repr(part).encode())
        h.update(b"\x00")
    return h.hexdigest()


def _cache_read(key: str, arch: str) -> Program | None:
    d = cache_dir()
    try:
        meta = json.loads((d / f"{key}.json").read_text())
        cubin = (d / f"{key}.cubin").read_bytes()
        if not cubin or hashlib.sha256(cubin).hexdigest() != meta["sha256"]:
            return None  # truncated or corrupt entry: recompile
        return Program(cubin, dict(meta["names"]), meta.get("log", ""), arch, key, from_cache=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cache_write(p: Program) -> None:
    try:
        d = cache_dir()
        _atomic_write(d / f"{p.key}.cubin", p.cubin)  # cubin first: the json marks it complete
        meta = {"names": p.names, "sha256": hashlib.sha256(p.cubin).hexdigest(), "log": p.log}
        _atomic_write(d / f"{p.key}.json", json.dumps(meta).encode())
    except OSError:
        pass  # a read-only home is no reason to fail: the program is still usable


def compile_program(
    main: str,
    headers: dict[str, str],
    names: list[str],
    arch: str,
    options: tuple[str, ...] = DEFAULT_OPTIONS,
    use_cache: bool = True,
) -> Program:
    """Compile `main` (with `headers` includable by name) to a CUBIN for `arch` ("sm_90").

    `names` are C++ name expressions ("adaln_fwd<float, ...>") to instantiate and fetch."""
    if not arch.startswith("sm_"):
        raise ValueError(
            f"arch must be a real architecture like 'sm_90' (CUBIN, not PTX), got {arch!r}"
        )
    key = _key(main, headers, names, arch, options)
    if use_cache:
        hit = _cache_read(key, arch)
        if hit is not None:
            return hit
    err, prog = nvrtc.nvrtcCreateProgram(
        main.encode(),
        b"adaln.cu",
        len(headers),
        [v.encode() for v in headers.values()],
        [k.encode() for k in headers],
    )
    _check(err, "nvrtcCreateProgram")
    try:
        for n in names:
            (err,) = nvrtc.nvrtcAddNameExpression(prog, n.encode())
            _check(err, f"nvrtcAddNameExpression({n})")
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _check(err, f"NVRTC compile for {arch}", prog)
        log = _log(prog)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize", prog)
        if size == 0:  # e.g. a virtual arch: "success" with nothing to load
            raise CompileError(f"NVRTC produced an empty CUBIN for {arch}", log)
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        _check(err, "nvrtcGetCUBIN", prog)
        lowered = {}
        for n in names:
            err, low = nvrtc.nvrtcGetLoweredName(prog, n.encode())
            _check(err, f"nvrtcGetLoweredName({n})", prog)
            lowered[n] = low.decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    p = Program(bytes(buf), lowered, log, arch, key)
    if use_cache:
        _cache_write(p)
    return p


_FUNC = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def resources(program: Program) -> dict[str, dict[str, int]]:
    """ptxas's resource report per name expression of `program` (from the verbose log):
    registers, shared memory, stack frame and spill bytes. Kernels the log does not describe
    (e.g. a cached entry compiled without -v) are left out."""
    by_lowered: dict[str, dict[str, int]] = {}
    cur = None
    for line in program.log.splitlines():
        if m := _FUNC.search(line):
            cur = by_lowered.setdefault(m.group(1), {})
        elif cur is not None and (m := _FRAME.search(line)):
            cur.update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif cur is not None and (m := _REGS.search(line)):
            sm = _SMEM.search(line)
            cur.update(registers=int(m[1]), smem=int(sm[1]) if sm else 0)
    return {n: by_lowered[low] for n, low in program.names.items() if low in by_lowered}
