"""Rendered tables: deterministic, and percentages computed from counts (no double rounding)."""

from __future__ import annotations

import json

from lethe.audit import published, tables


def test_render_is_deterministic_and_rounds_once():
    agg = json.loads(published.dumps(published.reproduce()))
    md1, md2 = tables.render_markdown(agg, "t", "n"), tables.render_markdown(agg, "t", "n")
    assert md1 == md2
    assert "| Floor with EXC-02 | 1,154 | 2,638 | 43.7% |" in md1  # 0.43745..., not 0.4375 -> 43.8
    assert "| Tolerance-free floor | 1,043 | 2,638 | 39.5% |" in md1
    assert "| Any violation | 1,639 | 2,638 | 62.1% |" in md1
    tex = tables.render_latex(agg, "c", "tab:x")
    assert r"39.5\%" in tex and "final\\_speedup $>$ 0" in tex
    assert "no verdict" not in md1  # our extra funnel stage is hidden when it removes nothing
