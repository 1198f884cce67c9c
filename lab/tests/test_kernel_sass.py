"""lab/kernel_sass.py: nvdisasm's listing split into kernels and their opcodes counted (the
parsing runs without nvdisasm; the tool itself needs the nvidia-cuda-nvdisasm wheel)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "kernel_sass", Path(__file__).resolve().parent.parent / "kernel_sass.py"
)
kernel_sass = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel_sass)

LISTING = """
	.section	.text._Z3fooPf,"ax",@progbits
	.text._Z3fooPf:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P1 LDG.E.NA.64.CONSTANT R48, desc[UR4][R8.64+0x100] ;
        /*0020*/                   STG.E.64 desc[UR4][R88.64], R78 ;
        /*0030*/                   EXIT ;
	.section	.text._Z3barv,"ax",@progbits
	.text._Z3barv:
        /*0000*/                   SHFL.BFLY PT, R33, R7, 0x10, 0x1f ;
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
"""


def test_split_functions_and_opcodes():
    funcs = kernel_sass.split_functions(LISTING)
    assert list(funcs) == ["_Z3fooPf", "_Z3barv"]
    assert len(funcs["_Z3fooPf"]) == 4 and len(funcs["_Z3barv"]) == 2
    ops = [kernel_sass.opcode(i) for i in funcs["_Z3fooPf"]]
    assert ops == ["LDC", "LDG", "STG", "EXIT"]  # the predicate @!P1 is not the opcode
    assert [kernel_sass.opcode(i) for i in funcs["_Z3barv"]] == ["SHFL", "BAR"]


def test_unknown_kernel_filter_is_a_clear_error():
    with pytest.raises(SystemExit, match="no kernel"):
        kernel_sass.main(["--D", "64", "--kernel", "no_such_kernel"])
