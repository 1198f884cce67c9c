"""Oracles for tests/test_peer_oracles.py: this project's own implementations of the peers'
reference behaviour (results, tie-breaks, orders, thresholds, constants), written from the
specification each module's header gives and credits (repository, path, commit read). No
source code is copied; framework calls (torch.distributed, timers) become plain inputs."""
