"""Run-time CUDA: NVRTC compile to CUBIN (suite.cuda.compile), an on-disk CUBIN cache, module load
in torch's primary context and typed kernel launch on torch's current stream (suite.cuda.launch).

Compiling needs only NVRTC (works on a machine without a GPU); loading and launching need a GPU.
"""

from suite.cuda.compile import CompileError, Program, compile_program, kernel_source_dir

__all__ = ["CompileError", "Program", "compile_program", "kernel_source_dir"]
