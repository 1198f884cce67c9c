"""The fused AdaLN kernels' tuning lab: benchmark variants, the latency model, SASS/ptxas/timeline
tools, the shipped ops' measurements (lab/ops/: host path, graph capture, bandwidth, epilogues)
and their tests. Not imported by suite/ (the shipped op runs the default kernels only);
run from the repository root, tests with an explicit path: `python -m pytest lab/tests`."""
