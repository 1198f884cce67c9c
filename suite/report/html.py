"""report.html: one self-contained page (inline SVG, inline CSS, no network) from jinja2 with
autoescape. Everything it shows comes from the run directory, so a rebuild gives the same bytes."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from suite.claims import Claim, Verdict
from suite.evidence import label as evidence_label
from suite.evidence import on_gpu as evidence_on_gpu
from suite.report import verdicts

TEMPLATES = Path(__file__).with_name("templates")

COLOURS = {name: st.fill for name, st in verdicts.STYLES.items()}  # a verdict's badge colour
INKS = {name: st.ink for name, st in verdicts.STYLES.items()}  # its text colour on that fill

# The choices the paper leaves open (ADAPTIVELOAD.md section 4) and what this suite does. A
# "C<n>: <key>" in a text names the ledger's primary key of that claim (a test holds them equal).
CHOICES = [
    (
        "Imbalance rate / CV of compute load",
        "CV across ranks within a step, averaged over steps, of measured (or emulated) per-rank "
        "compute time; alternatives: CV of predicted cost, (max - mean)/max, max/mean.",
    ),
    (
        "Step-time CV",
        "Across steps of the synchronous step (slowest rank's compute + gradient "
        "collective + optimizer); alternative: per-token normalised step time.",
    ),
    (
        "Peak VRAM utilisation",
        "Relative change of mean per-step torch.cuda.max_memory_allocated; "
        "alternatives: reserved memory, percentage points.",
    ),
    (
        "Throughput",
        "Global latent tokens after patchify per second, no padding, same data order "
        "and seed for both policies.",
    ),
    (
        "Correlation R",
        "Pearson R. C1: r_tokens_steps, over the equal-token baseline's training "
        "rank-batches (fallback: the sweep's equal-token shapes), the designed sweep as a reading "
        "beside it. C2: r_bs2_sweep, over the offline (B, S) shape sweep's median step times, "
        "proxy B*S^2 per batch, the training rank-batches as an alternative. Spearman beside each.",
    ),
    (
        "Cost model",
        "C3: cost_fit_r2, step_time ~ a + b*B*S^p by non-linear least squares with p free; p "
        "fixed at 2 as alternative. M_mem of the simulated plans from the sweep's measured peak "
        "memory (a linear fit in B*S with a safety margin); the training runs cap it at a "
        "multiple of the longest sample (training_info's m_mem_cap). M_comp = M_mem * s_cross^(p-1) "
        "at the tuned s_cross.",
    ),
    (
        "Kernel baseline",
        "The Wan 2.1 eager path (LayerNorm and modulation in fp32) as primary; "
        "bf16 eager and torch.compile as alternatives; bf16 x, N = 65536, D in {1536, 3072, 5120}.",
    ),
    ("Learning rate with variable B", "Unchanged across buckets (loss averaged per sample)."),
]


def fmt_num(x: Any) -> str:
    """A number for humans: 3 significant digits, thousands grouped, '–' for missing."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(x):
        return "–"
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
        return f"{x:.3g}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.1f}"


def fmt_ci(lo: Any, hi: Any) -> str:
    lo_s, hi_s = fmt_num(lo), fmt_num(hi)
    return "" if "–" in (lo_s, hi_s) else f" [{lo_s}, {hi_s}]"


def inline_svg(svg: str) -> Markup:
    """The <svg> element of a matplotlib SVG file's text, without the XML prolog and DOCTYPE, and
    without its fixed width and height (the page's CSS sizes it)."""
    start = svg.find("<svg")
    if start < 0:
        raise ValueError("the figure's SVG holds no <svg> element")
    svg = re.sub(
        r"<svg ([^>]*?)width=\"[^\"]*\" height=\"[^\"]*\"", r"<svg \1", svg[start:], count=1
    )
    return Markup(svg)  # written by matplotlib from our own figures: trusted markup


def flatten(obj: Any, prefix: str = "") -> list[tuple[str, str]]:
    """env.json as sorted (key, value) rows, nested keys joined with dots."""
    rows: list[tuple[str, str]] = []
    if isinstance(obj, Mapping):
        for k in sorted(obj):
            rows += flatten(obj[k], f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list) and obj and all(isinstance(o, Mapping) for o in obj):
        for i, o in enumerate(obj):
            rows += flatten(o, f"{prefix}[{i}]")
    else:
        rows.append((prefix, "absent" if obj is None else str(obj)))
    return rows


def rule_text(c: Claim) -> str:
    """The verdict rule in a few words, e.g. "higher is better, ±5 %"."""
    if c.rule == "threshold":
        return f"{'above' if c.direction == 'higher' else 'at most'} {fmt_num(c.paper_value)}"
    band = f"±{100 * c.tolerance:g}% of the paper's value"
    if c.direction == "match":
        return f"within {band}"
    if c.rule == "upto":
        return f"an upper bound: reaching it, {band}"
    return f"{c.direction} is better, {band}"


def claim_rows(
    results: list[Verdict],
    claims: list[Claim],
    figures_of: Mapping[str, list[str]],
    ranks: Mapping[str, str],
) -> list[dict]:
    """What the summary and definitions sections show for each claim; the verdict badge names
    the evidence kind the verdict's metric row declares (suite.evidence)."""
    by_id = {c.id: c for c in claims}
    rows = []
    for v in results:
        c = by_id[v.id]
        seen = {a["metric"]: a for a in v.alternatives}
        primary = v.metric or c.primary[0]
        alts = []
        for key in dict.fromkeys(c.primary + c.alternatives):
            if key == primary:
                continue
            a = seen.get(key)
            role = "fallback primary" if key in c.primary else "alternative"
            note = ""
            if a and not a["verdict"]:
                note = f"unit {a['unit']} is not the claim's {c.unit}: shown, not judged"
            alts.append(
                {
                    "metric": key,
                    "role": role,
                    "value": fmt_num(a["value"]) if a else "not measured",
                    "ci": fmt_ci(a["ci_low"], a["ci_high"]) if a else "",
                    "unit": a["unit"] if a else "",
                    "verdict": a["verdict"] if a else "",
                    "conditions": "; ".join(x for x in (a["conditions"], note) if x) if a else "",
                }
            )
        evidence = list(dict.fromkeys(e.strip() for e in re.split(r"[;,]", v.evidence)))
        evidence = [e for e in evidence if e]
        named = {e[len("figure ") :] for e in evidence if e.startswith("figure ")}
        evidence = [
            f"fig: {e[len('figure ') :]}" if e.startswith("figure ") else e for e in evidence
        ]
        rows.append(
            {
                "id": v.id,
                "claim": v.claim,
                "paper": v.paper_text,
                "unit": v.unit,
                "ours": fmt_num(v.measured),
                "ci": fmt_ci(v.ci_low, v.ci_high),
                "baseline": fmt_num(v.baseline),
                "verdict": v.verdict,
                "kind": evidence_label(v.evidence_kind) if v.verdict != "not-run" else "",
                "gpu": evidence_on_gpu(v.evidence_kind),
                "metric": v.metric,
                "primary": primary,
                "definition": v.definition,
                "conditions": v.conditions,
                "reason": v.reason,
                "evidence": evidence,
                # the experiment's other figures; those the evidence names are linked there
                "figures": [f for f in figures_of.get(c.experiment, []) if f not in named],
                "experiment": c.experiment,
                "hardware": c.hardware,
                "rule": c.rule,
                "direction": c.direction,
                "tolerance": fmt_num(c.tolerance),
                "alternatives": alts,
                "rule_text": rule_text(c),
                "ranks": ranks.get(v.id, ""),
                "depends": len({a["verdict"] for a in alts if a["verdict"]} | {v.verdict}) > 1,
                "reading_note": v.reading_note,
                # the ledger's verdict against torch.compile instead of the eager baseline
                "compile": compile_text(v),
            }
        )
    return rows


def compile_text(v: Verdict) -> str:
    """The headline's torch.compile marker of a claim, e.g. "vs torch.compile: partial (1.53)";
    empty where the ledger names no torch.compile reading."""
    if not v.compile_metric:
        return ""
    if v.compile_verdict == "not-run":
        return f"vs torch.compile: not measured ({v.compile_metric})"
    return f"vs torch.compile: {v.compile_verdict} ({fmt_num(v.compile_value)})"


def badge_css(verdict: str) -> str:
    """The inline style of a verdict's badge (any verdict: an unknown one gets a neutral grey)."""
    st = verdicts.style(verdict)
    return f"background:{st.fill};color:{st.ink}"


def render(context: Mapping[str, Any]) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals.update(badge=badge_css, styles=verdicts.STYLES)
    return env.get_template("report.html.j2").render(**context)
