"""Sessions: tests, lint, nvrtc_oldest, lowest, reproduce, report, bench, asv, wheelhouse.

Every venv session sees the packages of the interpreter running nox (a venv's own, not only its
base's), so a torch installed there (a user's CUDA build, CI's CPU build) is reused, never
replaced. Without one, torch is installed once into .nox/torch, which every session shares.
On an offline GPU node:
    python -m nox --no-venv --no-install -s reproduce -- --profile quick
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import site
import subprocess
import sys
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True
nox.options.download_python = "never"

ROOT = Path(__file__).parent
SHARED_TORCH = ROOT / ".nox" / "torch"  # pip --target dir; used only if nox's interpreter has none


def _outer_site_dirs() -> list[str]:
    """The interpreter running nox: its site-packages (a venv's own; `--system-site-packages`
    would give its base's), its user site, and .nox/torch when it has no torch of its own."""
    dirs = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    if importlib.util.find_spec("torch") is None:
        dirs.append(str(SHARED_TORCH))
    return dirs


def _link_outer_packages(session: nox.Session) -> None:
    """Put _outer_site_dirs() on the session venv's path through a .pth file. They come after the
    venv's own site-packages, so a package installed in the venv wins (nvrtc_oldest's NVRTC),
    and pip counts the ones found there as installed: it never downloads a second torch."""
    out = session.run_install(  # the install step: runs under --install-only too
        "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
    )
    if out is None:
        return  # --no-install on a reused venv: its .pth is already there
    purelib = out.strip()
    # addsitedir, not a bare path: the .pth files there run too (an editable torch's finder)
    lines = [f"import site; site.addsitedir({d!r})" for d in _outer_site_dirs()]
    # and their prefixes in site.PREFIXES: tools that look for files through
    # site.getsitepackages() (cuda-pathfinder finding libnvrtc in nvidia-cuda-nvrtc) see them too
    # (one statement: a .pth line runs in exec, where a comprehension cannot see `site`)
    lines.append(f"import site; site.PREFIXES.extend({site.PREFIXES!r})")
    Path(purelib, "_nox_outer_packages.pth").write_text("\n".join(lines) + "\n")
    if importlib.util.find_spec("torch") is None and not (SHARED_TORCH / "torch").is_dir():
        session.log(f"no torch in {sys.executable}: installing one, once, into {SHARED_TORCH}")
        session.install("--target", str(SHARED_TORCH), "torch", silent=False)


def _install(session: nox.Session, *extras: str, pins: list[str] = ()) -> None:
    """Install the suite with `extras` (pyproject's: ops, reproduce, parquet, bench, test) into
    the session, pip's progress shown (skipped by --no-install / --no-venv); `pins`: pip
    constraints ("numpy==1.26") it must resolve under."""
    if isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        return  # --no-venv: run on what the node already has
    _link_outer_packages(session)
    spec = f".[{','.join(extras)}]" if extras else "."
    args = []
    if pins:
        constraints = Path(session.create_tmp(), "floors.txt")
        constraints.write_text("\n".join(pins) + "\n")
        args = ["-c", str(constraints)]
    session.install("-e", spec, *args, silent=False)


def _run_py(session: nox.Session, *args: str, **kw) -> None:
    exe = (
        sys.executable
        if isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv)
        else "python"
    )
    session.run(exe, *args, **kw)


@nox.session
def tests(session: nox.Session) -> None:
    """Unit, property and end-to-end CPU tests (GPU tests skip with a reason without CUDA)."""
    _install(session, "test")
    _run_py(session, "-m", "pytest", *(session.posargs or ["-q"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and format check."""
    if not isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        session.install("ruff", silent=False)
    session.run("ruff", "check", "suite", "tests", "benchmarks", "tools", "noxfile.py")
    session.run("ruff", "format", "--check", "suite", "tests", "benchmarks", "tools", "noxfile.py")


# The oldest NVRTC the kernels are checked with: the H200 image's. A newer NVRTC accepts code
# this one refuses (a generic lambda in a kernel did, at db18a14), and no GPU is needed to see it.
OLDEST_NVRTC = "13.0"


@nox.session
def nvrtc_oldest(session: nox.Session) -> None:
    """The NVRTC compile tests (every kernel configuration, sm_80 and sm_90, no spills) with the
    oldest NVRTC supported, installed into this session's venv over the interpreter's own."""
    if isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        session.error("nvrtc_oldest installs an older NVRTC: run it in its own venv (no --no-venv)")
    _install(session, "test")
    session.install(f"nvidia-cuda-nvrtc=={OLDEST_NVRTC}.*", silent=False)
    want = tuple(int(v) for v in OLDEST_NVRTC.split("."))
    check = (
        "from cuda.bindings import nvrtc; v = tuple(nvrtc.nvrtcVersion()[1:]); "
        f"assert v == {want}, f'NVRTC {{v}} loaded, not {want}'; print('NVRTC', v)"
    )
    _run_py(session, "-c", check)
    # sm_90 only: the oldest NVRTC is the H200 image's, and the device is sm_90 (the tests
    # session compiles sm_80 and sm_90 with the interpreter's NVRTC)
    args = session.posargs or ["-q", "-p", "no:cacheprovider", "-k", "not sm_80"]
    _run_py(session, "-m", "pytest", "tests/test_adaln_kernels_cpu.py", *args)


def _wheelhouse():
    """suite/wheelhouse.py (stdlib only) loaded by path: its requirements() expands the extras."""
    spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "suite" / "wheelhouse.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def floor_pins(extras: tuple[str, ...] = ("reproduce", "parquet")) -> list[str]:
    """`name==floor` (marker kept) of every requirement of the base and `extras`, the extras they
    name expanded, torch left out (wheelhouse.EXCLUDE). Each needs one `>=` floor that is a
    release, so pinning it installs exactly the floor."""
    from packaging.requirements import Requirement

    wheelhouse = _wheelhouse()
    reqs = dict.fromkeys(r for e in extras for r in wheelhouse.requirements(e))
    pins = []
    for req in map(Requirement, reqs):
        floors = [s.version for s in req.specifier if s.operator == ">="]
        if len(floors) != 1:
            raise ValueError(f"pyproject.toml: {req} needs one >= floor for the lowest session")
        pins.append(f"{req.name}=={floors[0]}" + (f"; {req.marker}" if req.marker else ""))
    return pins


# The CPU tests run at the floors, one or more per floor: scipy (bootstrap's rng, optimize),
# numpy and pandas (the balance simulator, run tables, manifests), matplotlib (the cost model's
# figure), rich (progress), diffusers (the Wan patch), pyarrow (parquet manifests), cuda-bindings
# and NVRTC (both ops' kernels compiled), torch's APIs (test_packaging). jinja2 is installed but
# not exercised: the tests that render a report take minutes.
LOWEST_TESTS = (
    "tests/test_packaging.py",
    "tests/test_stats.py",
    "tests/test_costmodel.py",
    "tests/test_simulator.py",
    "tests/test_rundir.py",
    "tests/test_manifest.py",
    "tests/test_progress.py",
    "tests/test_diffusers_patch.py",
    "tests/test_cuda_build.py",
)


def _check_floors(session: nox.Session, pins: list[str]) -> None:
    """Fail unless every pinned package imports at its floor (not a newer copy found outside the
    venv); log the floors and torch's version."""
    from packaging.markers import Marker
    from packaging.version import Version

    names = [p.split("==")[0] for p in pins if "==" in p]
    script = (
        "import json, torch; from importlib.metadata import version, PackageNotFoundError\n"
        "def v(n):\n    try: return version(n)\n    except PackageNotFoundError: return None\n"
        f"print(json.dumps({{'torch': torch.__version__, **{{n: v(n) for n in {names!r}}}}}))"
    )
    out = session.run("python", "-c", script, silent=True)
    if out is None:
        return  # --install-only
    got = json.loads(out.strip().splitlines()[-1])
    session.log("at the floors: " + ", ".join(f"{n} {got[n]}" for n in names))
    session.log(f"torch {got['torch']} (the interpreter's: not pinned)")
    bad = []
    for pin in pins:
        name, rest = pin.split("==")
        want, _, marker = rest.partition(";")
        if marker and not Marker(marker).evaluate():
            continue  # a platform without wheels: not installed
        if got[name] is None or Version(got[name]) != Version(want.strip()):
            bad.append(f"{name}: pinned {want.strip()}, {got[name]} imports")
    if bad:
        session.error("not at the floors: " + "; ".join(bad))


@nox.session
def lowest(session: nox.Session) -> None:
    """CPU tests with the lowest versions pyproject.toml allows: every floor of the base, [ops],
    [reproduce] and [parquet] pinned (floor_pins), then checked to be what imports.

    torch is not pinned: the session runs the interpreter's torch (CI: 2.13 CPU). PyPI's torch
    2.6 for Linux is the CUDA build (GBs of wheels) and download.pytorch.org's CPU build is not
    reachable from the CI machine, so torch's floor (2.6, for the public FSDP2 fully_shard) is
    checked at the level of the APIs the code imports (tests/test_packaging.py), not by running
    torch 2.6."""
    if isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        session.error("lowest installs older packages: run it in its own venv (no --no-venv)")
    pins = floor_pins()
    _install(session, "test", pins=pins)
    _check_floors(session, pins)
    cache = Path(session.create_tmp(), "cubin")  # compile with this NVRTC, never read a cache
    args = session.posargs or ["-q", "-p", "no:cacheprovider", "-m", "not slow and not gpu"]
    _run_py(session, "-m", "pytest", *LOWEST_TESTS, *args,
            env={"ADAPTIVELOAD_CUBIN_CACHE": str(cache)})  # fmt: skip


@nox.session
def reproduce(session: nox.Session) -> None:
    """Run every claim's experiment and write the report (cpu profile without a GPU).

    nox -s reproduce -- --nproc-per-node 2 [reproduce options]   launches it under torchrun, so
    the training claims also get real data-parallel ranks (NCCL on GPUs)."""
    _install(session, "reproduce")
    args, launcher = _torchrun_args(session.posargs)
    # A SIGTERM to nox stops the suite as Ctrl-C does: nox passes it on (after INTERRUPT_S)
    # instead of dying and leaving the run behind. The suite stops within a second or two of
    # either signal (suite/stopping.py); nox's defaults (SIGTERM 0.3 s after Ctrl-C, SIGKILL
    # 0.2 s later) would cut that short, so it gets TERMINATE_S before SIGKILL.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    _run_py(
        session,
        *launcher,
        "-m",
        "suite",
        "reproduce",
        *args,
        interrupt_timeout=INTERRUPT_S,
        terminate_timeout=TERMINATE_S,
    )


INTERRUPT_S, TERMINATE_S = 3.0, 30.0  # reproduce: nox's waits before SIGTERM, then SIGKILL


def _torchrun_args(posargs) -> tuple[list[str], list[str]]:
    """(reproduce's own arguments, the launcher prefix): `--nproc-per-node K` (or `=K`) with
    K > 1 becomes `-m torch.distributed.run --nproc-per-node K` (one node, torchrun's defaults)."""
    args, nproc = [], None
    it = iter(posargs)
    for a in it:
        if a == "--nproc-per-node":
            nproc = next(it, "")
        elif a.startswith("--nproc-per-node="):
            nproc = a.split("=", 1)[1]
        else:
            args.append(a)
    if nproc is None:
        return args, []
    if not nproc.isdigit():
        raise ValueError(f"--nproc-per-node needs a whole number of processes, got {nproc!r}")
    return args, (
        ["-m", "torch.distributed.run", "--nproc-per-node", nproc] if int(nproc) > 1 else []
    )


@nox.session
def report(session: nox.Session) -> None:
    """Rebuild figures, HTML and PDF of a run directory: nox -s report -- RUN_DIR."""
    if not session.posargs:
        session.error("give the run directory: nox -s report -- reports/runs/<run>")
    _install(session, "reproduce")
    _run_py(session, "-m", "suite", "report", *session.posargs)


def _gpu_model() -> str:
    """This machine's first GPU as a folder name ("nvidia-h100-80gb-hbm3"), or "cpu"."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    name = out.strip().splitlines()[0] if out.strip() else "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@nox.session
def bench(session: nox.Session) -> None:
    """pytest-benchmark, for A/B on a GPU: the fused op against its baselines, and against your
    own last run on the same GPU model (saved under .benchmarks/<gpu model>/).

    nox -s bench [-- --compare]   --compare fails on a median regression over 10%

    The CUDA-synchronising timer (suite.timing.cuda_synced_perf_counter) waits for queued work
    before reading the clock; the default timer measures only the launch.
    """
    _install(session, "test", "bench")
    args = [a for a in session.posargs if a != "--compare"]
    if "--compare" in session.posargs:
        args += ["--benchmark-compare", "--benchmark-compare-fail=median:10%"]
    _run_py(
        session,
        "-m",
        "pytest",
        "tests/bench",
        "--benchmark-enable",
        "--benchmark-autosave",
        "--benchmark-storage",
        f"file://{ROOT / '.benchmarks' / _gpu_model()}",
        "--benchmark-timer",
        "suite.timing.cuda_synced_perf_counter",
        "-p",
        "no:randomly",
        *args,
        success_codes=[0, 5],  # 5: nothing ran (no GPU)
    )


@nox.session
def asv(session: nox.Session) -> None:
    """asv: this commit's results for `asv publish`, or the CPU regression gate.

    nox -s asv -- [--quick] [--bench REGEX] [--machine NAME]   benchmarks/run_asv.py
    nox -s asv -- gate check                                    fail on a CPU slowdown
    nox -s asv -- gate calibrate                                re-measure the gate's baseline
    """
    _install(session, "reproduce", "bench")
    gate = session.posargs[:1] == ["gate"]
    module, args = (
        ("benchmarks.gate", session.posargs[1:])
        if gate
        else ("benchmarks.run_asv", session.posargs)
    )
    _run_py(session, "-m", module, *args, env={"PYTHONPATH": str(ROOT)})


@nox.session(python=False)
def wheelhouse(session: nox.Session) -> None:
    """Download every wheel the suite needs except torch, for an air-gapped node.

    nox -s wheelhouse -- --python 3.12 --platform manylinux_2_28_x86_64 [--dest wheelhouse]
    """
    _run_py(session, "-m", "suite.wheelhouse", *session.posargs)


if os.environ.get("CI"):
    nox.options.error_on_missing_interpreters = True
