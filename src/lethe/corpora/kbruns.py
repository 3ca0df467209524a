"""Corpora of KernelBench run folders committed to a public git repository, pinned file by file.

A KernelBench fork that commits its ``runs/<run>/level_<L>_problem_<P>_sample_<S>_kernel.py`` (and, where it ran
KernelBench's evaluation, ``eval_results.json``), or the same per problem under another folder layout
(:data:`LAYOUTS`), is a corpus of generated ``ModelNew`` programs for KernelBench problems. Such a corpus is
described by a :class:`RunsCorpus` (repository, commit, the run folders with their model, intended backend and
layout) and pinned by a committed manifest beside this module: every file read (the repository's LICENSE, each
kernel file, each evaluation file and each problem file the kernels pair with) with its SHA-256 and size. Nothing
else of the upstream repository is in the tree.

Pairing: the forks adopted here generated against the problem files of their own checkout (KernelBench after its
July 2025 revision of problem sizes and input distributions), not against KernelBench 48642c5c, whose files differ
from theirs for every problem they cover. Each kernel is therefore paired with the fork's own problem file of the
same level and number at the pinned commit, the reference the kernel was written and judged against. Problem numbers
count from 1 in the kernel paths, the problem files and the evaluation files alike. Each entry also records how its
problem relates to KernelBench 48642c5c (:func:`relation_to_48642c5c`): ``identical`` (same bytes), ``same_name``
(same file name, revised contents: sizes, input distribution) or ``different`` (another problem under that number),
so that a comparison with the 48642c5c corpora can restrict itself to like problems.

:func:`materialise` writes a cache folder that ``lethe audit --kernelbench OUT/problems OUT/run`` reads:
``run/level_{L}_problem_{P}_sample_{S}_kernel.py`` (the upstream file byte for byte; ``S`` is the rank of the
kernel's run among the runs covering that problem, runs sorted by folder name, then the upstream sample),
``run/manifest.jsonl`` (ids, hashes, flags, upstream verdicts; no source) and ``problems/KernelBench/level{L}/``
(the paired problem files, MIT like KernelBench). Offline, a fetch fails at once with one line saying how to supply
the files by hand; a hand-supplied folder is used only if every pinned file in it matches its hash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from lethe.corpora.classify import classify
from lethe.corpora.fetch import FetchError, HashMismatch, Opener, Pin, fetch, sha256_file

PROBLEM_FILE = re.compile(r"^KernelBench/level(\d+)/(\d+)_[^/]*\.py$")
KB_KERNEL_NAME = "level_{level}_problem_{problem}_sample_{sample}_kernel.py"
FUNNEL_STAGES = ("listed", "paired", "compiles", "reference_in_budget", "not_toolchain_artifact")
MANIFEST_KEYS = ("id", "level", "problem", "sample", "run", "upstream_sample", "model", "backend_intended",
                 "backend_detected", "path", "code_sha256", "ref_path", "ref_sha256", "op_class",
                 "relation_to_48642c5c", "upstream_compiled", "upstream_correctness")


# Where a run folder keeps its kernels, as a pattern over the path below the folder (groups: level, problem and,
# where the layout has several samples, sample), and what its evaluation file looks like:
# ``kernelbench``: KernelBench's own run layout; evaluation file ``eval_results.json``, {problem: {sample_id,
#   compiled, correctness, ...}} (KernelBench's eval_from_generations);
# ``per_problem``: ``generated_kernels/level_<L>/problem_<P>.py``, one sample per problem; evaluation file a JSON
#   lines file, one {level, problem_id, generated_kernel_path, eval_result: {compiled, correctness}} per problem.
LAYOUTS: dict[str, re.Pattern[str]] = {
    "kernelbench": re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$"),
    "per_problem": re.compile(r"^generated_kernels/level_(\d+)/problem_(\d+)\.py$"),
}


@dataclass(frozen=True)
class Run:
    """One run folder of the corpus: the model that wrote it, the backend it was asked for, its layout (a key of
    :data:`LAYOUTS`) and its evaluation file, if any."""

    folder: str
    model: str
    backend: str
    eval_file: str | None = None
    layout: str = "kernelbench"

    def kernel_key(self, path: str) -> tuple[int, int, int] | None:
        """(level, problem, upstream sample) of a repository path that is a kernel file of this run, else None."""
        prefix = f"{self.folder}/"
        if not path.startswith(prefix):
            return None
        m = LAYOUTS[self.layout].match(path[len(prefix):])
        if not m:
            return None
        g = [int(x) for x in m.groups()]
        return g[0], g[1], g[2] if len(g) > 2 else 0


@dataclass(frozen=True)
class RunsCorpus:
    """A pinned corpus of KernelBench run folders (see the module docstring)."""

    name: str
    repo: str
    commit: str
    license: str
    runs: tuple[Run, ...]
    manifest: str  # file name of the committed manifest beside this module
    license_file: str = "LICENSE"
    # KernelBench's levels 1-3 are the ones 48642c5c has and the audit's verifier can run without downloading
    # models; a kernel of another level (the newer level 4 builds Hugging Face models) is dropped with its reason.
    levels: tuple[int, ...] = (1, 2, 3)

    @property
    def url_base(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repo}"

    @property
    def default_src(self) -> str:
        """Where a hand-supplied copy is looked for by default (relative to the repository root): the folder the
        device run carries, holding the pinned files under their repository paths."""
        return f".scratch/corpora/{self.name}"


class SchemaError(ValueError):
    """An upstream file does not have the layout or schema this adapter reads."""


# ---------------------------------------------------------------------------------------------------- pins


def build_manifest(spec: RunsCorpus, root: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a checkout of ``spec.repo`` at ``spec.commit``: the licence file, every kernel file of the
    run folders, their evaluation files, and the problem files of KernelBench/ for the levels the kernels cover,
    each with SHA-256 and size (paths relative to the checkout root)."""
    root = Path(root)
    paths = [spec.license_file]
    levels: set[int] = set()
    for run in spec.runs:
        kernels = _run_files(run, root)
        if not kernels:
            raise SchemaError(f"{root / run.folder}: no kernel files of layout {run.layout!r}")
        levels |= {run.kernel_key(k)[0] for k in kernels}
        paths += kernels
        if run.eval_file:
            paths.append(f"{run.folder}/{run.eval_file}")
    for level in sorted(levels & set(spec.levels)):
        paths += sorted(str(p.relative_to(root)) for p in (root / "KernelBench" / f"level{level}").glob("*.py")
                        if PROBLEM_FILE.match(str(p.relative_to(root))))
    return {"corpus": spec.name, "repo": spec.repo, "commit": spec.commit, "license": spec.license,
            "files": [{"path": p, "sha256": sha256_file(root / p), "size": (root / p).stat().st_size}
                      for p in paths]}


def _run_files(run: Run, root: Path) -> list[str]:
    """The repository paths under ``root`` that are kernel files of ``run``, sorted."""
    base = root / run.folder
    if not base.is_dir():
        return []
    rel = (str(p.relative_to(root)) for p in base.rglob("*.py") if p.is_file())
    return sorted(p for p in rel if run.kernel_key(p))


def _manifest_bytes(spec: RunsCorpus) -> bytes:
    # A bare file name is a committed manifest beside this module; an absolute path (tests) is read as it is.
    if Path(spec.manifest).is_absolute():
        return Path(spec.manifest).read_bytes()
    return resources.files("lethe.corpora").joinpath(spec.manifest).read_bytes()


def manifest(spec: RunsCorpus) -> dict[str, Any]:
    """The committed manifest of ``spec``; refused unless it names the spec's repository and commit."""
    m = json.loads(_manifest_bytes(spec).decode("utf-8"))
    if (m["repo"], m["commit"]) != (spec.repo, spec.commit):
        raise SchemaError(f"{spec.manifest} pins {m['repo']}@{m['commit']}, not {spec.repo}@{spec.commit}")
    return m


def pins(spec: RunsCorpus, m: dict[str, Any] | None = None) -> list[Pin]:
    """One raw-URL pin per manifest file."""
    m = m or manifest(spec)
    return [Pin(dataset=spec.repo, revision=spec.commit, filename=f["path"], sha256=f["sha256"], size=f["size"],
                license=spec.license, url_base=spec.url_base) for f in m["files"]]


def _hint(spec: RunsCorpus) -> str:
    return (f"To supply it by hand, check out https://github.com/{spec.repo} at commit {spec.commit} on a machine "
            f"with network access and pass its root (or a folder holding the manifest's files under their "
            f"repository paths) as --src; every file must match the manifest {spec.manifest}.")


def verify_tree(spec: RunsCorpus, root: str | os.PathLike[str], m: dict[str, Any] | None = None) -> None:
    """Raise HashMismatch unless every manifest file is under ``root`` with its pinned SHA-256 and no run folder
    or pinned problem folder holds a kernel or problem file the manifest does not list: an extra kernel would
    join the corpus, an extra problem file could pair a kernel with the wrong reference."""
    root = Path(root)
    m = m or manifest(spec)
    listed = {f["path"] for f in m["files"]}
    bad = []
    for f in m["files"]:
        p = root / f["path"]
        if not p.is_file():
            bad.append(f"{f['path']} missing")
        elif p.stat().st_size != f["size"] or sha256_file(p) != f["sha256"]:
            bad.append(f"{f['path']} differs")
    present = [k for run in spec.runs for k in _run_files(run, root)]
    for folder in sorted({str(Path(x).parent) for x in listed if PROBLEM_FILE.match(x)}):
        if (root / folder).is_dir():
            present += [f"{folder}/{q.name}" for q in sorted((root / folder).glob("*.py"))
                        if PROBLEM_FILE.match(f"{folder}/{q.name}")]
    bad += [f"{x} not pinned" for x in present if x not in listed]
    if bad:
        raise HashMismatch(f"{root} is not {spec.repo} at {spec.commit}: {len(bad)} of {len(m['files'])} files fail "
                           f"their pin ({'; '.join(bad[:5])}{'; ...' if len(bad) > 5 else ''}). {_hint(spec)}")


def resolve(spec: RunsCorpus, hand: str | os.PathLike[str] | None, cache_dir: str | os.PathLike[str], *,
            opener: Opener | None = None, timeout_s: float = 10.0) -> Path:
    """The root of a verified copy: the hand-supplied folder when it exists (every file checked), else the pinned
    files fetched one by one into the cache (FetchError at once, one line, offline)."""
    m = manifest(spec)
    if hand is not None and Path(hand).is_dir():
        verify_tree(spec, hand, m)
        return Path(hand)
    for pin in pins(spec, m):
        try:
            fetch(pin, cache_dir, opener=opener, timeout_s=timeout_s)
        except FetchError as exc:
            if isinstance(exc, HashMismatch):
                raise
            raise FetchError(f"cannot fetch {spec.repo}@{spec.commit} ({pin.filename}: {exc.__cause__ or exc}). "
                             f"{_hint(spec)}{f' (none at {hand})' if hand is not None else ''}") from exc
    return Path(cache_dir) / spec.repo.replace("/", "__") / spec.commit


# ---------------------------------------------------------------------------------------------------- pairing


#: Every name :func:`detect_backend` gives.
BACKENDS = ("triton", "cute", "tilelang", "cuda", "pytorch", "none")


def detect_backend(code: str) -> str:
    """The kernel language a source actually uses, whatever it was asked for: ``triton`` (a ``triton.jit``
    kernel), ``cute`` (CUTLASS's CuTe DSL), ``tilelang``, ``cuda`` (an extension compiled from C++/CUDA source),
    ``pytorch`` (a ModelNew with none of these: it runs PyTorch operators only), or ``none`` (no ModelNew)."""
    if not re.search(r"\bclass\s+ModelNew\b", code):
        return "none"
    if re.search(r"@\s*triton\.jit|\bimport\s+triton\b|\bfrom\s+triton\b", code):
        return "triton"
    if re.search(r"\bcutlass\.cute\b|\bimport\s+cutlass\b|\bfrom\s+cutlass\b", code):
        return "cute"
    if re.search(r"\bimport\s+tilelang\b|\bfrom\s+tilelang\b", code):
        return "tilelang"
    if re.search(r"\bload_inline\b|\bcpp_extension\b|__global__", code):
        return "cuda"
    return "pytorch"


def _kb48642_problems() -> dict[tuple[int, int], tuple[str, str]]:
    from lethe.corpora.leaderboard import kb_manifest

    out = {}
    for f in kb_manifest()["files"]:
        m = PROBLEM_FILE.match(f["path"])
        if m:
            out[(int(m.group(1)), int(m.group(2)))] = (Path(f["path"]).name, f["sha256"])
    return out


def relation_to_48642c5c(level: int, problem: int, name: str, sha256: str,
                         kb: dict[tuple[int, int], tuple[str, str]] | None = None) -> str:
    """How a problem file relates to KernelBench 48642c5c's file of the same level and number: ``identical``,
    ``same_name`` (same file name, other bytes), ``different`` (another name) or ``absent``."""
    kb = _kb48642_problems() if kb is None else kb
    if (level, problem) not in kb:
        return "absent"
    kname, ksha = kb[(level, problem)]
    return "identical" if ksha == sha256 else "same_name" if kname == name else "different"


def load_eval(run: Run, root: Path, kernels: list[str]) -> dict[str, tuple[bool, bool]]:
    """Upstream's verdict per kernel path of the run: (compiled, correctness) from its evaluation file (see
    :data:`LAYOUTS`). A kernel the file does not judge, or judges under another sample, is absent."""
    path = root / run.folder / run.eval_file
    out: dict[str, tuple[bool, bool]] = {}
    if run.layout == "kernelbench":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected an object keyed by problem number")
        for k, v in data.items():
            if not str(k).isdigit() or not isinstance(v, dict) or not {"compiled", "correctness"} <= set(v):
                raise SchemaError(f"{path}: entry {k!r} lacks compiled/correctness or is not keyed by a problem")
        for p in kernels:
            _, problem, sample = run.kernel_key(p)
            v = data.get(str(problem))
            if v is not None and int(v.get("sample_id", 0)) == sample:
                out[p] = (bool(v["compiled"]), bool(v["correctness"]))
        return out
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        r = json.loads(line)
        ev = r.get("eval_result")
        if "generated_kernel_path" not in r:
            raise SchemaError(f"{path} line {i + 1}: no generated_kernel_path")
        if isinstance(ev, dict) and {"compiled", "correctness"} <= set(ev) and r["generated_kernel_path"] in kernels:
            out[r["generated_kernel_path"]] = (bool(ev["compiled"]), bool(ev["correctness"]))
    return out


def pair(spec: RunsCorpus, root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One entry per pinned kernel file: its run, model, backends, hashes, the paired problem file of the fork,
    its class and relation to 48642c5c, the upstream verdict where the run has one, its sample index and id, or
    ``drop`` naming why it cannot be audited. Sorted by (level, problem, sample)."""
    root = Path(root)
    m = manifest(spec)
    listed = [f["path"] for f in m["files"]]
    problems: dict[tuple[int, int], str] = {}
    for p in listed:
        pm = PROBLEM_FILE.match(p)
        if pm:
            problems[(int(pm.group(1)), int(pm.group(2)))] = p
    kb = _kb48642_problems()
    ref_cache: dict[str, tuple[str, str, str]] = {}
    out = []
    for run in spec.runs:
        kernels = sorted(x for x in listed if run.kernel_key(x))
        verdicts = load_eval(run, root, kernels) if run.eval_file else {}
        for p in kernels:
            level, problem, usample = run.kernel_key(p)
            code = (root / p).read_bytes().decode("utf-8")
            e = {"run": run.folder, "model": run.model, "backend_intended": run.backend,
                 "backend_detected": detect_backend(code), "path": p, "level": level, "problem": problem,
                 "upstream_sample": usample, "code_sha256": hashlib.sha256(code.encode("utf-8")).hexdigest(),
                 "upstream_compiled": None, "upstream_correctness": None, "drop": None, "drop_code": None}
            if p in verdicts:
                e["upstream_compiled"], e["upstream_correctness"] = verdicts[p]
            ref = problems.get((level, problem))
            if level not in spec.levels:
                e.update(ref_path=None, ref_sha256=None, op_class=None, relation_to_48642c5c=None,
                         drop=f"level {level} is outside levels {', '.join(map(str, spec.levels))}",
                         drop_code="level_outside")
            elif ref is None:
                e.update(ref_path=None, ref_sha256=None, op_class=None, relation_to_48642c5c=None,
                         drop=f"no problem file KernelBench/level{level}/{problem}_*.py at {spec.commit[:12]}",
                         drop_code="no_problem_file")
            else:
                if ref not in ref_cache:
                    ref_src = (root / ref).read_text(encoding="utf-8")
                    sha = sha256_file(root / ref)
                    ref_cache[ref] = (classify(ref_src), sha, relation_to_48642c5c(level, problem, Path(ref).name,
                                                                                  sha, kb))
                cls, sha, rel = ref_cache[ref]
                e.update(ref_path=ref, ref_sha256=sha, op_class=cls, relation_to_48642c5c=rel)
                if e["backend_detected"] == "none":
                    e["drop"] = "no ModelNew class in the kernel file (a failed or empty generation)"
                    e["drop_code"] = "no_modelnew"
            out.append(e)
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in out:
        if e["drop"] is None:
            groups.setdefault((e["level"], e["problem"]), []).append(e)
    for g in groups.values():
        for s, e in enumerate(sorted(g, key=lambda x: (x["run"], x["upstream_sample"]))):
            e["sample"] = s
            e["id"] = f"level_{e['level']}_problem_{e['problem']}_sample_{s}"
    for e in out:
        e.setdefault("sample", None)
        e.setdefault("id", None)
    return sorted(out, key=lambda e: (e["level"], e["problem"], -1 if e["sample"] is None else e["sample"],
                                      e["run"], e["upstream_sample"]))


# ---------------------------------------------------------------------------------------------------- funnel


def funnel(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Every stage's kept count and drops by reason. The CPU stage fills ``listed`` and ``paired``; the GPU
    stages stay ``null`` (pending). ``compiles`` carries what upstream's own evaluation reported, where a run has
    one, as a prediction to be checked, never as a drop."""
    paired = [e for e in entries if e["drop"] is None]
    drops = Counter(e["drop"] for e in entries if e["drop"])
    judged = [e for e in paired if e["upstream_compiled"] is not None]
    return {"stages": [
        {"stage": "listed", "kept": len(entries), "dropped": {}},
        {"stage": "paired", "kept": len(paired), "dropped": dict(sorted(drops.items()))},
        {"stage": "compiles", "kept": None, "dropped": None, "status": "pending (GPU)",
         "upstream_eval": {"judged": len(judged), "compiled": sum(e["upstream_compiled"] for e in judged),
                           "correct": sum(bool(e["upstream_correctness"]) for e in judged)}},
        {"stage": "reference_in_budget", "kept": None, "dropped": None, "status": "pending (GPU)"},
        {"stage": "not_toolchain_artifact", "kept": None, "dropped": None, "status": "pending (GPU)"},
    ]}


def _counts(entries: list[dict[str, Any]], key) -> dict[str, int]:
    get = key if callable(key) else (lambda e: e[key])
    return dict(sorted(Counter(str(get(e)) for e in entries).items()))


def summary(spec: RunsCorpus, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The source-free corpus summary (``results/audit/<name>/corpus.json``): pin, provenance, funnel so far and
    counts per level, class, backend, model and run, and per upstream verdict. No kernel or problem source."""
    m = manifest(spec)
    paired = [e for e in entries if e["drop"] is None]
    raw = _manifest_bytes(spec)
    return {
        "corpus": spec.name,
        "pins": {"repo": spec.repo, "commit": spec.commit, "license": spec.license, "manifest": spec.manifest,
                 "manifest_sha256": hashlib.sha256(raw).hexdigest(), "files": len(m["files"]),
                 "bytes": sum(f["size"] for f in m["files"]),
                 "levels": list(spec.levels),
                 "runs": [{"folder": r.folder, "model": r.model, "backend": r.backend, "eval_file": r.eval_file,
                           "layout": r.layout} for r in spec.runs]},
        "provenance": {
            "pairing": f"the fork's own KernelBench/level{{L}}/{{P}}_*.py at {spec.commit}; P counts from 1 in the "
                       "kernel paths, the problem files and the evaluation files alike",
            "op_class_rule": "lethe.corpora.classify.classify on the paired problem source",
            "sample_rule": "rank of the kernel's run among the runs covering the problem (runs by folder name), "
                           "then the upstream sample",
            "id_format": "level_{L}_problem_{P}_sample_{S}, as lethe audit --kernelbench assigns",
            "backend_rule": "lethe.corpora.kbruns.detect_backend on the kernel source",
            "upstream_verdict": "compiled/correctness of the run's evaluation entry for the kernel (lethe.corpora."
                                "kbruns.load_eval); null where the run has no evaluation or no entry for it",
        },
        "funnel": funnel(entries),
        "counts": {
            "listed": len(entries), "paired": len(paired),
            # the funnel's drops by short code (no_modelnew, level_outside, no_problem_file), for citing in prose
            "dropped": _counts([e for e in entries if e["drop"]], "drop_code"),
            "problems": len({(e["level"], e["problem"]) for e in paired}),
            "per_level": _counts(paired, "level"),
            "per_class": _counts(paired, "op_class"),
            "per_backend_detected": _counts(paired, "backend_detected"),
            "per_backend_intended": _counts(paired, "backend_intended"),
            "per_model": _counts(paired, "model"),
            "per_run": _counts(paired, "run"),
            "per_level_class": _counts(paired, lambda e: f"{e['level']}/{e['op_class']}"),
            "per_backend_class": _counts(paired, lambda e: f"{e['backend_detected']}/{e['op_class']}"),
            "per_relation_to_48642c5c": _counts(paired, "relation_to_48642c5c"),
            "upstream_verdict": _counts(paired, lambda e: "unjudged" if e["upstream_compiled"] is None else
                                        "correct" if e["upstream_correctness"] else
                                        "compiled_incorrect" if e["upstream_compiled"] else "not_compiled"),
        },
    }


# ---------------------------------------------------------------------------------------------------- layout


def manifest_lines(entries: list[dict[str, Any]]) -> list[str]:
    """One JSON line per paired entry, sorted by id: ids, hashes, flags and upstream verdicts, never a source."""
    paired = sorted((e for e in entries if e["drop"] is None), key=lambda e: e["id"])
    return [json.dumps({k: e[k] for k in MANIFEST_KEYS}, sort_keys=True) for e in paired]


def write_manifest(entries: list[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """:func:`manifest_lines` into ``path`` (atomically): the source-free kernel manifest that may be committed."""
    _write(Path(path), "".join(x + "\n" for x in manifest_lines(entries)).encode("utf-8"))


def _under_results(path: Path) -> bool:
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return False
    return bool(rel.parts) and rel.parts[0] == "results"


def _write(target: Path, data: bytes) -> None:
    # Rewritten only when the bytes change, through a rename, so a reader never sees a half-written file.
    if not target.is_file() or target.read_bytes() != data:
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)


def materialise(spec: RunsCorpus, root: str | os.PathLike[str], out: str | os.PathLike[str]) -> dict[str, Any]:
    """Write ``out/run/`` (every paired kernel byte for byte under its audit name, plus ``manifest.jsonl``) and
    ``out/problems/KernelBench/level{L}/`` (the paired problem files); return the counts. A folder under
    ``results/`` is refused, and so is one whose run folder holds kernel files this corpus would not write."""
    root, out = Path(root), Path(out)
    if _under_results(out):
        raise ValueError(f"{out} is under results/: kernel sources are never written there; use the corpora cache")
    entries = pair(spec, root)
    paired = [e for e in entries if e["drop"] is None]
    run_dir, prob_dir = out / "run", out / "problems"
    names = {KB_KERNEL_NAME.format(**e) for e in paired}
    run_dir.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in run_dir.glob("level_*_problem_*_sample_*_kernel.py") if p.name not in names)
    if foreign:
        raise ValueError(f"{run_dir} holds kernel files this corpus does not write ({foreign[:3]}...); use an empty "
                         f"folder")
    for e in paired:
        _write(run_dir / KB_KERNEL_NAME.format(**e), (root / e["path"]).read_bytes())
    for ref in sorted({e["ref_path"] for e in paired}):
        (prob_dir / ref).parent.mkdir(parents=True, exist_ok=True)
        _write(prob_dir / ref, (root / ref).read_bytes())
    write_manifest(entries, run_dir / "manifest.jsonl")
    f = funnel(entries)["stages"]
    return {"listed": len(entries), "paired": len(paired), "written": len(paired), "dropped": f[1]["dropped"],
            "per_level": _counts(paired, "level"), "per_backend_detected": _counts(paired, "backend_detected"),
            "run": str(run_dir), "problems": str(prob_dir)}


# ---------------------------------------------------------------------------------------------------- CLI


def main(spec: RunsCorpus, argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m lethe.corpora.{spec.name.replace('-', '_')}",
                                 description=f"{spec.name}: {spec.repo}@{spec.commit[:12]} as a KernelBench run")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, help_ in (("materialise", "write OUT/run (kernels + manifest.jsonl) and OUT/problems"),
                        ("summary", "write the source-free corpus summary (corpus.json) and, beside it, "
                                    "the kernel manifest (manifest.jsonl)"),
                        ("pin", "write the manifest of a checkout at the pinned commit (maintainers only)")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--out", required=True, help="folder (materialise) or JSON file (summary, pin)")
        p.add_argument("--src", default=spec.default_src, help="hand-supplied copy: a checkout at the pinned commit "
                       "or a folder of the manifest's files under their repository paths (every file checked; "
                       "else fetched into --cache-dir)")
        p.add_argument("--cache-dir", default="cache/corpora")
    args = ap.parse_args(argv)
    try:
        if args.command == "pin":
            res = build_manifest(spec, args.src)
            Path(args.out).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
            res = {"files": len(res["files"]), "out": args.out}
        else:
            root = resolve(spec, args.src, args.cache_dir)
            if args.command == "materialise":
                res = materialise(spec, root, args.out)
            else:
                entries = pair(spec, root)
                s = summary(spec, entries)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(s, sort_keys=True, indent=1) + "\n", encoding="utf-8")
                write_manifest(entries, Path(args.out).with_name("manifest.jsonl"))
                res = {"listed": s["counts"]["listed"], "paired": s["counts"]["paired"], "out": args.out}
    except (FetchError, SchemaError, ValueError, OSError) as exc:
        print(f"lethe.corpora.{spec.name}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res, sort_keys=True))
    return 0
