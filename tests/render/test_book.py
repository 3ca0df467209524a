"""The results book keeps the paper's order, embeds tables, links figures, and never drops a rendered file."""

import re

import yaml

from lethe.render import figures, published_tables
from lethe.render.book import book_sections, render_book

LEDGER = [
    {"claim_id": "x.y", "sentence": "s", "paper_value": "1", "status": "reproduced", "value": "1", "agrees": "yes",
     "source": "results/a.json#k", "note": "-"},
    {"claim_id": "x.y", "sentence": "s", "paper_value": "1", "status": "published", "value": "2", "agrees": "no",
     "source": "data/published/a.json#k", "note": "rendered 2 vs paper 1"},
    {"claim_id": "x.z", "sentence": "t", "paper_value": "5", "status": "not reproducible here", "value": "n/a",
     "agrees": "-", "source": "source not located", "note": "not in the release"},
]


def _order(tmp_path, items):
    path = tmp_path / "book.yaml"
    path.write_text(yaml.safe_dump({"sections": [{"title": "S", "items": items}]}))
    return path


def test_order_embedding_and_extras(tmp_path):
    root = tmp_path / "repo"
    (root / "paper/tables").mkdir(parents=True)
    (root / "figures").mkdir()
    (root / "paper/tables/b.md").write_text("**Table B** <a id=\"tab:b\"></a>\n\n| x |\n|---:|\n| 1 |\n")
    (root / "paper/tables/z_extra.md").write_text("# Extra heading\n\n| y |\n|---:|\n| 2 |\n")
    (root / "figures/a.png").write_bytes(b"png")
    (root / "figures/a.pdf").write_bytes(b"pdf")
    order = _order(tmp_path, [
        {"path": "figures/a.png", "title": "Figure A", "source": "data/published/x.json"},
        {"path": "paper/tables/b.md", "title": "Table B", "source": "results/b.json"},
        {"path": "paper/tables/missing.md", "title": "Missing", "source": "results/m.json"},
    ])
    rendered = ["figures/a.png", "paper/tables/b.md", "paper/tables/z_extra.md", "paper/tables/b.tex"]
    text = render_book(root, rendered, LEDGER, tmp_path / "out.md", order_path=order)
    assert text.index("Figure A") < text.index("Table B") < text.index("Missing") < text.index("Extra heading")
    assert "![Figure A](../figures/a.png)" in text  # relative to paper/, wherever the book was written
    assert "| 1 |" in text and "### 1.2 Table B" in text
    assert "_Not rendered yet_: `paper/tables/missing.md`" in text
    assert "#### Extra heading" in text  # embedded headings are demoted under the book's own
    assert "## 3. Claims ledger" in text and "| x.y |" in text
    assert "\n\n\n" not in text
    # the one-screen summary: lines and claims per status, before the table itself
    summary_at = text.index("| status | lines | claims | meaning |")
    assert summary_at < text.index("| claim_id | sentence |")
    assert "| reproduced | 1 | 1 |" in text and "| published | 1 | 1 |" in text
    assert "| not reproducible here | 1 | 1 |" in text
    assert "2 claims, 3" in " ".join(text.split())
    assert "disagrees with the paper's figure (column `agrees`, the note says why) for: `x.y`" in " ".join(text.split())
    assert "No value here at all" in text and "`x.z`" in text


def test_glob_entries_follow_the_rendered_targets(tmp_path):
    root = tmp_path / "repo"
    (root / "paper/tables").mkdir(parents=True)
    for name in ("differential_published", "differential_fixture", "differential_zeta"):
        (root / f"paper/tables/{name}.md").write_text(f"table {name}\n")
    order = _order(tmp_path, [
        {"path": "paper/tables/differential_published.md", "title": "Published"},
        {"glob": "paper/tables/differential_*.md", "title": "Ours"},
    ])
    rendered = [f"paper/tables/differential_{n}.md" for n in ("zeta", "published", "fixture")]
    text = render_book(root, rendered, LEDGER, tmp_path / "out.md", order_path=order)
    assert text.count("table differential_published") == 1  # not repeated by the glob
    assert text.index("Ours (differential_fixture)") < text.index("Ours (differential_zeta)")
    assert "Further rendered" not in text


def test_repo_book_order_lists_our_outputs(repo):
    order = yaml.safe_load((repo / "paper/templates/book.yaml").read_text())
    listed = {i.get("path") for s in order["sections"] for i in s["items"]}
    for spec in figures.FIGURES:
        assert f"figures/{spec.stem}.png" in listed
    for stem in published_tables.TABLES:
        assert f"paper/tables/{stem}.md" in listed


def test_rule_file_matches_catalogue(repo):
    """paper.smk names each figure/table with its released inputs; it must agree with the Python catalogue."""
    smk = (repo / "workflow/rules/paper.smk").read_text()
    for spec in figures.FIGURES:
        m = re.search(rf'"{spec.stem}": \[([^\]]*)\]', smk)
        assert m, spec.stem
        assert sorted(re.findall(r'"([^"]+)"', m.group(1))) == sorted(spec.inputs)
    for stem, (inputs, _) in published_tables.TABLES.items():
        m = re.search(rf'"{stem}": \[([^\]]*)\]', smk)
        assert m, stem
        assert sorted(re.findall(r'"([^"]+)"', m.group(1))) == sorted(inputs)


def test_sections_of_repo_book(repo):
    sections = book_sections(repo, [])
    assert sections and all(s["items"] for s in sections)
