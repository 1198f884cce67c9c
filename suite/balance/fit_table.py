"""A CostModel from one row of the costmodel experiment's fit table (costmodel_fit), and the words
for what its sweep ran on. Library code (the balance validation, the training experiments and
the tools) reads a run's fitted model through here; `run_name` names a run folder by run, GPU
and commit (suite.experiments.balance.run_cost reads a whole folder's cost).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from suite.balance.costmodel import CostModel

MODEL_NAMES = {"wan-1.3b": "Wan 2.1 1.3B", "wan-14b": "Wan 2.1 14B", "tiny": "tiny test config"}


def given(v) -> bool:
    return not (v is None or (isinstance(v, float) and math.isnan(v)) or str(v) == "")


def model_conditions(meta) -> str:
    """What a sweep was measured on, e.g. "diffusers WanTransformer3DModel, Wan 2.1 1.3B,
    30 blocks, D=1536, gradient checkpointing, bf16" (from a costmodel_fit row or the sweep's
    columns; older runs without arch / checkpointing / dtype say "not recorded")."""
    get = meta.get if hasattr(meta, "get") else (lambda k, d=None: d)
    arch, model = get("arch", ""), get("model", "")
    arch = str(arch).split(" {")[0] if given(arch) else "architecture not recorded"
    name = MODEL_NAMES.get(str(model), str(model))
    ckpt = get("checkpointing", "")
    if given(ckpt):
        ckpt = "gradient checkpointing" if str(ckpt) == "True" else "no checkpointing"
    else:
        ckpt = "checkpointing not recorded"
    dtype = get("dtype", "")
    dtype = str(dtype) if given(dtype) else "dtype not recorded"
    layers = int(get("layers")) if given(get("layers", "")) else "?"
    return f"{arch}, {name}, {layers} blocks, D={get('dim', '?')}, {ckpt}, {dtype}"


def model_from_fit(fit: pd.DataFrame, variant: str = "free") -> CostModel:
    """The CostModel of one costmodel_fit row (what `balance` and `training` use)."""
    rows = fit[fit["variant"] == variant]
    if rows.empty:
        raise ValueError(f"costmodel_fit has no variant {variant!r}; has {sorted(fit['variant'])}")
    r = rows.iloc[0]
    return CostModel(
        a=r["a"],
        b=r["b"],
        p=r["p"],
        p_ci=(r["p_lo"], r["p_hi"]),
        r2=r["r2"],
        loo_err=r["loo_err"],
        n=int(r["n"]),
        p_fixed=variant != "free",
        m0=r["m0"],
        m1=r["m1"],
        capacity_bytes=r["capacity_bytes"],
        m_mem=r["m_mem"],
        m_comp=r["m_comp"],
        s_cross=r["s_cross"],
        source=f"costmodel_fit[{variant}] ({r['device']}: {model_conditions(r)})",
    )


def run_name(root) -> str:
    """A run folder named by its path, GPU and commit (its env.json), e.g.
    "reports/reference/h100/full-c2036da (NVIDIA H100 80GB HBM3, commit c2036da)"."""
    from suite.spread import gpu_and_commit

    root = Path(root)
    try:
        env = json.loads((root / "env.json").read_text())
    except (OSError, json.JSONDecodeError):
        return f"{root} (no env.json: GPU and commit not recorded)"
    gpu, commit = gpu_and_commit(env)
    return f"{root} ({gpu or 'no GPU'}, commit {commit or 'not recorded'})"
