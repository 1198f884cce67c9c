"""AdaptiveLoad reproducibility suite: load balancing, fused AdaLN kernels, a reference trainer,
and the claims ledger that turns measured tables into verdicts."""

__version__ = "0.1.0"
