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
MEASUREMENT_FREE_DOCS = ("README.md", "docs/CONVENTIONS.md", "docs/ARCHITECTURE.md",
                         "docs/kernelbench.md", "docs/rendering.md", "docs/foreign.md", "docs/red_team.md",
                         "docs/fla640.md", "docs/audit.md", "docs/aot.md", "docs/sandbox.md", "docs/verifier.md",
                         "docs/portability.md")
# A commit sha (7-40 hex digits with at least one digit and one letter), a device-call id, an "Nth build", or a
# session date.
DIARY = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|\bcalls? ?\d+\b|"
                   r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|\d+th) build\b|"
                   r"\b20\d\d-[01]\d-[0-3]\d\b",
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
    assert DIARY.search(_prose("The H200 run of 2026-11-29"))
    assert not DIARY.search(_prose("see `results/gdn/fla_compare_45d2c98/` and `call18`; d_v 128, 3xTF32"))


def test_reference_docs_carry_no_history(repo):
    """README.md and the docs in REFERENCE_DOCS are design and usage reference: which build, commit or device call did what
    belongs in git and the experiments' READMEs, so their prose names no commit sha, call id, build ordinal or session date
    (paths in code spans may still name a result folder)."""
    for doc in REFERENCE_DOCS + MEASUREMENT_FREE_DOCS:
        hits = [m.group() for m in DIARY.finditer(_prose((repo / doc).read_text(encoding="utf-8")))]
        assert hits == [], (doc, hits)


# A measured figure typed by hand: a number (or a range) followed by a unit of time or rate, a percentage, or a
# ratio written as "1.65x" / "2.75×" (attached, and not a shape such as 2048x2048).
MEASURED = re.compile(
    r"(?<![\w.^/-])\d[\d,]*(?:\.\d+)?(?:\s?[–-]\s?\d[\d,]*(?:\.\d+)?)?"
    r"(?:\s?(?:ms|µs|us|ns|s|min|minutes?|seconds?|hours?|CPU-seconds|TB/s|GB/s|MB/s|TFLOP/s|GFLOP/s|kernels/hour"
    r"|kernels/h|%)(?![\w/])|[x×](?!\w|\s*\d))")

# Design constants and parameters that read like measurements. Each entry: (file, the text as matched) -> why
# it is not a result.
CONSTANTS = {
    ("docs/kernelbench.md", "180 s"): "KernelBench's own batch timeout, kept as the per-sample limit",
    ("docs/kernelbench.md", "4×"): "the calibration's definition of a thin margin",
    ("docs/rendering.md", "60 s"): "the CPU ceiling tests/render/test_determinism.py asserts",
    ("docs/foreign.md", "1 s"): "the second corpus's throughput goal, a target",
    ("docs/sandbox.md", "20 s"): "runner._FORK_WAIT_S, after which a zygote counts as stuck",
    ("docs/sandbox.md", "20 ms"): "runner._POLL_S, the parent's poll interval",
    ("docs/sandbox.md", "2 s"): "the timeout the hostile suite gives each run",
    ("docs/verifier.md", "600 s"): "the default candidate time budget",
    ("docs/verifier.md", "60 s"): "the floor of the per-problem variant time budget",
    ("docs/verifier.md", "0.2 %"): "how far the CMP-02 example backward is built to be off",
}


def _prose_without_figures(text: str) -> str:
    """Prose as a reader sees it, less what is rendered: code (fenced, or inline even across a line break),
    rendered figures with their text, figure definitions and other comments."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"<!--=(?!def\b).*?-->.*?<!--/=-->", "", text, flags=re.DOTALL)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`]+`", "", text)


def hand_typed_measurements(text: str, name: str) -> list[str]:
    """The measurement-like figures of a doc's prose that neither a marker renders nor CONSTANTS explains."""
    return [m.group() for m in MEASURED.finditer(_prose_without_figures(text)) if (name, m.group()) not in CONSTANTS]


def test_hand_typed_measurements_are_caught():
    """The measurement check itself: timings, rates, speed-ups and percentages typed into prose are found; shapes,
    exponents, code, rendered figures and listed constants are not."""
    for typed in ["grading 2.46 s -> 0.48 s", "1.70x the single-shard rate", "a median ~1.5 s", "took 52–61 s",
                  "about 14 minutes", "3.2 TB/s", "620 TFLOP/s", "40 kernels/hour", "raw rate 90.0%", "(25x margin)",
                  "2.98× faster", "0.9 ms floor"]:
        assert hand_typed_measurements(typed, "docs/x.md"), typed
    for fine in ["a 2048x2048 matmul", "2^21 elements", "K=128, sm_90a", "`took 0.5 s`", "d_v 128, 3xTF32",
                 "<!--=@t-->1.5 s<!--/=-->", "<!--= claim:gdn.cw_fusion_speedup -->2.75×<!--/=-->", "level 1-2",
                 "`over budget: 334 s\n> 111 s`", "seed 20260829"]:
        assert hand_typed_measurements(fine, "docs/x.md") == [], fine
    assert hand_typed_measurements("within 20 s", "docs/sandbox.md") == []
    assert hand_typed_measurements("within 20 s", "docs/verifier.md") == ["20 s"]


def test_docs_carry_no_hand_typed_measurements(repo):
    """A timing, rate, speed-up or percentage in README.md or a doc is a result, so it comes from its result file
    (a rendered figure) or is pointed at (a table under paper/tables/, a ledger row), never typed by hand where it
    goes stale; design constants that look alike are listed, with a reason, in CONSTANTS."""
    for doc in MEASUREMENT_FREE_DOCS:
        hits = hand_typed_measurements((repo / doc).read_text(encoding="utf-8"), doc)
        assert hits == [], (doc, hits)


def test_every_listed_constant_is_still_in_its_doc(repo):
    """An allow-list entry whose text left its doc would silently excuse a later measurement with the same text."""
    for doc, text in CONSTANTS:
        found = [m.group() for m in MEASURED.finditer(_prose_without_figures((repo / doc).read_text(encoding="utf-8")))]
        assert text in found, (doc, text)
