"""SASS of the fused AdaLN kernels without a GPU: compiles one configuration (optionally a variant)
with NVRTC and disassembles the CUBIN with nvdisasm, to see where a kernel's registers and
instructions go before spending device time (lab/LOG.md, round 18). Prints, per kernel:
registers, spills, instructions, and the memory and synchronisation opcodes counted; --full
prints the listing.

nvdisasm comes from the `nvidia-cuda-nvdisasm` wheel (no GPU needed) or from PATH:

    pip install nvidia-cuda-nvdisasm
    python lab/kernel_sass.py --dtypes bf16,float,bf16 --D 1536 [--mode 0] [--variant bwd-r17]
        [--kernel adaln_fwd_pf] [--arch sm_90] [--full]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# opcodes worth counting: memory, shuffles, barriers (by the first word of the instruction)
COUNTED = ("LDG", "STG", "LDS", "STS", "LDL", "STL", "SHFL", "BAR", "WARPSYNC")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def find_nvdisasm() -> str:
    """nvdisasm on PATH, or the one the nvidia-cuda-nvdisasm wheel installs."""
    if exe := shutil.which("nvdisasm"):
        return exe
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec else []:
        for exe in sorted(Path(root).glob("*/bin/nvdisasm")):
            return str(exe)
    raise SystemExit("nvdisasm not found: pip install nvidia-cuda-nvdisasm (or put it on PATH)")


def split_functions(listing: str) -> dict[str, list[str]]:
    """nvdisasm -c output -> {lowered kernel name: its instructions (predicate kept)}."""
    out: dict[str, list[str]] = {}
    cur = None
    for line in listing.splitlines():
        if m := re.match(r"\s*\.text\.(\S+):", line):
            cur = out.setdefault(m.group(1), [])
        elif cur is not None and (m := _INSN.search(line)):
            cur.append(m.group(1))
    return out


def opcode(insn: str) -> str:
    """The opcode's first word without its predicate (e.g. "@!P1 LDG.E.64" -> "LDG")."""
    words = insn.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bf16,float,bf16", help="x, modulation, y C++ types")
    ap.add_argument("--D", type=int, default=1536)
    ap.add_argument("--mode", type=int, default=0, help="0 per sample, 1 per token, 2 affine")
    ap.add_argument("--variant", default="default", help="a name of lab/kernel_variants.py")
    ap.add_argument("--kernel", default="", help="only kernels whose name contains this")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--full", action="store_true", help="print every instruction")
    a = ap.parse_args(argv)

    from lab.variants import variant_config
    from suite.cuda.compile import compile_program, read_sources, resources
    from suite.ops.fused_adaln.cuda import SOURCES, KernelConfig

    tx, tm, ty = a.dtypes.split(",")
    cfg = KernelConfig(tx, tm, ty, a.D, a.mode)
    cfg = cfg if a.variant == "default" else variant_config(cfg, a.variant)
    names = [n for n in dict.fromkeys(cfg.names()) if a.kernel in n]
    if not names:
        raise SystemExit(f"no kernel of {cfg} contains {a.kernel!r}")
    main_src = '#include "adaln_fwd.cu"\n#include "adaln_bwd.cu"\n'
    prog = compile_program(main_src, read_sources(SOURCES), names, a.arch, use_cache=False)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(prog.cubin)
        f.flush()
        run = subprocess.run([find_nvdisasm(), "-c", f.name], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"nvdisasm failed: {run.stderr.strip()}")
    funcs, res = split_functions(run.stdout), resources(prog)
    for name in names:
        insns = funcs.get(prog.names[name], [])
        r = res.get(name, {})
        counts = collections.Counter(opcode(i) for i in insns)
        shown = ", ".join(f"{op} {counts[op]}" for op in COUNTED if counts[op])
        print(
            f"{name}: {r.get('registers')} registers, {r.get('spill_stores')} bytes spilled, "
            f"{len(insns)} instructions ({shown})"
        )
        if a.full:
            print("\n".join("    " + i for i in insns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
