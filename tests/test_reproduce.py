"""The runner: skip done experiments, record not-run and failures, resume after an interrupt,
rebuild the report byte-identically. Fast tests use fake experiment modules (REGISTRY patched);
one real end-to-end CPU run goes through `python -m suite` in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from suite import experiments, reproduce
from suite.claims import claims_of, load_claims
from suite.report import build, plots
from suite.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
IDS = [f"C{i}" for i in range(1, 19)]
QUAD_KEYS = {"cost_fit_r2_quadratic", "cost_fit_loo_err_quadratic"}  # costmodel, not judged

HEADER = """
import pandas as pd
from pathlib import Path
from suite.experiments import metric_rows
COUNTER = Path({counter!r})

def _count(name):
    COUNTER.mkdir(parents=True, exist_ok=True)
    f = COUNTER / name
    f.write_text(str(int(f.read_text()) + 1 if f.exists() else 1))
"""

FAKES = {
    # shapes: fine, no claims of its own
    "shapes": """
NAME, NEEDS = "shapes", "cpu"
def run(ctx):
    _count(NAME)
    ctx.log("sweeping")
    return {"shapes_sweep": pd.DataFrame({"B": [1, 2], "S": [10, 20], "step_s": [0.1, 0.3]})}
def summarize(tables):
    return metric_rows([])
""",
    # costmodel: raises inside run -> recorded, others continue
    "costmodel": """
NAME, NEEDS = "costmodel", "cpu"
def run(ctx):
    _count(NAME)
    raise RuntimeError("gamma broke")
def summarize(tables):
    return metric_rows([])
""",
    # balance: C4 and C5 with a CI; interrupts the run once when STOP exists
    "balance": """
NAME, NEEDS = "balance", "cpu"
SECONDS = {"cpu": 100}  # only read under --budget
EVIDENCE = {"balance_steps": "simulated@costmodel_fit"}  # suite.evidence
def run(ctx):
    _count(NAME)
    if (COUNTER / "STOP").exists():
        (COUNTER / "STOP").unlink()
        raise KeyboardInterrupt
    from suite.progress import track
    for _ in track(ctx.progress, range(3), "steps"):
        pass
    return {"balance_steps": pd.DataFrame({"step": [0, 1, 2], "cv": [0.2, 0.18, 0.19]})}
def summarize(tables):
    cv = float(tables["balance_steps"]["cv"].mean()) * 100
    return metric_rows([
        {"claim": "C4", "metric": "imbalance_rate_reduction_sim", "value": 48.0, "unit": "%",
         "conditions": "simulated, 16 ranks", "evidence": "balance_steps; figure fake_bars"},
        {"claim": "C5", "metric": "rank_cv_sim", "value": cv, "ci_low": cv - 1,
         "ci_high": cv + 1, "baseline": 39.0, "unit": "%", "evidence": "balance_steps"},
        {"claim": "C5", "metric": "rank_maxmean_sim", "value": 30.0, "unit": "%"},
    ])
""",
    # kernels: needs CUDA -> not-run with the reason
    "kernels": """
NAME, NEEDS = "kernels", "cuda"
def run(ctx):
    raise AssertionError("must not run without a GPU")
def summarize(tables):
    return metric_rows([])
""",
    # opmemory: runs, but summarize raises -> recorded, not fatal; its plot module raises too
    "opmemory": """
NAME, NEEDS = "opmemory", "cpu"
def run(ctx):
    _count(NAME)
    return {"opmemory_bytes": pd.DataFrame({"impl": ["fused", "wan"], "bytes": [1, 3]})}
def summarize(tables):
    raise ValueError("summary exploded")
""",
    # training: distributed (other ranks run it too), fine, no tables
    "training": """
NAME, NEEDS, DISTRIBUTED = "training", "cpu", True
def run(ctx):
    _count(NAME)
    if (COUNTER / "DEFER").exists():  # work left for the next invocation (--budget)
        from suite.rundir import WorkDeferred
        raise WorkDeferred("2 pieces left")
    if (COUNTER / "PARTS").exists():  # parts an earlier invocation finished at another commit
        ctx.part_commits.add((COUNTER / "PARTS").read_text())
    return {}
def summarize(tables):
    return metric_rows([])
""",
}

PLOTS = {
    "balance": """
import matplotlib.pyplot as plt
def figures(tables, metrics):
    fig, ax = plt.subplots(figsize=(4, 3))
    df = tables["balance_steps"]
    ax.plot(df["step"], df["cv"], marker="o")
    return [("fake_bars", "CV <per step> & more", fig)]
""",
    "opmemory": """
def figures(tables, metrics):
    raise KeyError("no such column")
""",
}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Fake experiments and plot modules in a fresh package; returns the counter folder."""
    pkg = f"fakeexp_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / "pkgs" / pkg
    (root / "plots").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "plots" / "__init__.py").write_text("")
    counter = tmp_path / "counter"
    for name, body in FAKES.items():
        code = HEADER.format(counter=str(counter)) + textwrap.dedent(body)
        (root / f"{name}.py").write_text(code)
    for name, body in PLOTS.items():
        (root / "plots" / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.setattr(experiments, "REGISTRY", {n: f"{pkg}.{n}" for n in FAKES})
    monkeypatch.setattr(plots, "PACKAGE", f"{pkg}.plots")
    monkeypatch.setattr(reproduce, "cuda_available", lambda: False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    return counter


def runs(counter: Path, name: str) -> int:
    f = counter / name
    return int(f.read_text()) if f.exists() else 0


def claims(run: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads((run / "claims.json").read_text())}


def test_failures_and_not_run_are_recorded_and_others_run(fake, tmp_path):
    quiet = (
        tmp_path / "no-report"
    )  # --no-report keeps the exit status (a resumable run relies on it)
    assert reproduce.main(["--out", str(quiet), "--no-report"]) == 1
    assert not (quiet / "report.html").exists()
    run = tmp_path / "run"
    assert reproduce.main(["--out", str(run)]) == 1  # a failed experiment: non-zero exit
    res = run / "results"
    assert (res / "shapes.done.json").exists() and (res / "balance.done.json").exists()
    assert "gamma broke" in (res / "costmodel.error.txt").read_text()
    assert "Traceback" in (res / "costmodel.error.txt").read_text()
    assert json.loads((res / "kernels.notrun.json").read_text()) == {"reason": "needs a CUDA GPU"}
    done = json.loads((res / "balance.done.json").read_text())
    assert done["profile"] == "cpu" and done["tables"] == {"balance_steps": 3}
    assert done["seconds"] >= 0 and done["world_size"] == 1

    c = claims(run)
    assert sorted(c, key=lambda k: int(k[1:])) == IDS
    for cid, row in c.items():
        assert row["verdict"] == "not-run" and row["reason"] or row["verdict"] != "not-run", cid
    # no interval on the fake C4 row: inconclusive under the interval rule (suite.claims)
    assert (
        c["C4"]["verdict"] == "inconclusive"
        and c["C4"]["ranks"] == "simulated from a CPU cost fit of this run"
    )
    assert c["C5"]["verdict"] == "reproduced" and c["C5"]["ci_low"] is not None
    assert c["C11"]["reason"] == "needs a CUDA GPU"
    assert c["C3"]["reason"] == "costmodel failed (RuntimeError: gamma broke)"
    assert c["C13"]["reason"].startswith("opmemory failed (summarize failed: ValueError: summary")

    html = (run / "report.html").read_text()
    for cid in IDS:
        assert f'id="claim-{cid}"' in html and f'id="def-{cid}"' in html
    assert "gamma broke" in html and "summary exploded" in html and "no such column" in html
    assert 'id="fig-fake_bars"' in html and "CV &lt;per step&gt; &amp; more" in html
    assert 'href="results/balance_steps.csv"' in html and 'href="#fig-fake_bars"' in html
    assert "rank_maxmean_sim" in html  # alternative definition shown
    assert (run / "figures" / "fake_bars.svg").exists() and (run / "figures" / "fake_bars.png")
    assert (run / "report.pdf").read_bytes().startswith(b"%PDF")
    assert (run / "metrics.csv").read_text().count("\n") == 4  # header + 3 rows
    env = json.loads((run / "env.json").read_text())
    assert env["profile"] == "cpu" and "git" in env and "timestamp" in env


@pytest.mark.parametrize("budget", [[], ["--budget", "500"]])
def test_an_experiment_that_does_not_import_is_a_failure(fake, tmp_path, monkeypatch, budget):
    """A SyntaxError (or ImportError) in an experiment module is not "no claims": the runner
    records its traceback, the other experiments run, and its claims name the error."""
    package = experiments.REGISTRY["opmemory"].rsplit(".", 1)[0]
    broken = tmp_path / "pkgs" / package / "broken.py"
    broken.write_text("NAME = 'opmemory'\ndef run(ctx:\n")
    monkeypatch.setitem(experiments.REGISTRY, "opmemory", f"{package}.broken")
    run = tmp_path / "run"
    assert reproduce.main(["--out", str(run), *budget]) == 1
    error = (run / "results" / "opmemory.error.txt").read_text()
    assert "SyntaxError" in error and "broken.py" in error
    assert runs(fake, "training") == 1 and (run / "results" / "balance.done.json").exists()
    assert claims(run)["C13"]["reason"].startswith("opmemory failed (SyntaxError")


def test_rerun_skips_done_and_force_redoes(fake, tmp_path, capsys):
    run = tmp_path / "run"
    reproduce.main(["--out", str(run)])
    env_before = (run / "env.json").read_bytes()
    reproduce.main(["--out", str(run)])
    assert runs(fake, "shapes") == 1 and runs(fake, "balance") == 1
    assert runs(fake, "costmodel") == 2  # failed ones are retried
    assert "done already" in capsys.readouterr().err
    assert (run / "env.json").read_bytes() == env_before  # the run keeps its first timestamp
    reproduce.main(["--out", str(run), "--force"])
    assert runs(fake, "shapes") == 2 and runs(fake, "balance") == 2


def test_interrupted_run_resumes(fake, tmp_path):
    run = tmp_path / "run"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "STOP").write_text("")
    assert reproduce.main(["--out", str(run)]) == 130
    res = run / "results"
    assert (res / "shapes.done.json").exists()
    assert not (res / "balance.done.json").exists()
    assert not (res / "balance_steps.csv").exists()
    assert not list(res.glob(".*.tmp"))
    assert not (run / "report.html").exists()
    reproduce.main(["--out", str(run)])
    assert runs(fake, "shapes") == 1 and runs(fake, "balance") == 2
    assert (res / "balance.done.json").exists() and (run / "report.html").exists()


def test_budget_defers_what_does_not_fit_and_the_report_waits(fake, tmp_path, monkeypatch, capsys):
    """--budget: an experiment whose estimate (SECONDS) does not fit is not started, nor one that
    reads its tables; later ones that fit run; an experiment that raises WorkDeferred is not a
    failure; no report until the invocation that finishes the work (exit 3 until then)."""
    monkeypatch.setitem(experiments.DEPENDS, "opmemory", ("balance",))
    run, res = tmp_path / "run", tmp_path / "run" / "results"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "DEFER").write_text("")
    assert reproduce.main(["--out", str(run), "--budget", "50"]) == reproduce.EXIT_DEFERRED
    err = capsys.readouterr().err
    assert runs(fake, "balance") == 0 and runs(fake, "opmemory") == 0  # not started
    assert "balance: deferred to the next invocation (needs ~100 s, 50 s left)" in err
    assert "opmemory: deferred to the next invocation (its input balance was deferred)" in err
    assert (res / "shapes.done.json").exists() and runs(fake, "training") == 1
    assert not (res / "training.done.json").exists() and not (res / "training.error.txt").exists()
    assert "left for the next invocation: balance, opmemory, training; failed: costmodel" in err
    assert not (run / "report.html").exists()
    (fake / "DEFER").unlink()
    assert reproduce.main(["--out", str(run), "--budget", "500"]) == 1  # costmodel always fails
    assert runs(fake, "shapes") == 1 and runs(fake, "balance") == 1 and runs(fake, "training") == 2
    assert (run / "report.html").exists()


def test_a_run_resumed_at_another_commit_says_so(fake, tmp_path, monkeypatch):
    """Each experiment records the commit it ran at; the report flags those that differ from
    the commit the run started at (env.json), e.g. a full profile resumed over several days."""
    run = tmp_path / "run"
    monkeypatch.setenv("SUITE_GIT_SHA", "aaaa111")
    monkeypatch.setenv("SUITE_GIT_DIRTY", "0")
    (fake / "STOP").parent.mkdir(parents=True, exist_ok=True)
    (fake / "STOP").write_text("")
    assert reproduce.main(["--out", str(run)]) == 130  # shapes done, balance interrupted
    monkeypatch.setenv("SUITE_GIT_SHA", "bbbb222")
    reproduce.main(["--out", str(run)])
    res = run / "results"
    commit = lambda n: json.loads((res / f"{n}.done.json").read_text())["git"]  # noqa: E731
    assert commit("shapes") == "aaaa111" and commit("balance") == "bbbb222"
    html = (run / "report.html").read_text()
    assert "git <code>aaaa111</code>" in html and "some experiments ran at bbbb222" in html
    assert '<th scope="col">Commit</th>' in html and "<td><code>bbbb222</code></td>" in html


def test_a_run_started_on_another_gpu_model_does_not_resume_here(
    fake, tmp_path, monkeypatch, capsys
):
    """One run's tables come from one GPU model: resuming a run directory whose env.json names
    another model stops with exit 2 and says what to do; the same model, a CPU invocation or
    --force go on."""
    import torch

    run = tmp_path / "run"
    reproduce.main(["--out", str(run)])
    env = json.loads((run / "env.json").read_text())
    env["torch"] = {"device_name": "NVIDIA H200"}
    (run / "env.json").write_text(json.dumps(env))
    monkeypatch.setattr(reproduce, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    assert reproduce.main(["--out", str(run), "--profile", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "started on NVIDIA H200" in err and "NVIDIA H100 80GB HBM3" in err and "--force" in err
    assert runs(fake, "shapes") == 1  # nothing ran
    assert reproduce.other_gpu(RunDir(run), have_cuda=False) is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    assert reproduce.other_gpu(RunDir(run), have_cuda=True) is None


def test_an_experiment_with_parts_from_earlier_commits_records_them(fake, tmp_path, monkeypatch):
    """An experiment that resumes parts an earlier invocation finished (the full profile's
    training) adds their commits to ctx.part_commits: done.json and the report name them all."""
    monkeypatch.setenv("SUITE_GIT_SHA", "bbbb222")
    monkeypatch.setenv("SUITE_GIT_DIRTY", "0")
    (fake / "PARTS").parent.mkdir(parents=True, exist_ok=True)
    (fake / "PARTS").write_text("aaaa111")
    run = tmp_path / "run"
    reproduce.main(["--out", str(run)])
    done = json.loads((run / "results" / "training.done.json").read_text())
    assert done["git"] == "bbbb222, aaaa111"
    assert json.loads((run / "results" / "shapes.done.json").read_text())["git"] == "bbbb222"
    assert "some experiments ran at aaaa111" in (run / "report.html").read_text()


def test_report_rebuild_is_byte_identical(fake, tmp_path):
    run = tmp_path / "a" / "run"
    reproduce.main(["--out", str(run)])
    derived = ["report.html", "report.pdf", "claims.json", "metrics.csv"]
    derived += sorted(f"figures/{p.name}" for p in (run / "figures").iterdir())
    before = {f: (run / f).read_bytes() for f in derived}
    copy = tmp_path / "b" / "moved"  # the report does not depend on where the run lies
    shutil.copytree(
        run,
        copy,
        ignore=shutil.ignore_patterns("report.*", "figures", "claims.json", "metrics.csv"),
    )
    (run / "figures" / "stale.svg").write_text("<svg/>")
    time.sleep(1.1)  # a clock-dependent byte would differ now
    assert build.main([str(run)]) == 0
    assert build.main([str(copy)]) == 0
    assert not (run / "figures" / "stale.svg").exists()
    for f in derived:
        assert (run / f).read_bytes() == before[f], f
        assert (copy / f).read_bytes() == before[f], f


def test_report_on_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert build.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a run directory" in err and "results/" in err
    assert build.main([str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_only_selects_claims_experiments_and_upstream(fake):
    assert reproduce.select("") == list(FAKES)
    assert reproduce.select("C11") == ["kernels"]
    # the ledger: C4's primary is balance's, an alternative training's; both read costmodel
    assert reproduce.select("C4") == ["shapes", "costmodel", "balance", "training"]
    assert reproduce.select("kernels,C13") == ["kernels", "opmemory"]
    with pytest.raises(reproduce.UsageError, match="C99"):
        reproduce.select("C99")
    with pytest.raises(reproduce.UsageError, match="neither a claim id"):
        reproduce.select("nope")


def test_the_ledger_says_which_claims_each_experiment_feeds():
    """The ledger (claims.csv) alone links claims to experiments: the claim's experiment, its
    primary keys' `experiment:` prefixes and its alternatives'. No module restates it."""
    assert {n: claims_of(n) for n in experiments.REGISTRY} == {
        "shapes": (),
        "costmodel": ("C1", "C2", "C3"),
        "balance": ("C4", "C5", "C6", "C7", "C8", "C9"),
        "kernels": ("C11", "C12"),
        "opmemory": ("C13", "C16"),
        "training": tuple(f"C{i}" for i in (1, 2, 4, 5, 6, 7, 8, 9, 10, 14, 15, 17, 18)),
        "e2e": ("C17",),
    }
    for claim in load_claims():
        assert set(claim.producers) <= set(experiments.REGISTRY), claim.id
        assert not any(":" in k for k in claim.primary + claim.alternatives), claim.id
    c4 = {c.id: c for c in load_claims()}["C4"]
    assert c4.producers == ("balance", "training") and "cv_reduction_emulated" in c4.alternatives
    for name in experiments.REGISTRY:
        assert not hasattr(experiments.load(name), "CLAIMS"), name


def test_registry_order_runs_every_experiment_after_its_inputs(monkeypatch):
    """DEPENDS is the one statement of which experiment reads which: REGISTRY's order must be a
    topological order of it, and a name that is not an experiment is an error naming it."""
    order = list(experiments.REGISTRY)
    for name, inputs in experiments.DEPENDS.items():
        assert all(order.index(n) < order.index(name) for n in inputs), name
    experiments.check_order()
    monkeypatch.setitem(experiments.DEPENDS, "balance", ("costmodel", "costmodl"))
    with pytest.raises(ValueError, match="'costmodl' .in the entry of 'balance'. is not an exp"):
        reproduce.select("C4")
    monkeypatch.setitem(experiments.DEPENDS, "balance", ("training",))
    with pytest.raises(ValueError, match="'balance' reads training, which REGISTRY runs after"):
        reproduce.select("")


def test_only_runs_just_the_selection(fake, tmp_path):
    run = tmp_path / "run"
    assert reproduce.main(["--out", str(run), "--only", "C16"]) == 0
    assert runs(fake, "opmemory") == 1 and runs(fake, "shapes") == 0
    assert (
        claims(run)["C4"]["reason"] == "balance not run in this run directory"
    )  # C4-C9: the trace simulation


def test_default_profile_and_out(fake, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert reproduce.default_profile() == "cpu"
    reproduce.main(["--only", "shapes", "--no-report"])
    (out,) = (tmp_path / "reports" / "runs").iterdir()
    assert out.name.endswith("-cpu") and str(out.name) in capsys.readouterr().err
    monkeypatch.setattr(reproduce, "cuda_available", lambda: True)
    assert reproduce.default_profile() == "quick"


def test_torchrun_ranks(fake, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert reproduce.main([]) == 2
    assert "--out" in capsys.readouterr().err
    run = tmp_path / "run"
    assert reproduce.main(["--out", str(run)]) == 0
    assert runs(fake, "training") == 1 and runs(fake, "shapes") == 0  # only DISTRIBUTED ones
    assert not (run / "report.html").exists() and not list(run.glob("results/*.json"))
    monkeypatch.setenv("RANK", "0")
    reproduce.main(["--out", str(run)])
    assert json.loads((run / "results" / "training.done.json").read_text())["world_size"] == 2


def test_help_mentions_every_option(capsys):
    with pytest.raises(SystemExit):
        reproduce.main(["--help"])
    text = capsys.readouterr().out
    for opt in ("--profile", "--out", "--only", "--force", "quick", "full", "cpu"):
        assert opt in text


# -- the real thing: `python -m suite reproduce --profile cpu` on this machine, in a subprocess
def _suite(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m suite ARGS` from the repository root, output captured, GPUs hidden: these
    tests are of the no-GPU path (GPU experiments not run), on a GPU machine too."""
    cmd = [sys.executable, "-m", "suite", *args]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("e2e") / "run"
    t0 = time.time()
    proc = _suite("reproduce", "--profile", "cpu", "--out", str(run))
    return run, proc, time.time() - t0


def test_e2e_cpu_reproduce(real_run):
    run, proc, seconds = real_run
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert seconds < 300, f"the cpu profile took {seconds:.0f} s (budget 300 s)"
    errors = sorted(p.name for p in (run / "results").glob("*.error.txt"))
    assert (proc.returncode == 1) == bool(errors), (errors, proc.stdout[-2000:])
    c = claims(run)
    assert sorted(c, key=lambda k: int(k[1:])) == IDS
    for cid, row in c.items():
        assert row["verdict"] in (
            "reproduced",
            "exceeded",
            "partial",
            "not-reproduced",
            "inconclusive",
            "not-run",
        ), cid
        if row["verdict"] in ("not-run", "inconclusive"):
            assert row["reason"], cid
    for cid in ("C11", "C12", "C13", "C16"):  # kernels, opmemory: GPU only
        assert c[cid]["verdict"] == "not-run" and c[cid]["reason"], cid
    html = (run / "report.html").read_text()
    pdf = (run / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and len(pdf) > 10_000
    for cid in IDS:
        assert f'id="claim-{cid}"' in html, cid
    assert "verdict" in proc.stdout  # the console table
    # the physical cost form beside the paper's: its own table, non-judged C3 rows
    assert (run / "results" / "costmodel_quadratic.csv").exists()
    keys = set(pd.read_csv(run / "metrics.csv")["metric"])
    assert QUAD_KEYS <= keys
    assert c["C3"]["metric"] == "cost_fit_r2" and 'id="beyond-cost"' in html


def test_e2e_run_from_before_the_quadratic_table_resumes_and_reports(real_run, tmp_path):
    """A run directory finished before costmodel_quadratic existed: the rerun reuses it (no
    refit), summarizes and reports without the table, its rows or the cost-form section."""
    run, _, _ = real_run
    old = tmp_path / "old"
    shutil.copytree(run, old)
    (old / "results" / "costmodel_quadratic.csv").unlink()
    done = old / "results" / "costmodel.done.json"
    info = json.loads(done.read_text())
    info["tables"] = {k: n for k, n in info["tables"].items() if k != "costmodel_quadratic"}
    done.write_text(json.dumps(info))
    proc = _suite("reproduce", "--profile", "cpu", "--out", str(old))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "costmodel: done already" in proc.stderr
    assert not (old / "results" / "costmodel_quadratic.csv").exists()
    keys = set(pd.read_csv(old / "metrics.csv")["metric"])
    assert "cost_fit_r2" in keys and not QUAD_KEYS & keys
    assert claims(old) == claims(run)  # the quadratic rows never move a verdict
    html = (old / "report.html").read_text()
    assert 'id="beyond-cost"' not in html and '<section id="beyond">' in html
    assert "costmodel.summarize" not in html  # no summarize error in the report


def test_e2e_rerun_skips_and_report_is_identical(real_run):
    run, _, _ = real_run
    derived = ["report.html", "report.pdf", "claims.json", "metrics.csv"]
    derived += sorted(f"figures/{p.name}" for p in (run / "figures").iterdir())
    before = {f: (run / f).read_bytes() for f in derived}
    done = {p.name: p.read_bytes() for p in (run / "results").glob("*.done.json")}
    proc = _suite("reproduce", "--profile", "cpu", "--out", str(run))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    for name in done:
        assert f"{name.removesuffix('.done.json')}: done already" in proc.stderr
        assert (run / "results" / name).read_bytes() == done[name]
    proc = _suite("report", str(run), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for f in derived:
        assert (run / f).read_bytes() == before[f], f
