"""report.pdf and the figures: no text crosses its table cell or the page, no empty panels, and
the rendered pages (pdftoppm) carry ink inside the margins only. Verdict styles and evidence kinds
cover every verdict, so a CPU run cannot read as a GPU result."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from test_reproduce import fake  # noqa: F401  (the fake-experiments fixture)

from suite import evidence, reproduce
from suite.claims import VERDICTS, load_claims
from suite.evidence import Evidence
from suite.report import html, pdf, verdicts
from suite.report.plots import kernels, shapes

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reports" / "reference" / "h200" / "quick-5753865" / "claims.json"


def _rows(kind_of) -> list[dict]:
    """html.claim_rows-shaped rows of the committed reference, evidence kind from kind_of."""
    rows = []
    for c in json.loads(REFERENCE.read_text()):
        rows.append(
            {
                "id": c["id"],
                "claim": c["claim"],
                "paper": c["paper_text"],
                "ours": html.fmt_num(c["measured"]),  # a not-run claim has none: "–"
                "ci": html.fmt_ci(c["ci_low"], c["ci_high"]),
                "unit": c["unit"],
                "verdict": c["verdict"],
                "kind": kind_of(c),
                "reason": c["reason"],
                "conditions": c["conditions"] * 3,  # long notes must be cut, not overflow
            }
        )
    return rows


# every evidence kind's label, at its longest (suite.evidence)
KINDS = [
    Evidence(how, gpu, "wan-1.3b", 1, 1024 if how in ("real", "emulated") else 0).label()
    for how in evidence.HOW
    for gpu in (True, False)
]


@pytest.mark.parametrize("kind", KINDS)
def test_title_page_fits_every_evidence_kind(kind):
    rows = _rows(lambda c: kind)
    rows[0]["verdict"] = "not-reproduced"  # the longest verdict beside the longest kind
    fig = pdf.title_page(rows, "run x · git abc", "A summary paragraph. " * 40)
    try:
        assert pdf.layout_problems(fig) == []
    finally:
        plt.close(fig)


def test_layout_problems_sees_an_overflowing_cell_and_an_empty_panel():
    fig = plt.figure(figsize=pdf.PAGE)
    ax = fig.add_axes((0.1, 0.5, 0.8, 0.4))
    ax.axis("off")
    table = ax.table(cellText=[["x" * 200]], colWidths=[0.2], loc="upper center")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    fig.add_axes((0.1, 0.1, 0.3, 0.3)).set_title("peak memory")
    try:
        problems = pdf.layout_problems(fig)
    finally:
        plt.close(fig)
    assert any("overflows" in p for p in problems), problems
    assert any("empty panel: 'peak memory'" in p for p in problems), problems


def test_shapes_figure_on_cpu_has_no_empty_memory_panel():
    sweep = pd.DataFrame(
        {"B": [1, 1, 2, 2], "S": [16, 32, 16, 32], "step_s": [0.1, 0.2, 0.2, 0.4],
         "peak_mem_bytes": 0, "model": "tiny", "dim": 64, "layers": 2, "device": "cpu"}
    )  # fmt: skip
    [(_, caption, fig)] = shapes.figures({"shapes_sweep": sweep})
    assert len(fig.axes) == 1 and pdf.layout_problems(fig) == []
    assert "not measured on this machine" in caption


def test_kernel_bandwidth_figure_draws_only_measured_panels():
    rows = [
        {"op": op, "dtype": dt, "D": D, "impl": "fused", "N": N, "B": 1, "gbps": 100.0 + N,
         "copy_gbps": 4000.0}
        for op in ("fwd", "bwd")
        for dt, Ds in (("bfloat16", (1536, 3072, 5120)), ("float32", (3072,)))
        for D in Ds
        for N in (4096, 65536)
    ]  # fmt: skip
    fig = kernels.bandwidth_figure(pd.DataFrame(rows))
    assert len(fig.axes) == 8  # 2 ops x (3 bf16 widths + 1 fp32 width); no empty fp32 panels
    assert pdf.layout_problems(fig) == []


def test_every_verdict_has_a_distinct_colour_and_a_legend_entry():
    names = list(dict.fromkeys([*VERDICTS, "inconclusive"]))  # the ledger emits inconclusive
    assert set(names) <= set(verdicts.STYLES)
    fills = [verdicts.STYLES[n].fill.lower() for n in names]
    assert len(set(fills)) == len(fills)
    assert all(n in pdf.legend() for n in names)
    assert verdicts.style("a-new-verdict") == verdicts.UNKNOWN


def test_summary_of_a_cpu_run_says_it_is_no_gpu_result():
    rows = [
        {"id": "C2", "verdict": "exceeded", "kind": "measured on CPU", "gpu": False, "reason": ""},
        {"id": "C4", "verdict": "reproduced", "kind": "simulated", "gpu": False, "reason": ""},
        {"id": "C11", "verdict": "not-run", "kind": "", "gpu": False, "reason": "needs a CUDA GPU"},
    ]
    n = len(load_claims())
    text = verdicts.summary(rows, "cpu", "no CUDA GPU", n)
    assert f"without a CUDA GPU judged 2 of the paper's {n} claims" in text
    assert "1 exceeded (C2)" in text and "None of these is a GPU result" in text
    assert "Not run: C11 (needs a CUDA GPU)" in text
    rows[0]["kind"], rows[0]["gpu"] = "measured on GPU", True
    assert "None of these" not in verdicts.summary(rows, "quick", "NVIDIA H200", 18)


@pytest.mark.skipif(
    shutil.which("pdftoppm") is None, reason="no pdftoppm (apt-get install poppler-utils)"
)
def test_rendered_pdf_pages_have_ink_inside_the_margins_only(fake, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    reproduce.main(["--out", str(run)])
    subprocess.run(["pdftoppm", "-r", "40", "-gray", "-png", str(run / "report.pdf"),
                    str(tmp_path / "page")], check=True, timeout=120)  # fmt: skip
    pages = sorted(tmp_path.glob("page-*.png"))
    assert len(pages) >= 2  # title page and the fake figure
    for page in pages:
        img = plt.imread(page)
        ink = img < 0.9
        assert ink.mean() > 0.002, f"{page.name} is blank"
        edge = np.concatenate([ink[0], ink[-1], ink[:, 0], ink[:, -1]])
        assert not edge.any(), f"{page.name}: something runs off the page"
