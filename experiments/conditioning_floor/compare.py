"""Before/after table of the conditioning floor (CPU measurement, thin driver).

Reads verdict rows (JSON lines, ``lethe.verdict`` rows as the trusted runner's checkpoint or the red-team
re-verification writes them) of the same kernels verified by the base commit's verifier ("before") and by this
branch's ("after"), and writes, per kernel, each side's status, failing gates and wall seconds, plus the gates
whose status changed, to ``<out>/<name>.json``; ``provenance.json`` beside it.

    python experiments/conditioning_floor/compare.py --name trusted_subset --before B.jsonl --after A.jsonl \
        --out results/conditioning_floor --base-commit 1960bd6 --command "..."
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from lethe import provenance


def read_rows(path: str) -> dict[str, dict]:
    """Rows by id (strict profile only; a later line wins, as in the checkpoint)."""
    rows = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            r = r.get("row", r)
            if r.get("profile", "strict") == "strict":
                rows[r["id"]] = r
    return rows


# The trusted runner's progress line: "[i/n] <id>: <status> ... (<wall> s, total <t> s)".
PROGRESS = re.compile(r"^\[\d+/\d+\] (\S+): .*\((\d+) s, total \d+ s\)$")


def read_walls(log: str | None) -> dict[str, float]:
    """Wall seconds per kernel (reference + candidate + grading) from a trusted-runner log; {} without one."""
    if not log:
        return {}
    walls = {}
    for line in Path(log).read_text().splitlines():
        m = PROGRESS.match(line.strip())
        if m:
            walls[m.group(1)] = float(m.group(2))
    return walls


def side(r: dict | None, wall: float | None = None) -> dict | None:
    if r is None:
        return None
    return {"status": r["status"], "error": (r.get("error") or "")[:300], "seconds": r.get("seconds"),
            "wall_s": wall,
            "fails": sorted(g for g, v in r.get("gates", {}).items() if v["status"] in ("fail", "error")),
            "gates": {g: v["status"] for g, v in sorted(r.get("gates", {}).items())}}


def compare(before: dict[str, dict], after: dict[str, dict], walls_before: dict | None = None,
            walls_after: dict | None = None) -> list[dict]:
    out = []
    for kid in sorted(set(before) | set(after)):
        b = side(before.get(kid), (walls_before or {}).get(kid))
        a = side(after.get(kid), (walls_after or {}).get(kid))
        changed = {}
        if a and b:
            for g in sorted(set(a["gates"]) | set(b["gates"])):
                if a["gates"].get(g) != b["gates"].get(g):
                    changed[g] = [b["gates"].get(g), a["gates"].get(g)]
        out.append({"id": kid, "before": b, "after": a, "changed": changed})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--before-log", default=None)
    ap.add_argument("--after-log", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--base-commit", required=True)
    ap.add_argument("--command", default="")
    a = ap.parse_args(argv)
    rows = compare(read_rows(a.before), read_rows(a.after), read_walls(a.before_log), read_walls(a.after_log))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.name}.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    provenance.write(out / f"{a.name}.provenance.json", command=a.command or None, base_commit=a.base_commit,
                     profile="strict", device="cpu", n_kernels=len(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
