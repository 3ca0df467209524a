# Render rules of the paper stage: figures and tables from the authors' released records that no other stage
# renders, the claims ledger (paper/claims.csv) and the results book (paper/book.md). All CPU, seconds.
# This file is included last (see config "stages"), so RENDER_TARGETS already holds every other stage's outputs.

PUBLISHED = "data/published"
PAPER_FIGURES = {
    # stem: released files it is drawn from (lethe.render.figures.FIGURES keeps the same list)
    "published_gate_failures": ["audit_drkernel.json"],
    "published_class_floor": ["audit_tolerance_free.json"],
    "published_differential": ["crossval_kernelbench.json"],
    "published_elapsed": ["audit_rows.jsonl.gz"],
}
PAPER_TABLES = {
    "published_gate_counts": ["audit_drkernel.json"],
    "published_second_corpus": ["audit_sakana.json"],
}


# Only stems whose released records are present join the DAG, so a checkout without data/published/ still
# has a valid DAG; the book then lists them as not rendered.
FIGURE_STEMS = sorted(
    s for s, fs in PAPER_FIGURES.items() if all(os.path.exists(os.path.join(PUBLISHED, f)) for f in fs)
)
TABLE_STEMS = sorted(
    s for s, fs in PAPER_TABLES.items() if all(os.path.exists(os.path.join(PUBLISHED, f)) for f in fs)
)
# What the book embeds: every other stage's render target (snapshot before ours are added) plus our own.
BOOK_ITEMS = (
    [t for t in RENDER_TARGETS if t != "paper/book.md"]
    + expand("figures/{stem}.png", stem=FIGURE_STEMS)
    + expand("paper/tables/{stem}.md", stem=TABLE_STEMS)
)

RENDER_TARGETS.extend(
    expand("figures/{stem}.{ext}", stem=FIGURE_STEMS, ext=["png", "pdf"])
    + expand("paper/tables/{stem}.{ext}", stem=TABLE_STEMS, ext=["md", "tex"])
    + ["paper/claims.csv", "paper/book.md"]
)


# Every intermediate the ledger spec names that exists at parse time; absent ones render as "not reproducible
# here" with the file named, so the ledger rule's DAG is valid at every stage of the project.
from lethe.render.ledger import spec_files

CLAIM_SOURCES = spec_files(os.path.join(workflow.basedir, "paper/claims_spec.yaml"))
CLAIM_INPUTS = [p for p in CLAIM_SOURCES if os.path.exists(p)]


if FIGURE_STEMS:

    rule paper_figures:
        conda:
            CONDA_ENV
        input:
            sorted({os.path.join(PUBLISHED, f) for s in FIGURE_STEMS for f in PAPER_FIGURES[s]}),
        output:
            [
                report(
                    f"figures/{stem}.png",
                    caption=f"../report/{stem}.rst",
                    category="Figures",
                    subcategory="published records",
                )
                for stem in FIGURE_STEMS
            ],
            expand("figures/{stem}.pdf", stem=FIGURE_STEMS),
        params:
            stems=FIGURE_STEMS,
        log:
            "logs/paper/figures.log",
        script:
            "../scripts/paper_figures.py"


if TABLE_STEMS:

    rule paper_tables:
        conda:
            CONDA_ENV
        input:
            sorted({os.path.join(PUBLISHED, f) for s in TABLE_STEMS for f in PAPER_TABLES[s]}),
        output:
            [
                report(
                    f"paper/tables/{stem}.md",
                    caption=f"../report/{stem}.rst",
                    category="Tables",
                    subcategory="published records",
                )
                for stem in TABLE_STEMS
            ],
            expand("paper/tables/{stem}.tex", stem=TABLE_STEMS),
        params:
            stems=TABLE_STEMS,
        log:
            "logs/paper/tables.log",
        script:
            "../scripts/paper_tables.py"


rule paper_claims:
    conda:
        CONDA_ENV
    input:
        spec="paper/claims_spec.yaml",
        sources=CLAIM_INPUTS,
    output:
        csv=report("paper/claims.csv", caption="../report/claims.rst", category="Claims ledger"),
    params:
        root=".",
    log:
        "logs/paper/claims.log",
    script:
        "../scripts/paper_claims.py"


rule paper_book:
    conda:
        CONDA_ENV
    input:
        claims="paper/claims.csv",
        order="paper/templates/book.yaml",
        template="paper/templates/book.md.j2",
        rendered=BOOK_ITEMS,
    output:
        book=report("paper/book.md", caption="../report/book.rst", category="Results book"),
    params:
        root=".",
        rendered=BOOK_ITEMS,
    log:
        "logs/paper/book.log",
    script:
        "../scripts/paper_book.py"
