"""Rendering twice gives identical bytes (what CI checks with git diff --exit-code), and within the time budget."""

import time
from pathlib import Path

import pytest

from lethe.render import figures, published_tables
from lethe.render.book import render_book
from lethe.render.ledger import write_ledger
from lethe.render.style import PUBLISHED_TAG


def _render_into(out: Path, published: Path, repo: Path) -> dict[str, bytes]:
    drawn = figures.render_all(published, out / "figures")
    tables = published_tables.render_all(published, out / "tables")
    assert len(drawn) == len(figures.FIGURES) and len(tables) == len(published_tables.TABLES)
    rows = write_ledger(repo / "paper/claims_spec.yaml", repo, out / "claims.csv")
    rendered = [f"figures/{s}.png" for s in drawn] + [f"paper/tables/{t}.md" for t in tables]
    render_book(repo, rendered, rows, out / "book.md")
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_render_twice_is_byte_identical(tmp_path, published_dir, repo):
    # CPU time, not wall time: the test box is shared, and contention must not decide the verdict.
    start = time.process_time()
    first = _render_into(tmp_path / "a", published_dir, repo)
    second = _render_into(tmp_path / "b", published_dir, repo)
    elapsed = time.process_time() - start
    assert sorted(first) == sorted(second)
    assert len([k for k in first if k.endswith((".png", ".pdf"))]) == 2 * len(figures.FIGURES)
    differing = [k for k in first if first[k] != second[k]]
    assert differing == []
    # no timestamps or version stamps in the files themselves
    for name, data in first.items():
        if name.endswith(".pdf"):
            assert b"/CreationDate" not in data and b"/Producer" not in data, name
        if name.endswith(".png"):
            assert b"Software" not in data and b"matplotlib" not in data.lower(), name
    # the whole render path, twice, must fit well inside the 2-minute budget of the default target
    assert elapsed < 60, elapsed


def test_published_captions_say_so():
    for spec in figures.FIGURES:
        assert PUBLISHED_TAG in spec.caption
        assert "published figures (paper authors' release)" in spec.caption


def test_report_captions_exist_and_say_published(repo):
    for spec in figures.FIGURES:
        rst = repo / "workflow" / "report" / f"{spec.stem}.rst"
        assert rst.is_file(), rst
        assert "published figures (paper" in " ".join(rst.read_text().split())


def test_dejavu_is_matplotlibs_own_file_whatever_the_host_has():
    """The house font resolves to the copy inside matplotlib, not a host's /usr/share/fonts copy, so the PDFs'
    embedded glyph tables do not depend on the machine or on how matplotlib's font cache was built."""
    from pathlib import Path

    import matplotlib
    from matplotlib import font_manager

    from lethe.render import style  # noqa: F401 - importing it pins the font

    found = Path(font_manager.findfont("DejaVu Sans", fallback_to_default=False))
    assert found.parent == Path(matplotlib.get_data_path(), "fonts", "ttf"), found
