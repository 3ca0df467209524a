"""Turn the output of ``experiments/foreign/sakana_h200.py`` (one or several device runs) into the small committed
files of ``results/foreign/sakana-subset/``.

Why a separate step: the experiment is resumable and spread over device calls, so what a single call writes is
partial. Its append-only logs (``compile.jsonl``, ``rows.checkpoint.jsonl``, ``kb.jsonl``, ``timings.jsonl``)
are the record; the parquet/JSON summaries are rebuilt here from them, so that

- ``compile.parquet`` has one row per selected kernel, in selection order, with the archive's ``Correct`` label
  (the verdict schema has no column for it) and every build attempt, including builds made by an earlier call
  and kernels whose source could not be converted (two kernels of the slice share an id; the log's source hash
  tells their builds apart);
- ``throughput.json`` times the whole battery (``reference_s + candidate_s + grade_s``), not the first profile's
  row, and keeps cold (float64 reference computed) and warm (reference cached) kernels apart.

    python -m lethe.foreign.ingest --src DIR --dest results/foreign/sakana-subset [--log run1.log ...]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lethe.foreign import second_corpus as sc

SUBSET = "data/sakana_subset/subset.jsonl"
PUBLISHED_ROWS = "data/published/audit_rows.jsonl.gz"
GOAL = {"kernels": 50, "per_kernel_s": 1.0}

_COMPILE_PHASE = re.compile(r"\[sakana\] compile phase: (\d+)/(\d+) built \((\d+) this run\) in ([0-9.]+) s wall")
_EXT = re.compile(r"\[lethe-ext\] (sakana_[0-9a-f]+) via load_inline in ([0-9.]+) s")
_ERROR_CHARS = 1500


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def selection_args(command: str) -> dict[str, Any]:
    """``--levels`` and ``--limit`` of an experiment command line (the experiment's defaults otherwise)."""
    levels = re.search(r"--levels[ =](\S+)", command or "")
    limit = re.search(r"--limit[ =](\d+)", command or "")
    return {"levels": levels.group(1) if levels else "1,2,3", "limit": int(limit.group(1)) if limit else 0}


def select_items(subset_rows: Sequence[Mapping[str, Any]], levels: str, limit: int) -> list[dict[str, Any]]:
    """The experiment's selection (same order), reduced to what the committed tables need."""
    from lethe.corpora import sakana

    wanted = {x.strip() for x in str(levels).split(",") if x.strip()}
    items = []
    for r in subset_rows:
        if str(r.get("Level_ID")) not in wanted:
            continue
        it = sakana.to_item(r)
        code = r.get("CUDA_Code") or ""
        items.append({
            "id": it["id"], "slice_id": it["id"],
            # the experiment's bookkeeping key (sakana_h200.py): slice id + hash of the generated candidate
            "uid": f'{it["id"]}#{hashlib.sha256((it["candidate"] or "").encode()).hexdigest()[:12]}',
            "level": int(r["Level_ID"]), "task": int(r["Task_ID"]), "op_name": r.get("Op_Name"),
            "op_class": it["op_class"], "sakana_correct": str(r.get("Correct")).lower() == "true",
            "ext_name": "sakana_" + hashlib.sha256(code.encode()).hexdigest()[:16] if it["candidate"] else None,
            "extract_error": it["extract_error"] or "",
        })
    items = items[:limit] if limit else items
    # Ids are not unique in the slice (two different level-2 sources share one). A committed row is keyed by
    # id, so a shared id gets the first hex digits of its CUDA source's hash appended.
    shared = {k for k, n in Counter(it["id"] for it in items).items() if n > 1}
    for it in items:
        if it["id"] in shared:
            digits = it["ext_name"][7:13] if it["ext_name"] else it["uid"].split("#")[1][:6]
            it["id"] = f'{it["id"]}~{digits}'
    return [{"position": i, **it} for i, it in enumerate(items)]


def unique_ids(records: Sequence[Mapping[str, Any]], items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Records (verdict rows, timings, KernelBench rows) with the committed id of their kernel, found by uid."""
    by_uid = {it["uid"]: it["id"] for it in items}
    shared = {it["slice_id"] for it in items if it["id"] != it["slice_id"]}
    out = []
    for r in records:
        if r.get("uid") not in by_uid and r["id"] in shared:
            # the uid hashes the generated candidate, so a change of the harness template changes it: a record
            # of a shared slice id that matches no uid cannot be told apart from its twin
            raise ValueError(f"record for {r['id']!r} (uid {r.get('uid')!r}) matches no selected kernel's uid; its "
                             "slice id is shared, so it cannot be assigned (was the record made with another "
                             "version of lethe.corpora.sakana's candidate template? remap its uid first)")
        out.append({**r, "id": by_uid.get(r.get("uid"), r["id"])})
    return out


def parse_logs(texts: Iterable[str]) -> dict[str, Any]:
    """From the experiment's stdout: the wall time of the run that built (most builds in one call) and the
    seconds each extension (by source hash) took in load_inline."""
    best: tuple[int, float] | None = None
    ext: dict[str, float] = {}
    for text in texts:
        for m in _COMPILE_PHASE.finditer(text):
            this_run, wall = int(m.group(3)), float(m.group(4))
            if this_run and wall > 0 and (best is None or this_run > best[0]):
                best = (this_run, wall)
        for m in _EXT.finditer(text):
            ext[m.group(1)] = float(m.group(2))
    return {"builds_this_run": best[0] if best else None, "compile_wall_s": best[1] if best else None,
            "load_inline_s": ext}


def compile_table(items: Sequence[Mapping[str, Any]], attempts: Sequence[Mapping[str, Any]],
                  load_inline_s: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """One row per selected kernel: its label, whether a build was attempted, and the build's outcome.

    ``attempts`` are compile.jsonl lines (id, compiled, compile_seconds, error). Where several kernels share an
    id, each takes the attempt whose time is nearest to its own source's load_inline time in the log; where one
    kernel has several attempts (a retry), a successful one wins.
    """
    load_inline_s = load_inline_s or {}
    # older logs carry no uid: those attempts are matched by slice id; an attempt with a uid belongs to that
    # kernel alone and must not be handed to a twin that shares its slice id
    pool: dict[str, list[dict]] = {}
    for a in attempts:
        if not a.get("uid"):
            pool.setdefault(a["id"], []).append(dict(a))
    by_uid: dict[str, list[dict]] = {}
    for a in attempts:
        if a.get("uid"):
            by_uid.setdefault(a["uid"], []).append(dict(a))
    out = []
    for it in items:
        row = {k: it[k] for k in ("position", "id", "level", "task", "op_name", "op_class", "sakana_correct",
                                  "ext_name")}
        # attempts recorded with the experiment's uid match exactly; older logs match by slice id
        if it.get("uid") in by_uid:
            mine = by_uid[it["uid"]] if it["ext_name"] else []
        else:
            mine = pool.get(it.get("slice_id", it["id"]), []) if it["ext_name"] else []
        chosen = None
        if mine:
            ok = [a for a in mine if a.get("compiled")]
            target = load_inline_s.get(it["ext_name"])
            if ok and target is not None:
                chosen = min(ok, key=lambda a: abs(float(a["compile_seconds"]) - target))
            else:
                chosen = ok[0] if ok else mine[-1]
            mine.remove(chosen)
        row.update({
            "candidate_extracted": it["ext_name"] is not None,
            "build_attempted": chosen is not None,
            "compiled": bool(chosen and chosen.get("compiled")),
            "compile_seconds": float(chosen["compile_seconds"]) if chosen else None,
            "error": (it["extract_error"] if not it["ext_name"] else (chosen or {}).get("error", ""))[-_ERROR_CHARS:],
        })
        out.append(row)
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def published_times(path: str | Path) -> dict[str, dict[str, Any]]:
    """The paper's per-kernel times (B200, first corpus: the release holds none for the second one)."""
    with gzip.open(path, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    def s(xs):
        t = sc.published_elapsed(xs)
        return {"n": t["n"], "median": t["median"], "p90": round(t["p90"], 3) if t["p90"] is not None else None}
    return {
        "all_gated": {**s(rows), "source": f"{path} (elapsed_s of gated rows; Dr. Kernel corpus, B200)"},
        "matmul_gated": {**s([r for r in rows if r.get("op_class") == "matmul"]),
                         "source": f"{path} (elapsed_s of gated rows with op_class matmul; B200)"},
    }


def ingest(src: str | Path, dest: str | Path, *, logs: Sequence[str | Path] = (), subset: str | Path = SUBSET,
           published_rows: str | Path | None = PUBLISHED_ROWS, runs: Sequence[str] = (),
           notes: Sequence[str] = (), scaling_note: str = "not measured") -> dict[str, Any]:
    """Write the committed files into ``dest``; returns the throughput summary."""
    from lethe.verifier.records import read_rows, write_rows

    src, dest = Path(src), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    prov = json.loads((src / "provenance.json").read_text())
    sel = selection_args(prov.get("command", ""))
    from lethe.corpora import sakana

    items = select_items(sakana.load_rows(subset), sel["levels"], sel["limit"])
    log_paths = [Path(p) for p in logs]
    parsed = parse_logs(p.read_text(encoding="utf-8", errors="replace") for p in log_paths)

    attempts = _jsonl(src / "compile.jsonl")
    ctab = compile_table(items, attempts, parsed["load_inline_s"])
    pd.DataFrame(ctab).to_parquet(dest / "compile.parquet", index=False)

    ckpt = src / "rows.checkpoint.jsonl"
    verdicts = _jsonl(ckpt) if ckpt.exists() else read_rows(src / "rows.parquet")
    verdicts = unique_ids(verdicts, items)
    write_rows(verdicts, dest / "rows.parquet")

    kb = unique_ids(_jsonl(src / "kb.jsonl"), items)
    kb_cols = sorted({k for r in kb for k in r} - {"id"})
    pd.DataFrame([{"id": r["id"], **{k: r.get(k) for k in kb_cols}} for r in kb]).to_parquet(
        dest / "kb_rows.parquet", index=False)

    timings = unique_ids(_jsonl(src / "timings.jsonl"), items)
    trows = []
    for t in timings:
        trows.append({**{k: v for k, v in sorted(t.items()) if k != "slowest_probes"},
                      "slowest_probes": json.dumps(t.get("slowest_probes", [])),
                      "battery_s": round(sc.battery_seconds(t), 3), "cold_reference": sc.is_cold(t)})
    pd.DataFrame(trows).to_parquet(dest / "timings.parquet", index=False)

    scaling_rows = _jsonl(src / "scaling.jsonl")
    wall = parsed["compile_wall_s"]
    workers = re.search(r"--workers[ =](\d+)", " ".join(runs) + " " + prov.get("command", ""))
    tp = sc.throughput_summary(
        timings, [a for a in ctab if a["build_attempted"]], compile_wall_s=wall,
        workers=int(workers.group(1)) if workers else 16,
        published=published_times(published_rows) if published_rows else None, kb_rows=kb,
        scaling=scaling_rows or scaling_note, goal=GOAL)
    audited = {t["id"] for t in timings}
    by_id = {c["id"]: c for c in ctab}
    tp.update({
        "device": prov.get("gpu"),
        "selected": len(ctab),
        "candidates_extracted": sum(c["candidate_extracted"] for c in ctab),
        "compiled": sum(c["compiled"] for c in ctab),
        "audited_levels": dict(sorted(Counter(str(by_id[i]["level"]) for i in audited).items())),
        "audited_tasks": sorted({f"L{by_id[i]['level']}-T{by_id[i]['task']} {by_id[i]['op_name']}"
                                 for i in audited}),
        "kernelbench_outcomes": sc.kb_outcomes(kb),
    })
    (dest / "throughput.json").write_text(json.dumps(tp, indent=2, sort_keys=True) + "\n")

    ingest_block = {
        "by": "lethe.foreign.ingest",
        "runs": list(runs) or [prov.get("command", "")],
        "selection": sel,
        "source_sha256": {p.name: _sha256(p) for p in sorted(src.glob("*.jsonl"))},
        "logs": [p.name for p in log_paths],
        "notes": list(notes),
    }
    (dest / "provenance.json").write_text(json.dumps({**prov, "ingest": ingest_block}, indent=2, sort_keys=True)
                                          + "\n")
    for p in [*log_paths, src / "gpu.txt"]:
        if p.exists() and p.resolve() != (dest / p.name).resolve():
            shutil.copyfile(p, dest / p.name)
    return tp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="the experiment's --out (with its *.jsonl and provenance.json)")
    ap.add_argument("--dest", required=True)
    ap.add_argument("--log", action="append", default=[], help="the experiment's stdout, one per device call")
    ap.add_argument("--subset", default=SUBSET)
    ap.add_argument("--published", default=PUBLISHED_ROWS)
    ap.add_argument("--run", action="append", default=[], help="command line of each device call, in order")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--scaling-note", default="not measured")
    args = ap.parse_args(argv)
    tp = ingest(args.src, args.dest, logs=args.log, subset=args.subset, published_rows=args.published or None,
                runs=args.run, notes=args.note, scaling_note=args.scaling_note)
    print(json.dumps({k: tp[k] for k in ("kernels_timed", "per_kernel_s", "per_kernel_warm_s")}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
