"""NVRTC compile time of each fused-AdaLN kernel family, for sm_90 (needs no GPU, only NVRTC)."""

from __future__ import annotations


class Compile:
    version = 1
    params = (["bf16-sample-1536", "float-sample-5120", "bf16-token-3072", "bf16-affine-5120"],)
    param_names = ["variant"]
    timeout = 300
    number = 1
    repeat = 2

    def setup(self, variant):
        from suite.ops.fused_adaln import cuda as fc

        tx, mode, d = variant.split("-")
        modes = {"sample": fc.MODE_SAMPLE, "token": fc.MODE_TOKEN, "affine": fc.MODE_AFFINE}
        self.cfg = fc.KernelConfig(tx, "float", tx, int(d), modes[mode])

    def time_compile_sm90(self, variant):
        from suite.ops.fused_adaln.cuda import build

        build(self.cfg, "sm_90", use_cache=False)
