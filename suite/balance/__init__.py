"""Load balancing for mixed-length video DiT training: buckets, batch-size policies, a distributed
batch sampler, the cost model a + b*B*S^p, a shape-sweep harness, a vectorised cluster simulator
and the coordinated global policy. Plain numpy/scipy: importable without torch.

Modules: buckets, policies, sampler, costmodel, shapebench, simulator, global_policy, cli.
"""
