"""Ports of the peers' reference functions, the oracles tests/test_peer_oracles.py checks the
suite's implementations against. Each module's header names its source (repository, path,
commit read) and licence; each port keeps the source's structure and its tie-breaks, with the
framework calls (torch.distributed, timers) replaced by plain inputs."""
