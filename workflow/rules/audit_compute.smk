# Compute rules of the audit stage: fetch a corpus, verify it in shards (scatter), gather rows + aggregates.
#
#   snakemake --cores all --config compute=audit                       the fixture corpus (config default)
#   snakemake --cores all --config compute=audit audit='{"corpus": "drkernel", "shards": 64}' --profile workflow/profiles/slurm
#
# One job per shard, not per kernel: thousands of one-kernel jobs cost minutes of scheduling. A shard keeps a
# row-level checkpoint under cache/audit/ (not a rule output, so Snakemake never deletes it when a job dies):
# re-running a killed shard resumes where it stopped.

AUDIT_CORPUS = config["audit"]["corpus"]
AUDIT_SHARDS = int(config["audit"]["shards"])
AUDIT_CACHE = f"cache/audit/{AUDIT_CORPUS}"


# The corpus's input file: committed for fixture / sakana-subset, fetched into the corpora cache otherwise
# (an unknown corpus name fails here with a KeyError naming it).
from lethe.corpora.fetch import PINS as _AUDIT_PINS
from lethe.corpora.items import LOCAL_FILES as _AUDIT_LOCAL

AUDIT_CORPUS_FILE = _AUDIT_LOCAL.get(AUDIT_CORPUS) or str(
    _AUDIT_PINS[AUDIT_CORPUS].path(config["corpora"]["cache_dir"])
)


rule corpora_fetch:
    conda:
        CONDA_ENV
    output:
        f"{config['corpora']['cache_dir']}/{{dataset}}/{{revision}}/{{filename}}",
    params:
        # the cache root: the output less its {dataset}/{revision}/{filename} tail (a filename may hold slashes)
        cache_dir=lambda w, output: output[0]
        .removesuffix(os.path.join(w.dataset, w.revision, w.filename))
        .rstrip(os.sep),
    log:
        "logs/audit/fetch_{dataset}_{revision}_{filename}.log",
    script:
        "../scripts/audit_fetch.py"


rule audit_shard:
    conda:
        CONDA_ENV
    input:
        corpus=AUDIT_CORPUS_FILE,
    output:
        f"{AUDIT_CACHE}/shards/{{i}}-of-{AUDIT_SHARDS}.parquet",
    params:
        corpus=AUDIT_CORPUS,
        shards=AUDIT_SHARDS,
        checkpoint=lambda wc: f"{AUDIT_CACHE}/checkpoints/{wc.i}-of-{AUDIT_SHARDS}.jsonl",
        profiles=config["profiles"],
        device=config["device"],
        seed=config["seed"],
        timeout_s=config["audit"]["timeout_s"],
        verifier=config["audit"].get("verifier", ""),
    resources:
        gpu=1 if config["device"] == "cuda" else 0,
        mem_mb=int(config["audit"]["memory_mb"]) + 2048,
    log:
        f"logs/audit/{AUDIT_CORPUS}/shard-{{i}}-of-{AUDIT_SHARDS}.log",
    script:
        "../scripts/audit_shard.py"


rule audit_gather:
    conda:
        CONDA_ENV
    input:
        expand(f"{AUDIT_CACHE}/shards/{{i}}-of-{AUDIT_SHARDS}.parquet", i=range(AUDIT_SHARDS)),
    output:
        rows=f"results/audit/{AUDIT_CORPUS}/rows.parquet",
        aggregates=f"results/audit/{AUDIT_CORPUS}/aggregates.json",
        provenance=f"results/audit/{AUDIT_CORPUS}/provenance.json",
    params:
        corpus=AUDIT_CORPUS,
        config=lambda wc: {k: config[k] for k in ("audit", "profiles", "device", "seed")},
    log:
        f"logs/audit/{AUDIT_CORPUS}/gather.log",
    script:
        "../scripts/audit_gather.py"


rule audit_kernels:
    conda:
        CONDA_ENV
    input:
        corpus=AUDIT_CORPUS_FILE,
    output:
        f"results/audit/{AUDIT_CORPUS}/kernels.parquet",
    params:
        corpus=AUDIT_CORPUS,
    log:
        f"logs/audit/{AUDIT_CORPUS}/kernels.log",
    script:
        "../scripts/audit_kernels.py"


# The KernelBench leaderboard corpus's source-free summary (counts, funnel so far, pins) and kernel manifest
# (ids, hashes, flags), on the CPU. raw_data.json and data.json are each the hand-supplied copy when one is in
# place (the script refuses it unless its SHA-256 is the pin's), else the pinned download in the corpora cache
# (corpora_fetch). Candidate sources stay in the cache: the upstream repository has no licence.
from lethe.corpora import leaderboard as _LB


rule leaderboard_corpus:
    conda:
        CONDA_ENV
    input:
        raw=lambda w: (
            config["corpora"]["leaderboard"]["raw"]
            if os.path.isfile(config["corpora"]["leaderboard"]["raw"])
            else str(_LB.RAW.path(config["corpora"]["cache_dir"]))
        ),
        data=lambda w: (
            config["corpora"]["leaderboard"]["data"]
            if os.path.isfile(config["corpora"]["leaderboard"]["data"])
            else str(_LB.DATA.path(config["corpora"]["cache_dir"]))
        ),
        adapter="src/lethe/corpora/leaderboard.py",
        manifest=f"src/lethe/corpora/{_LB.KB_MANIFEST}",
    output:
        corpus="results/audit/leaderboard/corpus.json",
        manifest="results/audit/leaderboard/manifest.jsonl",
    params:
        kernelbench=config["corpora"]["kernelbench"],
        cache_dir=config["corpora"]["cache_dir"],
    log:
        "logs/audit/leaderboard_corpus.log",
    script:
        "../scripts/audit_leaderboard_corpus.py"


# The KernelBench run corpora committed to public forks (lethe.corpora.kbruns): each one's source-free summary and
# kernel manifest, on the CPU, from its hand-supplied copy (.scratch/corpora/<corpus>/, every file checked against
# the committed pin) or else the pinned files fetched into the corpora cache. Kernel sources stay out of results/.
from lethe.corpora import hzeng_backends as _HZ
from lethe.corpora import technoabsurdist_runs as _TA
from lethe.corpora import yenhao_runs as _YH

_KBRUNS = {s.name: s for s in (_HZ.SPEC, _TA.SPEC, _YH.SPEC)}


rule kbruns_corpus:
    conda:
        CONDA_ENV
    input:
        adapter="src/lethe/corpora/kbruns.py",
        manifest=lambda w: f"src/lethe/corpora/{_KBRUNS[w.corpus].manifest}",
    output:
        corpus="results/audit/{corpus}/corpus.json",
        manifest="results/audit/{corpus}/manifest.jsonl",
    wildcard_constraints:
        corpus="|".join(_KBRUNS),
    params:
        src=lambda w: _KBRUNS[w.corpus].default_src,
        cache_dir=config["corpora"]["cache_dir"],
    log:
        "logs/audit/kbruns_corpus_{corpus}.log",
    script:
        "../scripts/audit_kbruns_corpus.py"


# One GPU machine, end to end (experiments/audit/replicate_h200.py): extension builds, KernelBench's own check,
# the Lethe audit under all three profiles (with its kill -9 resume test), the latency benchmark and the replicas,
# on the mixed KernelBench run folder; the driver is resumable step by step (RUN/state.json), and packs what it
# measured (never a candidate source). audit_gpu_ingest turns the pack into committed results.
GPU_RUN = config["audit"].get("gpu_run", {})
GPU_RUN_PY = python_cmd()


rule audit_gpu_run:
    conda:
        CONDA_ENV
    input:
        kb=config["corpora"]["kernelbench"],
        raw=config["corpora"]["leaderboard"]["raw"],
        driver="experiments/audit/replicate_h200.py",
    output:
        pack="cache/audit/gpu_run/results.tar.gz",
    params:
        run="cache/audit/gpu_run/run",
        subset=GPU_RUN.get("subset", 8),
        n_self=GPU_RUN.get("n_self", 8),
        latency_n=GPU_RUN.get("latency_n", 10),
        python=GPU_RUN_PY,
    resources:
        gpu=1,
    log:
        "logs/audit/gpu_run.log",
    shell:
        "{params.python} {input.driver} --run {params.run} --kb $(realpath {input.kb}) --raw $(realpath {input.raw}) "
        "--subset {params.subset} --n-self {params.n_self} --lat-n {params.latency_n} --skip sakana,trusted "
        "> {log} 2>&1 && {params.python} {input.driver} --run {params.run} --kb {input.kb} --raw {input.raw} "
        "--collect {output.pack} >> {log} 2>&1"


rule audit_gpu_ingest:
    conda:
        CONDA_ENV
    input:
        pack="cache/audit/gpu_run/results.tar.gz",
    output:
        rows=f"results/audit/{GPU_RUN.get('corpus', 'mixed')}/rows.parquet",
    params:
        corpus=GPU_RUN.get("corpus", "mixed"),
        python=GPU_RUN_PY,
    log:
        "logs/audit/gpu_ingest.log",
    shell:
        "{params.python} experiments/audit/ingest_h200.py {input.pack} --corpus {params.corpus} > {log} 2>&1"


# The replication corpora on one GPU machine, a slice per call (experiments/audit/replicate_h200.py --slice,
# lethe.audit.accumulate): the next kernels of the corpus that have no committed rows, built under a wall
# budget, judged by KernelBench's own check and our replicas, audited under the three profiles. The ingest rule
# adds the call's kernels to the committed results (--merge) and appends the call to runs.jsonl; rerun both for
# the next slice (snakemake -f). Sizes come from config audit.replication_run.
REPL_RUN = config["audit"].get("replication_run", {})


rule audit_replication_run:
    conda:
        CONDA_ENV
    input:
        kb=config["corpora"]["kernelbench"],
        raw=config["corpora"]["leaderboard"]["raw"],
        driver="experiments/audit/replicate_h200.py",
    output:
        pack="cache/audit/replication/{corpus}/results.tar.gz",
    wildcard_constraints:
        corpus="|".join(config["audit"].get("replication", [])) or "__none__",
    params:
        run=lambda wc: f"cache/audit/replication/{wc.corpus}/run",
        done=lambda wc: f"results/audit/{wc.corpus}/rows.parquet",
        slice=REPL_RUN.get("slice", 90),
        budget=REPL_RUN.get("build_budget_s", 560),
        build_workers=REPL_RUN.get("build_workers", 14),
        workers=REPL_RUN.get("workers", 8),
        python=GPU_RUN_PY,
    resources:
        gpu=1,
    log:
        "logs/audit/replication_run_{corpus}.log",
    shell:
        "rm -rf {params.run} && {params.python} {input.driver} --run {params.run} --kb $(realpath {input.kb}) "
        "--raw $(realpath {input.raw}) --corpus {wildcards.corpus} --slice {params.slice} --done {params.done} "
        "--build-budget-s {params.budget} --build-workers {params.build_workers} --workers {params.workers} "
        "--skip audit_killed,latency,mamba,sakana,trusted > {log} 2>&1; {params.python} {input.driver} "
        "--run {params.run} --kb {input.kb} --raw {input.raw} --collect {output.pack} >> {log} 2>&1"


rule audit_replication_ingest:
    conda:
        CONDA_ENV
    input:
        pack="cache/audit/replication/{corpus}/results.tar.gz",
        kb=config["corpora"]["kernelbench"],
        raw=config["corpora"]["leaderboard"]["raw"],
    output:
        touch("cache/audit/replication/{corpus}/ingested"),
    wildcard_constraints:
        corpus="|".join(config["audit"].get("replication", [])) or "__none__",
    params:
        # The candidate sources never travel back with the pack: the same corpus is materialised here to read
        # the fast-math flags of the pre-registered test and to gather an audit that the lease cut short.
        materialise=lambda wc, input: (
            f"-m lethe.corpora.leaderboard materialise --out cache/audit/replication/leaderboard/sources "
            f"--raw {input.raw} --kb {input.kb}" if wc.corpus == "leaderboard" else
            f"-m lethe.corpora.{wc.corpus.replace('-', '_')} materialise --out cache/audit/replication/{wc.corpus}/sources"),
        sources=lambda wc: os.path.join(f"cache/audit/replication/{wc.corpus}/sources",
                                        "" if wc.corpus == "leaderboard" else "run"),
        problems=lambda wc, input: input.kb if wc.corpus == "leaderboard" else f"cache/audit/replication/{wc.corpus}/sources/problems",
        python=GPU_RUN_PY,
    log:
        "logs/audit/replication_ingest_{corpus}.log",
    shell:
        "{params.python} {params.materialise} > {log} 2>&1 && {params.python} experiments/audit/ingest_h200.py "
        "{input.pack} --corpus {wildcards.corpus} --merge --run-commit $(git rev-parse --short HEAD) "
        "--sources {params.sources} --kb {params.problems} >> {log} 2>&1"
