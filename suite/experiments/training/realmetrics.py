"""C7/C8 metric rows of the training experiment's real ranks (table training_real, gathered by
suite.train.realranks), pure pandas.

`real_metrics`:
- throughput_gain_8_real (C7) / throughput_gain_16_real (C8) when K is 8 / 16, otherwise
  throughput_gain_real under both C7 and C8 with K in the conditions: dual over equal-token,
  global tokens / total step time, bootstrap CI over steps; throughput_gain_global_real (C7, C8):
  the global policy (its K-rank plan) over equal-token, any K.
- emulation_error_pct (C7): the emulator's prediction for K ranks against the measured real steps.
  The prediction is the emulated run of the same policy on its own K-rank plan (`RUN@K`, e.g. the
  8-rank runs of C7) where there is one; otherwise it regroups the 16-virtual-rank run into K-rank
  steps (`runstats.regroup`: global batch k*16 + r becomes step (k*16 + r) // K, rank
  (k*16 + r) % K), which is the real run's plan exactly, and recomposes the step as slowest rank + all-reduce model for K
  ranks + optimizer. The metric is the mean over matched steps (both policies) of
  100 * |emulated step_s / real step_s - 1|; the signed total-time error is in the conditions.
  Only steps whose per-step tokens match are compared (else the metric is not produced).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.experiments.training.runstats import regroup, throughput_gain
from suite.train.logs import step_table, summary_table


def real_metrics(tables: dict[str, pd.DataFrame], cond_emulated: str = "") -> list[dict]:
    """C7/C8 metric rows from training_real (and training_ranks for the emulation error)."""
    real = tables.get("training_real")
    if real is None or real.empty:
        return []
    K = int(real["world"].iloc[0])
    backend = str(real["backend"].iloc[0]) if "backend" in real.columns else "?"
    dev = "GPUs" if backend == "nccl" else "CPU processes"
    i0 = real.iloc[0]
    S = real["S"]
    cond = (
        f"{K} real ranks ({backend}, {K} {dev}, DDP), {i0['model']} width D={int(i0['dim'])}, "
        f"{int(i0['layers'])} layers, S {int(S.min())}-{int(S.max())}"
    )
    steps = {run: step_table(d, keys=["run"]) for run, d in real.groupby("run")}
    base = "default/equal-token/wan"
    rows: list[dict] = []
    if base in steps:
        e = summary_table(steps[base], keys=["run"]).iloc[0]
        for pol, suffix in (("dual", ""), ("global", "_global")):
            run = f"default/{pol}/wan"
            if run not in steps:
                continue
            g, lo, hi = throughput_gain(steps[base], steps[run])
            d = summary_table(steps[run], keys=["run"]).iloc[0]
            c = (
                f"{cond}; {len(steps[run])} steps; tokens/s {pol} {d.throughput:.0f} vs "
                f"{e.throughput:.0f}"
            )
            if suffix == "" and K in (8, 16):
                targets = [("C7" if K == 8 else "C8", f"throughput_gain_{K}_real")]
            else:
                targets = [
                    ("C7", f"throughput_gain{suffix}_real"),
                    ("C8", f"throughput_gain{suffix}_real"),
                ]
            for claim, key in targets:
                rows.append(
                    {
                        "claim": claim,
                        "metric": key,
                        "value": g,
                        "ci_low": lo,
                        "ci_high": hi,
                        "unit": "%",
                        "conditions": c,
                        "evidence": "training_real; figure training_throughput",
                    }
                )
    emu = tables.get("training_ranks")
    if emu is not None and not emu.empty:
        errs, tot_r, tot_e = [], 0.0, 0.0
        for run, st in steps.items():
            if "/global/" in run:  # a 16-rank global plan is not a K-rank one: no regrouping
                continue
            er = emu[emu["run"] == f"{run}@{K}"]  # the policy's own K-rank plan, if emulated
            if er.empty:
                er = emu[emu["run"] == run]
            if er.empty or int(er["world"].iloc[0]) % K:
                continue
            if "busbw_gbps" in real.columns:  # the all-reduce bandwidth measured on the K ranks
                er = er.assign(busbw_gbps=float(real["busbw_gbps"].iloc[0]))
            pred = step_table(regroup(er, K) if K != int(er["world"].iloc[0]) else er, keys=["run"])
            m = st.merge(pred, on="step", suffixes=("_real", "_emu"))
            if m.empty or not (m.tokens_real == m.tokens_emu).all():
                continue
            errs += list(np.abs(m.step_s_emu / m.step_s_real - 1))
            tot_r += float(m.step_s_real.sum())
            tot_e += float(m.step_s_emu.sum())
        if errs:
            measured = "busbw_gbps" in real.columns
            bw = float((real if measured else emu)["busbw_gbps"].iloc[0])
            rows.append(
                {
                    "claim": "C7",
                    "metric": "emulation_error_pct",
                    "value": 100 * float(np.mean(errs)),
                    "unit": "% error",
                    "conditions": f"mean |emulated/real - 1| of the step time over {len(errs)} "
                    f"matched steps (same batches); total-time error "
                    f"{100 * (tot_e / tot_r - 1):+.1f}%; all-reduce model at {bw:.1f} GB/s"
                    f" ({'measured on the real ranks' if measured else 'assumed'}); real: {cond}"
                    + (f"; emulated: {cond_emulated}" if cond_emulated else ""),
                    "evidence": "training_real, training_ranks",
                }
            )
    return rows
