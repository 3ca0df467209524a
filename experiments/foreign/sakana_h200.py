"""Second corpus on the H200: compile in parallel, audit under every contract profile, KernelBench's
paper-era check beside it, per-kernel throughput and shard scaling.

Correctness comes first (every row is a verdict); timing is wall clock per kernel as the audit sees it, with
compilation measured separately in its own phase (the extension cache is then shared, keyed by source hash).

    python3 experiments/foreign/sakana_h200.py --out $OUT/foreign [--levels 1,2] [--limit N] [--workers 16] \
        [--work DIR] [--phases compile,audit,kb,scaling]

Resumable: builds live in --work (default --out) and audited rows are appended to
<work>/rows.checkpoint.jsonl; a re-run skips kernels already built or audited, so the experiment can be spread
over several device calls on one warm machine. Every kernel's wall clock is split into phases (reference,
candidate process, grading) in timings.jsonl.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from lethe import provenance
from lethe.corpora import sakana
from lethe.foreign.second_corpus import throughput_summary

SUBSET = ROOT / "data" / "sakana_subset" / "subset.jsonl"


def _compile_one(item_id: str, cand_src: str, ext_dir: str) -> dict:
    """Build one candidate's extension in a fresh process (ProcessPool worker), timing only the build."""
    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    t0 = time.perf_counter()
    try:
        ns: dict = {"__name__": f"cand_{abs(hash(item_id))}"}
        exec(compile(cand_src, f"<{item_id}>", "exec"), ns)
        ns["_ext"]()
        return {"id": item_id, "compiled": True, "compile_seconds": round(time.perf_counter() - t0, 3), "error": ""}
    except BaseException as exc:  # noqa: BLE001 - a build failure is this row's finding, not the run's
        return {"id": item_id, "compiled": False, "compile_seconds": round(time.perf_counter() - t0, 3),
                "error": f"{type(exc).__name__}: {exc}"[-1500:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=0, help="audit only the first N selected rows (0 = all)")
    ap.add_argument("--levels", default="1,2,3", help="KernelBench levels to take from the slice")
    ap.add_argument("--work", default="", help="persistent build/checkpoint directory (default: --out)")
    ap.add_argument("--phases", default="compile,audit,kb,scaling")
    ap.add_argument("--workers", type=int, default=16, help="parallel compile processes")
    ap.add_argument("--retry-failed", action="store_true",
                    help="rebuild candidates whose recorded build failed (default: a failed build stays failed)")
    ap.add_argument("--profiles", default="strict,cuda-default,fast-math")
    ap.add_argument("--scaling", default="1,2,4", help="concurrent shards for the scaling measurement")
    ap.add_argument("--scaling-kernels", type=int, default=16)
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--skip-kb", action="store_true")
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting kernels after this many seconds")
    args = ap.parse_args(argv)

    import pandas as pd
    import torch

    from lethe.kernelbench.check import check_isolated
    from lethe.verifier.api import verify, verify_profiles

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or args.out)
    work.mkdir(parents=True, exist_ok=True)
    phases = set(args.phases.split(","))
    ext_dir = str(work / "torch_extensions")
    os.environ["LETHE_SANDBOX_EXTENSIONS_DIR"] = ext_dir
    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    device = "cuda" if torch.cuda.is_available() else "cpu"

    rows = sakana.load_rows(SUBSET)
    items = []
    for r in rows:
        it = sakana.to_item(r)
        it["sakana_correct"] = str(r.get("Correct")).lower() == "true"
        it["level"] = int(r.get("Level_ID"))
        # Ids are not unique in the slice (two different level-2 sources share one): bookkeeping (builds,
        # resume, KernelBench rows) goes by uid = id + source hash; rows keep the slice's id.
        it["uid"] = f'{it["id"]}#{hashlib.sha256((it["candidate"] or "").encode()).hexdigest()[:12]}'
        if str(it["level"]) in args.levels.split(","):
            items.append(it)
    if args.limit:
        items = items[: args.limit]
    print(f"[sakana] {len(items)} rows, device={device}", flush=True)

    # Phase 1: compile every candidate in parallel (16 cores), once; builds already recorded are not redone.
    compile_log = work / "compile.jsonl"
    done_c = {}
    if compile_log.exists():
        done_c = {r.get("uid"): r for r in map(json.loads, compile_log.read_text().splitlines())
                  if r.get("compiled") or not args.retry_failed}
    todo = [it for it in items if it["candidate"] and it["uid"] not in done_c]
    t0 = time.perf_counter()
    compile_rows = [done_c[it["uid"]] for it in items if it["uid"] in done_c]
    if "compile" in phases and todo:
        with ProcessPoolExecutor(max_workers=args.workers) as pool, open(compile_log, "a", buffering=1) as clog:
            futs = {pool.submit(_compile_one, it["id"], it["candidate"], ext_dir): it for it in todo}
            for f in as_completed(futs):
                c = {**f.result(), "uid": futs[f]["uid"]}
                compile_rows.append(c)
                clog.write(json.dumps(c, sort_keys=True) + "\n")
                print(f"[compile] {c['id']}: {c['compiled']} {c['compile_seconds']:.1f}s", flush=True)
    compile_wall = time.perf_counter() - t0
    for it in items:
        if not it["candidate"]:
            compile_rows.append({"id": it["id"], "uid": it["uid"], "compiled": False, "compile_seconds": 0.0,
                                 "error": it["extract_error"] or "no candidate"})
    compiled = {c["uid"]: c for c in compile_rows}
    print(f"[sakana] compile phase: {sum(c['compiled'] for c in compile_rows)}/{len(items)} built "
          f"({len(todo)} this run) in {compile_wall:.1f} s wall", flush=True)
    if "audit" not in phases and "kb" not in phases and "scaling" not in phases:
        return 0

    # Is the shared build cache hit by a fresh process? (A miss would put nvcc inside every audit.)
    # Only a build whose binary is on this machine can be checked (a resumed --work may list builds made
    # elsewhere); checking another would time a full rebuild instead.
    def _on_disk(it):
        m = re.search(r"_load_inline\(name='([^']+)'", it["candidate"] or "")
        return bool(m) and os.path.exists(os.path.join(ext_dir, m.group(1), m.group(1) + ".so"))

    first = next((it for it in items if compiled.get(it["uid"], {}).get("compiled") and _on_disk(it)), None)
    if first is not None:
        with ProcessPoolExecutor(max_workers=1) as pool:
            again = pool.submit(_compile_one, first["id"], first["candidate"], ext_dir).result()
        print(f"[sakana] cache check: rebuilding {first['id']} in a fresh process took "
              f"{again['compile_seconds']:.2f} s (phase 1: {compiled[first['uid']]['compile_seconds']:.1f} s)",
              flush=True)
    t_start = time.perf_counter()
    ckpt_path, tim_path = work / "rows.checkpoint.jsonl", work / "timings.jsonl"
    verdict_rows = [json.loads(x) for x in ckpt_path.read_text().splitlines()] if ckpt_path.exists() else []
    verdict_rows = [r for r in verdict_rows if r.get("uid") in {it["uid"] for it in items}]
    timings = [json.loads(x) for x in tim_path.read_text().splitlines()] if tim_path.exists() else []
    done_a = {r["uid"] for r in verdict_rows}
    ckpt, tlog = open(ckpt_path, "a", buffering=1), open(tim_path, "a", buffering=1)

    # Phase 2: the battery, one candidate run per kernel graded under every profile (the probe plan does not
    # depend on the profile); the reference is cached per source and seed across kernels.
    profiles = args.profiles.split(",")
    for n, it in enumerate(items, 1):
        if "audit" not in phases:
            break
        if not it["candidate"] or it["uid"] in done_a:
            continue
        if not compiled.get(it["uid"], {}).get("compiled"):
            continue  # a build failure is recorded in compile.parquet; the battery has nothing to load
        if args.budget_s and time.perf_counter() - t_start > args.budget_s:
            print(f"[sakana] time budget reached after {n - 1} kernels", flush=True)
            break
        phase_s: dict = {}
        rows_k = verify_profiles(it["reference"], it["candidate"], profiles=profiles, device=device,
                                 seed=args.seed, kernel_id=it["id"], corpus="sakana-subset",
                                 op_class=it["op_class"], timeout_s=600, timings=phase_s)
        for row in rows_k:
            row["sakana_correct"] = it["sakana_correct"]
            row["level"] = it["level"]
            row["compiled_in_phase1"] = compiled.get(it["uid"], {}).get("compiled", False)
            row["uid"] = it["uid"]
            verdict_rows.append(row)
            ckpt.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        row = rows_k[0]
        trow = {"id": it["id"], "uid": it["uid"], "level": it["level"], "status": row["status"], "seconds": row["seconds"],
                "candidate_compile_s": row.get("compile_seconds"), **phase_s}
        timings.append(trow)
        tlog.write(json.dumps(trow, sort_keys=True) + "\n")
        fails = {r["profile"]: [g for g, v in r.get("gates", {}).items() if v["status"] in ("fail", "error")]
                 for r in rows_k}
        print(f"[audit {n}/{len(items)}] {it['id']}: {row['status']} {row['seconds']:.2f}s {phase_s} "
              f"(in-process load {row.get('compile_seconds')}) fails={fails} {row['error'][:200]}", flush=True)

    ckpt.close()
    tlog.close()

    # Phase 3: KernelBench's paper-era check beside it.
    audited = {r["uid"] for r in verdict_rows}
    kb_path = work / "kb.jsonl"
    kb_rows = [json.loads(x) for x in kb_path.read_text().splitlines()] if kb_path.exists() else []
    kb_done = {r.get("uid") for r in kb_rows}
    if not args.skip_kb and "kb" in phases:
        klog = open(kb_path, "a", buffering=1)
        for n, it in enumerate(items, 1):
            if it["uid"] not in audited or it["uid"] in kb_done:
                continue
            if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                print("[kb] time budget reached", flush=True)
                break
            t1 = time.perf_counter()
            kb = check_isolated(it["reference"], it["candidate"], variant="paper", device=device, timeout_s=600)
            kb = {k: (json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else v)
                  for k, v in kb.items()}
            kb.update({"id": it["id"], "uid": it["uid"], "seconds": round(time.perf_counter() - t1, 3)})
            kb_rows.append(kb)
            klog.write(json.dumps(kb, sort_keys=True, default=str) + "\n")
            print(f"[kb {n}/{len(items)}] {it['id']}: {kb.get('outcome')}", flush=True)
        klog.close()

    # Phase 4: shard scaling on one GPU: the same kernels, strict profile, 1/2/4 concurrent shards.
    scale_path = work / "scaling.jsonl"
    scaling = [json.loads(x) for x in scale_path.read_text().splitlines()] if scale_path.exists() else []
    subset = [it for it in items if it["candidate"] and it["uid"] in audited][: args.scaling_kernels]
    for k in [int(x) for x in args.scaling.split(",") if x and "scaling" in phases]:
        if args.budget_s and time.perf_counter() - t_start > args.budget_s:
            print("[scaling] time budget reached", flush=True)
            break
        t1 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=k) as pool:
            list(pool.map(lambda it: verify(it["reference"], it["candidate"], profile="strict", device=device,
                                            seed=args.seed, kernel_id=it["id"], corpus="sakana-subset"),
                          subset))
        wall = time.perf_counter() - t1
        scaling.append({"concurrent_shards": k, "kernels": len(subset), "wall_s": round(wall, 3),
                        "kernels_per_s": round(len(subset) / wall, 4)})
        with open(scale_path, "a") as fh:
            fh.write(json.dumps(scaling[-1], sort_keys=True) + "\n")
        print(f"[scaling] {k} shards: {wall:.1f} s for {len(subset)} kernels", flush=True)

    # Per kernel = the whole battery (reference + candidate + every profile's grading), from the phase timings;
    # a row's own `seconds` stops at its profile. Compile wall is this call's; builds reused from an earlier
    # call of the same --work keep their own compile_seconds.
    throughput = {"device": device,
                  **throughput_summary(timings, compile_rows, compile_wall_s=round(compile_wall, 3),
                                       workers=args.workers, kb_rows=kb_rows,
                                       scaling=scaling or "not measured")}
    from lethe.verifier.records import write_rows

    write_rows(verdict_rows, out / "rows.parquet")
    pd.DataFrame(kb_rows).to_parquet(out / "kb_rows.parquet", index=False)
    pd.DataFrame(compile_rows).sort_values("uid").to_parquet(out / "compile.parquet", index=False)
    pd.DataFrame([{**t, "slowest_probes": json.dumps(t.get("slowest_probes", []))} for t in timings]).to_parquet(
        out / "timings.parquet", index=False)
    (out / "throughput.json").write_text(json.dumps(throughput, indent=2, sort_keys=True) + "\n")
    provenance.write(out / "provenance.json", command=" ".join([sys.executable, *sys.argv]),
                     experiment="foreign/sakana_h200", rows=len(items))
    print(json.dumps(throughput, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
