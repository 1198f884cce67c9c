"""The verdict table `reproduce` prints when the report is built: each claim's verdict, the kind
of evidence behind it (the report's claim rows: measured on GPU, CPU stand-in, simulated,
emulated) and its whole note, wrapped rather than cut."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from suite.report.html import COLOURS


def print_summary(rows: Sequence[Mapping], run_dir: Path) -> None:
    """A rich table of the report's claim rows (suite.report.html.claim_rows) on the console."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=172)
    table = Table(title=f"AdaptiveLoad claims: {run_dir}")
    table.add_column("id", no_wrap=True, min_width=3)
    table.add_column("verdict", no_wrap=True, min_width=14)
    table.add_column("evidence", min_width=12, max_width=24)
    table.add_column("paper", max_width=22)
    table.add_column("ours [95% CI]", no_wrap=True, min_width=22)
    wide = console.width >= 140
    if wide:
        table.add_column("claim", max_width=40)
    table.add_column("note", min_width=30)
    for r in rows:
        colour = COLOURS.get(r["verdict"], "#666")
        ours = r["ours"] + r["ci"]
        cells = [
            r["id"],
            f"[bold {colour}]{r['verdict']}[/]",
            r["kind"] or "–",
            r["paper"],
            f"{ours} {r['unit']}" if ours != "–" else ours,
            *([r["claim"]] if wide else []),
            r["reason"] or r["conditions"],
        ]
        table.add_row(*(escape(str(c)) if i != 1 else c for i, c in enumerate(cells)))
    console.print(table)
