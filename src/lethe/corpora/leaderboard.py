"""KernelBench leaderboard corpus ("Kernelsseum"): LLM-generated ModelNew solutions paired with KernelBench.

Inputs, both pinned by commit and SHA-256 (:mod:`lethe.corpora.fetch`):

* ``raw_data.json`` of anneouyang/KernelBenchLeaderboard at :data:`LB_COMMIT` (:data:`RAW`): a list of rows
  {problem_id, level, model, display_name, file, code, torch_speedup, ...}. The upstream repository carries no
  licence, so the file is measured, never committed, and no candidate source enters the tree: committed results
  hold ids, hashes, counts and verdicts only.
* KernelBench (ScalingIntelligence/KernelBench, MIT) at :data:`KB_COMMIT`: its evaluation code and the 250
  problem files, pinned file by file by the committed manifest ``kernelbench_48642c5c.json`` (paths and
  SHA-256 only; the code itself is never copied in).

Offline, each fetch fails at once with a one-line instruction for supplying the file by hand; a hand-supplied
file (or folder) is used only when its SHA-256 (every file's) matches the pin.

Pairing: upstream ``problem_id`` counts from 0, KernelBench's problem files from 1, so row (level L,
problem_id p) pairs with ``KernelBench/level{L}/{p+1}_*.py``. The leaderboard's own copies of two problem files
differ from KernelBench's (:data:`DIFFERING`); those rows are paired against KernelBench's file anyway and
flagged ``problem_file_differs``. The operator class is :func:`lethe.corpora.classify.classify` of the paired
KernelBench reference source (the paper's regex rule, first match in its priority order).

:func:`materialise` writes the paired rows as a KernelBench run layout that ``lethe audit --kernelbench KB DIR``
reads: ``level_{L}_problem_{P}_sample_{S}_kernel.py`` with ``P`` KernelBench's problem number (``p+1``) and
``S`` the rank of the row's model among that problem's models sorted by name, plus ``manifest.jsonl``. The
audit then names each kernel ``level_{L}_problem_{P}_sample_{S}``, the ``id`` of the manifest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

from lethe.corpora.classify import classify
from lethe.corpora.fetch import FetchError, HashMismatch, Opener, Pin, fetch, sha256_file, verify

CORPUS = "leaderboard"
LB_REPO = "anneouyang/KernelBenchLeaderboard"
LB_COMMIT = "170ca7965f53bba599d1078b6fcaa5dd2658ec50"
RAW = Pin(
    dataset=LB_REPO,
    revision=LB_COMMIT,
    filename="docs/assets/raw_data.json",
    sha256="cb9d138947348c9b327b9d98ff43f3e8176b8995e62db483a7c46879a27bfe3e",
    size=1_316_421,
    license="none (the upstream repository has no licence file: measure it, never commit it)",
    url_base=f"https://raw.githubusercontent.com/{LB_REPO}",
)
# The leaderboard's per-problem index ({"Level L: P_Name": [{display_name, torch_speedup, file}]}), in
# KernelBench's numbering: the independent witness that problem_id counts from 0 (see pairing_check).
DATA = Pin(
    dataset=LB_REPO,
    revision=LB_COMMIT,
    filename="docs/assets/data.json",
    sha256="d8f4558680c1dca0c5e9da7b437cbfd5ce1f5e6932eb9437d66baeb22ad2b263",
    size=77_810,
    license=RAW.license,
    url_base=RAW.url_base,
)
KB_REPO = "ScalingIntelligence/KernelBench"
KB_COMMIT = "48642c5c4ff616e1a2339f7e84b72eea0ac1a6a8"
KB_URL_BASE = f"https://raw.githubusercontent.com/{KB_REPO}"
KB_MANIFEST = "kernelbench_48642c5c.json"

# Defaults for a checkout beside ../shared (relative to the repository root, like config.yaml's paths).
DEFAULT_RAW = "../shared/data/kernelbench-leaderboard/raw_data.json"
DEFAULT_DATA = "../shared/data/kernelbench-leaderboard/data.json"
DEFAULT_KB = "../shared/third_party/kernelbench-48642c5c"
DEFAULT_CACHE = "cache/corpora"

# Problems (KernelBench numbering) whose copy in the leaderboard repository differs from KernelBench's file.
DIFFERING: dict[tuple[int, int], str] = {
    (1, 100): "HingeLoss: the leaderboard's copy has another target shape",
    (2, 44): "the leaderboard's copy has an extra mean",
}

FIELDS = ("problem_id", "code", "torch_speedup", "torch_compile_speedup", "baseline_torch_time",
          "baseline_torch_compile_time", "kernel_eval_time", "level", "model", "display_name", "file")

# torch >= 2.4 no longer converts Tensor.type() (DeprecatedTypeProperties) to the ScalarType the dispatch
# macros take, so such a source cannot compile there; the check predicts that failure, it drops nothing.
_DISPATCH_ON_TYPE = re.compile(r"\bAT_DISPATCH_\w+\s*\(\s*[^,()]*(?:\([^()]*\))?[^,()]*\.type\s*\(\s*\)\s*,")
PREDICTED_DISPATCH = "AT_DISPATCH_* given Tensor.type(): does not compile under torch >= 2.4"

KB_KERNEL_NAME = "level_{level}_problem_{problem}_sample_{sample}_kernel.py"


class SchemaError(ValueError):
    """A raw_data.json row lacks a field of the upstream schema or has one of the wrong type."""


# ---------------------------------------------------------------------------------------------------- fetch


def resolve_raw(hand: str | os.PathLike[str] | None = DEFAULT_RAW, cache_dir: str | os.PathLike[str] = DEFAULT_CACHE,
                *, opener: Opener | None = None, timeout_s: float = 10.0) -> Path:
    """The verified raw_data.json: the hand-supplied file when it exists (refused with HashMismatch unless its
    SHA-256 is the pin's), else the pinned cache copy, downloaded when absent (FetchError at once offline)."""
    return _resolve(RAW, hand, cache_dir, "--raw (config corpora.leaderboard.raw)", opener, timeout_s)


def resolve_data(hand: str | os.PathLike[str] | None = DEFAULT_DATA, cache_dir: str | os.PathLike[str] = DEFAULT_CACHE,
                 *, opener: Opener | None = None, timeout_s: float = 10.0) -> Path:
    """The verified data.json, under the same rules as :func:`resolve_raw`."""
    return _resolve(DATA, hand, cache_dir, "--data (config corpora.leaderboard.data)", opener, timeout_s)


def _resolve(pin: Pin, hand, cache_dir, option: str, opener: Opener | None, timeout_s: float) -> Path:
    if hand is not None and Path(hand).is_file():
        verify(pin, hand)
        return Path(hand)
    try:
        return fetch(pin, cache_dir, opener=opener, timeout_s=timeout_s)
    except FetchError as exc:
        if isinstance(exc, HashMismatch):
            raise
        raise FetchError(f"{exc} Or point {option} at such a copy"
                         f"{f' (none at {hand})' if hand is not None else ''}.") from exc


def kb_manifest() -> dict[str, Any]:
    """The committed per-file pin of KernelBench at KB_COMMIT: {repo, commit, license, files: [{path, sha256,
    size}]}."""
    return json.loads(resources.files("lethe.corpora").joinpath(KB_MANIFEST).read_text(encoding="utf-8"))


def kb_pins(manifest: dict[str, Any] | None = None) -> list[Pin]:
    """One raw-URL pin per file of the KernelBench manifest."""
    manifest = manifest or kb_manifest()
    return [Pin(dataset=manifest["repo"], revision=manifest["commit"], filename=f["path"], sha256=f["sha256"],
                size=f["size"], license=manifest["license"], url_base=f"https://raw.githubusercontent.com/"
                f"{manifest['repo']}") for f in manifest["files"]]


def build_kb_manifest(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a KernelBench copy: LICENSE, src/{__init__,eval,utils}.py and every problem file, each
    with its SHA-256 and size (paths relative to the checkout root)."""
    root = Path(root)
    paths = ["LICENSE", "src/__init__.py", "src/eval.py", "src/utils.py"]
    paths += sorted(str(p.relative_to(root)) for p in root.glob("KernelBench/level*/*.py"))
    return {"repo": KB_REPO, "commit": KB_COMMIT, "license": "MIT",
            "files": [{"path": p, "sha256": sha256_file(root / p), "size": (root / p).stat().st_size}
                      for p in paths]}


def verify_kernelbench(root: str | os.PathLike[str], manifest: dict[str, Any] | None = None) -> None:
    """Raise HashMismatch unless every manifest file is present under ``root`` with its pinned SHA-256 and the
    problem folders the manifest covers hold no other problem file: a copy with one edited, missing or extra
    problem file would pair rows with the wrong reference."""
    root = Path(root)
    manifest = manifest or kb_manifest()
    bad = []
    listed = {f["path"] for f in manifest["files"]}
    for f in manifest["files"]:
        p = root / f["path"]
        if not p.is_file():
            bad.append(f"{f['path']} missing")
        elif sha256_file(p) != f["sha256"]:
            bad.append(f"{f['path']} differs")
    for folder in sorted({str(Path(x).parent) for x in listed if x.startswith("KernelBench/level")}):
        bad += [f"{x} not pinned" for x in sorted(str(q.relative_to(root)) for q in (root / folder).glob("*.py"))
                if x not in listed]
    if bad:
        raise HashMismatch(f"{root} is not KernelBench at {manifest['commit']}: {len(bad)} of "
                           f"{len(manifest['files'])} files fail their pin ({'; '.join(bad[:5])}"
                           f"{'; ...' if len(bad) > 5 else ''}). {_kb_hint(manifest)}")


def _kb_hint(manifest: dict[str, Any]) -> str:
    return (f"To supply it by hand, check out https://github.com/{manifest['repo']} at commit {manifest['commit']} "
            f"on a machine with network access and pass its root (holding src/ and KernelBench/) as the "
            f"KernelBench folder; every file must match lethe/corpora/{KB_MANIFEST}.")


def resolve_kernelbench(hand: str | os.PathLike[str] | None = DEFAULT_KB,
                        cache_dir: str | os.PathLike[str] = DEFAULT_CACHE, *, opener: Opener | None = None,
                        timeout_s: float = 10.0) -> Path:
    """The root of a verified KernelBench copy: the hand-supplied folder when it exists (every file checked),
    else the pinned files fetched one by one into the cache (FetchError at once, one line, offline)."""
    manifest = kb_manifest()
    if hand is not None and Path(hand).is_dir():
        verify_kernelbench(hand, manifest)
        return Path(hand)
    pins = kb_pins(manifest)
    for pin in pins:
        try:
            fetch(pin, cache_dir, opener=opener, timeout_s=timeout_s)
        except FetchError as exc:
            if isinstance(exc, HashMismatch):
                raise
            raise FetchError(f"cannot fetch KernelBench@{manifest['commit']} ({pin.filename}: "
                             f"{exc.__cause__ or exc}). {_kb_hint(manifest)}") from exc
    # Pin.path puts each file at <cache>/<owner__repo>/<commit>/<path>: that folder is the checkout root.
    return Path(cache_dir) / manifest["repo"].replace("/", "__") / manifest["commit"]


# ---------------------------------------------------------------------------------------------------- rows


def load_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a raw_data.json, schema-checked; ``problem_id`` and ``level`` become ints whether upstream
    wrote them as numbers or as strings."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise SchemaError(f"{path}: expected a JSON list of rows")
    rows = []
    for i, r in enumerate(data):
        missing = [k for k in FIELDS if k not in r]
        if missing:
            raise SchemaError(f"{path} row {i}: missing field(s) {missing}")
        try:
            level, pid = int(str(r["level"])), int(str(r["problem_id"]))
        except ValueError as exc:
            raise SchemaError(f"{path} row {i}: level/problem_id not integers") from exc
        if not isinstance(r["code"], str) or not isinstance(r["model"], str):
            raise SchemaError(f"{path} row {i}: code and model must be strings")
        rows.append({**r, "level": level, "problem_id": pid})
    return rows


def pairing_check(rows: list[dict[str, Any]], data_path: str | os.PathLike[str]) -> dict[str, int]:
    """How the rows' problem_id relates to the problem numbers of data.json, which lists the same kernels (by
    upstream file hash) under KernelBench-numbered problem names: per row, whether data.json's problem is
    problem_id + 1 or problem_id, another one, or whether the row is absent from data.json. The pairing rule
    (problem_id + 1) stands only if no listed row disagrees with it."""
    data = json.loads(Path(data_path).read_text(encoding="utf-8"))
    where: dict[str, tuple[int, int]] = {}
    for key, entries in data.items():
        m = re.fullmatch(r"Level (\d+): (\d+)_.*", key, flags=re.S)
        if not m:
            raise SchemaError(f"{data_path}: unexpected problem key {key!r}")
        for e in entries:
            where[e["file"]] = (int(m.group(1)), int(m.group(2)))
    out = Counter()
    for r in rows:
        got = where.get(r["file"])
        if got is None:
            out["absent_from_data_json"] += 1
        elif got == (r["level"], r["problem_id"] + 1):
            out["problem_id_plus_1"] += 1
        elif got == (r["level"], r["problem_id"]):
            out["problem_id_plus_0"] += 1
        else:
            out["other"] += 1
    return {k: out.get(k, 0) for k in ("problem_id_plus_1", "problem_id_plus_0", "other", "absent_from_data_json")}


def problem_index(kb_root: str | os.PathLike[str]) -> dict[tuple[int, int], Path]:
    """(level, KernelBench problem number) -> problem file, from a checkout root or its KernelBench folder."""
    root = Path(kb_root)
    probs = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    index: dict[tuple[int, int], Path] = {}
    for level_dir in sorted(probs.glob("level*")):
        m = re.fullmatch(r"level(\d+)", level_dir.name)
        if not m:
            continue
        for f in sorted(level_dir.glob("*.py")):
            head = f.name.split("_", 1)[0]
            if head.isdigit():
                index[(int(m.group(1)), int(head))] = f
    return index


def predicted_compile_failure(code: str) -> str | None:
    """The known toolchain incompatibility this source hits, if any (None: no static reason to expect a
    compile failure)."""
    return PREDICTED_DISPATCH if _DISPATCH_ON_TYPE.search(code) else None


def pair(rows: list[dict[str, Any]], kb_root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One entry per row: the row's pairing with KernelBench (problem = problem_id + 1), its class, flags and
    sample index, or ``drop`` naming why it could not be paired. Sorted by (level, problem, sample)."""
    kb_root = Path(kb_root)
    index = problem_index(kb_root)
    class_cache: dict[Path, tuple[str, str]] = {}
    out = []
    for r in rows:
        level, problem = r["level"], r["problem_id"] + 1
        code = r["code"]
        e = {"level": level, "problem_id": r["problem_id"], "problem": problem, "model": r["model"],
             "display_name": r.get("display_name", ""), "file": r["file"],
             "code_sha256": hashlib.sha256(code.encode("utf-8")).hexdigest(),
             "problem_file_differs": (level, problem) in DIFFERING,
             "predicted_compile_failure": predicted_compile_failure(code), "drop": None}
        ref = index.get((level, problem))
        if ref is None:
            e.update(drop=f"no KernelBench problem file level{level}/{problem}_*.py", ref_path=None,
                     ref_sha256=None, op_class=None)
        else:
            if ref not in class_cache:
                class_cache[ref] = (classify(ref.read_text(encoding="utf-8")), sha256_file(ref))
            cls, ref_hash = class_cache[ref]
            e.update(ref_path=ref.relative_to(kb_root).as_posix(), ref_sha256=ref_hash, op_class=cls)
        out.append(e)
    # Sample index: the rank of the model among the problem's paired rows, models sorted by name (the upstream
    # file hash breaks a tie, should a model ever appear twice for one problem).
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in out:
        if e["drop"] is None:
            groups.setdefault((e["level"], e["problem"]), []).append(e)
    for g in groups.values():
        for s, e in enumerate(sorted(g, key=lambda x: (x["model"], x["file"]))):
            e["sample"] = s
            e["id"] = f"level_{e['level']}_problem_{e['problem']}_sample_{s}"
    for e in out:
        e.setdefault("sample", None)
        e.setdefault("id", None)
    return sorted(out, key=lambda e: (e["level"], e["problem"], -1 if e["sample"] is None else e["sample"],
                                      e["model"], e["file"]))


# ---------------------------------------------------------------------------------------------------- funnel

FUNNEL_STAGES = ("listed", "paired", "compiles", "reference_in_budget", "not_toolchain_artifact")


def funnel(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The funnel so far: every stage's kept count and drops by reason. The CPU stage fills ``listed`` and
    ``paired``; the GPU stages stay ``null`` (pending) and ``compiles`` carries the static prediction of compile
    failures, counted by reason, so that none can later vanish silently."""
    listed = len(entries)
    drops = Counter(e["drop"] for e in entries if e["drop"])
    paired = [e for e in entries if e["drop"] is None]
    predicted = Counter(e["predicted_compile_failure"] for e in paired if e["predicted_compile_failure"])
    return {
        "stages": [
            {"stage": "listed", "kept": listed, "dropped": {}},
            {"stage": "paired", "kept": len(paired), "dropped": dict(sorted(drops.items())),
             "flagged": {"problem_file_differs": sum(e["problem_file_differs"] for e in paired)}},
            {"stage": "compiles", "kept": None, "dropped": None, "status": "pending (GPU)",
             "predicted_drops": dict(sorted(predicted.items()))},
            {"stage": "reference_in_budget", "kept": None, "dropped": None, "status": "pending (GPU)"},
            {"stage": "not_toolchain_artifact", "kept": None, "dropped": None, "status": "pending (GPU)"},
        ],
    }


def _counts(entries: list[dict[str, Any]], key: str) -> dict[str, int]:
    return dict(sorted(Counter(str(e[key]) for e in entries).items()))


def summary(entries: list[dict[str, Any]], raw_path: str | os.PathLike[str], kb_root: str | os.PathLike[str],
            pairing: dict[str, int] | None = None) -> dict[str, Any]:
    """The source-free corpus summary (results/audit/leaderboard/corpus.json): counts per level, class and model,
    the funnel so far, the pins, the provenance and (when given) :func:`pairing_check`'s counts. No candidate or
    problem source is in it."""
    paired = [e for e in entries if e["drop"] is None]
    return {
        "corpus": CORPUS,
        "pins": {
            "raw_data": {"repo": RAW.dataset, "commit": RAW.revision, "path": RAW.filename, "url": RAW.url(),
                         "sha256": RAW.sha256, "size": RAW.size, "license": RAW.license},
            "data": {"repo": DATA.dataset, "commit": DATA.revision, "path": DATA.filename, "url": DATA.url(),
                     "sha256": DATA.sha256, "size": DATA.size, "license": DATA.license},
            "kernelbench": {"repo": KB_REPO, "commit": KB_COMMIT, "license": "MIT", "manifest": KB_MANIFEST,
                            "files": len(kb_manifest()["files"]),
                            "manifest_sha256": hashlib.sha256(
                                resources.files("lethe.corpora").joinpath(KB_MANIFEST).read_bytes()).hexdigest()},
        },
        "provenance": {
            "raw_data_sha256": sha256_file(raw_path),
            "pairing": "KernelBench problem number = upstream problem_id + 1; file KernelBench/level{L}/{P}_*.py",
            "pairing_check": pairing,
            "op_class_rule": "lethe.corpora.classify.classify on the paired KernelBench problem source",
            "sample_rule": "rank of the model among the problem's rows, models sorted by name",
            "id_format": "level_{L}_problem_{P}_sample_{S} (P in KernelBench numbering), as lethe audit "
                         "--kernelbench assigns",
            "differing_problems": [f"level{lv}/{p}: {why}" for (lv, p), why in sorted(DIFFERING.items())],
            "acceptance": "every row is taken to be accepted by KernelBench's check (the leaderboard times only "
                          "kernels that passed it); an inference, there is no correctness column",
        },
        "funnel": funnel(entries),
        "counts": {
            "listed": len(entries),
            "paired": len(paired),
            "per_level": _counts(paired, "level"),
            "per_class": _counts(paired, "op_class"),
            "per_model": _counts(paired, "model"),
            "per_level_class": dict(sorted(Counter(f"{e['level']}/{e['op_class']}" for e in paired).items())),
            "problems": len({(e["level"], e["problem"]) for e in paired}),
        },
        "flagged": {
            "problem_file_differs": sorted(e["id"] for e in paired if e["problem_file_differs"]),
            "predicted_compile_failure": sorted(e["id"] for e in paired if e["predicted_compile_failure"]),
        },
    }


# ---------------------------------------------------------------------------------------------------- layout

MANIFEST_KEYS = ("id", "level", "problem", "problem_id", "sample", "model", "display_name", "file", "code_sha256",
                 "ref_path", "ref_sha256", "op_class", "problem_file_differs", "predicted_compile_failure")


def manifest_lines(entries: list[dict[str, Any]]) -> list[str]:
    """One JSON line per paired entry, sorted by id: ids, hashes and flags only, never a source."""
    paired = sorted((e for e in entries if e["drop"] is None), key=lambda e: e["id"])
    return [json.dumps({k: e[k] for k in MANIFEST_KEYS}, sort_keys=True) for e in paired]


def write_manifest(entries: list[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(x + "\n" for x in manifest_lines(entries)), encoding="utf-8")
    os.replace(tmp, path)



def _under_results(path: Path) -> bool:
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return False
    return bool(rel.parts) and rel.parts[0] == "results"


def materialise(rows: list[dict[str, Any]], kb_root: str | os.PathLike[str], out: str | os.PathLike[str]
                ) -> dict[str, Any]:
    """Write every paired row as ``out/level_{L}_problem_{P}_sample_{S}_kernel.py`` (the row's code, byte for
    byte as UTF-8) plus ``out/manifest.jsonl`` (one line per kernel, sorted by id); return the counts.

    ``out`` is a cache folder: candidate sources have no licence, so a folder under ``results/`` is refused. A
    kernel file already there that this corpus would not write is refused too (it would join the audit)."""
    out = Path(out)
    if _under_results(out):
        raise ValueError(f"{out} is under results/: candidate sources are never written there; use the corpora "
                         f"cache (config corpora.cache_dir)")
    entries = pair(rows, kb_root)
    paired = [e for e in entries if e["drop"] is None]
    names = {KB_KERNEL_NAME.format(**e) for e in paired}
    out.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in out.glob("level_*_problem_*_sample_*_kernel.py") if p.name not in names)
    if foreign:
        raise ValueError(f"{out} holds kernel files this corpus does not write ({foreign[:3]}...); use an empty "
                         f"folder")
    code = {(r["level"], r["problem_id"], r["model"], r["file"]): r["code"] for r in rows}
    for e in paired:
        target = out / KB_KERNEL_NAME.format(**e)
        data = code[(e["level"], e["problem_id"], e["model"], e["file"])].encode("utf-8")
        if not target.is_file() or target.read_bytes() != data:
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
    write_manifest(entries, out / "manifest.jsonl")
    f = funnel(entries)["stages"]
    return {"listed": len(entries), "paired": len(paired), "written": len(paired),
            "dropped": f[1]["dropped"], "problem_file_differs": f[1]["flagged"]["problem_file_differs"],
            "predicted_compile_failure": sum(f[2]["predicted_drops"].values()),
            "per_level": _counts(paired, "level"), "out": str(out)}


# ---------------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lethe.corpora.leaderboard", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for name, help_ in (("materialise", "write the KernelBench run layout + manifest.jsonl into a cache folder"),
                        ("summary", "write the source-free corpus summary (corpus.json)")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--out", required=True, help="folder (materialise) or JSON file (summary)")
        p.add_argument("--raw", default=DEFAULT_RAW, help="hand-supplied raw_data.json (used when it exists and "
                       "its SHA-256 matches the pin; else fetched into --cache-dir)")
        p.add_argument("--kb", default=DEFAULT_KB, help="hand-supplied KernelBench checkout root (every file "
                       "checked against the manifest; else fetched into --cache-dir)")
        p.add_argument("--cache-dir", default=DEFAULT_CACHE)
        if name == "summary":
            p.add_argument("--data", default=DEFAULT_DATA, help="hand-supplied data.json (the pairing cross-check)")
    args = ap.parse_args(argv)
    try:
        raw = resolve_raw(args.raw, args.cache_dir)
        kb = resolve_kernelbench(args.kb, args.cache_dir)
        rows = load_rows(raw)
        if args.command == "materialise":
            res = materialise(rows, kb, args.out)
        else:
            res = summary(pair(rows, kb), raw, kb, pairing_check(rows, resolve_data(args.data, args.cache_dir)))
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(res, sort_keys=True, indent=1) + "\n", encoding="utf-8")
            res = {"listed": res["counts"]["listed"], "paired": res["counts"]["paired"], "out": args.out}
    except (FetchError, SchemaError, ValueError, OSError) as exc:
        print(f"lethe.corpora.leaderboard: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
