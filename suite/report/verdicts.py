"""How a verdict is shown: its colours, the kind of evidence behind it, and the plain-language
summary of a run. One copy for the HTML, the PDF and the figures.

Colours are Okabe-Ito (distinct under the common colour-vision deficiencies), each with the ink
that stays readable on it; exceeded (blue) and reproduced (green) differ in hue and lightness.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from suite.claims import VERDICTS


@dataclass(frozen=True)
class Style:
    fill: str
    ink: str
    meaning: str


STYLES: dict[str, Style] = {
    "exceeded": Style("#0072B2", "#ffffff", "beats the paper by more than the tolerance"),
    "reproduced": Style("#009E73", "#ffffff", "within the tolerance of the paper"),
    "partial": Style("#E69F00", "#1d2330", "beats the baseline, short of the paper"),
    "inconclusive": Style("#CC79A7", "#1d2330", "the 95% interval straddles a boundary"),
    "not-reproduced": Style("#D55E00", "#ffffff", "no improvement over the baseline"),
    "not-run": Style("#BBBBBB", "#1d2330", "not run here; the reason is given"),
}
assert set(VERDICTS) <= set(STYLES), f"a verdict without a colour: {set(VERDICTS) - set(STYLES)}"
UNKNOWN = Style("#666666", "#ffffff", "a verdict this report does not know")


def style(verdict: str) -> Style:
    return STYLES.get(verdict, UNKNOWN)


def _ids(ids: list[str]) -> str:
    return ", ".join(ids)


def summary(rows: Iterable[Mapping], profile: str, device: str, total: int) -> str:
    """One paragraph: what was judged, how each verdict came out (claim ids), on what evidence,
    and what was not run and why. `rows` are html.claim_rows() (kind: the evidence label; gpu:
    whether that evidence comes from a GPU)."""
    rows = list(rows)
    by_verdict: dict[str, list[str]] = {}
    by_kind: dict[str, list[str]] = {}
    reasons: dict[str, list[str]] = {}
    for r in rows:
        by_verdict.setdefault(r["verdict"], []).append(r["id"])
        if r["verdict"] == "not-run":
            reasons.setdefault(r["reason"] or "no reason recorded", []).append(r["id"])
        elif r["kind"]:
            by_kind.setdefault(r["kind"], []).append(r["id"])
    judged = len(rows) - len(by_verdict.get("not-run", []))
    gpu = any(r.get("gpu") for r in rows if r["verdict"] != "not-run")
    where = f"on {device}" if device and device != "no CUDA GPU" else "without a CUDA GPU"
    text = [f"This {profile}-profile run {where} judged {judged} of the paper's {total} claims"]
    parts = [
        f"{len(ids)} {v} ({_ids(ids)})"
        for v in STYLES
        if v != "not-run" and (ids := by_verdict.get(v))
    ]
    parts += [f"{len(ids)} {v} ({_ids(ids)})" for v, ids in by_verdict.items() if v not in STYLES]
    text[0] += (": " + "; ".join(parts) + ".") if parts else "."
    if by_kind:
        kinds = "; ".join(f"{k}: {_ids(ids)}" for k, ids in by_kind.items())
        text.append(f"Evidence behind them: {kinds}.")
    if judged and not gpu:
        text.append(
            "None of these is a GPU result: the verdicts come from this machine's CPU (a "
            "small stand-in model and a cost model fitted on it), so they check the method, "
            "not the paper's GPU numbers."
        )
    for reason, ids in reasons.items():
        text.append(f"Not run: {_ids(ids)} ({reason}).")
    return " ".join(text)
