# Compute rule of the hand-audit stage: draw a fresh stratified sample of a corpus's disputed cell (seeded)
# and write it as an unlabelled label file under results/ (copy it to data/hand_audit/ to start labelling).


rule hand_audit_select:
    conda:
        CONDA_ENV
    input:
        rows="results/audit/{corpus}/rows.parquet",
        kb_rows="results/differential/{corpus}/kb_rows.parquet",
    output:
        labels="results/hand_audit/{corpus}/sample.csv",
        selection="results/hand_audit/{corpus}/selection.json",
        provenance="results/hand_audit/{corpus}/provenance.json",
    params:
        seed=config["seed"],
        per_stratum=2,
        profile=config["profile"],
    log:
        "logs/hand_audit/{corpus}_select.log",
    script:
        "../scripts/hand_audit_select.py"
