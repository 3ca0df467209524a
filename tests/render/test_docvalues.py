"""Figures in the README and the docs are rendered from their result files, and a stale one fails here."""

import json
import re

import pytest

from lethe.render.docvalues import DocValueError, check, find, main, render, update

DOC = """The floor is <!--= results/a.json#k / n [k=k; n=n] | {:.1%} -->39.5%<!--/=--> of
<!--=@n-->2,638<!--/=--> kernels; the ledger says <!--= claim:audit.x@published -->62.1%<!--/=-->.
<!--=def n: results/a.json#n | {:,} -->
"""


@pytest.fixture
def root(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "paper").mkdir()
    (tmp_path / "results/a.json").write_text(json.dumps({"k": 1043, "n": 2638, "r": [0.2114, 1.0444]}))
    (tmp_path / "paper/claims.csv").write_text(
        "claim_id,sentence,paper_value,status,value,agrees,source,note\n"
        "audit.x,s,62.1%,re-aggregated,62.2%,no,results/published/g.json#v,-\n"
        "audit.x,s,62.1%,published,62.1%,yes,data/published/g.json#v,-\n")
    (tmp_path / "doc.md").write_text(DOC)
    return tmp_path


def test_current_figures_pass_and_stale_ones_are_named(root):
    assert check(["doc.md"], root) == []
    (root / "results/a.json").write_text(json.dumps({"k": 1044, "n": 2638}))
    problems = check(["doc.md"], root)
    assert len(problems) == 1 and "doc.md:1" in problems[0] and "'39.6%'" in problems[0]
    assert main(["--root", str(root), "doc.md"]) == 1


def test_write_rewrites_only_the_figures(root):
    (root / "results/a.json").write_text(json.dumps({"k": 1044, "n": 2639}))
    assert update("doc.md", root) == 2
    text = (root / "doc.md").read_text()
    assert text == DOC.replace("39.5%<", "39.6%<").replace("2,638<", "2,639<")
    assert check(["doc.md"], root) == [] and update("doc.md", root) == 0


def test_ledger_references_read_the_status_asked_for(root):
    figs = find(DOC, "doc.md")
    assert [f.source for f in figs] == ["results/a.json#k / n [k=k; n=n]", "results/a.json#n", "claim:audit.x@published"]
    assert render(figs[2], root) == "62.1%"
    no_status = find("<!--= claim:audit.x -->?<!--/=-->")[0]
    assert render(no_status, root) == "62.2%"  # the first line with a value


def test_list_values_fill_positional_fields(root):
    fig = find("<!--= results/a.json#r | {0:.2f}x-{1:.2f}x -->?<!--/=-->")[0]
    assert render(fig, root) == "0.21x-1.04x"


@pytest.mark.parametrize("doc", [
    "<!--= results/a.json#missing | {} -->?<!--/=-->",  # key absent
    "<!--= results/nope.json#k | {} -->?<!--/=-->",  # file absent
    "<!--= claim:audit.none -->?<!--/=-->",  # no such ledger line
    "<!--= claim:audit.x | {} -->?<!--/=-->",  # the ledger formats its own values
    "<!--= results/a.json | {} -->?<!--/=-->",  # no key at all
])
def test_unreadable_sources_fail_loudly(root, doc):
    with pytest.raises(DocValueError):
        render(find(doc, "doc.md")[0], root)


def test_examples_in_code_are_not_figures():
    doc = "```markdown\n<!--= SOURCE | FORMAT -->x<!--/=-->\n```\nand `<!--=@y-->1<!--/=-->` inline\n"
    assert find(doc) == []
    assert len(find(doc + "<!--= results/a.json#n | {} -->1<!--/=-->")) == 1


def test_undefined_or_repeated_names_fail():
    with pytest.raises(DocValueError):
        find("<!--=@x-->1<!--/=-->")
    with pytest.raises(DocValueError):
        find("<!--=def x: a.json#k | {} --><!--=def x: a.json#k | {} -->")


def test_readme_and_docs_figures_match_their_sources(repo):
    """Every marked figure in README.md and docs/*.md equals what its result file or ledger line gives now."""
    files = ["README.md", *sorted(str(p.relative_to(repo)) for p in (repo / "docs").glob("*.md"))]
    assert sum(len(find((repo / f).read_text(encoding="utf-8"), f)) for f in files) > 0
    assert check(files, repo) == []


REFERENCE_DOCS = ("docs/native.md", "docs/gdn.md")
# A commit sha (7-40 hex digits with at least one digit and one letter), a device-call id, or an "Nth build".
DIARY = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|\bcalls? ?\d+\b|"
                   r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|\d+th) build\b",
                   re.IGNORECASE)


def _prose(text: str) -> str:
    """The text a reader sees as prose: without code (fenced or inline), rendered figures and their definitions."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`\n]+`", "", text)


def test_diary_marks_are_caught():
    """The history check itself: a sha, a call id or a build ordinal in prose is found; the same inside code is not."""
    assert DIARY.search(_prose("measured at 45d2c98 in call18"))
    assert DIARY.search(_prose("the ninth build's forward"))
    assert not DIARY.search(_prose("see `results/gdn/fla_compare_45d2c98/` and `call18`; d_v 128, 3xTF32"))


def test_reference_docs_carry_no_history(repo):
    """docs/native.md and docs/gdn.md are design and usage reference: which build, commit or device call did what
    belongs in git and the experiments' READMEs, so their prose names no commit sha, call id or build ordinal
    (paths in code spans may still name a result folder)."""
    for doc in REFERENCE_DOCS:
        hits = [m.group() for m in DIARY.finditer(_prose((repo / doc).read_text(encoding="utf-8")))]
        assert hits == [], (doc, hits)
