"""What stands behind a number: its evidence kind, read from the data it was computed on.

Every metric row carries `evidence_kind`, a short key such as
    emulated;gpu=1;model=wan-1.3b;layers=1;ranks=16
built here from the raw table the row names first in its `evidence` column (the tables it was
computed on). How a table was obtained is declared by the experiment that writes it (its module's
EVIDENCE: table -> "measured", "simulated" or "ranks"); everything else comes from the table's own
columns and from where that experiment ran (its done.json):
- how: measured (timed or counted on this run's device), real (ranks of one torch.distributed
  job), emulated (ranks run one after another on one device), simulated (a plan costed by a step
  model fitted in this run: the fit's table gives model and layers).
  "ranks" tables say real or emulated per row in their `emulated` column.
- gpu: whether the experiment that wrote the table ran on a CUDA device.
- model, layers: the model the table measured and how many of its blocks; fewer blocks than the
  named Wan 2.1 model has (or a model that is not a Wan 2.1 configuration) is a stand-in.
- ranks: how many ranks the table's runs had.
The badge, the Methods' rank section, the run summary and the console read `label()` of this key;
no part of the suite infers evidence from a metric's name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

HOW = ("measured", "real", "emulated", "simulated")
DECLARED = ("measured", "simulated", "ranks")  # what an experiment's EVIDENCE may say of a table
# Blocks of the Wan 2.1 configurations (suite.model.CONFIGS; a test keeps the two equal): a run
# with fewer is a k-block stand-in. Kept here so the judging layer needs no torch.
FULL_LAYERS = {"wan-1.3b": 30, "wan-14b": 40}
_STRENGTH = {"measured": 0, "real": 1, "emulated": 2, "simulated": 3}  # weakest evidence last


@dataclass(frozen=True)
class Evidence:
    how: str
    gpu: bool = False
    model: str = ""  # "" for an operator-level measurement (no model)
    layers: int = 0
    ranks: int = 0

    def __post_init__(self):
        if self.how not in HOW:
            raise ValueError(f"evidence how must be one of {', '.join(HOW)}, got {self.how!r}")

    @property
    def stand_in(self) -> bool:
        """A model other than a whole Wan 2.1 configuration (fewer blocks, or the tiny one)."""
        if not self.model:
            return False
        full = FULL_LAYERS.get(self.model)
        return full is None or 0 < self.layers < full

    def key(self) -> str:
        parts = [self.how, f"gpu={int(self.gpu)}"]
        parts += [f"model={self.model}"] if self.model else []
        parts += [f"layers={self.layers}"] if self.layers else []
        parts += [f"ranks={self.ranks}"] if self.ranks else []
        return ";".join(parts)

    @classmethod
    def parse(cls, key: str) -> Evidence:
        how, *rest = str(key).split(";")
        fields = dict(p.split("=", 1) for p in rest if "=" in p)
        try:
            return cls(
                how=how,
                gpu=fields.get("gpu") == "1",
                model=fields.get("model", ""),
                layers=int(fields.get("layers", 0)),
                ranks=int(fields.get("ranks", 0)),
            )
        except ValueError as e:
            raise ValueError(f"evidence_kind {key!r}: {e}") from None

    def model_text(self) -> str:
        """'1-of-30-block stand-in', 'stand-in model' or '' (the whole model, or no model)."""
        if not self.stand_in:
            return ""
        full = FULL_LAYERS.get(self.model)
        if full is None or not self.gpu:
            return "stand-in model"
        return f"{self.layers}-of-{full}-block stand-in"

    def label(self) -> str:
        """The badge's line, e.g. '16 ranks emulated on one GPU, 1-of-30-block stand-in'."""
        where = "GPU" if self.gpu else "CPU"
        ranks = f"{self.ranks} " if self.ranks else ""
        head = {
            "measured": f"measured on {where}",
            "real": f"{ranks}real ranks on {where}",
            "emulated": f"{ranks}ranks emulated on one {where}",
            "simulated": f"simulated from a {where} cost fit of this run",
        }[self.how]
        tail = self.model_text()
        return f"{head}, {tail}" if tail else head


def label(key: str) -> str:
    """The label of an evidence key; '' for none (a claim that was not run)."""
    return Evidence.parse(key).label() if key else ""


def on_gpu(key: str) -> bool:
    return bool(key) and Evidence.parse(key).gpu


def weakest(keys) -> str:
    """The weakest of several evidence keys (a number derived from several metrics)."""
    found = [Evidence.parse(k) for k in keys if k]
    if not found:
        return ""
    worst = max(found, key=lambda e: (_STRENGTH[e.how], e.stand_in, not e.gpu))
    return worst.key()


def _one(df: pd.DataFrame, col: str, pick=max):
    if col not in df.columns or df[col].dropna().empty:
        return None
    vals = df[col].dropna()
    return pick(vals.tolist())


def writer(table: str, experiments) -> str:
    """The experiment that writes `table` (tables are prefixed with their experiment's name)."""
    return max((e for e in experiments if table.startswith(f"{e}_")), key=len, default="")


def of_table(
    table: str, tables: Mapping[str, pd.DataFrame], declared: str, devices: Mapping[str, str]
) -> Evidence:
    """The evidence of one raw table. `declared` is its writer's EVIDENCE entry, "how" or
    "how@source" where the provenance columns (model, layers) live in another table (a fit's
    residuals: the sweep; a simulation: the cost fit it was costed by); `devices`: experiment ->
    the device it ran on (done.json)."""
    how, _, source = declared.partition("@")
    if how not in DECLARED:
        raise ValueError(f"EVIDENCE of {table} must say one of {', '.join(DECLARED)}, got {how!r}")
    source = source or table
    df, src = tables[table], tables.get(source, tables[table])
    model = str(_one(src, "model", lambda v: v[0]) or "")
    layers = int(_one(src, "layers") or 0)
    ranks = 0
    if how == "ranks":  # a simulated table's rank counts are its rows' (the claim names one)
        emulated = _one(df, "emulated", lambda v: any(bool(x) for x in v))
        how = "real" if emulated is False else "emulated"
        ranks = int(_one(df, "world") or _one(df, "ranks") or 0)
    gpu = str(devices.get(writer(source, devices), "")).startswith("cuda")
    return Evidence(how, gpu, model, layers, ranks)


def _tables_named(text: str) -> list[str]:
    """The table names in a metric row's `evidence` text ('figure X' entries are figures)."""
    names = []
    for part in re.split(r"[;,]", str(text)):
        part = part.strip()
        if part and not part.startswith("figure "):
            names.append(part)
    return names


def tag(
    metrics: pd.DataFrame,
    tables: Mapping[str, pd.DataFrame],
    declared: Mapping[str, str],
    devices: Mapping[str, str],
) -> pd.DataFrame:
    """`metrics` with `evidence_kind` set from the first declared table each row names; a row
    that already has one (a derived metric) keeps it."""
    kinds = {
        t: of_table(t, tables, how, devices).key() for t, how in declared.items() if t in tables
    }
    out = metrics.copy()
    have = out["evidence_kind"] if "evidence_kind" in out else pd.Series([""] * len(out))
    out["evidence_kind"] = [
        k
        if isinstance(k, str) and k
        else next((kinds[t] for t in _tables_named(ev) if t in kinds), "")
        for k, ev in zip(have.tolist(), out["evidence"].tolist(), strict=True)
    ]
    return out
