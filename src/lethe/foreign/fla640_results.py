"""The committed results of the fla #640 experiment (``results/foreign/fla640/``): collect them from device calls,
load them, and check them against their schema.

A device call of ``experiments/fla640/run.py`` writes ``direct.json`` (schema ``lethe.fla640.direct/1``), a
``provenance.json`` (``lethe.provenance/1``), ``verdicts.parquet`` when a verifier pair ran, and the call's stdout
log. Device time comes in short calls, so one result is spread over several of them and some calls end with
nothing run. The folder follows the house layout for results (docs/CONVENTIONS.md, :mod:`lethe.results`), with
run folders because a run's files are more than one JSON document:

* ``fla640.json`` (schema :data:`SCHEMA`; config ``results.fla640``, what the render rule reads) -- the current
  result: every call in device-time order with its commit, command, device, the tasks it ran and skipped, and
  notes; a *results* call names its folder and the sha256 of each of its files, a call that ran nothing is an
  *attempt* (no files), so a reader sees every call that was made without mistaking an empty one for a result;
* ``runs/<what it holds>/`` -- each results call's files verbatim, in a folder named by the tasks it ran
  (:func:`run_folder_name`, e.g. ``runs/verify_gdn_K64_bfloat16_T64``), never by the device call;
* ``provenance.json`` -- the newest results call's own provenance, as written on the device;
* ``history.jsonl`` -- one line per call (:func:`lethe.results.history_line`; status ``current`` for a results
  call, with its folder, ``attempt`` for one that ran nothing).

    python -m lethe.foreign.fla640_results --dest results/foreign/fla640 \\
        --call call2=/tmp/fla640_runs/call2 --call call4=/tmp/fla640_runs/call4 \\
        --attempt call3=/tmp/fla640_runs/call3 --note "call4=..."
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lethe.foreign import fla640 as F
from lethe.results import HISTORY, PROVENANCE, history_line, load_history

SCHEMA = "lethe.fla640.results/2"
RESULT = "fla640.json"
RUNS = "runs"
DIRECT_SCHEMA = F.DIRECT_SCHEMA
DEVICE_PROVENANCE_SCHEMA = "lethe.provenance/1"
ROLES = ("results", "attempt")
# history.jsonl status of a call by its role
HISTORY_STATUS = {"results": "current", "attempt": "attempt"}
# Device-provenance fields copied into each call's entry (the rest stays in the call's own provenance.json).
DEVICE_FIELDS = ("git_sha", "command", "utc_time", "gpu", "capability", "driver", "cuda_runtime", "torch", "triton",
                 "fla", "python", "platform", "budget_s", "seconds", "quick", "seed")
DIRECT_KEYS = ("schema", "fla", "thresholds", "shapes", "cells", "verifier", "skipped", "comparisons", "outcome")
CELL_KEYS = ("op", "K", "BK_expected", "dtype", "T")


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def task_names(direct: Mapping[str, Any]) -> list[str]:
    """The tasks a call ran, named as run.py's log names them (direct cells first, then verifier pairs)."""
    return [F.task_name({"kind": "direct", **c}) for c in direct["cells"]] + [
        F.task_name({"kind": "verify", "id": v["id"]}) for v in direct["verifier"]]


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


def _slug(kind: str, ops, Ks, dtypes, Ts) -> str:
    j = lambda xs: "-".join(str(x) for x in sorted(set(xs)))  # noqa: E731
    return f"{kind}_{j(ops)}_K{'-K'.join(str(k) for k in sorted(set(Ks)))}_{j(dtypes)}_T{j(Ts)}"


def run_folder_name(direct: Mapping[str, Any]) -> str:
    """The folder name of a results call, from what its ``direct.json`` holds: ``direct_<ops>_K<Ks>_<dtypes>_T<Ts>``
    for its direct cells and ``verify_<ops>_K<Ks>_<compute dtypes>_T<Ts>`` for its verifier pairs, joined by
    ``__`` (each list sorted, values joined by ``-``), e.g. ``direct_gdn_K64-K128_bfloat16_T256``."""
    cells, pairs = direct["cells"], [F.parse_pair(v["id"]) for v in direct["verifier"]]
    parts = []
    if cells:
        parts.append(_slug("direct", [c["op"] for c in cells], [c["K"] for c in cells], [c["dtype"] for c in cells],
                           [c["T"] for c in cells]))
    if pairs:
        parts.append(_slug("verify", [p.op for p in pairs], [p.K for p in pairs],
                           [p.compute_dtype or "native" for p in pairs], [p.T for p in pairs]))
    if not parts:
        raise ValueError("a results call that ran no task holds nothing: record it as an attempt")
    return "__".join(parts)


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3``, ... when another call's folder already holds the same tasks."""
    n, out = 1, name
    while out in taken:
        n += 1
        out = f"{name}_{n}"
    return out


def write_result(dest: str | Path, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Write ``dest``'s current result (:data:`RESULT`), ``provenance.json`` (the newest results call's own, byte
    for byte) and ``history.jsonl`` (one line per call) from the call entries; returns the current result."""
    dest = Path(dest)
    entries = sorted(entries, key=lambda e: e["utc_time"] or "")
    doc = {"schema": SCHEMA, "experiment": "fla640", "collected_by": "lethe.foreign.fla640_results",
           "calls": list(entries)}
    (dest / RESULT).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    results = [e for e in entries if e["role"] == "results"]
    if results:
        shutil.copyfile(dest / results[-1]["folder"] / PROVENANCE, dest / PROVENANCE)
    lines = []
    for e in entries:
        line = history_line(e["call"], e, HISTORY_STATUS[e["role"]],
                            note="ran no task: nothing committed" if e["role"] == "attempt" else "")
        if e["role"] == "results":
            line["folder"] = e["folder"]
        lines.append(line)
    (dest / HISTORY).write_text("".join(json.dumps(h, sort_keys=True) + "\n" for h in lines))
    return doc


def collect(dest: str | Path, calls: Sequence[tuple[str, str | Path]], attempts: Sequence[tuple[str, str | Path]] = (),
            notes: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """Copy each results call's files verbatim into ``dest/runs/<what it holds>/`` and write the current result,
    ``provenance.json`` and ``history.jsonl`` (:func:`write_result`).

    Entries of an existing current result for calls not named here are kept as they are (hand notes included),
    so adding a later call needs only that call's folder. Calls are listed in the order of their device time
    (``utc_time``), attempts included.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    notes = notes or {}
    named = {n for n, _ in (*calls, *attempts)}
    old = dest / RESULT
    entries = ([e for e in json.loads(old.read_text())["calls"] if e["call"] not in named] if old.exists() else [])
    taken = {e["folder"] for e in entries if e.get("folder")}
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
                folder = f"{RUNS}/{_unique(run_folder_name(direct), {t.split('/', 1)[1] for t in taken})}"
                taken.add(folder)
                entry["folder"] = folder
                out = dest / folder
                out.mkdir(parents=True, exist_ok=True)
                for f in sorted(p for p in src.iterdir() if p.is_file()):
                    if f.resolve() != (out / f.name).resolve():  # re-collecting a committed folder in place
                        shutil.copyfile(f, out / f.name)
                    entry["files"][f"{folder}/{f.name}"] = sha256_file(out / f.name)
            entries.append(entry)
    return write_result(dest, entries)


# ----------------------------------------------------------------------------------------------------------
# loading and checking


def load(result: str | Path) -> dict[str, Any]:
    """The current result (``result``: its :data:`RESULT` file, as config ``results.fla640`` names it) as
    ``{"provenance": <the current result>, "calls": [...]}``: per results call its entry, its direct.json and
    (when present) its verdict rows."""
    from lethe.verifier.records import read_rows

    result = Path(result)
    prov = json.loads(result.read_text())
    calls = []
    for c in prov["calls"]:
        if c["role"] != "results":
            continue
        d = result.parent / c["folder"]
        rows = read_rows(d / "verdicts.parquet") if (d / "verdicts.parquet").exists() else []
        calls.append({**c, "direct": json.loads((d / "direct.json").read_text()), "rows": rows})
    return {"provenance": prov, "calls": calls}


def validate(result: str | Path) -> list[str]:
    """Every way the committed results (``result``: the current-result file) break their schema, as messages
    (empty: valid)."""
    from lethe.verifier.records import validate as validate_row

    result = Path(result)
    results_dir = result.parent
    errs: list[str] = []
    prov = json.loads(result.read_text())
    if prov.get("schema") != SCHEMA:
        errs.append(f"current result schema {prov.get('schema')!r} != {SCHEMA}")
    names = [c.get("call") for c in prov.get("calls", [])]
    if len(set(names)) != len(names):
        errs.append(f"duplicate call names {names}")
    times = [c.get("utc_time") or "" for c in prov.get("calls", [])]
    if times != sorted(times):
        errs.append("calls are not in device-time order")
    folders = [c.get("folder") for c in prov.get("calls", []) if c.get("role") == "results"]
    runs = results_dir / RUNS
    on_disk_runs = {f"{RUNS}/{p.name}" for p in runs.iterdir()} if runs.is_dir() else set()
    if on_disk_runs != set(folders):
        errs.append(f"run folders on disk {sorted(on_disk_runs)} != the results calls' {sorted(map(str, folders))}")
    others = {p.name for p in results_dir.iterdir()} - {RESULT, PROVENANCE, HISTORY, RUNS}
    if others:
        errs.append(f"files outside the layout: {sorted(others)}")
    history = [(h.get("run"), h.get("status")) for h in load_history(results_dir)]
    expect = [(c.get("call"), HISTORY_STATUS.get(c.get("role"))) for c in prov.get("calls", [])]
    if history != expect:
        errs.append(f"history.jsonl lists {history}, the current result {expect}")
    if folders and all(folders) and (results_dir / folders[-1] / PROVENANCE).is_file() and (
            not (results_dir / PROVENANCE).is_file()
            or sha256_file(results_dir / PROVENANCE) != sha256_file(results_dir / folders[-1] / PROVENANCE)):
        errs.append("provenance.json is not the newest results call's own provenance")
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
            if c["files"] or c.get("folder"):
                errs.append(f"{name}: an attempt commits no files")
            continue
        if not c.get("folder"):
            errs.append(f"{name}: a results call names its folder")
            continue
        d = results_dir / c["folder"]
        for rel, sha in c["files"].items():
            if not (results_dir / rel).is_file():
                errs.append(f"{name}: {rel} listed but absent")
            elif sha256_file(results_dir / rel) != sha:
                errs.append(f"{name}: {rel} differs from its recorded sha256")
        on_disk = {f"{c['folder']}/{p.name}" for p in d.iterdir()} if d.is_dir() else set()
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
            errs.append(f"{name}: the current result disagrees with the call's own provenance on {diff}")
        direct = json.loads((d / "direct.json").read_text())
        if direct.get("schema") != DIRECT_SCHEMA:
            errs.append(f"{name}: direct.json schema {direct.get('schema')!r} != {DIRECT_SCHEMA}")
        dmiss = [k for k in DIRECT_KEYS if k not in direct]
        if dmiss:
            errs.append(f"{name}: direct.json misses {dmiss}")
            continue
        want = run_folder_name(direct)
        if not re.fullmatch(rf"{RUNS}/{re.escape(want)}(_\d+)?", c["folder"]):
            errs.append(f"{name}: folder {c['folder']} is not named by what it holds ({RUNS}/{want})")
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
    errs = validate(Path(args.dest) / RESULT)
    for e in errs:
        print("invalid:", e)
    return 1 if errs else 0


if __name__ == "__main__":
    raise SystemExit(main())
