"""The committed results of the fla #640 experiment (``results/foreign/fla640/``): collect them from device calls,
load them, and check them against their schema.

A device call of ``experiments/fla640/run.py`` writes ``direct.json`` (schema ``lethe.fla640.direct/1``), a
``provenance.json`` (``lethe.provenance/1``), ``verdicts.parquet`` when a verifier pair ran, and the call's stdout
log. Device time comes in short calls, so one result is spread over several of them and some calls end with
nothing run. :func:`collect` keeps every file of a *results* call verbatim under ``<dest>/<call>/`` and records
a call that ran nothing as an *attempt* (no files, only its command and what it skipped) in the top-level
``provenance.json`` (schema :data:`SCHEMA`), so a reader sees every call that was made without mistaking an empty
one for a result.

    python -m lethe.foreign.fla640_results --dest results/foreign/fla640 \\
        --call call2=/tmp/fla640_runs/call2 --call call4=/tmp/fla640_runs/call4 \\
        --attempt call3=/tmp/fla640_runs/call3 --note "call4=..."
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA = "lethe.fla640.results/1"
DIRECT_SCHEMA = "lethe.fla640.direct/1"
DEVICE_PROVENANCE_SCHEMA = "lethe.provenance/1"
ROLES = ("results", "attempt")
# Device-provenance fields copied into each call's entry (the rest stays in the call's own provenance.json).
DEVICE_FIELDS = ("git_sha", "command", "utc_time", "gpu", "capability", "driver", "cuda_runtime", "torch", "triton",
                 "fla", "python", "platform", "budget_s", "seconds", "quick", "seed")
DIRECT_KEYS = ("schema", "fla", "thresholds", "shapes", "cells", "verifier", "skipped", "comparisons", "outcome")
CELL_KEYS = ("op", "K", "BK_expected", "dtype", "T")


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def task_names(direct: Mapping[str, Any]) -> list[str]:
    """The tasks a call ran, named as run.py's log names them (direct cells first, then verifier pairs)."""
    return ([f"direct {c['op']} K={c['K']} {c['dtype']} T={c['T']}" for c in direct["cells"]]
            + [f"verify {v['id']}" for v in direct["verifier"]])


def command_flag(command: str, flag: str) -> str | None:
    """The value of ``--flag VALUE`` in a recorded command line (None when absent; "" for a bare switch)."""
    words = shlex.split(command or "")
    for i, w in enumerate(words):
        if w == flag:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            return "" if nxt.startswith("--") else nxt
        if w.startswith(flag + "="):
            return w.split("=", 1)[1]
    return None


def auto_notes(role: str, device: Mapping[str, Any], direct: Mapping[str, Any]) -> list[str]:
    """What the files themselves say about a call's scope (so no note has to be typed by hand to be true)."""
    ran, skipped = task_names(direct), direct["skipped"]
    notes = []
    # in run.py's order: --only-verifier filters the plan first, then --max-tasks cuts it
    if command_flag(device.get("command", ""), "--only-verifier") is not None:
        notes.append("--only-verifier: the plan held its verifier pairs only (no direct cells).")
    max_tasks = command_flag(device.get("command", ""), "--max-tasks")
    if max_tasks not in (None, "", "0"):
        notes.append(f"--max-tasks {max_tasks}: the plan was cut to its first {max_tasks} task(s) before the run.")
    text = f"{len(ran)} task(s) ran, {len(skipped)} skipped"
    if skipped:
        lefts = sorted({s["left_s"] for s in skipped})
        text += (f" by the time budget ({device.get('budget_s')} s; {lefts[0]:g} s left, under every remaining "
                 "task's estimate)" if len(lefts) == 1 else " by the time budget")
    notes.append(text + ".")
    if role == "attempt":
        notes.append("Recorded as an attempt only: nothing it wrote is a result, and no file of it is committed.")
    return notes


def collect(dest: str | Path, calls: Sequence[tuple[str, str | Path]], attempts: Sequence[tuple[str, str | Path]] = (),
            notes: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Copy each results call's files verbatim into ``dest/<call>/`` and write ``dest/provenance.json``.

    Entries of an existing ``dest/provenance.json`` for calls not named here are kept as they are (hand notes
    included), so adding a later call needs only that call's folder. Calls are listed in the order of their device
    time (``utc_time``), attempts included.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    notes = notes or {}
    named = {n for n, _ in (*calls, *attempts)}
    old = dest / "provenance.json"
    entries = ([e for e in json.loads(old.read_text())["calls"] if e["call"] not in named] if old.exists() else [])
    for role, group in (("results", calls), ("attempt", attempts)):
        for name, src in group:
            src = Path(src)
            device = json.loads((src / "provenance.json").read_text())
            direct = json.loads((src / "direct.json").read_text())
            entry: dict[str, Any] = {"call": name, "role": role, **{k: device.get(k) for k in DEVICE_FIELDS}}
            entry["date"] = str(device.get("utc_time", ""))[:10]
            entry["fla_dispatch_disabled"] = direct["fla"].get("dispatch_disabled")
            entry["guard_state"] = direct["fla"].get("guard_state")
            entry["oracle_device"] = direct["fla"].get("oracle_device")
            entry["tasks_run"] = task_names(direct)
            entry["tasks_skipped"] = direct["skipped"]
            entry["notes"] = auto_notes(role, device, direct) + list(notes.get(name, ()))
            entry["files"] = {}
            if role == "results":
                out = dest / name
                out.mkdir(parents=True, exist_ok=True)
                for f in sorted(p for p in src.iterdir() if p.is_file()):
                    if f.resolve() != (out / f.name).resolve():  # re-collecting a committed folder in place
                        shutil.copyfile(f, out / f.name)
                    entry["files"][f"{name}/{f.name}"] = sha256_file(out / f.name)
            entries.append(entry)
    entries.sort(key=lambda e: e["utc_time"] or "")
    doc = {"schema": SCHEMA, "experiment": "fla640", "collected_by": "lethe.foreign.fla640_results",
           "calls": entries}
    (dest / "provenance.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


# ----------------------------------------------------------------------------------------------------------
# loading and checking


def load(results_dir: str | Path) -> dict[str, Any]:
    """The provenance plus, per results call, its direct.json and (when present) its verdict rows."""
    from lethe.verifier.records import read_rows

    results_dir = Path(results_dir)
    prov = json.loads((results_dir / "provenance.json").read_text())
    calls = []
    for c in prov["calls"]:
        if c["role"] != "results":
            continue
        d = results_dir / c["call"]
        rows = read_rows(d / "verdicts.parquet") if (d / "verdicts.parquet").exists() else []
        calls.append({**c, "direct": json.loads((d / "direct.json").read_text()), "rows": rows})
    return {"provenance": prov, "calls": calls}


def validate(results_dir: str | Path) -> list[str]:
    """Every way the committed results break their schema, as messages (empty: valid)."""
    from lethe.verifier.records import validate as validate_row

    results_dir = Path(results_dir)
    errs: list[str] = []
    prov = json.loads((results_dir / "provenance.json").read_text())
    if prov.get("schema") != SCHEMA:
        errs.append(f"provenance schema {prov.get('schema')!r} != {SCHEMA}")
    names = [c.get("call") for c in prov.get("calls", [])]
    if len(set(names)) != len(names):
        errs.append(f"duplicate call names {names}")
    times = [c.get("utc_time") or "" for c in prov.get("calls", [])]
    if times != sorted(times):
        errs.append("calls are not in device-time order")
    for c in prov.get("calls", []):
        name = c.get("call")
        if c.get("role") not in ROLES:
            errs.append(f"{name}: role {c.get('role')!r} not in {ROLES}")
            continue
        missing = [k for k in (*DEVICE_FIELDS, "date", "tasks_run", "tasks_skipped", "notes", "files") if k not in c]
        if missing:
            errs.append(f"{name}: missing {missing}")
            continue
        if c["role"] == "attempt":
            if c["files"]:
                errs.append(f"{name}: an attempt commits no files")
            continue
        d = results_dir / name
        for rel, sha in c["files"].items():
            if not (results_dir / rel).is_file():
                errs.append(f"{name}: {rel} listed but absent")
            elif sha256_file(results_dir / rel) != sha:
                errs.append(f"{name}: {rel} differs from its recorded sha256")
        on_disk = {f"{name}/{p.name}" for p in d.iterdir()} if d.is_dir() else set()
        if on_disk != set(c["files"]):
            errs.append(f"{name}: files on disk {sorted(on_disk)} != listed {sorted(c['files'])}")
        if not (d / "direct.json").is_file() or not (d / "provenance.json").is_file():
            errs.append(f"{name}: a results call needs direct.json and provenance.json")
            continue
        device = json.loads((d / "provenance.json").read_text())
        if device.get("schema") != DEVICE_PROVENANCE_SCHEMA:
            errs.append(f"{name}: device provenance schema {device.get('schema')!r}")
        diff = [k for k in DEVICE_FIELDS if device.get(k) != c[k]]
        if diff:
            errs.append(f"{name}: provenance.json disagrees with the call's own provenance on {diff}")
        direct = json.loads((d / "direct.json").read_text())
        if direct.get("schema") != DIRECT_SCHEMA:
            errs.append(f"{name}: direct.json schema {direct.get('schema')!r} != {DIRECT_SCHEMA}")
        dmiss = [k for k in DIRECT_KEYS if k not in direct]
        if dmiss:
            errs.append(f"{name}: direct.json misses {dmiss}")
            continue
        if task_names(direct) != c["tasks_run"] or direct["skipped"] != c["tasks_skipped"]:
            errs.append(f"{name}: tasks_run/tasks_skipped disagree with direct.json")
        for i, cell in enumerate(direct["cells"]):
            cm = [k for k in CELL_KEYS if k not in cell]
            if cm:
                errs.append(f"{name}: cell {i} misses {cm}")
        rows_path = d / "verdicts.parquet"
        ids = [v["id"] for v in direct["verifier"]]
        if rows_path.exists():
            import pyarrow.parquet as pq

            from lethe.verifier.records import is_verdict_schema, read_rows

            if not is_verdict_schema(pq.read_schema(rows_path).remove_metadata()):
                errs.append(f"{name}: verdicts.parquet does not have the verdict arrow schema")
            rows = read_rows(rows_path)
            for r in rows:
                try:
                    validate_row(r)
                except ValueError as exc:
                    errs.append(f"{name}: verdict row {r.get('id')}: {exc}")
            if [r["id"] for r in rows if r["status"] != "harness_error"] != [
                    v["id"] for v in direct["verifier"] if v["status"] != "harness_error"]:
                errs.append(f"{name}: verdict rows and direct.json's verifier list name different pairs")
            if any(r["corpus"] != "fla640" for r in rows):
                errs.append(f"{name}: verdict rows outside corpus fla640")
        elif any(v["status"] != "harness_error" for v in direct["verifier"]):
            errs.append(f"{name}: direct.json lists verifier pairs {ids} but no verdicts.parquet")
    return errs


def _pairs(values: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for v in values:
        name, _, path = v.partition("=")
        if not name or not path:
            raise SystemExit(f"expected NAME=DIR, got {v!r}")
        out.append((name, path))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", required=True)
    ap.add_argument("--call", action="append", default=[], help="NAME=DIR of a call whose files are results")
    ap.add_argument("--attempt", action="append", default=[], help="NAME=DIR of a call recorded as an attempt only")
    ap.add_argument("--note", action="append", default=[], help="NAME=TEXT, a note on one call (repeatable)")
    args = ap.parse_args(argv)
    notes: dict[str, list[str]] = {}
    for name, text in _pairs(args.note):
        notes.setdefault(name, []).append(text)
    collect(args.dest, _pairs(args.call), _pairs(args.attempt), notes)
    errs = validate(args.dest)
    for e in errs:
        print("invalid:", e)
    return 1 if errs else 0


if __name__ == "__main__":
    raise SystemExit(main())
