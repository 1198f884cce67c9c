"""report.html: self-contained (no network references), internal links resolve, and headless
Chromium renders every claim and every figure's <svg>."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_reproduce import IDS, fake  # noqa: F401  (the fake-experiments fixture)

from suite import reproduce

CHROMIUM = next(
    (
        p
        for p in (
            "/usr/bin/chromium",
            shutil.which("chromium") or "",
            shutil.which("chromium-browser") or "",
        )
        if p and Path(p).exists()
    ),
    None,
)


class Collect(HTMLParser):
    """ids, hrefs, srcs and the number of <svg> elements (and <svg> inside <figure>)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.svgs = 0
        self.figure_svgs = 0
        self._in_figure = 0
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if "href" in a and tag in ("a", "link"):
            self.hrefs.append(a["href"])
        if "src" in a:
            self.srcs.append(a["src"])
        if tag == "figure":
            self._in_figure += 1
        if tag == "svg":
            self.svgs += 1
            self.figure_svgs += self._in_figure > 0
        if tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "figure":
            self._in_figure -= 1


def parse(text: str) -> Collect:
    c = Collect()
    c.feed(text)
    return c


@pytest.fixture
def report(fake, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    reproduce.main(["--out", str(run)])
    return run


def figure_names(html: str) -> list[str]:
    return re.findall(r'<figure id="fig-([^"]+)"', html)


def test_html_has_no_external_references(report):
    html = (report / "report.html").read_text()
    c = parse(html)
    for ref in c.hrefs + c.srcs:
        assert not re.match(r"\s*(https?:)?//", ref), f"network reference {ref!r}"
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//", html), "CSS fetches a URL"
    assert not re.search(r"@import", html)
    assert c.scripts == 0
    assert not c.srcs  # images are inline SVG, nothing is loaded


def test_internal_links_resolve(report):
    c = parse((report / "report.html").read_text())
    for ref in c.hrefs:
        if ref.startswith("#"):
            assert ref[1:] in c.ids, f"dangling anchor {ref}"
        else:
            assert (report / ref).exists(), f"link to a missing file {ref}"


def test_every_claim_and_figure_in_the_source(report):
    html = (report / "report.html").read_text()
    c = parse(html)
    for cid in IDS:
        assert f"claim-{cid}" in c.ids and f"def-{cid}" in c.ids
    names = figure_names(html)
    assert "claims-overview" in names and "fake_bars" in names
    assert c.figure_svgs == len(names)
    for name in names:
        assert (report / "figures" / f"{name}.svg").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
def test_headless_chromium_renders_claims_and_figures(report):
    html = (report / "report.html").read_text()
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-extensions",
            "--no-first-run",
            "--virtual-time-budget=3000",
            "--dump-dom",
            (report / "report.html").resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = parse(proc.stdout)
    assert dom.ids, "chromium returned an empty DOM"
    for cid in IDS:
        assert f"claim-{cid}" in dom.ids, cid
    names = figure_names(html)
    for name in names:
        assert f"fig-{name}" in dom.ids, name
    assert dom.figure_svgs == len(names), "a figure's <svg> did not make it into the DOM"


def _costmodel_run(root: Path, quadratic: bool) -> Path:
    """A run directory with the real shapes sweep -> costmodel tables (synthetic quadratic cost);
    quadratic=False is a run finished before costmodel_quadratic existed."""
    from test_costmodel import _quad_sweep

    from suite.experiments import costmodel
    from suite.rundir import RunDir

    run, sweep = RunDir(root), _quad_sweep(seed=5)
    run.write_table("shapes_sweep", sweep)
    run.mark_done("shapes", {"experiment": "shapes", "device": "cpu"})
    tables = costmodel.fit_tables(sweep)
    for name, df in tables.items():
        if quadratic or name != "costmodel_quadratic":
            run.write_table(name, df)
    run.mark_done("costmodel", {"experiment": "costmodel", "device": "cpu"})
    return root


def test_beyond_section_shows_the_cost_forms_from_the_tables(tmp_path):
    import pandas as pd

    from suite.report import build

    new = build.build_report(_costmodel_run(tmp_path / "new", quadratic=True))
    assert not new.errors, new.errors
    html = (tmp_path / "new" / "report.html").read_text()
    c = parse(html)
    assert "beyond" in c.ids and "beyond-cost" in c.ids
    q = pd.read_csv(tmp_path / "new" / "results" / "costmodel_quadratic.csv").iloc[0]
    f = pd.read_csv(tmp_path / "new" / "results" / "costmodel_fit.csv").iloc[0]
    start = html.index('id="beyond-cost"')
    section = html[start : html.index("</section>", start)]
    for number in (f"{q['r2']:.3f}", f"{100 * q['loo_err']:.1f}%", f"{f['r2']:.3f}"):
        assert number in section, number
    assert f"{100 * f['loo_err']:.1f}%" in section
    assert {"cost_fit_r2_quadratic", "cost_fit_loo_err_quadratic"} <= set(new.metrics["metric"])
    for ref in c.hrefs:
        assert ref[1:] in c.ids if ref.startswith("#") else (tmp_path / "new" / ref).exists()
    # a run from before the table: same verdicts, no quadratic rows, no cost-form section
    old = build.build_report(_costmodel_run(tmp_path / "old", quadratic=False))
    assert not old.errors, old.errors
    html = (tmp_path / "old" / "report.html").read_text()
    assert 'id="beyond-cost"' not in html and '<section id="beyond">' not in html
    assert not set(old.metrics["metric"]) & {"cost_fit_r2_quadratic", "cost_fit_loo_err_quadratic"}
    verdicts = {v.id: (v.verdict, v.metric, v.measured) for v in new.verdicts}
    assert verdicts == {v.id: (v.verdict, v.metric, v.measured) for v in old.verdicts}
    assert verdicts["C3"][1] == "cost_fit_r2"


def _row(html: str, cid: str) -> str:
    start = html.index(f'<tr id="claim-{cid}">')
    return html[start : html.index("</tr>", start)]


def test_summary_and_evidence_kind_on_top_of_a_cpu_run(report):
    html = (report / "report.html").read_text()
    summary = html[
        html.index('id="summary-text"') : html.index("</p>", html.index('id="summary-text"'))
    ]
    assert "without a CUDA GPU judged" in summary and "None of these is a GPU result" in summary
    assert "no GPU result in this run" in html[: html.index("<main>")]
    # the verdict badge itself names the evidence: the fake C4 and C5 are simulated on a CPU
    for cid in ("C4", "C5"):
        assert '<span class="kind">simulated from a CPU cost fit of this run</span>' in _row(
            html, cid
        ), cid
    assert 'class="kind"' not in _row(html, "C11")  # not run: nothing behind it
    for name in ("inconclusive", "not-run", "exceeded"):  # every verdict in the legend
        assert f">{name}</span>" in html[html.index('class="legend') :]


def test_evidence_links_are_not_repeated(report):
    html = (report / "report.html").read_text()
    cells = re.findall(r'<td class="small">((?:(?!</td>).)*)</td>\s*</tr>', html, flags=re.S)
    assert cells
    for cell in cells:
        links = re.findall(r'href="([^"]+)"', cell)
        assert len(links) == len(set(links)), cell
    assert _row(html, "C4").count('href="#fig-fake_bars"') == 1


# Run in the browser on a copy of the page: which sections are wider than the page, which
# figures or badges have no size. Written into the DOM for --dump-dom to carry out.
LAYOUT_PROBE = """<script>
window.addEventListener("load", () => {
  const bad = [];
  const page = document.documentElement.clientWidth;
  for (const s of document.querySelectorAll("section")) {
    if (s.scrollWidth > s.clientWidth + 1) bad.push("overflows: section " + s.id);
    if (s.getBoundingClientRect().right > page + 1) bad.push("off the page: section " + s.id);
  }
  for (const e of document.querySelectorAll("figure svg, .badge, table"))
    if (e.getBoundingClientRect().width < 1 || e.getBoundingClientRect().height < 1)
      bad.push("empty: " + (e.closest("[id]") || {id: "?"}).id + " " + e.tagName);
  const out = document.createElement("pre");
  out.id = "layout-probe";
  out.textContent = JSON.stringify(bad);
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 900])
def test_headless_chromium_finds_no_overflowing_or_empty_elements(report, width):
    probe = report / "probe.html"
    html = (report / "report.html").read_text()
    probe.write_text(html.replace("</body>", LAYOUT_PROBE + "</body>"))
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", f"--window-size={width},900", "--virtual-time-budget=5000",
         "--dump-dom", probe.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', proc.stdout, flags=re.S)
    assert found, "the layout probe did not run"
    assert json.loads(found.group(1).replace("&quot;", '"')) == []
