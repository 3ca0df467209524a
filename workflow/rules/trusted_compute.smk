# Compute rule of the trusted stage (only with --config compute=trusted|all): every trusted candidate (each
# KernelBench problem's own code as ModelNew = Model, and data/trusted/kernels/) through the sandboxed verifier,
# graded under every configured profile from one candidate run, smallest problems first, resumable from
# cache/trusted/<device>/checkpoint.jsonl. It is the same command as `python -m lethe.trusted.run` (see that
# module): run again, it resumes. CPU: --config compute=trusted device=cpu writes results/trusted/; the H200:
# --config compute=trusted device=cuda writes results/trusted/gpu/ (trusted.kb_root must point at a KernelBench
# checkout there too). On a lent device machine, experiments/trusted/device_run.sh runs both columns in one call.
import glob

TRUSTED_DEVICE = "cuda" if config["device"] == "cuda" else "cpu"
TRUSTED_OUT = "results/trusted/gpu" if TRUSTED_DEVICE == "cuda" else "results/trusted"


rule trusted:
    conda:
        CONDA_ENV
    input:
        kernels=sorted(glob.glob(os.path.join(workflow.basedir, "data", "trusted", "kernels", "*.py"))),
        corpus="src/lethe/trusted/corpus.py",
        runner="src/lethe/trusted/run.py",
    output:
        rows=f"{TRUSTED_OUT}/rows.parquet",
        corpus=f"{TRUSTED_OUT}/corpus.json",
        summary=f"{TRUSTED_OUT}/summary.json",
        provenance=f"{TRUSTED_OUT}/provenance.json",
    params:
        kb_root=config["trusted"]["kb_root"],
        device=TRUSTED_DEVICE,
        profiles=config["profiles"],
        seed=config["seed"],
        budget_s=config["trusted"]["budget_s"],
        max_numel=config["trusted"]["max_numel"],
        max_flops=config["trusted"]["max_flops"],
        stop_after_s=config["trusted"]["stop_after_s"],
    log:
        f"logs/trusted/run_{TRUSTED_DEVICE}.log",
    script:
        "../scripts/trusted_run.py"
