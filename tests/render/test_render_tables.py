"""render_table: both renderings carry every cell, escape specials, fail on a missing key, and are stable."""

import pytest

from lethe.render.tables import Column, format_value, render_table, table_text, tex_escape

ROWS = [
    {"gate": "EXC-01", "kernels": 868, "rate": 868 / 2638, "note": "a_b & c"},
    {"gate": "ORD-02", "kernels": 1126, "rate": None, "note": "x|y"},
]
COLS = [("gate", "Gate"), ("kernels", "Kernels"), ("rate", "Rate", "{:.1%}"), Column("note", "Note")]


def test_markdown_and_latex_content(tmp_path):
    out = render_table(ROWS, COLS, "Floor 39.5% & more", "tab:t", tmp_path / "t.md", tmp_path / "t.tex",
                       notes=["source_x"])
    md, tex = (tmp_path / "t.md").read_text(), (tmp_path / "t.tex").read_text()
    assert md == out.markdown and tex == out.latex
    assert "| EXC-01 | 868 | 32.9% | a_b & c |" in md
    assert r"x\|y" in md  # a pipe would split the Markdown cell
    assert "| ORD-02 | 1,126 | – |" in md
    assert r"EXC-01 & 868 & 32.9\% & a\_b \& c \\" in tex
    assert r"\caption{Floor 39.5\% \& more}" in tex and r"\label{tab:t}" in tex
    for rule in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert tex.count(rule) == 1
    assert r"\begin{tabular}{lrrl}" in tex
    assert "Note: source_x" in md and r"source\_x" in tex
    assert md.endswith("\n") and not md.endswith("\n\n")
    unescaped = tex.replace(r"\{", "").replace(r"\}", "")
    assert unescaped.count("{") == unescaped.count("}")


def test_same_bytes_twice():
    a = table_text(ROWS, COLS, "c", "tab:c")
    b = table_text([dict(r) for r in ROWS], COLS, "c", "tab:c")
    assert a == b


def test_missing_key_is_an_error():
    with pytest.raises(KeyError, match="no key"):
        table_text([{"gate": "x"}], COLS, "c", "tab:c")


def test_dataframe_input():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(ROWS)
    assert "| EXC-01 | 868 |" in table_text(frame, COLS, "c", "tab:c").markdown


def test_default_formats():
    assert format_value(1043) == "1,043"
    assert format_value(0.39537) == "0.395"
    assert format_value(True) == "yes"
    assert format_value(float("nan")) == ""
    assert format_value(0.0033128, "{:.1e}") == "3.3e-03"
    assert tex_escape("50% of #1_a") == r"50\% of \#1\_a"
