"""The register cap ptxas derives from __launch_bounds__(threads, min CTAs per SM), measured on a
register-hungry test kernel (NVRTC, no GPU needed). lab/LOG.md "Round 8": the caps follow
16384 / (32 x ceil(warps per SM / 4)) rounded down to 8 (one register partition per scheduler),
not 65536 / (threads x CTAs); e.g. (192, 3) -> 96, (160, 3) -> 128.

    python tools/ptxas_regcap.py [--arch sm_90]
"""

from __future__ import annotations

import argparse
import math
import re

BOUNDS = [(192, 3), (160, 3), (128, 3), (256, 2), (320, 2), (96, 6)]

SRC = r"""
template <int T, int B>
__global__ void __launch_bounds__(T, B)
k(const float4* __restrict__ in, float4* __restrict__ out, int n) {
  float4 v[64];  // 256 live floats: far more than any cap, so ptxas uses all it may
#pragma unroll
  for (int i = 0; i < 64; ++i) v[i] = in[threadIdx.x + i * n];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += v[i].x * v[63 - i].y + v[i].z * v[i].w;
#pragma unroll
  for (int i = 0; i < 64; ++i) { v[i].x += s; out[threadIdx.x + i * n] = v[i]; }
}
"""


def caps(arch: str) -> dict[tuple[int, int], int]:
    from cuda.bindings import nvrtc

    src = SRC + "".join(
        f"template __global__ void k<{t}, {b}>(const float4*, float4*, int);\n" for t, b in BOUNDS
    )
    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"regcap.cu", 0, [], [])
    opts = [f"--gpu-architecture={arch}".encode(), b"-Xptxas", b"-v"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    out, bound = {}, None
    for line in log.decode(errors="replace").splitlines():
        m = re.search(r"_Z1kILi(\d+)ELi(\d+)E", line)
        if "Compiling entry" in line and m:
            bound = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and bound:
            out[bound] = int(m.group(1))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="sm_90")
    a = p.parse_args()
    print("threads  ctas  ptxas  65536/(threads*ctas)  per-scheduler model")
    for (t, b), r in sorted(caps(a.arch).items()):
        naive = 65536 // (t * b) // 8 * 8
        sched = 16384 // (32 * math.ceil(b * t / 32 / 4)) // 8 * 8
        print(f"{t:7d}  {b:4d}  {r:5d}  {naive:20d}  {sched:19d}")


if __name__ == "__main__":
    main()
