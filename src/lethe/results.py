"""Canonical experiment results: one current result per experiment, the history in an index.

An experiment's folder ``results/<experiment>/`` holds

* ``<result>.json`` -- the current result: the runs that measure the code as it is (usually one; more when a
  device session split one measurement over several calls, or a later run re-measured only part of an earlier
  one), as ``{"schema": RUNS_SCHEMA, "experiment": ..., "runs": [{"run", "result", "provenance"}, ...]}``,
  oldest run first, each with the result document and the provenance its run wrote;
* ``provenance.json`` -- the newest current run's provenance, as written on the device;
* ``history.jsonl`` -- one line per run ever committed (current and superseded): its name, commit, time,
  command, status, and for a superseded run the files it had and the commit whose tree still holds them
  (``git show <commit>:<path>`` recovers each).

Renderers read the current result through :func:`load_runs`; nothing globs run folders. :func:`fold` builds the
three files from run folders (what a new device run goes through: ``python -m lethe.results fold``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

RUNS_SCHEMA = "lethe.results.runs/1"
HISTORY = "history.jsonl"
PROVENANCE = "provenance.json"
#: provenance fields copied into a history line
HISTORY_FIELDS = ("git_sha", "utc_time", "command", "gpu", "driver", "torch", "triton")


def load_runs(path: str | Path) -> list[tuple[str, dict, dict]]:
    """(run name, result document, provenance) of each run of a current-result file, oldest first."""
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != RUNS_SCHEMA:
        raise ValueError(f"{path}: not a current-result file (schema {doc.get('schema')!r}, expected {RUNS_SCHEMA})")
    return [(r["run"], r["result"], r["provenance"]) for r in doc["runs"]]


def load_history(folder: str | Path) -> list[dict]:
    """The history lines of an experiment folder, in the order written (oldest run first)."""
    p = Path(folder) / HISTORY
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def history_line(name: str, provenance: dict, status: str, files: Sequence[str] = (), commit: str | None = None,
                 note: str = "") -> dict:
    """One history entry: ``status`` "current" (its data is in the current result) or "superseded" (its
    ``files`` are recoverable from ``commit``'s tree)."""
    line: dict[str, Any] = {"run": name, "status": status, **{k: provenance.get(k) for k in HISTORY_FIELDS}}
    if status == "superseded":
        line["files"] = list(files)
        line["in_commit"] = commit
    if note:
        line["note"] = note
    return line


def fold(folder: str | Path, result_name: str, experiment: str, current: Sequence[tuple[str, Path | None]],
         superseded: Sequence[tuple[str, Path]] = (), commit: str | None = None, notes: dict | None = None,
         repo_root: str | Path = ".") -> dict:
    """Write an experiment's current result, provenance and history from run folders.

    ``current`` and ``superseded``: (run name, folder holding ``result_name`` and ``provenance.json``), oldest
    first; a current run given with folder None is kept from the existing current result. A run of the existing
    current result that is not named in ``current`` becomes superseded, its files being the current-result file
    at ``commit``. Lines of the existing history whose run is not named again are kept. ``commit``: a commit
    whose tree holds the superseded files (recorded, so ``git show`` finds them after they are deleted);
    ``notes``: {run name: why it is current or superseded}. Returns the current-result document."""
    folder, repo_root, notes = Path(folder), Path(repo_root), notes or {}
    if not current:
        raise ValueError("an experiment needs at least one current run")
    existing = {n: (res, prov) for n, res, prov in load_runs(folder / result_name)} if (
        folder / result_name).exists() else {}
    keep = {n for n, _ in current}
    named = {n for n, _ in [*current, *superseded]} | set(existing)
    lines = [h for h in load_history(folder) if h["run"] not in named]
    runs = []
    for name, (_, prov) in existing.items():
        if name not in keep:
            rel = str((folder / result_name).resolve().relative_to(repo_root.resolve()))
            lines.append(history_line(name, prov, "superseded", [rel], commit, notes.get(name, "")))
    for name, d in superseded:
        prov = json.loads((Path(d) / PROVENANCE).read_text())
        files = sorted(str(p.resolve().relative_to(repo_root.resolve())) for p in Path(d).rglob("*") if p.is_file())
        lines.append(history_line(name, prov, "superseded", files, commit, notes.get(name, "")))
    for name, d in current:
        if d is None:
            if name not in existing:
                raise ValueError(f"run {name!r} is not in the current result to be kept")
            result, prov = existing[name]
        else:
            prov = json.loads((Path(d) / PROVENANCE).read_text())
            result = json.loads((Path(d) / result_name).read_text())
        runs.append({"run": name, "result": result, "provenance": prov})
        lines.append(history_line(name, prov, "current", note=notes.get(name, "")))
    lines.sort(key=lambda h: str(h.get("utc_time") or ""))
    doc = {"schema": RUNS_SCHEMA, "experiment": experiment, "runs": runs}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / result_name).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    (folder / PROVENANCE).write_text(json.dumps(runs[-1]["provenance"], indent=1, sort_keys=True) + "\n")
    (folder / HISTORY).write_text("".join(json.dumps(h, sort_keys=True) + "\n" for h in lines))
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lethe.results", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fold", help="write an experiment's current result and history from run folders")
    f.add_argument("folder", help="results/<experiment>")
    f.add_argument("--result", required=True, help="the result file each run folder holds, e.g. profile.json")
    f.add_argument("--experiment", required=True)
    f.add_argument("--current", action="append", default=[], metavar="NAME=DIR",
                   help="oldest first; NAME= (no folder) keeps that run of the existing current result")
    f.add_argument("--superseded", action="append", default=[], metavar="NAME=DIR")
    f.add_argument("--commit", default=None, help="a commit whose tree holds the superseded folders")
    a = ap.parse_args(argv)
    pairs = lambda xs: [(n, Path(d) if d else None) for n, _, d in (x.partition("=") for x in xs)]  # noqa: E731
    fold(a.folder, a.result, a.experiment, pairs(a.current), pairs(a.superseded), a.commit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
