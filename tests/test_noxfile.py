"""noxfile.py's reproduce session: `--nproc-per-node K` becomes a torchrun launch."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("nox")
_spec = importlib.util.spec_from_file_location(
    "noxfile", Path(__file__).resolve().parents[1] / "noxfile.py"
)
noxfile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(noxfile)

TORCHRUN = ["-m", "torch.distributed.run", "--nproc-per-node"]


@pytest.mark.parametrize(
    "posargs,args,launcher",
    [
        (["--profile", "quick"], ["--profile", "quick"], []),
        (["--nproc-per-node", "2", "--profile", "quick"], ["--profile", "quick"], [*TORCHRUN, "2"]),
        (["--profile", "full", "--nproc-per-node=8"], ["--profile", "full"], [*TORCHRUN, "8"]),
        (["--nproc-per-node", "1", "--budget", "500"], ["--budget", "500"], []),
    ],
)
def test_reproduce_launches_torchrun_for_several_processes(posargs, args, launcher):
    assert noxfile._torchrun_args(posargs) == (args, launcher)


@pytest.mark.parametrize("bad", [["--nproc-per-node", "two"], ["--nproc-per-node"]])
def test_reproduce_rejects_a_bad_process_count(bad):
    with pytest.raises(ValueError, match="nproc-per-node"):
        noxfile._torchrun_args(bad)


def test_sessions_see_the_packages_of_the_interpreter_running_nox(monkeypatch):
    """The venvs' .pth lists the running interpreter's own site-packages (a venv's, not its
    base's), and the shared .nox/torch only when that interpreter has no torch of its own.
    (Inside a nox session this interpreter is the session's, whose torch may be the shared one.)"""
    import site

    dirs = noxfile._outer_site_dirs()
    assert set(site.getsitepackages()) <= set(dirs)
    assert str(noxfile.SHARED_TORCH) not in dirs  # this interpreter imports a torch
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    assert str(noxfile.SHARED_TORCH) in noxfile._outer_site_dirs()
