"""The package as declared: a non-editable install carries the CUDA sources, the ledger and the
report template; each extra brings what it says and no more; the floors are the lowest session's
pins and docs/install.md's; the license and the console command."""

import ast
import importlib
import importlib.util
import os
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from suite import wheelhouse

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_kernels_ledger_and_template(tmp_path):
    pytest.importorskip("setuptools")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path),
        str(ROOT),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("adaptiveload_suite-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    kernels = {p.name for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh")}
    assert kernels and {f"suite/_kernels/{k}" for k in kernels} <= names
    assert "suite/claims.csv" in names
    assert "suite/report/templates/report.html.j2" in names


# --- what each install brings -----------------------------------------------------------------

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
_spec = importlib.util.spec_from_file_location("noxfile", ROOT / "noxfile.py")


def _noxfile():
    pytest.importorskip("nox")
    module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(module)
    return module


def _closure(reqs: list[str]) -> set[str]:
    """Every distribution `reqs` pull in, through the requirements of the versions installed
    here (markers evaluated for this machine; a dependency's extras are not followed)."""
    seen, todo = set(), [Requirement(r) for r in reqs]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in metadata.requires(name) or ()]
        except metadata.PackageNotFoundError:
            pass  # not installed here: its own requirements unknown (none of ops' is absent)
    return seen


def test_the_ops_extra_pulls_no_benchmark_or_data_stack():
    """`pip install 'adaptiveload-suite[ops]'` brings torch and the two CUDA wheels with their
    own requirements: no asv, nox, pandas, scipy, matplotlib or pytest."""
    ops = wheelhouse.requirements("ops") + list(PYPROJECT["dependencies"])
    direct = {canonicalize_name(Requirement(r).name) for r in ops}
    assert direct == {"torch", "cuda-bindings", "nvidia-cuda-nvrtc"}
    pulled = _closure(ops)
    assert "torch" in pulled and len(pulled) > 3  # the walk reached torch's own requirements
    heavy = {"asv", "nox", "pandas", "scipy", "matplotlib", "pytest", "pytest-benchmark"}
    assert not pulled & heavy, sorted(pulled & heavy)


def test_reproduce_extra_covers_what_the_suite_imports():
    """Every third-party top-level module suite/ imports (outside optional probes) comes with the
    base and [reproduce]; nothing [reproduce] declares goes unused."""
    optional = {"pynvml"}  # suite.env's probe: "absent" without it
    module_of = {"cuda-bindings": "cuda", "nvidia-cuda-nvrtc": None}  # NVRTC: a library, no import
    declared = {
        module_of.get(n, n.replace("-", "_"))
        for n in (Requirement(r).name.lower() for r in wheelhouse.requirements("reproduce"))
    } | {"torch"}
    imported = set()
    for path in (ROOT / "suite").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                imported.add((node.module or "").split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"suite", "__future__"} - optional
    assert third_party == declared - {None}, (third_party, declared)


def test_cuda_wheels_are_marked_off_macos():
    """cuda-bindings and nvidia-cuda-nvrtc publish no macOS wheels: without the marker no macOS
    install resolves, with it the ops run their CPU path there."""
    reqs = {Requirement(r).name: Requirement(r) for r in wheelhouse.requirements("ops")}
    for name in ("cuda-bindings", "nvidia-cuda-nvrtc"):
        marker = reqs[name].marker
        assert marker is not None, name
        assert not marker.evaluate({"sys_platform": "darwin"})
        assert marker.evaluate({"sys_platform": "linux"}) and marker.evaluate(
            {"sys_platform": "win32"}
        )


def test_the_ops_import_and_run_on_cpu_without_the_rest():
    """`import suite.ops` and both ops' CPU path with numpy, pandas, scipy, matplotlib, diffusers,
    jinja2, rich and the CUDA bindings all unimportable (a macOS install of the base)."""
    blocked = ["numpy", "pandas", "scipy", "matplotlib", "diffusers", "jinja2", "markupsafe",
               "rich", "asv", "nox", "pyarrow", "cuda", "nvidia"]  # fmt: skip
    script = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Block())
import torch
from suite.ops import adaln
from suite.ops.epilogue import residual_norm, rms_norm
x = torch.randn(2, 5, 64, requires_grad=True)
scale, shift = torch.randn(2, 1, 64), torch.randn(2, 1, 64)
adaln(x, scale, shift).sum().backward()
x_new, normed = residual_norm(x.detach(), torch.randn(2, 5, 64), scale=scale, shift=shift)
rms_norm(normed, torch.ones(64))
print("ok", x.grad.shape == x.shape)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120)  # fmt: skip
    assert out.returncode == 0 and out.stdout.split() == ["ok", "True"], out.stderr[-2000:]


def test_compiling_without_nvrtc_names_the_extra(monkeypatch):
    from suite.cuda import compile as cc

    monkeypatch.setattr(cc, "nvrtc", None)
    with pytest.raises(ModuleNotFoundError, match=r"adaptiveload-suite\[ops\]"):
        cc.nvrtc_version()


def test_lowest_session_pins_every_runtime_floor():
    """`nox -s lowest` pins each requirement of the base, [ops], [reproduce] and [parquet] at its
    `>=` floor (torch: the interpreter's), and the floors docs/install.md states are pyproject's."""
    nf = _noxfile()
    pins = {Requirement(p).name: Requirement(p) for p in nf.floor_pins()}
    runtime = wheelhouse.requirements("reproduce") + wheelhouse.requirements("parquet")
    reqs = [Requirement(r) for r in runtime]
    assert set(pins) == {r.name for r in reqs} and "torch" not in pins
    for r in reqs:
        (floor,) = [s.version for s in r.specifier if s.operator == ">="]
        assert str(pins[r.name].specifier) == f"=={floor}" and pins[r.name].marker == r.marker
    nvrtc = pins["nvidia-cuda-nvrtc"].specifier
    assert nvrtc.contains(f"{nf.OLDEST_NVRTC}.48")  # the oldest NVRTC nvrtc_oldest compiles with
    doc = (ROOT / "docs" / "install.md").read_text()
    every = [Requirement(r) for r in wheelhouse.requirements("test")] + [
        Requirement(r) for r in PYPROJECT["dependencies"]
    ]
    for r in every:
        (floor,) = [s.version for s in r.specifier if s.operator == ">="]
        assert f"| {r.name} | {floor} |" in doc, f"docs/install.md: no row '| {r.name} | {floor} |'"


# The torch APIs the suite imports that are newest, and the release each became public in. The
# declared floor is the newest of them. torch's floor is not installed by `nox -s lowest` (see
# its docstring): this checks each API is still where the code imports it from.
TORCH_APIS = [
    ("torch.distributed.fsdp", "fully_shard", "2.6"),
    ("torch.distributed.fsdp", "MixedPrecisionPolicy", "2.6"),
    ("torch.library", "custom_op", "2.4"),
    ("torch.library", "register_fake", "2.4"),
    ("torch.library", "register_autograd", "2.4"),
    ("torch.compiler", "is_compiling", "2.3"),
    ("torch.distributed.device_mesh", "init_device_mesh", "2.2"),
]


def test_torch_floor_is_the_newest_api_the_code_imports():
    for module, name, _ in TORCH_APIS:
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
    (torch,) = [Requirement(r) for r in PYPROJECT["dependencies"] if r.startswith("torch")]
    (floor,) = [s.version for s in torch.specifier if s.operator == ">="]
    assert Version(floor) == max(Version(since) for *_, since in TORCH_APIS)


def test_license_is_declared_and_shipped():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it
    assert PYPROJECT["license"] == "Apache-2.0" and PYPROJECT["license-files"] == ["LICENSE"]


def test_help_names_the_console_command_and_version_prints_it():
    from suite import __main__ as cli
    from suite import __version__

    (script,) = [k for k, v in PYPROJECT["scripts"].items() if v == "suite.__main__:main"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "suite"]
    help_ = subprocess.run([*run, "--help"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert help_.returncode == 0 and f"usage: {script} <command>" in help_.stdout
    assert f"{script} --version" in help_.stdout
    out = subprocess.run([*run, "--version"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith(f"adaptiveload-suite {__version__}")
    try:
        installed = metadata.version("adaptiveload-suite")
    except metadata.PackageNotFoundError:
        assert cli.version() == f"{__version__} (source tree, not installed)"
    else:
        assert cli.version() == installed


@pytest.mark.slow
def test_pip_resolves_the_ops_extra_without_the_benchmark_or_data_stack(tmp_path):
    """pip's own resolution of `.[ops]` from the indexes (this torch's build pinned, so no second
    torch is fetched): no asv, nox, pandas, scipy, matplotlib or pytest. Needs the network."""
    import json

    import torch

    pin = tmp_path / "torch.txt"
    pin.write_text(f"torch=={torch.__version__}\n")
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--report", str(report), "-c", str(pin), f"{ROOT}[ops]"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        pytest.skip(f"pip could not resolve from the indexes here: {out.stderr.strip()[-300:]}")
    pulled = {
        canonicalize_name(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]
    }
    assert {"torch", "cuda-bindings", "nvidia-cuda-nvrtc"} <= pulled
    heavy = {"asv", "nox", "pandas", "scipy", "matplotlib", "pytest", "pytest-benchmark"}
    assert not pulled & heavy, sorted(pulled & heavy)


def test_a_command_without_its_extra_says_which_to_install():
    """A base install (the ops alone) runs `reproduce` into one line naming the extra, exit 2."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pandas'] = None; from suite.__main__ import main; "
        "sys.exit(main(['reproduce', '--help']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "needs 'pandas'" in r.stderr and "adaptiveload-suite[reproduce]" in r.stderr
