"""Measurements of the shipped ops that no product entry point runs: the host-path benchmark and
its breakdown, CUDA-graph capture and bandwidth checks, the epilogue benchmark."""
