"""benchmarks/gate.py: a benchmark slower than its threshold fails twice or not at all; a
uniformly slower machine passes; the committed baseline covers every CPU benchmark and its
numbers follow from its raw seconds by the stated rule."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from benchmarks import gate
from tests.test_run_asv import benchmarks

PLANNER = "bench_balance.Planner.time_epoch_plan['global']"
SIM = "bench_balance.Simulator.time_simulate[1024, 'dual']"


def run(machine=1.0, **slower):
    """One run's values: the machine workload and two benchmarks, each `slower` times its base."""
    base = {gate.MACHINE_SPEED: 0.2, PLANNER: 0.05, SIM: 0.5}
    factor = {PLANNER: slower.get("planner", 1.0), SIM: slower.get("sim", 1.0)}
    return {k: {"value": v * machine * factor.get(k, 1.0), "version": "1"} for k, v in base.items()}


@pytest.fixture
def baseline():
    bench = gate.summarise([run(), run(1.02), run(0.99, planner=1.03)])
    return {"benchmarks": bench, "machine_version": "1"}


def test_threshold_rule_clips_noise_to_floor_and_ceiling():
    assert gate.threshold(1.0) == gate.FLOOR
    assert gate.threshold(1.2) == pytest.approx(1.2**gate.EXPONENT)
    assert gate.threshold(1.5) == gate.CEILING < 2  # a 2x slowdown always fails
    assert gate.FLOOR < gate.CEILING


def test_summarise_takes_the_median_ratio_and_the_spread():
    runs = [run(), run(1.5), run(1.0, planner=1.2)]  # a 1.5x slower machine changes nothing
    b = gate.summarise(runs)[PLANNER]
    assert b["ratio"] == pytest.approx(0.25) and b["noise"] == pytest.approx(1.2)
    assert b["raw_noise"] == pytest.approx(1.5)  # raw: the machine's 1.5x shows
    assert b["seconds"] == pytest.approx([0.05, 0.075, 0.06])
    assert gate.MACHINE_SPEED not in gate.summarise(runs)


def test_a_uniformly_slower_machine_passes(baseline):
    lines, bad = gate.judge(run(machine=1.8), baseline)
    assert bad == [] and all(line.startswith("ok") for line in lines)


def test_a_2x_slower_benchmark_fails_on_a_slower_machine_too(baseline):
    for machine in (0.7, 1.0, 1.8):
        lines, bad = gate.judge(run(machine=machine, planner=2.0), baseline)
        assert bad == [PLANNER], machine
        assert any(line.startswith("SLOW   2.0") and PLANNER in line for line in lines)


def test_a_changed_missing_or_new_benchmark_fails(baseline):
    changed = run()
    changed[SIM]["version"] = "2"
    assert gate.judge(changed, baseline)[1] == [SIM]
    missing = {k: v for k, v in run().items() if k != SIM}
    assert gate.judge(missing, baseline)[1] == [SIM]
    new = run() | {"bench_balance.Planner.time_epoch_plan['new']": {"value": 1, "version": "1"}}
    lines, bad = gate.judge(new, baseline)
    assert bad == ["bench_balance.Planner.time_epoch_plan['new']"]
    assert any("not in the baseline; run `python -m benchmarks.gate calibrate`" in x for x in lines)
    workload = run()
    workload[gate.MACHINE_SPEED]["version"] = "2"  # every ratio is to the old workload
    assert gate.judge(workload, baseline)[1] == [gate.MACHINE_SPEED]


def test_check_fails_only_when_the_confirming_run_is_slow_too(baseline, tmp_path, monkeypatch):
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline))
    asked = []

    def measure_then(*runs):
        it = iter(runs)

        def measure(bench=gate.CPU_BENCHMARKS):
            asked.append(bench)
            return next(it)

        return measure

    monkeypatch.setattr(gate, "measure", measure_then(run(planner=2.0), run(planner=2.1)))
    assert gate.check(path) == 1
    # the confirming run re-runs only the benchmark and parameters that were slow, named as
    # asv matches them: "name(param, ...)"
    assert re.search(asked[1], "bench_balance.Planner.time_epoch_plan('global')")
    assert not re.search(asked[1], "bench_balance.Planner.time_epoch_plan('dual')")
    assert not re.search(asked[1], "bench_balance.Simulator.time_simulate(1024, 'dual')")
    monkeypatch.setattr(gate, "measure", measure_then(run(planner=2.0), run()))
    assert gate.check(path) == 0  # a one-off: not confirmed
    monkeypatch.setattr(gate, "measure", measure_then(run(1.3)))
    assert gate.check(path) == 0


def _cpu_benchmark_names() -> set[str]:
    """asv's names, with parameters, of every benchmark the gate runs."""
    names = set()
    for name, (cls, _) in benchmarks().items():
        if not re.search(gate.CPU_BENCHMARKS, name) or name == gate.MACHINE_SPEED:
            continue
        params = getattr(cls, "params", ())
        params = params if isinstance(params, tuple) else (params,)
        for combo in itertools.product(*params):
            names.add(name + ("[" + ", ".join(map(repr, combo)) + "]" if combo else ""))
    return names


def test_the_committed_baseline_covers_every_cpu_benchmark_at_its_version():
    base = json.loads(gate.BASELINE.read_text())["benchmarks"]
    assert set(base) == _cpu_benchmark_names()
    versions = {k: str(cls.version) for k, (cls, _) in benchmarks().items()}
    for name, b in base.items():
        assert b["version"] == versions[name.split("[")[0]], name


def test_the_committed_baseline_follows_from_its_raw_seconds():
    """Every ratio, noise and threshold recomputed from the committed raw seconds."""
    data = json.loads(gate.BASELINE.read_text())
    assert data["runs"] == len(data["machine_seconds"]) >= 3
    runs = [
        {gate.MACHINE_SPEED: {"value": m, "version": data["machine_version"]}}
        | {
            k: {"value": b["seconds"][i], "version": b["version"]}
            for k, b in data["benchmarks"].items()
        }
        for i, m in enumerate(data["machine_seconds"])
    ]
    again = gate.summarise(runs)
    for name, b in data["benchmarks"].items():
        for key in ("ratio", "noise", "raw_noise", "threshold"):
            assert again[name][key] == pytest.approx(b[key]), (name, key)
        assert gate.FLOOR <= b["threshold"] <= gate.CEILING < 2
