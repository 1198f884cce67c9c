"""Verdicts per GPU (suite.report.pergpu) and the figure a report opens with
(suite.report.plots.opening), from run folders made of a committed reference's claims.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib as mpl
import pandas as pd
import pytest

from suite.report import pergpu
from suite.report.plots import RC, opening

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reports" / "reference" / "h200" / "quick-5753865"


def _copy(tmp_path: Path, gpu_dir: str, device: str, edit=None) -> Path:
    """A run folder: the reference's claims.json (changed by `edit`) and env.json naming `device`."""
    run = tmp_path / gpu_dir / "quick-test"
    run.mkdir(parents=True)
    shutil.copy2(REFERENCE / "claims.json", run / "claims.json")
    env = json.loads((REFERENCE / "env.json").read_text())
    env["torch"]["device_name"] = device
    (run / "env.json").write_text(json.dumps(env))
    if edit:
        claims = json.loads((run / "claims.json").read_text())
        (run / "claims.json").write_text(json.dumps([edit(c) for c in claims]))
    return run


def _h100_partial_c6(c: dict) -> dict:
    if c["id"] == "C6":
        return {**c, "verdict": "partial", "measured": c["measured"] / 4}
    return c


@pytest.fixture
def two_gpus(tmp_path) -> pd.DataFrame:
    runs = [
        _copy(tmp_path, "h200", "NVIDIA H200"),
        _copy(tmp_path, "h100", "NVIDIA H100 80GB HBM3", _h100_partial_c6),
    ]
    return pd.concat([pergpu.load_run(r) for r in runs], ignore_index=True)


def test_gpu_name_comes_from_env_json():
    assert pergpu.gpu_name({"torch": {"device_name": "NVIDIA H200"}}) == "H200"
    assert pergpu.gpu_name({"torch": {}, "nvidia_smi": [{"name": "NVIDIA H100"}]}) == "H100"
    assert pergpu.gpu_name({"torch": {"device_name": None}}) == pergpu.NO_GPU


def test_per_gpu_table_marks_the_claims_whose_verdicts_differ(two_gpus):
    wide = pergpu.per_gpu(two_gpus).set_index("id")
    committed = {c["id"]: c for c in json.loads((REFERENCE / "claims.json").read_text())}
    assert list(wide.index) == [f"C{i}" for i in range(1, 19)]  # the ledger's order
    assert pergpu.gpus(two_gpus) == ["H100 80GB HBM3", "H200"]
    assert wide.index[wide["differs"]].tolist() == ["C6"]
    assert wide.loc["C6", "H100 80GB HBM3 verdict"] == "partial"
    assert wide.loc["C6", "H200 verdict"] == committed["C6"]["verdict"]
    assert wide.loc["C11", "H200 measured"] == pytest.approx(committed["C11"]["measured"])
    assert wide.loc["C11", "H200 ci_low"] == pytest.approx(committed["C11"]["ci_low"])
    assert pd.isna(wide.loc["C10", "H200 measured"])  # not run: JSON null reads NaN


def test_per_gpu_refuses_two_runs_of_one_gpu(tmp_path):
    runs = [_copy(tmp_path / k, "h200", "NVIDIA H200") for k in ("a", "b")]
    long = pd.concat([pergpu.load_run(r) for r in runs])
    long["run"] = ["a"] * 18 + ["b"] * 18
    with pytest.raises(ValueError, match="one run per GPU"):
        pergpu.per_gpu(long)


def test_load_run_names_what_a_run_folder_lacks(tmp_path):
    with pytest.raises(FileNotFoundError, match="no claims.json or env.json"):
        pergpu.load_run(tmp_path)


def _marks(fig) -> list[str]:
    return [ln.get_label() for ln in fig.axes[0].lines if ln.get_label().startswith("mark ")]


def test_opening_figure_draws_one_mark_per_run_and_claim(two_gpus, tmp_path):
    with mpl.rc_context(RC):
        fig = opening.figure(two_gpus)
        fig.savefig(tmp_path / "opening.png")
    assert (tmp_path / "opening.png").stat().st_size > 10_000
    marks = _marks(fig)
    # every claim with a paper number and a value: one mark per run; C9 (qualitative) and C10
    # (not run) are written at their row instead
    numeric = two_gpus[two_gpus.measured.notna() & (two_gpus.paper_value != 0)]
    assert len(marks) == len(numeric) == 2 * 16
    assert {m.split()[-1] for m in marks} == set(numeric.id)
    words = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "H200: not run" in words and "H100 80GB HBM3: not run" in words
    labels = {t.get_text(): t.get_color() for t in fig.axes[0].get_yticklabels()}
    assert labels["C10 ↑"] == opening.NOT_RUN and labels["C16 ↓"] != opening.NOT_RUN
    shapes = {ln.get_label(): ln.get_marker() for ln in fig.legends[0].legend_handles}
    assert shapes["H200"] != shapes["H100 80GB HBM3"]


def test_opening_figure_of_one_run(tmp_path):
    one = pergpu.load_run(_copy(tmp_path, "h200", "NVIDIA H200"))
    with mpl.rc_context(RC):
        fig = opening.figure(one)
    assert len(_marks(fig)) == 16
    assert opening.figure(one.iloc[:0]) is None


def test_per_gpu_rows_carry_the_verdict_against_torch_compile(two_gpus):
    """C11-C13 read against torch.compile too (the ledger's compile column): the per-GPU rows carry
    that verdict and value per GPU; claims without one carry an empty verdict."""
    wide = pergpu.per_gpu(two_gpus).set_index("id")
    claims = {c["id"]: c for c in json.loads((REFERENCE / "claims.json").read_text())}
    for gpu in pergpu.gpus(two_gpus):
        assert wide.loc["C11", f"{gpu} compile_verdict"] == claims["C11"]["compile_verdict"]
        assert wide.loc["C11", f"{gpu} compile_value"] == pytest.approx(
            claims["C11"]["compile_value"]
        )
        assert wide.loc["C4", f"{gpu} compile_verdict"] == ""
