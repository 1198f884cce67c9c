"""Did a kernel change alter the machine code of the shipped kernels? Compiles every shipped
configuration's kernels (suite/ops/fused_adaln/kernel_config.py) for sm_90 from the working tree
and from a base revision (its kernel sources and its kernel names), and compares each kernel's ELF
.text section and ptxas's resource report (registers, shared memory, stack, spills); the CUBIN
bytes differ with any edit that moves a line, so they cannot tell. Kernels are paired by their
position in KernelConfig.names(), so a template parameter that is removed or added (its names
change) is compared too. A refactor that leaves the shipped code alone keeps every measurement
in reports/ valid.

    python lab/kernel_code_diff.py --base 728903d [--widths 1,7,64,1000,1536,...] [--jobs 2]

Exit status 1 when a kernel's code differs or fails to compile from the base.
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import subprocess
import sys
import types
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CONFIG = "suite/ops/fused_adaln/kernel_config.py"
WIDTHS = "1,7,64,1000,1536,3072,4100,5120,8192"  # tests/test_kernel_config.py's


def text_sections(cubin: bytes) -> dict[str, bytes]:
    """The .text.<kernel> sections of an ELF64 CUBIN, by section name."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]  # the section-name string table's file offset
    out = {}
    for name, _type, _flags, _addr, off, size in heads:
        n = cubin[names_at + name : cubin.index(b"\0", names_at + name)].decode()
        if n.startswith(".text."):
            out[n] = cubin[off : off + size]
    return out


def _git_show(rev: str, path: str) -> str | None:
    run = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True)
    return run.stdout if run.returncode == 0 else None


def base_sources(rev: str, files: list[str]) -> dict[str, str]:
    """rev's kernels/ files among `files` (those added since rev are left out: their code was
    inside another file there)."""
    shown = {f: _git_show(rev, f"kernels/{f}") for f in files}
    return {f: s for f, s in shown.items() if s is not None}


def base_config_module(rev: str) -> types.ModuleType:
    """rev's kernel_config.py as a module (it imports nothing of the suite)."""
    src = _git_show(rev, CONFIG)
    if src is None:
        raise SystemExit(f"{CONFIG} not found at {rev}")
    mod = types.ModuleType("base_kernel_config")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, f"{rev}:{CONFIG}", "exec"), mod.__dict__)
    return mod


def fingerprints(sources: dict[str, str], names: list[str], arch: str) -> list[str | None]:
    """Per name expression, a hash of its kernel's .text section and ptxas resources."""
    from suite.cuda.compile import compile_program, resources
    from suite.ops.fused_adaln.cuda import MAIN

    prog = compile_program(MAIN, sources, names, arch, use_cache=False)
    text, res = text_sections(prog.cubin), resources(prog)
    out = []
    for n in names:
        code = text.get(".text." + prog.names[n])
        report = repr(sorted(res.get(n, {}).items())).encode()
        out.append(None if code is None else hashlib.sha256(code + report).hexdigest())
    return out


def _compare(job) -> tuple[int, list[str]]:
    from suite.cuda.compile import CompileError

    label, base_src, base_names, head_src, head_names, arch = job
    if len(base_names) != len(head_names):
        return 0, [f"{label}: {len(base_names)} kernels at the base, {len(head_names)} now"]
    try:
        old = fingerprints(base_src, base_names, arch)
    except CompileError as e:
        return 0, [f"{label}: does not compile from the base ({str(e)[:80]})"]
    new = fingerprints(head_src, head_names, arch)
    bad = [f"{label}: {b} -> {h} differs" for b, h, o, n in zip(base_names, head_names, old, new)
           if o is None or o != n]  # fmt: skip
    return len(head_names) - len(bad), bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision to compare with")
    ap.add_argument("--widths", default=WIDTHS)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--jobs", type=int, default=1, help="programs compiled at once")
    a = ap.parse_args(argv)

    from suite.cuda.compile import read_sources
    from suite.ops.fused_adaln.cuda import SOURCES
    from suite.ops.fused_adaln.kernel_config import all_configs

    widths = tuple(int(w) for w in a.widths.split(","))
    head_src, base_src = read_sources(SOURCES), base_sources(a.base, SOURCES)
    base_cfg = base_config_module(a.base)
    jobs = []
    for cfg in all_configs(widths):
        key = (cfg.tx, cfg.tm, cfg.ty, cfg.D, cfg.mode)
        label = "{}/{}/{} D={} mode={}".format(*key)
        base_names = base_cfg.KernelConfig(*key).names()
        jobs.append((label, base_src, base_names, head_src, cfg.names(), a.arch))
    same, bad = 0, []
    with ProcessPoolExecutor(a.jobs) as pool:
        for n_same, n_bad in pool.map(_compare, jobs):
            same, bad = same + n_same, bad + n_bad
    print(f"{len(jobs)} programs: {same} kernels with the same code as {a.base}; {len(bad)} differ")
    print("\n".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
