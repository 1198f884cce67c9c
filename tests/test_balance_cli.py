import json
from pathlib import Path

import pandas as pd
import pytest

from suite.__main__ import main
from suite.balance.cli import forecast_main, simulate_main
from suite.balance.costmodel import CostModel
from suite.balance.fit_cost_cli import fit_cost_main
from suite.balance.registry import POLICIES


def test_simulate_json(capsys):
    assert simulate_main(["--policy", "dual", "--gpus", "8", "--steps", "200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"] == 8 and 0 <= out["rank_cv"] < 1 and out["throughput"] > 0


def test_simulate_text_through_main(capsys):
    assert main(["simulate", "--policy", "equal-token", "--gpus", "4", "--steps", "50"]) == 0
    assert "rank CV" in capsys.readouterr().out


def test_fit_cost_synthetic_and_sweep_csv(tmp_path, capsys):
    out, table = tmp_path / "cost.json", tmp_path / "sweep.csv"
    assert fit_cost_main(["--synthetic", "--out", str(out), "--table", str(table)]) == 0
    printed = capsys.readouterr().out
    assert "physical form a + c*B + b*B*S + d*B*S^2: a = " in printed and "R^2 = " in printed
    cost = CostModel.load(out)
    assert 1.5 < cost.p < 2.1 and cost.m_comp > 0
    out2 = tmp_path / "cost2.json"
    assert fit_cost_main(["--sweep", str(table), "--out", str(out2), "--capacity-gb", "1"]) == 0
    assert CostModel.load(out2).m_mem == pytest.approx((0.9e9 - 1e8) / 4e3, rel=0.01)
    assert simulate_main(["--cost", str(out2), "--gpus", "4", "--steps", "20"]) == 0
    capsys.readouterr()


def test_cost_json_carries_the_quadratic_step_model(tmp_path, capsys):
    """fit-cost writes the physical form beside the power law; simulate and forecast cost their
    steps with it (and say so) unless --step-model power; a JSON without it keeps the power law."""
    from suite.balance.costmodel import QuadraticCost

    out = tmp_path / "cost.json"
    assert fit_cost_main(["--synthetic", "--out", str(out)]) == 0
    capsys.readouterr()
    cost = CostModel.load(out)
    assert set(cost.quadratic) >= {"a", "c", "b", "d"} and cost.quadratic["r2"] > 0.9
    assert isinstance(cost.step_model(), QuadraticCost)
    assert CostModel.load(out).to_json() == json.loads(out.read_text())  # round trip
    args = ["--cost", str(out), "--gpus", "8", "--steps", "50", "--json"]
    assert simulate_main(args) == 0
    quad = json.loads(capsys.readouterr().out)
    assert quad["step_model"].startswith("quadratic")
    assert simulate_main([*args, "--step-model", "power"]) == 0
    power = json.loads(capsys.readouterr().out)
    assert power["step_model"].startswith("power law") and power["m_comp"] == quad["m_comp"]
    assert power["throughput"] != quad["throughput"]  # other step costs, same batches
    assert forecast_main(["--gpus", "8", "--steps", "50", "--cost", str(out), "--json",
                          "--manifest", str(_manifest(tmp_path))]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["step_model"].startswith("quadratic")
    bad = json.loads(out.read_text()) | {"quadratic": {"a": 1.0}}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert simulate_main(["--cost", str(tmp_path / "bad.json")]) == 2
    assert "quadratic needs a, c, b, d" in capsys.readouterr().err


def _manifest(tmp_path):
    m = tmp_path / "m.csv"
    m.write_text("height,width,frames\n" + "480,832,81\n" * 5 + "480,832,1\n" * 20)
    return m


def test_fit_cost_bad_sweep(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("B,S\n1,2\n")
    assert fit_cost_main(["--sweep", str(bad), "--out", str(tmp_path / "c.json")]) == 2
    assert "step_s" in capsys.readouterr().err


def test_forecast_manifest_and_plot(tmp_path, capsys):
    m = tmp_path / "m.csv"
    m.write_text(
        "height,width,frames\n" + "480,832,81\n" * 5 + "480,832,1\n" * 20 + "720,1280,33\n" * 5
    )
    plot = tmp_path / "f.png"
    assert (
        forecast_main(["--manifest", str(m), "--gpus", "16", "--steps", "60", "--plot", str(plot)])
        == 0
    )
    out = capsys.readouterr().out
    assert "recommend: policy" in out and "M_mem" in out and plot.stat().st_size > 0
    assert forecast_main(["--manifest", str(m), "--gpus", "8", "--steps", "40", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["recommend"]["policy"] in {p["policy"] for p in obj["policies"]}


def test_forecast_bad_manifest_names_line(tmp_path, capsys):
    m = tmp_path / "m.csv"
    m.write_text("height,width,frames\n480,832,81\n480,832,82\n")
    assert forecast_main(["--manifest", str(m)]) == 2
    assert "m.csv:3" in capsys.readouterr().err


def test_help_exits_zero():
    for fn in (simulate_main, forecast_main, fit_cost_main):
        with pytest.raises(SystemExit) as e:
            fn(["--help"])
        assert e.value.code == 0


def _latency_run(tmp_path, capsys, rows: str, steps: int = 400) -> dict:
    lat = tmp_path / "lat.csv"
    lat.write_text("B,S,step_s\n" + rows)
    m = tmp_path / "m.csv"
    m.write_text("height,width,frames\n480,832,1\n480,832,5\n")
    args = ["--policy", "equal-token", "--manifest", str(m), "--latency", str(lat), "--gpus", "2"]
    assert simulate_main([*args, "--steps", str(steps), "--noise", "0", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_with_measured_latency_table(tmp_path, capsys):
    out = _latency_run(tmp_path, capsys, "145,1560,1.0\n72,3120,3.0\n")
    # batches of 1 s (prob (1/145) / (1/145 + 1/72) = 0.332) and 3 s on 2 ranks: a mixed step
    # (prob 2 * 0.332 * 0.668) has max/mean 1.5, so the mean max/mean is 1 + 0.4435 * 0.5
    assert out["maxmean"] == pytest.approx(1.222, abs=0.03)
    assert out["maxmean_p99"] == pytest.approx(1.5)
    assert out["step_model"].startswith("latency table")


def test_latency_table_falls_back_to_the_cost_model_for_unmeasured_shapes(tmp_path, capsys):
    """Shapes the table lacks cost what the step model says: a table of other shapes only
    gives the cost model's own result."""
    plain = json.loads(_plain(tmp_path, capsys))
    other = _latency_run(tmp_path, capsys, "2,1560,1.0\n1,3120,1.5\n")
    assert other["throughput"] == pytest.approx(plain["throughput"])
    measured = _latency_run(tmp_path, capsys, "145,1560,1.0\n")  # one shape measured
    assert measured["throughput"] != pytest.approx(plain["throughput"])


def _plain(tmp_path, capsys) -> str:
    m = tmp_path / "m.csv"
    m.write_text("height,width,frames\n480,832,1\n480,832,5\n")
    args = ["--policy", "equal-token", "--manifest", str(m), "--gpus", "2", "--steps", "400"]
    assert simulate_main([*args, "--noise", "0", "--json"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("policy", list(POLICIES))
def test_simulate_json_has_the_metric_keys_for_every_policy(policy, capsys):
    assert simulate_main(["--policy", policy, "--gpus", "8", "--steps", "120", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    keys = ("rank_cv", "rank_cv_p99", "maxmean", "maxmean_p99", "step_cv", "bubble")
    for k in (*keys, "throughput", "planner_ms"):
        assert k in out and out[k] == out[k], k  # present and not NaN
    assert out["rank_cv_p99"] >= out["rank_cv"] and out["maxmean_p99"] >= out["maxmean"] >= 1
    assert out["policy"] == policy and out["planner_ms"] > 0


def test_forecast_ranks_every_registry_policy_and_says_why(tmp_path, capsys, monkeypatch):
    """The recommendation reads the registry: a policy added there is simulated and can win."""
    from suite.balance import registry
    from suite.balance.policies import EqualToken

    tiny = registry.PolicySpec(
        "tiny-batches", lambda inputs: EqualToken(m_tok=1, name="tiny-batches"), "B = 1", "#000001"
    )
    monkeypatch.setitem(registry.POLICIES, tiny.name, tiny)
    table = registry.POLICIES
    args = ["--manifest", str(_manifest(tmp_path)), "--gpus", "8", "--steps", "100", "--json"]
    assert forecast_main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["policies"]] == list(table)
    best = max(out["policies"], key=lambda r: r["throughput"])
    assert out["recommend"]["policy"] == best["policy"] != "tiny-batches"
    assert "highest simulated throughput" in out["recommend"]["reason"]


@pytest.mark.parametrize("reference", ["quick-5753865", "full-dd54683"])
def test_forecast_with_the_h200_reference_cost(reference, tmp_path, capsys):
    """End to end: a small CSV manifest and a committed H200 fit (the reference's cost.json,
    `python -m suite fit-cost` on that run's shapes_sweep, which agrees with its costmodel_fit)
    through `python -m suite forecast`."""
    from pathlib import Path

    from suite.balance.fit_table import model_from_fit
    from suite.rundir import read_csv

    ref = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200" / reference
    committed = CostModel.load(ref / "cost.json")
    fit = model_from_fit(read_csv(ref / "results" / "costmodel_fit.csv"))
    assert (committed.a, committed.b, committed.p, committed.m_mem) == pytest.approx(
        (fit.a, fit.b, fit.p, fit.m_mem), rel=1e-6
    )
    json.loads(
        (ref / "cost.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON")
    )
    m = tmp_path / "my_data.csv"
    m.write_text(
        "height,width,frames\n"
        + "480,832,1\n" * 40
        + "480,832,33\n" * 20
        + "480,832,81\n" * 10
        + "720,1280,81\n" * 3
    )
    assert (
        main(
            [
                "forecast",
                "--manifest",
                str(m),
                "--gpus",
                "16",
                "--steps",
                "40",
                "--cost",
                str(ref / "cost.json"),
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    from suite.balance.registry import POLICIES

    ran = {r["policy"] for r in out["policies"]}
    skipped = {s.split(" ")[0] for s in out["recommend"]["skipped"]}
    assert ran | skipped == set(POLICIES) and not ran & skipped
    assert out["recommend"]["candidates"] == list(POLICIES)
    assert {"equal-token", "dual", "global", "bucket-sync", "pack-trim-5pct"} <= ran
    # the committed JSON carries that run's physical form: the steps are costed with it (where
    # the sweep timed the optimizer apart, fitted without it: d moves by ~0.1%, optimizer_s kept)
    quad = pd.read_csv(ref / "results" / "costmodel_quadratic.csv").iloc[0]
    sweep = pd.read_csv(ref / "results" / "shapes_sweep.csv")
    apart = "optimizer_s" in sweep
    assert committed.quadratic["d"] == pytest.approx(quad["d"], rel=0.01 if apart else 1e-6)
    assert committed.optimizer_s == pytest.approx(sweep.optimizer_s.median() if apart else 0.0)
    assert out["step_model"].startswith("quadratic")
    assert out["recommend"]["m_mem"] == pytest.approx(fit.m_mem)
    assert out["recommend"]["p"] == pytest.approx(fit.p)


def test_fit_cost_says_when_the_physical_form_cannot_be_fitted(tmp_path, capsys):
    """One batch size cannot separate the per-sample and token terms: the power law is still
    fitted and written, the physical form is reported as not fitted, with the reason."""
    rows = [(1, s, 0.01 + 2e-6 * s**1.5) for s in (256, 512, 1024, 2048, 4096)]
    sweep = tmp_path / "one_b.csv"
    pd.DataFrame(rows, columns=["B", "S", "step_s"]).to_csv(sweep, index=False)
    assert fit_cost_main(["--sweep", str(sweep), "--out", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "physical form a + c*B + b*B*S + d*B*S^2 not fitted: " in out


def test_forecast_empty_manifest_names_the_file(tmp_path, capsys):
    m = tmp_path / "empty.csv"
    m.write_text("")
    assert forecast_main(["--manifest", str(m)]) == 2
    err = capsys.readouterr().err
    assert f"{m}: the manifest is empty" in err and "No columns to parse" not in err


def test_forecast_prints_a_note_for_a_manifest_without_frames(tmp_path, capsys):
    m = tmp_path / "imgs.csv"
    m.write_text("height,width\n" + "480,832\n" * 20)
    assert forecast_main(["--manifest", str(m), "--gpus", "8", "--steps", "50", "--json"]) == 0
    out = capsys.readouterr()
    assert "note: " in out.err and "no 'frames' column" in out.err
    json.loads(out.out)  # the note stays off stdout: --json output is still one object


def test_forecast_help_documents_the_manifest(capsys):
    with pytest.raises(SystemExit):
        forecast_main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Without a frames column every row is read as an image" in out


def test_forecast_help_and_json_name_every_registry_policy(tmp_path, capsys):
    """The recommendation is among all registry rows, the peers included, and says so."""
    from suite.balance.registry import OWN, PEERS, POLICIES

    with pytest.raises(SystemExit):
        forecast_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    squeezed = text.replace(" ", "")  # argparse may wrap a name at its hyphens
    assert all(n in squeezed for n in POLICIES) and "among all of them" in text
    args = ["--manifest", str(_manifest(tmp_path)), "--gpus", "4", "--steps", "60", "--json"]
    assert forecast_main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["policies"]] == list(POLICIES)  # all apply to this data
    rec = out["recommend"]
    assert rec["candidates"] == list(POLICIES)
    best = max(out["policies"], key=lambda r: r["throughput"])
    assert rec["policy"] == best["policy"]
    kind = "the suite's own" if best["policy"] in OWN else "a peer's"
    assert f"among {len(POLICIES)} policies ({kind}" in rec["reason"]
    assert set(PEERS) <= {r["policy"] for r in out["policies"]}


def test_fit_cost_prices_micro_batches_without_the_optimizer_timed_apart(tmp_path, capsys):
    """A sweep that timed the optimizer apart (the H200 30-block sweep at db196e6): the physical
    form is fitted to step_s - optimizer_s and the JSON carries the median optimizer time, which
    simulate charges once a step (unless --optimizer-s overrides it); without the column nothing
    changes."""
    ref = Path(__file__).resolve().parent.parent / "reports/reference/h200/full-attempt-db196e6"
    sweep = pd.read_csv(ref / "results" / "shapes_sweep.csv")
    apart, whole = tmp_path / "apart.json", tmp_path / "whole.json"
    sweep.to_csv(tmp_path / "apart.csv", index=False)
    sweep.drop(columns="optimizer_s").to_csv(tmp_path / "whole.csv", index=False)
    for src, out in (("apart", apart), ("whole", whole)):
        args = ["--sweep", str(tmp_path / f"{src}.csv"), "--out", str(out), "--capacity-gb", "140"]
        assert fit_cost_main(args) == 0
    assert "optimizer 16.9 ms a step" in capsys.readouterr().out
    a, w = CostModel.load(apart), CostModel.load(whole)
    assert a.optimizer_s == pytest.approx(sweep.optimizer_s.median()) and w.optimizer_s == 0.0
    assert a.quadratic["a"] < w.quadratic["a"] - 0.01  # the fixed cost less the optimizer
    assert "optimizer apart" in a.quadratic["source"] and a.p == w.p  # the power law: whole steps

    def sim(cost, *extra):
        assert simulate_main(["--cost", str(cost), "--steps", "50", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["throughput"]

    assert sim(apart) < sim(apart, "--optimizer-s", "0")
    # the power law prices whole steps: no optimizer on top, the same as without the column
    assert sim(apart, "--step-model", "power") == pytest.approx(sim(whole, "--step-model", "power"))


def test_forecast_runs_the_policies_asked_for_and_shows_progress(tmp_path, capsys):
    args = ["--manifest", str(_manifest(tmp_path)), "--gpus", "8", "--steps", "40", "--json"]
    assert forecast_main([*args, "--policies", "pack-kk-flops, global", "--jobs", "1"]) == 0
    got = capsys.readouterr()
    out = json.loads(got.out)
    assert [r["policy"] for r in out["policies"]] == ["pack-kk-flops", "global"]
    assert out["recommend"]["candidates"] == ["pack-kk-flops", "global"] and out["steps"] == 40
    assert "forecast: 2 policies on 8 ranks x 40 steps" in got.err
    assert "forecast: 1/2 pack-kk-flops" in got.err and "s left)" in got.err
    assert "forecast: 2/2 global" in got.err


def test_forecast_names_an_unknown_policy_and_the_accepted_ones(tmp_path, capsys):
    args = ["--manifest", str(_manifest(tmp_path)), "--policies", "global,nope,pack-kk"]
    assert forecast_main(args) == 2
    err = capsys.readouterr().err
    assert "--policies: unknown policy 'nope', 'pack-kk'; accepted: " + ", ".join(POLICIES) in err
    assert forecast_main(["--manifest", str(_manifest(tmp_path)), "--policies", " ,"]) == 2
    assert "unknown policy list (empty)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse's one-line usage error
        forecast_main(["--manifest", str(_manifest(tmp_path)), "--jobs", "0"])
    assert e.value.code == 2
    assert "argument --jobs: must be a whole number >= 1, got '0'" in capsys.readouterr().err


def test_forecast_in_two_processes_gives_the_same_table(tmp_path, capsys):
    args = ["--manifest", str(_manifest(tmp_path)), "--gpus", "8", "--steps", "30", "--json"]
    args += ["--policies", "equal-token,pack-kk-fitted,bucket-sync"]
    tables = []
    for jobs in ("1", "2"):
        assert forecast_main([*args, "--jobs", jobs]) == 0
        tables.append(json.loads(capsys.readouterr().out)["policies"])
    assert [r["policy"] for r in tables[1]] == ["equal-token", "pack-kk-fitted", "bucket-sync"]
    for one, two in zip(*tables):
        assert {k: v for k, v in one.items() if k != "planner_ms"} == {
            k: v for k, v in two.items() if k != "planner_ms"
        }


def test_forecast_steps_follow_the_corpus_a_step_needs():
    """1000 steps while a corpus draw holds them; fewer at many ranks, never under the floor."""
    from suite.balance.buckets import bucket_table
    from suite.balance.simulator import AUTO_STEPS_MIN, CORPUS_CAP, auto_steps

    video = bucket_table(pd.Series([32_760] * 5 + [1_560] * 5))  # mean S 17,160
    m_mem = 712_000.0
    assert auto_steps(video, m_mem, 16) == 1000
    at_1024 = auto_steps(video, m_mem, 1024)
    assert at_1024 == int(CORPUS_CAP / (1.1 * 1024 * m_mem / 17_160))
    assert AUTO_STEPS_MIN < at_1024 < 1000
    assert auto_steps(bucket_table(pd.Series([1_560] * 4)), m_mem, 1024) == AUTO_STEPS_MIN


def test_simulate_prints_an_estimate_on_long_work(capsys, monkeypatch):
    monkeypatch.setattr("suite.balance.cli.LONG_S", 0.0)
    assert simulate_main(["--policy", "pack-kk-flops", "--gpus", "8", "--steps", "20"]) == 0
    err = capsys.readouterr().err
    assert "simulate: pack-kk-flops on 8 ranks x 20 steps, about" in err and "done in" in err


# ----------------------------------------------------------------------------- the default cost

REF_H100 = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h100" / "full-c2036da"


def _forecast(tmp_path, capsys, *args):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from forecast_manifest import manifest

    m = tmp_path / "m5000.csv"
    if not m.exists():
        manifest(5000, 0).to_csv(m, index=False)  # the practitioner's manifest: 5,000 samples
    assert forecast_main(["--manifest", str(m), "--jobs", "1", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_forecast_and_simulate_name_the_cost_and_its_run(tmp_path, capsys):
    out = _forecast(tmp_path, capsys, "--gpus", "8", "--steps", "20", "--policies", "dual")
    assert out["cost"].startswith("cost: the default, analytic Wan-14B on H200")
    out = _forecast(tmp_path, capsys, "--gpus", "8", "--steps", "20", "--policies", "dual",
                    "--cost", str(REF_H100))  # fmt: skip
    assert "full-c2036da (NVIDIA H100 80GB HBM3, commit c2036da)" in out["cost"]
    assert out["recommend"]["m_mem"] == pytest.approx(370477.598, rel=1e-6)
    h200 = REF_H100.parents[1] / "h200" / "full-dd54683" / "cost.json"
    args = ["--gpus", "4", "--steps", "20", "--cost", str(h200)]
    assert simulate_main(args) == 0
    text = capsys.readouterr().out
    assert f"cost: {h200} (" in text and "in run " in text and "NVIDIA H200, commit dd54683" in text


@pytest.mark.parametrize("gpus", [16, pytest.param(1024, marks=pytest.mark.slow)])
def test_the_defaults_recommendation_is_its_source_models(gpus, tmp_path, capsys):
    """On a 5,000-sample manifest, forecast without --cost recommends what it recommends with the
    cost the default stands for: the analytic model's steps with the planners' power law fitted
    freely to it (the old default's a = 6.2 s, which it no longer charges)."""
    from suite.balance.costmodel import default_cost_model

    steps = ["--steps", "200" if gpus == 16 else "12"]
    default = _forecast(tmp_path, capsys, "--gpus", str(gpus), *steps)
    src = tmp_path / "analytic.json"
    default_cost_model(pin_fixed=False).save(src)
    source = _forecast(tmp_path, capsys, "--gpus", str(gpus), *steps, "--cost", str(src))
    assert default["recommend"]["policy"] == source["recommend"]["policy"]
    tput = {r["policy"]: r["throughput"] for r in default["policies"]}
    assert max(tput, key=tput.get) == default["recommend"]["policy"] != "dual"
