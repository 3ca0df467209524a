"""A corpus audited over several device calls: which kernels a call takes, and how its results join the others.

One H200 call (ten minutes, thirty per session) builds, judges and audits only a slice of a corpus of hundreds of
CUDA kernels. The slices follow one fixed order, SHA-256 of the kernel id (:func:`sha_order`), so any prefix is a
sample spread over levels, models and operator classes, and a call simply takes the next kernels that have no
committed rows yet (:func:`next_slice`). A call's wall budget can end its builds (:func:`unbuilt`: those kernels
wait for the next call) or its audit (``lethe.audit.batch.gather_finished`` keeps the finished kernels). Its
results then join the committed ones: verdict rows by (id, profile) (:func:`merge_rows`), per-kernel lines by id
(:func:`union_lines`), the newest judgement of a kernel replacing an older one, with one index line per call
carrying its provenance and :func:`throughput`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping


def sha_order(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Items in SHA-256-of-id order: independent of levels, models and file names."""
    return sorted(items, key=lambda it: hashlib.sha256(str(it["id"]).encode()).hexdigest())


def audited_ids(rows_path: str | Path | None) -> set[str]:
    """Kernel ids with committed verdict rows (an earlier call audited them); empty when there is no file."""
    if not rows_path or not Path(rows_path).is_file():
        return set()
    import pyarrow.parquet as pq

    return {str(i) for i in pq.read_table(rows_path, columns=["id"]).column("id").to_pylist()}


def next_slice(items: Iterable[Mapping[str, Any]], n: int, done: set[str]) -> list[Mapping[str, Any]]:
    """The next ``n`` items with a candidate, in :func:`sha_order`, that ``done`` lacks."""
    return [it for it in sha_order([it for it in items if it.get("candidate")]) if str(it["id"]) not in done][:n]


def parse_backends(text: str) -> tuple[str, ...] | None:
    """A ``--backends`` value (comma-separated detected backends, e.g. ``triton``) as a tuple in the order given,
    or None when it names none. ValueError for a name the corpus manifests never record
    (:data:`lethe.corpora.kbruns.BACKENDS`), so a typo is not an empty slice."""
    from lethe.corpora.kbruns import BACKENDS

    names = tuple(dict.fromkeys(b.strip() for b in text.split(",") if b.strip()))
    unknown = [b for b in names if b not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {', '.join(unknown)}; detected backends are {', '.join(BACKENDS)}")
    return names or None


def detected_backends(manifest: str | Path) -> dict[str, str | None]:
    """id -> ``backend_detected`` of a corpus manifest (``run/manifest.jsonl`` of lethe.corpora.kbruns)."""
    with open(manifest, encoding="utf-8") as fh:
        return {str(e["id"]): e.get("backend_detected") for e in map(json.loads, filter(str.strip, fh))}


def select_backends(items: Iterable[Mapping[str, Any]], detected: Mapping[str, str | None],
                    backends: Iterable[str]) -> list[Mapping[str, Any]]:
    """The items whose detected backend is one of ``backends``, in their given order (a Triton-only slice
    needs no extension build). ValueError for an unknown backend name, or when an item has no recorded
    backend (a manifest that does not record them cannot be sliced by backend)."""
    wanted = set(parse_backends(",".join(backends)) or ())
    items = list(items)
    missing = [str(it["id"]) for it in items if detected.get(str(it["id"])) is None]
    if missing:
        raise ValueError(f"no detected backend recorded for {len(missing)} kernel(s), e.g. {missing[0]}")
    return [it for it in items if detected[str(it["id"])] in wanted]


def finished_builds(work: str | Path) -> set[str]:
    """Ids with a build outcome (built or failed) in a ``lethe audit`` work folder's build logs."""
    out = set()
    for f in sorted(Path(work).glob("builds-*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                out.add(str(json.loads(line)["id"]))
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line of a killed worker
    return out


def unbuilt(cuda_items: Iterable[Mapping[str, Any]], work: str | Path) -> list[str]:
    """The CUDA candidates whose extension build has no outcome: the build budget ran out before they started.
    A failed build is an outcome (a finding: the kernel does not compile), not unbuilt."""
    have = finished_builds(work)
    return sorted(str(it["id"]) for it in cuda_items if str(it["id"]) not in have)


def id_order(kid: str) -> tuple:
    from lethe.kernelbench.real import id_key

    return id_key(kid)


def union_lines(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Per-kernel lines keyed by ``id``, the new line winning, in KernelBench id order."""
    by_id = {str(r["id"]): r for r in old}
    by_id.update({str(r["id"]): r for r in new})
    return [by_id[i] for i in sorted(by_id, key=id_order)]


def write_lines(path: str | Path, lines: Iterable[Mapping[str, Any]]) -> None:
    """JSON lines written whole or not at all (a temporary file renamed over the old one): an ingest that dies
    half-way leaves the committed union as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in lines), encoding="utf-8")
    os.replace(tmp, path)


def merge_rows(old: list[dict], new: list[dict]) -> list[dict]:
    """Verdict rows keyed by (id, profile): a kernel in ``new`` replaces all of its old rows (a kernel audited
    again is judged by its newest call only, never half old, half new); ordered by id, then profile."""
    fresh = {str(r["id"]) for r in new}
    by_key = {(str(r["id"]), r["profile"]): r for r in old if str(r["id"]) not in fresh}
    by_key.update({(str(r["id"]), r["profile"]): r for r in new})
    return [by_key[k] for k in sorted(by_key, key=lambda k: (id_order(k[0]), k[1]))]


def _arg(cmd: list[str], flag: str) -> int | None:
    try:
        return int(cmd[cmd.index(flag) + 1])
    except (ValueError, IndexError):
        return None


def throughput(state: Mapping[str, Any], built: int, audited: int, judged: int) -> dict[str, Any]:
    """Kernels per hour of each stage of one call, from the driver's step records (``state.json``: each step's
    command and wall time). An audit stopped by the call's limit has no wall time; ``wall_s_to_last_row`` (its
    start to its last checkpoint write) counts the kernels it finished."""
    def stage(name: str, kernels: int, wall, flag: str) -> dict[str, Any]:
        st = state.get(name, {})
        return {"kernels": kernels, "wall_s": wall, "workers": _arg(list(st.get("cmd", [])), flag),
                "kernels_per_hour": round(3600 * kernels / wall, 1) if wall and kernels else None}

    a = state.get("audit", {})
    return {"build": stage("build", built, state.get("build", {}).get("wall_s"), "--build-workers"),
            "kernelbench_real": stage("kb_real", judged, state.get("kb_real", {}).get("wall_s"), "--workers"),
            "audit_three_profiles": stage("audit", audited, a.get("wall_s") or a.get("wall_s_to_last_row"),
                                          "--workers")}
