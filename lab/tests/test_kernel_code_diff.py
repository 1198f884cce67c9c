"""lab/kernel_code_diff.py: kernels compared by their machine code, not by CUBIN bytes (NVRTC on
the CPU, no GPU needed)."""

import importlib.util
from pathlib import Path

from suite.cuda.compile import compile_program

_spec = importlib.util.spec_from_file_location(
    "kernel_code_diff", Path(__file__).resolve().parent.parent / "kernel_code_diff.py"
)
kcd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kcd)

SRC = "template <int V> __global__ void k(float* p) { p[threadIdx.x] = V * p[threadIdx.x]; }\n"


def _text(src: str, name: str = "k<3>") -> bytes:
    prog = compile_program(src, {}, [name], "sm_90", use_cache=False)
    return kcd.text_sections(prog.cubin)[".text." + prog.names[name]]


def test_same_code_after_moving_lines_other_code_after_an_edit():
    moved = "// a comment that moves every line\n\n" + SRC
    assert _text(SRC) == _text(moved)  # the CUBIN bytes may differ; the code does not
    assert _text(SRC) != _text(SRC.replace("V * p", "V + p"))
    assert _text(SRC) != _text(SRC, "k<4>")
