"""docs/peers.md is tools/peers_table.py's output: it states its one command, names every
registry policy under every cost at 16 and 1024 ranks, bolds the highest throughput as the
recommendation, and its default column at 16 ranks is what the tool computes now."""

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from suite.balance.registry import POLICIES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "peers.md"


def _tool():
    sys.path.insert(0, str(ROOT / "tools"))
    import peers_table

    return peers_table


def _tables(text: str) -> dict[int, pd.DataFrame]:
    """{ranks: the section's table (policy rows, one column per cost, the cells' text)}."""
    out = {}
    for ranks, body in re.findall(r"^## (\d+) ranks\n\n(.*?)(?:\n\n|\Z)", text, re.S | re.M):
        lines = [ln.strip("|").split("|") for ln in body.strip().splitlines()]
        head, rows = [c.strip().strip("`") for c in lines[0]], lines[2:]
        out[int(ranks)] = pd.DataFrame(
            [[c.strip() for c in r] for r in rows], columns=head
        ).set_index("policy")
    return out


def test_the_page_states_its_command_and_names_every_policy_under_every_cost():
    tool = _tool()
    text = PAGE.read_text()
    assert f"`{tool.COMMAND}`" in text.split("\n\n")[1]
    tables = _tables(text)
    assert sorted(tables) == sorted(tool.STEPS)
    refs = ["default"] + ["/".join(r.parts[-2:]) for r in tool.references()]
    for t in tables.values():
        assert list(t.columns) == refs
        assert list(t.index) == [*POLICIES, "**recommend**"]
        for ref in refs:
            bold = [p for p in POLICIES if t.at[p, ref].startswith("**")]
            assert len(bold) == 1 and t.at["**recommend**", ref].startswith(bold[0] + " (+")


@pytest.mark.slow
def test_the_default_column_at_16_ranks_is_what_the_tool_computes():
    tool = _tool()
    rows = pd.DataFrame(tool.one("default", 16)).set_index("policy")
    page = _tables(PAGE.read_text())[16]["default"]
    for name in POLICIES:
        assert page[name].strip("*") == tool._rate(rows.at[name, "throughput"]), name
