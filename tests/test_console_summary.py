"""The verdict table `reproduce` prints: each verdict with the kind of evidence behind it (from
the report's claim rows) and its whole note, wrapped, never cut."""

from __future__ import annotations

import re

from suite.report.console import print_summary

NOTE = (
    "simulated with the CPU cost fit: 1000 steps x 3 plan seeds at 8..1024 ranks; the step CV "
    "of [equal-token] is not above the baseline's, so no improvement is shown here at all"
)


def row(cid: str, verdict: str, kind: str, reason: str = "", conditions: str = "") -> dict:
    return {
        "id": cid,
        "verdict": verdict,
        "kind": kind,
        "paper": "below 5%",
        "ours": "7.2",
        "ci": " [6.1, 8.3]",
        "unit": "%",
        "claim": "step time CV",
        "reason": reason,
        "conditions": conditions,
    }


def test_summary_names_the_evidence_and_keeps_the_whole_note(capsys, tmp_path):
    rows = [
        row("C6", "not-reproduced", "simulated, CPU cost fit", conditions=NOTE),
        row("C11", "not-run", "", reason="needs a CUDA GPU"),
        row("C3", "inconclusive", "CPU stand-in", conditions="fit on 42 sweep rows"),
    ]
    print_summary(rows, tmp_path)
    out = capsys.readouterr().out
    words = " ".join(re.sub(r"[│┃|]", " ", out).split())
    assert "simulated, CPU cost fit" in words and "CPU stand-in" in words
    for word in NOTE.split():  # every word of the note is printed (wrapped across lines)
        assert word in words, word
    assert "…" not in out
    assert "[equal-token]" in out  # a note's brackets are text, not rich markup
