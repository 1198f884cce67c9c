"""python -m suite.experiments.kernels: the kernel benchmark alone (see main)."""

from suite.experiments.kernels import main

main()
