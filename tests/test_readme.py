"""README.md stays true: its results section is the generator's output for the committed references,
its prose names no commit, and its usage snippet runs as written on CPU."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _readme_results():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import readme_results
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return readme_results


def test_results_block_is_what_the_tool_writes_now():
    """The README's results section is readme_results.readme_block() of REFERENCES, byte for byte:
    a reference, verdict rule or claims.json that moves without the README fails here."""
    readme_results = _readme_results()
    block = readme_results.readme_block(list(readme_results.REFERENCES))
    assert README.count(readme_results.BEGIN) == 1 and README.count(readme_results.END) == 1
    start = README.index(readme_results.BEGIN)
    end = README.index(readme_results.END) + len(readme_results.END)
    assert README[start:end] == block, "run: PYTHONPATH=. python tools/readme_results.py --readme"
    for ref in readme_results.REFERENCES:
        assert f"`{ref}/claims.json`" in block
    assert readme_results.per_gpu_table(list(readme_results.REFERENCES)) in block


def test_write_readme_replaces_only_the_block(tmp_path):
    readme_results = _readme_results()
    path = tmp_path / "README.md"
    stale = f"intro\n{readme_results.BEGIN}\n| C1 | typed by hand |\n{readme_results.END}\nrest\n"
    path.write_text(stale)
    assert readme_results.write_readme(path) is True
    text = path.read_text()
    assert text.startswith("intro\n") and text.endswith("\nrest\n") and "typed by hand" not in text
    assert readme_results.write_readme(path) is False  # a second run changes nothing


def test_no_commit_hash_outside_the_generated_block():
    """History lives in git: the hand-written part names no commit."""
    readme_results = _readme_results()
    start, end = README.index(readme_results.BEGIN), README.index(readme_results.END)
    prose = README[:start] + README[end:]
    assert re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", prose) == []


def svg_texts(svg: str) -> list[str]:
    """A matplotlib SVG's strings in drawing order, whether its text is <text> elements or paths
    (each drawn string then follows a comment holding it; mathtext keeps the comment either way)."""
    found = re.findall(r"<!-- (.*?) -->|<text[^>]*>([^<]*)</text>", svg)
    return [html.unescape(comment or text) for comment, text in found]


def test_the_per_gpu_figure_is_the_references_opening_figure(tmp_path):
    """The README shows the committed figure; redrawn from REFERENCES it carries the same text
    (the claims, one legend entry per GPU): a reference that moves without it fails here."""
    readme_results = _readme_results()
    committed = ROOT / "docs" / "claims-per-gpu.svg"
    assert "(docs/claims-per-gpu.svg)" in README and committed.is_file()
    out = tmp_path / "figure.svg"
    readme_results.per_gpu_figure(list(readme_results.REFERENCES), out)
    texts = lambda p: svg_texts(p.read_text())  # noqa: E731
    assert texts(out) == texts(committed)
    assert any("H200" in t for t in texts(out)) and any("H100" in t for t in texts(out))


def test_single_run_table_reads_a_claims_json():
    readme_results = _readme_results()
    claims = json.loads((ROOT / readme_results.REFERENCE / "claims.json").read_text())
    out = readme_results.table(claims).splitlines()
    assert len(out) == 2 + len(claims) and out[2].startswith("| C1 |")
    c11 = next(c for c in claims if c["id"] == "C11")
    row = next(r for r in out if r.startswith("| C11 |"))
    assert f"**{c11['verdict']}**" in row and f"`{c11['metric']}`" in row


def test_the_two_commands_and_the_results_come_first():
    first_screen = "\n".join(README.splitlines()[:60])
    assert "python3 -m pip install nox && nox -s reproduce" in first_screen
    assert "python3 -m pip install nox && nox -s tests" in first_screen
    assert "| C1 |" in first_screen


def test_usage_snippet_runs_on_cpu(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) == 1, "one usage snippet"
    script = tmp_path / "snippet.py"
    script.write_text(blocks[0])
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("cpu (2, 1560, 1536) "), proc.stdout
