"""Did a kernel-source change alter the machine code of the default kernels? Compiles every default
configuration's kernels (suite/ops/fused_adaln/kernel_config.py) for sm_90 from the working tree and from the
kernel sources of a base revision, and compares the ELF .text sections of each kernel (the CUBIN
bytes differ with any edit that moves a line, so they cannot tell). A refactor or a new variant
that leaves the defaults' code alone keeps every measured default in reports/ valid.

    python lab/kernel_code_diff.py --base d45682e [--widths 1536,3072,5120] [--arch sm_90]

Exit status 1 when a kernel's code differs or fails to compile from the base sources.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


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


def base_sources(rev: str, files: list[str]) -> dict[str, str]:
    def show(f):
        return subprocess.run(
            ["git", "show", f"{rev}:kernels/{f}"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def exists(f):  # files added since rev (their code was inside another file there)
        return not subprocess.run(
            ["git", "cat-file", "-e", f"{rev}:kernels/{f}"], cwd=ROOT, capture_output=True
        ).returncode

    return {f: show(f) for f in files if exists(f)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision whose kernels/ to compare with")
    ap.add_argument("--widths", default="1536,3072,5120,1000,8192")
    ap.add_argument("--arch", default="sm_90")
    a = ap.parse_args(argv)

    from suite.cuda.compile import CompileError, compile_program, read_sources
    from suite.ops.fused_adaln.cuda import SOURCES
    from suite.ops.fused_adaln.kernel_config import all_configs

    main_src = '#include "adaln_fwd.cu"\n#include "adaln_bwd.cu"\n'
    head, base = read_sources(SOURCES), base_sources(a.base, SOURCES)
    widths = tuple(int(w) for w in a.widths.split(","))
    same, bad = 0, []
    for cfg in all_configs(widths):
        label = f"{cfg.tx}/{cfg.tm}/{cfg.ty} D={cfg.D} mode={cfg.mode}"
        names = cfg.names()
        try:
            old = compile_program(main_src, base, names, a.arch, use_cache=False)
        except CompileError as e:
            bad.append(f"{label}: does not compile from {a.base}'s sources ({str(e)[:80]})")
            continue
        new = compile_program(main_src, head, names, a.arch)
        # by name expression: a new defaulted template parameter changes the mangled names
        old_text, new_text = text_sections(old.cubin), text_sections(new.cubin)
        for n in names:
            if old_text.get(".text." + old.names[n]) == new_text.get(".text." + new.names[n]):
                same += 1
            else:
                bad.append(f"{label}: {n} differs")
    print(f"{same} kernels with the same code as {a.base}; {len(bad)} differ")
    print("\n".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
