"""A non-editable install must carry the CUDA sources, the ledger and the report template."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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
