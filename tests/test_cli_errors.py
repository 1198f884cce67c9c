"""Bad inputs of `fit-cost`, `simulate`, `forecast`, `python -m suite.train` and the tools users
run: each is one error line, exit status 2, no traceback, and it stops before the work. A table of
cases (argv, setup, expected code, expected substring), the shape of tests/test_cli_errors_run.py;
{tmp} in argv is the case's folder, where `setup(tmp, monkeypatch)` wrote its files.

argv[0] names the entry point: a `python -m suite` command, `suite.train`, or `tools/<x>.py`;
all run in-process through their main(argv), except the two subprocess tests at the end (the
real `python -m suite` process, and the advertised torch.distributed.run launcher).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
COST = ROOT / "reports/reference/h200/quick-5753865/cost.json"


# ----------------------------------------------------------------------------- setups
def nothing(tmp, mp):
    pass


def files(**texts):
    """Setup: write each name=text into the case's folder ("__" in a name stands for ".")."""

    def setup(tmp, mp):
        for name, text in texts.items():
            (tmp / name.replace("__", ".")).write_text(text)

    return setup


def cost(**patch):
    """Setup: the H200 quick reference cost JSON with fields replaced, as {tmp}/cost.json (a NaN
    is written as JSON's NaN literal, as a hand edit or another tool would)."""

    def setup(tmp, mp):
        obj = {**json.loads(COST.read_text()), **patch}
        (tmp / "cost.json").write_text(json.dumps(obj, indent=2))
        (tmp / "file").write_text("not a folder\n")

    return setup


def no_pyarrow(tmp, mp):
    find = importlib.util.find_spec
    mp.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "pyarrow" else find(n, *a))
    (tmp / "m.parquet").write_bytes(b"PAR1")


def a_run(tmp, mp):
    """A run folder with the shape sweep rebalance needs (and no costmodel_fit)."""
    (tmp / "run" / "results").mkdir(parents=True)
    (tmp / "run" / "results" / "shapes_sweep.csv").write_text("B,S,step_s\n1,256,0.1\n")
    (tmp / "file").write_text("not a folder\n")


def read_only(tmp, mp):
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o555)
    MANIFESTS(tmp, mp)


VIDEO = "height,width,frames\n480,832,81\n720,1280,81\n480,832,1\n"
MANIFESTS = files(
    ok__csv=VIDEO,
    shifted__csv="height,width,frames\n5,480,832,81\n",  # pandas read it as 480x832x81
    short__csv="height,width,frames\n480,832,81\n480,832\n",
    quote__csv='height,width,frames\n480,832,81\n"480,832,81\n',
    big__csv="height,width,frames\n480,832,81\n4096,4096,81\n",  # 1,376,256 tokens
    sweep__csv="B,S,step_s\n1,256,0.1\n1,512,0.2\n1,1024,0.5\n2,256",  # cut mid-row
    sweep_cols__csv="B,S,t\n1,256,0.1\n",
    latency__csv="B,S,step_s\n1,1560,0.1\n1,3600,-1\n",
    file="not a folder\n",
)
CUDA = torch.cuda.is_available()
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0

CASES = [
    # (id, argv, setup, expected code, expected substring)
    ("unknown-command", ["nope"], nothing, 2, "unknown command 'nope'"),
    # simulate
    ("sim-gpus-0", ["simulate", "--gpus", "0"], nothing, 2, "--gpus: must be a whole number >= 1"),
    ("sim-gpus-text", ["simulate", "--gpus", "8.5"], nothing, 2, "got '8.5'"),
    (
        "sim-gpus-million",
        ["simulate", "--gpus", "1000000"],
        nothing,
        2,
        "--gpus 1000000 x --steps 1000 of dual plans about",
    ),
    (
        "sim-steps-huge",
        ["simulate", "--gpus", "10000", "--steps", "100000"],
        nothing,
        2,
        "above the limit of 4.47e+07 (8 GiB at 192 bytes a sample): use at most --steps",
    ),
    ("sim-steps-0", ["simulate", "--steps", "0"], nothing, 2, "--steps: must be a whole number"),
    ("sim-noise-nan", ["simulate", "--noise", "nan"], nothing, 2, "--noise: must be a finite"),
    ("sim-collective-neg", ["simulate", "--collective-s", "-1"], nothing, 2, "--collective-s"),
    ("sim-seed-neg", ["simulate", "--seed", "-1"], nothing, 2, "--seed: must be a whole number"),
    ("sim-policy", ["simulate", "--policy", "nope"], nothing, 2, "invalid choice: 'nope'"),
    ("sim-mix", ["simulate", "--mix", "nope"], nothing, 2, "invalid choice: 'nope'"),
    (
        "sim-manifest-shifted",
        ["simulate", "--manifest", "{tmp}/shifted.csv"],
        MANIFESTS,
        2,
        "shifted.csv:2: 4 fields, the header has 3 (height,width,frames)",
    ),
    (
        "sim-manifest-short-row",
        ["simulate", "--manifest", "{tmp}/short.csv"],
        MANIFESTS,
        2,
        "short.csv:3: 2 fields",
    ),
    (
        "sim-manifest-open-quote",
        ["simulate", "--manifest", "{tmp}/quote.csv"],
        MANIFESTS,
        2,
        "quote.csv:3: not valid CSV",
    ),
    (
        "sim-manifest-above-m-mem",
        ["simulate", "--manifest", "{tmp}/big.csv"],
        MANIFESTS,
        2,
        "big.csv:3: a 4096x4096x81 sample is 1,376,256 tokens, above M_mem",
    ),
    (
        "sim-manifest-missing",
        ["simulate", "--manifest", "{tmp}/absent.csv"],
        nothing,
        2,
        "absent.csv: no such manifest file",
    ),
    (
        "sim-manifest-parquet-no-pyarrow",
        ["simulate", "--manifest", "{tmp}/m.parquet"],
        no_pyarrow,
        2,
        "m.parquet: reading Parquet needs pyarrow: pip install 'adaptiveload-suite[parquet]'",
    ),
    (
        "sim-cost-p-nan",
        ["simulate", "--cost", "{tmp}/cost.json"],
        cost(p=float("nan")),
        2,
        "cost.json:20: p must be a finite number, got nan",
    ),
    (
        "sim-cost-p-range",
        ["simulate", "--cost", "{tmp}/cost.json"],
        cost(p=9),
        2,
        "p must be >= 0.5 and <= 3, got 9",
    ),
    (
        "sim-cost-b-negative",
        ["simulate", "--cost", "{tmp}/cost.json"],
        cost(b=-1.0),
        2,
        "b must be >= 0, got -1.0",
    ),
    (
        "sim-cost-m-mem-text",
        ["simulate", "--cost", "{tmp}/cost.json"],
        cost(m_mem="big"),
        2,
        "m_mem must be a number, got 'big'",
    ),
    (
        "sim-cost-no-m-mem",
        ["simulate", "--cost", "{tmp}/cost.json"],
        cost(m_mem=None),
        2,
        "the cost JSON has no m_mem",
    ),
    (
        "sim-cost-quadratic",
        ["simulate", "--cost", "{tmp}/cost.json"],
        cost(quadratic={"a": 0.1, "c": 0.0, "b": 1e-6, "d": -1.0}),
        2,
        "quadratic.d must be >= 0, got -1.0",
    ),
    (
        "sim-cost-not-json",
        ["simulate", "--cost", "{tmp}/file"],
        MANIFESTS,
        2,
        "file: cannot read a cost JSON",
    ),
    (
        "sim-latency-bad-row",
        ["simulate", "--latency", "{tmp}/latency.csv"],
        MANIFESTS,
        2,
        "--latency {tmp}/latency.csv:3: step_s must be a finite number > 0",
    ),
    # forecast
    (
        "fc-gpus-0",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--gpus", "0"],
        MANIFESTS,
        2,
        "--gpus",
    ),
    (
        "fc-jobs-0",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--jobs", "0"],
        MANIFESTS,
        2,
        "--jobs",
    ),
    (
        "fc-gpus-million",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--gpus", "1000000"],
        MANIFESTS,
        2,
        "above the limit",
    ),
    (
        "fc-policies",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--policies", "nope"],
        MANIFESTS,
        2,
        "--policies: unknown policy 'nope'",
    ),
    (
        "fc-plot-under-a-file",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--plot", "{tmp}/file/x.png"],
        MANIFESTS,
        2,
        "--plot {tmp}/file/x.png: {tmp}/file is not a folder",
    ),
    (
        "fc-plot-a-folder",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--plot", "{tmp}"],
        MANIFESTS,
        2,
        "the file must end in .png or .svg or .pdf",
    ),
    (
        "fc-plot-folder-named-png",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--plot", "{tmp}/d.png"],
        lambda tmp, mp: (MANIFESTS(tmp, mp), (tmp / "d.png").mkdir()),
        2,
        "is a folder; give a file path",
    ),
    (
        "fc-plot-read-only",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--plot", "{tmp}/ro/x.png"],
        read_only,
        2,
        "cannot write in {tmp}/ro (permission denied)",
    ),
    (
        "fc-manifest-shifted",
        ["forecast", "--manifest", "{tmp}/shifted.csv"],
        MANIFESTS,
        2,
        "shifted.csv:2: 4 fields",
    ),
    (
        "fc-manifest-above-m-mem",
        ["forecast", "--manifest", "{tmp}/big.csv"],
        MANIFESTS,
        2,
        "big.csv:3: a 4096x4096x81 sample",
    ),
    (
        "fc-cost-p-nan",
        ["forecast", "--manifest", "{tmp}/ok.csv", "--cost", "{tmp}/cost.json"],
        lambda tmp, mp: (MANIFESTS(tmp, mp), cost(p=float("nan"))(tmp, mp)),
        2,
        "p must be a finite number, got nan",
    ),
    ("fc-no-manifest", ["forecast"], nothing, 2, "--manifest"),
    # fit-cost: every case stops before the sweep
    (
        "fit-out-under-a-file",
        ["fit-cost", "--synthetic", "--out", "{tmp}/file/cost.json"],
        MANIFESTS,
        2,
        "--out {tmp}/file/cost.json: {tmp}/file is not a folder",
    ),
    (
        "fit-out-a-folder",
        ["fit-cost", "--synthetic", "--out", "{tmp}"],
        MANIFESTS,
        2,
        "is a folder; give a file path",
    ),
    (
        "fit-out-read-only",
        ["fit-cost", "--synthetic", "--out", "{tmp}/ro/cost.json"],
        read_only,
        2,
        "permission denied",
    ),
    (
        "fit-table-under-a-file",
        ["fit-cost", "--synthetic", "--out", "{tmp}/c.json", "--table", "{tmp}/file/t.csv"],
        MANIFESTS,
        2,
        "--table {tmp}/file/t.csv",
    ),
    (
        "fit-sweep-cut-mid-row",
        ["fit-cost", "--sweep", "{tmp}/sweep.csv", "--out", "{tmp}/c.json"],
        MANIFESTS,
        2,
        "sweep.csv:5: step_s must be a finite number > 0, got nan",
    ),
    (
        "fit-sweep-columns",
        ["fit-cost", "--sweep", "{tmp}/sweep_cols.csv", "--out", "{tmp}/c.json"],
        MANIFESTS,
        2,
        "missing columns ['step_s']",
    ),
    (
        "fit-sweep-missing",
        ["fit-cost", "--sweep", "{tmp}/absent.csv", "--out", "{tmp}/c.json"],
        nothing,
        2,
        "--sweep {tmp}/absent.csv: cannot read it",
    ),
    ("fit-seq-lens", ["fit-cost", "--seq-lens", "256,a"], nothing, 2, "--seq-lens: must be comma"),
    ("fit-batch-sizes", ["fit-cost", "--batch-sizes", "0"], nothing, 2, "--batch-sizes"),
    ("fit-p-nan", ["fit-cost", "--p", "nan"], nothing, 2, "--p: must be a finite"),
    ("fit-p-range", ["fit-cost", "--p", "4"], nothing, 2, "<= 3.0"),
    ("fit-capacity-0", ["fit-cost", "--capacity-gb", "0"], nothing, 2, "--capacity-gb"),
    ("fit-safety-1", ["fit-cost", "--safety", "1"], nothing, 2, "--safety"),
    ("fit-repeats-0", ["fit-cost", "--repeats", "0"], nothing, 2, "--repeats"),
    (
        "fit-model",
        ["fit-cost", "--model", "nope", "--out", "{tmp}/c.json"],
        nothing,
        2,
        "--model must be one of tiny",
    ),
    (
        "fit-dtype",
        ["fit-cost", "--dtype", "fp8", "--out", "{tmp}/c.json"],
        nothing,
        2,
        "--dtype must be one of",
    ),
    (
        "fit-device",
        ["fit-cost", "--device", "xyz", "--out", "{tmp}/c.json"],
        nothing,
        2,
        "--device must be cpu or cuda",
    ),
    (
        "fit-device-cuda",
        ["fit-cost", "--device", "cuda", "--out", "{tmp}/c.json"],
        nothing,
        2,
        "--device cuda: this machine has no CUDA device",
    ),
    # python -m suite.train
    ("train-no-out", ["suite.train"], nothing, 2, "--out"),
    (
        "train-layers-0",
        ["suite.train", "--out", "{tmp}/t", "--layers", "0"],
        nothing,
        2,
        "--layers",
    ),
    ("train-steps-0", ["suite.train", "--out", "{tmp}/t", "--steps", "0"], nothing, 2, "--steps"),
    ("train-lr-nan", ["suite.train", "--out", "{tmp}/t", "--lr", "nan"], nothing, 2, "--lr"),
    (
        "train-ranks-neg",
        ["suite.train", "--out", "{tmp}/t", "--emulate-ranks", "-1"],
        nothing,
        2,
        "--emulate-ranks",
    ),  # fmt: skip
    ("train-mix", ["suite.train", "--out", "{tmp}/t", "--mix", "nope"], nothing, 2, "--mix"),
    (
        "train-corpus-0",
        ["suite.train", "--out", "{tmp}/t", "--corpus-size", "0"],
        nothing,
        2,
        "--corpus-size",
    ),  # fmt: skip
    (
        "train-out-under-a-file",
        ["suite.train", "--out", "{tmp}/file/t", "--device", "cpu"],
        MANIFESTS,
        2,
        "--out {tmp}/file/t: {tmp}/file is not a folder",
    ),
    (
        "train-out-a-file",
        ["suite.train", "--out", "{tmp}/file", "--device", "cpu"],
        MANIFESTS,
        2,
        "is a file; give a folder",
    ),
    (
        "train-manifest-shifted",
        ["suite.train", "--out", "{tmp}/t", "--manifest", "{tmp}/shifted.csv", "--device", "cpu"],
        MANIFESTS,
        2,
        "shifted.csv:2: 4 fields",
    ),
    (
        "train-cost-p-nan",
        ["suite.train", "--out", "{tmp}/t", "--cost", "{tmp}/cost.json", "--device", "cpu"],
        cost(p=float("nan")),
        2,
        "p must be a finite number, got nan",
    ),
    (
        "train-fsdp-one-process",
        ["suite.train", "--out", "{tmp}/t", "--fsdp", "--device", "cpu"],
        nothing,
        2,
        "--fsdp needs a distributed launch: python -m torch.distributed.run",
    ),
    (
        "train-device-cuda",
        ["suite.train", "--out", "{tmp}/t", "--device", "cuda"],
        nothing,
        2,
        "--device cuda: this machine has no CUDA device",
    ),
    # tools users run
    (
        "rebalance-no-run",
        ["tools/rebalance.py", "{tmp}/absent", "--out", "{tmp}/o"],
        nothing,
        2,
        "no shapes_sweep table",
    ),
    (
        "rebalance-out-under-a-file",
        ["tools/rebalance.py", "{tmp}/run", "--out", "{tmp}/file/o"],
        a_run,
        2,
        "--out {tmp}/file/o: cannot make it",
    ),
    (
        "rebalance-refit-without-fit",
        ["tools/rebalance.py", "{tmp}/run", "--out", "{tmp}/o", "--refit"],
        a_run,
        2,
        "--refit: {tmp}/run/results has no costmodel_fit table",
    ),
    (
        "forecast-manifest-samples-0",
        ["tools/forecast_manifest.py", "--samples", "0"],
        nothing,
        2,
        "--samples: must be a whole number from 1 to 10000000",
    ),
    (
        "forecast-manifest-out-under-a-file",
        ["tools/forecast_manifest.py", "--out", "{tmp}/file/m.csv"],
        MANIFESTS,
        2,
        "--out {tmp}/file/m.csv: {tmp}/file is not a folder",
    ),
    (
        "kernels-summary-missing",
        ["tools/kernels_summary.py", "{tmp}/absent.csv"],
        nothing,
        2,
        "absent.csv: cannot read it as CSV",
    ),
    (
        "readme-results-missing",
        ["tools/readme_results.py", "{tmp}/claims.json"],
        nothing,
        2,
        "claims.json: cannot read it as a claims.json",
    ),
]
SKIP = {
    "fc-plot-read-only": ROOT_USER and "root writes into a read-only folder",
    "fit-out-read-only": ROOT_USER and "root writes into a read-only folder",
    "fit-device-cuda": CUDA and "this machine has CUDA",
    "train-device-cuda": CUDA and "this machine has CUDA",
}


def entry(name: str):
    """The main(argv) of a `python -m suite` command, of suite.train, or of tools/<x>.py."""
    if name == "suite.train":
        from suite.train.__main__ import main

        return main
    if name.startswith("tools/"):
        spec = importlib.util.spec_from_file_location(Path(name).stem, ROOT / name)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.main
    from suite.__main__ import main

    return lambda argv: main([name, *argv])


@pytest.mark.parametrize(
    ("argv", "setup", "code", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_one_line_exit_2(request, tmp_path, capsys, monkeypatch, argv, setup, code,
                                      expect):  # fmt: skip
    if reason := SKIP.get(request.node.callspec.id):
        pytest.skip(reason)
    setup(tmp_path, monkeypatch)
    argv = [a.format(tmp=tmp_path) for a in argv]
    monkeypatch.chdir(tmp_path)  # a case that wrongly ran would write its default outputs here
    try:
        got = entry(argv[0])(argv[1:])
    except SystemExit as e:  # argparse's usage error
        got = e.code
    err = capsys.readouterr().err
    assert got == code, err
    assert expect.format(tmp=tmp_path) in err, err
    assert "Traceback" not in err
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(errors) == 1, err
    made = {"forecast_manifest.csv", "c.json", "x.png", "t", "o"}  # outputs: none was written
    assert not [p.name for p in tmp_path.rglob("*") if p.name in made]


def test_the_suite_process_prints_one_line(tmp_path):
    """The same through a real `python -m suite` process (stderr as a user sees it)."""
    (tmp_path / "m.csv").write_text("height,width,frames\n5,480,832,81\n")
    out = subprocess.run(
        [sys.executable, "-m", "suite", "forecast", "--manifest", str(tmp_path / "m.csv")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"error: {tmp_path / 'm.csv'}:2: 4 fields, the header has 3 " \
        "(height,width,frames)\n"  # fmt: skip


def test_the_advertised_launcher_runs_the_trainer():
    """README and --help launch ranks with `python -m torch.distributed.run` (torchrun), which
    works wherever torch imports, also where the torchrun script is not on PATH."""
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m",
         "suite.train", "--help"],
        capture_output=True, text=True, cwd=ROOT, timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "python -m torch.distributed.run --nproc-per-node 2 -m suite.train" in out.stdout
    assert "torchrun --nproc" not in (ROOT / "README.md").read_text()
