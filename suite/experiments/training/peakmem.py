"""C10's metric rows: peak device memory of the dual run over equal-token, measured per step,
over equal-token trained at the token budget tuned for balance (the paper's baseline), and over
that baseline modelled from the plain equal-token run.

Definitions (summary lists every metric): peak_vram_util_gain is the mean over steps
of each step's peak allocated bytes (max over its ranks and their micro-batches), dual over
equal-token in %; _rankbatch the mean over rank-batches instead (the earlier definition);
_reserved the same per-step mean of max reserved; _pp the difference in % of device memory;
_tuned_measured the dual run over the trained run default/equal-token-tuned/wan (equal-token at
M_tok = `tuned_token_budget`, training_info m_tok_tuned), per-step peaks as above; _tuned the
same baseline with its peaks modelled from this run's own memory fit (not measured).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.experiments.training.runstats import compare, pairing_note

TUNED = "equal-token-tuned"  # the policy segment of C10's trained baseline's run name


def step_peak_gain(summ, base, new, paired: bool):
    """(gain %, CI low, CI high, new's and base's mean per-step peak bytes) of the mean over steps
    of each step's peak allocated memory, new over base; None where peaks were not measured."""
    pe, pn = summ[base][0].peak_mem_bytes.mean(), summ[new][0].peak_mem_bytes.mean()
    if not pe > 0:
        return None
    return (*compare(summ, base, new, "peak_gain", paired), pn, pe)


def memory_rows(ranks, summ, base, new, capacity: float, cond: str, paired: bool) -> list[dict]:
    """C10: the mean over steps of each step's peak (max over its ranks and micro-batches), new
    over base (run-and-world keys of `summ`, runstats.run_summaries); _rankbatch: the
    mean over rank-batches instead (the earlier definition)."""
    gain = step_peak_gain(summ, base, new, paired)
    if gain is None:
        return []
    v, lo, hi, pn, pe = gain
    rb = {k: ranks[ranks["run"] == k[0]].peak_mem_bytes.mean() for k in (base, new)}
    rv, rlo, rhi = compare(summ, base, new, "peak_reserved_gain", paired)
    row = {"claim": "C10", "unit": "%", "evidence": "training_ranks"}
    return [
        row
        | {
            "metric": "peak_vram_util_gain",
            "value": v,
            "ci_low": lo,
            "ci_high": hi,
            "conditions": f"mean per-step peak allocated {pn / 2**30:.1f} vs {pe / 2**30:.1f} GiB; "
            + cond
            + "; "
            + pairing_note(paired),
        },
        row
        | {
            "metric": "peak_vram_util_gain_rankbatch",
            "value": 100 * (rb[new] / rb[base] - 1),
            "conditions": f"mean over rank-batches of peak allocated {rb[new] / 2**30:.1f} vs "
            f"{rb[base] / 2**30:.1f} GiB (per rank-batch, not per step: an alternative reading); "
            + cond,
        },
        row
        | {
            "metric": "peak_vram_util_gain_reserved",
            "value": rv,
            "ci_low": rlo,
            "ci_high": rhi,
            "conditions": "mean per-step max reserved; " + cond,
        },
        row
        | {
            "metric": "peak_vram_util_gain_pp",
            "value": 100 * (pn - pe) / capacity,
            "unit": "pp",
            "conditions": "mean per-step peak, % of device memory; " + cond,
        },
    ]


def tuned_token_budget(m_comp: float, p: float, s_max: float) -> float:
    """Equal-token's M_tok tuned for balance: the largest budget whose longest bucket's batch
    (B = max(1, floor(M_tok / s_max))) stays within the dual rule's compute budget M_comp, so no
    bucket of either policy is slower than the dual's slowest batch."""
    return s_max * max(1, math.floor(m_comp / s_max**p))


def tuned_row(ranks, summ, base, new, info: pd.Series, cond: str) -> list[dict]:
    """C10 _tuned: the dual run's measured per-step peak over equal-token at the tuned M_tok,
    whose per-step peak is modelled: each rank-batch of the measured equal-token run re-batched to
    B' = max(1, floor(M_tok / S)) at its S, peak = m0 + m1 * B' * S with (m0, m1) least squares on
    this run's own measured rank-batches of both policies; per-step max over ranks, mean over steps."""
    runs = ranks[ranks["run"].isin([base[0], new[0]])]
    x, y = (runs.B * runs.S).to_numpy(float), runs.peak_mem_bytes.to_numpy(float)
    if len(np.unique(x)) < 2 or not (y > 0).any() or not np.isfinite(info.get("m_comp", math.nan)):
        return []
    m1, m0 = np.polyfit(x, y, 1)
    r2 = 1 - np.sum((y - (m0 + m1 * x)) ** 2) / np.sum((y - y.mean()) ** 2)
    b = ranks[ranks["run"] == base[0]]
    m_tok = tuned_token_budget(float(info["m_comp"]), float(info["p"]), float(b.S.max()))
    B = np.maximum(1, np.floor(m_tok / b.S.to_numpy(float)))
    peak = pd.Series(m0 + m1 * B * b.S.to_numpy(float), index=b.index).groupby(b.step).max()
    dual = summ[new][0].peak_mem_bytes.mean()
    return [
        {
            "claim": "C10",
            "metric": "peak_vram_util_gain_tuned",
            "value": 100 * (dual / peak.mean() - 1),
            "unit": "%",
            "evidence": "training_ranks",
            "conditions": f"modelled baseline: equal-token at M_tok {m_tok:.0f} tuned for balance "
            f"(longest bucket within M_comp) vs the measured dual run; mean per-step peak "
            f"{dual / 2**30:.1f} vs {peak.mean() / 2**30:.1f} GiB, memory m0 + m1*B*S fitted on "
            f"this run's rank-batches (R^2 {r2:.3f}); " + cond,
        }
    ]


def tuned_measured_row(summ, tuned, new, info: pd.Series, cond: str, paired: bool) -> list[dict]:
    """C10 _tuned_measured: the mean per-step peak of run-and-world key `new` (dual) over `tuned`
    (equal-token trained at the M_tok tuned for balance), both measured; [] where either run is
    missing or peaks were not measured (CPU)."""
    gain = step_peak_gain(summ, tuned, new, paired) if tuned in summ and new in summ else None
    if gain is None:
        return []
    v, lo, hi, pn, pe = gain
    return [
        {
            "claim": "C10",
            "metric": "peak_vram_util_gain_tuned_measured",
            "value": v,
            "ci_low": lo,
            "ci_high": hi,
            "unit": "%",
            "evidence": "training_ranks",
            "conditions": f"measured: equal-token trained at M_tok {info['m_tok_tuned']:.0f} "
            f"tuned for balance (longest bucket within M_comp) vs dual at M_mem "
            f"{info['m_mem']:.0f}, M_comp {info['m_comp']:.3g}; mean per-step peak allocated "
            f"{pn / 2**30:.2f} vs {pe / 2**30:.2f} GiB; " + cond + "; " + pairing_note(paired),
        }
    ]
