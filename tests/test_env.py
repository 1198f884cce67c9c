"""env.capture: every field present, and a probe that fails records its error instead of raising."""

from __future__ import annotations

import json

from suite import env


def test_capture_has_every_field():
    info = env.capture("cpu", 1)
    for key in (
        "timestamp",
        "profile",
        "python",
        "platform",
        "hostname",
        "cpu_count",
        "packages",
        "torch",
        "nvidia_smi",
        "nvml",
        "nvrtc",
        "git",
        "world_size",
    ):
        assert key in info, key
    assert info["timestamp"].endswith("Z")
    assert info["packages"]["pandas"] != "absent"
    assert isinstance(info["git"], dict)
    json.dumps(info)  # serialisable


def test_failing_probes_are_recorded(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(env, "git_info", boom)
    monkeypatch.setattr(env, "torch_info", boom)
    monkeypatch.setattr(env, "_run", boom)
    info = env.capture()
    assert info["git"] == {"error": "RuntimeError: probe exploded"}
    assert info["torch"] == {"error": "RuntimeError: probe exploded"}
    assert info["nvidia_smi"] == {"error": "RuntimeError: probe exploded"}


def test_missing_nvidia_smi_is_absent(monkeypatch):
    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(env, "_run", missing)
    assert env.nvidia_smi() == "absent"


def test_nvidia_smi_output_is_parsed(monkeypatch):
    line = (
        "NVIDIA H200, 570.86, 143771, 1980, 1980, 2619, 2619, 120.5, 700.0, Enabled, 31, P0, 9.0, "
        "GPU-5e0b1c2d-0000-1111-2222-333344445555"
    )
    monkeypatch.setattr(env, "_run", lambda *a, **k: line)
    (gpu,) = env.nvidia_smi()
    assert gpu["name"] == "NVIDIA H200" and gpu["ecc.mode.current"] == "Enabled"
    assert gpu["power.limit"] == "700.0" and gpu["uuid"].startswith("GPU-")


def test_git_sha_from_launcher_when_the_tree_has_no_commit(tmp_path, monkeypatch):
    import subprocess as sp

    from suite import env

    sp.run(["git", "init", "-q", str(tmp_path)], check=True)  # a .git with no commit, as on a node
    monkeypatch.setattr(env, "REPO", tmp_path)
    monkeypatch.setenv("SUITE_GIT_SHA", "9ff09e2")
    monkeypatch.setenv("SUITE_GIT_DIRTY", "0")
    info = env.git_info()
    assert info["sha"] == "9ff09e2" and info["dirty"] is False
    monkeypatch.delenv("SUITE_GIT_SHA")
    assert env.git_info().startswith("absent")


def test_launcher_sha_wins_over_a_stale_checkout(monkeypatch):
    """A node's copy of the tree may carry a .git from an older commit: the launcher's word wins."""
    from suite import env

    monkeypatch.setenv("SUITE_GIT_SHA", "240d3cd")
    monkeypatch.setenv("SUITE_GIT_DIRTY", "0")
    info = env.git_info()  # REPO is this checkout, which has a real HEAD
    assert info["sha"] == "240d3cd" and info["source"].startswith("SUITE_GIT_SHA")
    monkeypatch.delenv("SUITE_GIT_SHA")
    assert env.git_info()["sha"] != "240d3cd"
