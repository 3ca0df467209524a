"""Run the verifier over one shard of a corpus, resumably.

Why row-level checkpoints: an audit of thousands of kernels runs for hours and dies for reasons that have
nothing to do with any kernel (preemption, a node reboot, a killed Snakemake job). Every finished verdict is
appended to a JSONL checkpoint and fsynced before the next kernel starts, so a restart skips exactly the
finished (id, profile) pairs and loses at most the kernel that was in flight. A line cut short by a kill is
detected and truncated away; any other unreadable line (garbage, a ``{}``, a run of NUL bytes that a crash
can leave on some file systems) is skipped with a warning and never costs the valid rows around it. The
shard's parquet is written to a temporary file and renamed, so a reader never sees half a table.

Why attempt markers: a kernel that kills the shard process itself (SIGKILL, a hard abort in the verifier's
own process) would kill it again on every resume, and the audit would never finish. Before each
verification the shard appends an attempt marker (fsynced) to a sidecar file beside the checkpoint
(``<checkpoint>.attempts``); on resume, an item that was started ``max_attempts`` times and never got a row
gets a ``crash`` row saying so instead of another attempt. It costs its own row only.

The verifier is injected (``verify_fn``) so that tests and CI can use :func:`lethe.audit.testing.fake_verify`;
by default it is ``lethe.verifier.api.verify``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

VerifyFn = Callable[..., Mapping[str, Any]]

NO_CANDIDATE = "no_candidate"
HARNESS_ERROR = "harness_error"
TIMEOUT = "timeout"  # lethe.verifier.records' name for a candidate that ran out of time
# Seconds the shard waits beyond the verifier's own timeout before it gives up on a call: the verifier is
# expected to enforce timeout_s itself (its sandbox kills the candidate); this is the backstop.
GRACE_S = 30.0
# Attempts after which an item that keeps taking the shard process down with it gets a crash row.
MAX_ATTEMPTS = 2
CRASH = "crash"


def default_verify() -> VerifyFn:
    from lethe.verifier.api import verify  # imported late: the shard runner must work without it in tests

    return verify


def resolve(spec: str | None) -> VerifyFn:
    """``module:function`` -> callable; None -> the real verifier."""
    if not spec:
        return default_verify()
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


def row_problem(obj: Any) -> str | None:
    """Why a decoded checkpoint line is not a row the shard can resume from, or None when it is.

    A resume keys rows by (id, profile), compares ``sources``, ``seed`` and ``environment`` with the item,
    and writes every row to the shard's parquet; anything that would break one of those steps (a ``{}``, a
    list, a non-integer seed, gates that are not a mapping, a field of the wrong type for the parquet
    schema) is not a row."""
    if not isinstance(obj, dict):
        return f"not a JSON object ({type(obj).__name__})"
    for k in ("id", "profile", "status"):
        v = obj.get(k)
        if isinstance(v, bool) or not isinstance(v, (str, int)) or v == "":
            return f"field {k!r} missing or not a string"
    if not isinstance(obj["profile"], str) or not isinstance(obj["status"], str):
        return "profile and status must be strings"
    seed = obj.get("seed", 0)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        return "seed is not an integer"
    for k in ("sources", "environment", "error", "corpus", "device"):
        if obj.get(k) is not None and not isinstance(obj[k], str):
            return f"field {k!r} is not a string"
    if obj.get("gates") is not None and not isinstance(obj["gates"], dict):
        return "gates is not a mapping"
    return None


def _fits_schema(rows: list[dict[str, Any]]) -> list[str | None]:
    """Per row, why it cannot be written with the shard's parquet schema (None when it can). One table
    conversion for the common all-valid case; row by row only when that fails."""
    import pyarrow as pa

    schema = _arrow_schema()

    def convert(batch: list[dict[str, Any]]) -> None:
        full = [complete_row(r) for r in batch]
        pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in full], schema=schema)

    try:
        convert(rows)
        return [None] * len(rows)
    except Exception:  # noqa: BLE001 - find the culprits below
        pass
    out: list[str | None] = []
    for r in rows:
        try:
            convert([r])
            out.append(None)
        except Exception as exc:  # noqa: BLE001 - any conversion failure makes it unusable
            out.append(f"does not fit the verdict schema: {type(exc).__name__}: {str(exc)[:200]}")
    return out


def _scan_lines(path: Path) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """Decoded JSON lines of a JSONL file as (line number, value), and the lines that did not decode as
    (line number, why). A torn last line (no newline: the process was killed mid-write) is cut off the file,
    so the next append starts on a fresh line; nothing else is ever removed from the file."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(end)
            fh.flush()
            os.fsync(fh.fileno())
        data = data[:end]
    good: list[tuple[int, Any]] = []
    bad: list[tuple[int, str]] = []
    for no, line in enumerate(data.split(b"\n")[:-1], start=1):
        # NUL bytes are never part of a JSON text (json.dumps escapes them); a crash can leave runs of them
        # where a write was lost, sometimes in front of a line that was written after it.
        text = line.strip(b"\0 \t\r")
        if not text:
            if line:
                bad.append((no, "only NUL bytes or blanks"))
            continue
        try:
            good.append((no, json.loads(text)))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            bad.append((no, f"not JSON ({exc.__class__.__name__})"))
    return good, bad


def read_checkpoint(path: str | os.PathLike[str], *, skipped: list[tuple[int, str]] | None = None
                    ) -> list[dict[str, Any]]:
    """Finished rows of a checkpoint, in file order. A torn last line (process killed mid-write) is cut off
    the file; every other line that is not a valid row (see :func:`row_problem`) is skipped with a warning
    and, when ``skipped`` is given, recorded there as (line number, why). Never raises for bad content."""
    path = Path(path)
    if not path.exists():
        return []
    decoded, bad = _scan_lines(path)
    cands: list[tuple[int, dict[str, Any]]] = []
    for no, obj in decoded:
        why = row_problem(obj)
        if why is None:
            cands.append((no, obj))
        else:
            bad.append((no, why))
    rows = []
    for (no, obj), why in zip(cands, _fits_schema([o for _, o in cands]) if cands else [], strict=True):
        if why is None:
            rows.append(obj)
        else:
            bad.append((no, why))
    if bad:
        bad.sort()
        if skipped is not None:
            skipped.extend(bad)
        shown = "; ".join(f"line {no}: {why}" for no, why in bad[:5])
        warnings.warn(f"{path}: skipped {len(bad)} checkpoint line(s) that are not verdict rows ({shown}"
                      f"{'; ...' if len(bad) > 5 else ''})", RuntimeWarning, stacklevel=2)
    return rows


def attempts_path(checkpoint: str | os.PathLike[str]) -> Path:
    """The sidecar file of attempt markers beside a checkpoint."""
    checkpoint = Path(checkpoint)
    return checkpoint.with_name(checkpoint.name + ".attempts")


def read_attempts(checkpoint: str | os.PathLike[str]) -> dict[str, int]:
    """How many times each attempt key (:func:`attempt_key`) was started, from the sidecar file; lines that
    are not markers are ignored (the file only ever serves to stop retrying)."""
    path = attempts_path(checkpoint)
    if not path.exists():
        return {}
    counts: dict[str, int] = {}
    for _, obj in _scan_lines(path)[0]:
        if isinstance(obj, dict) and isinstance(obj.get("key"), str):
            counts[obj["key"]] = counts.get(obj["key"], 0) + 1
    return counts


def _verifier_digest() -> str:
    try:
        from lethe.verifier.api import code_digest
    except Exception:  # noqa: BLE001 - a shard with a stand-in verifier runs without the real one
        return ""
    return code_digest()


def attempt_key(item: Mapping[str, Any], profile: str, *, seed: int, code: str) -> str:
    """What an attempt marker counts: the same kernel (id and both sources), profile, seed and verifier code.
    A change to any of these is a new question, so earlier deaths do not count against it."""
    blob = json.dumps([str(item["id"]), profile, item_sources(item), int(seed), code], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _append(fh, row: Mapping[str, Any]) -> None:
    fh.write(json.dumps(row, sort_keys=True, default=str) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _guarded(verify_fn: VerifyFn, timeout_s: float, **kwargs: Any) -> dict[str, Any]:
    """Call the verifier; a verifier that overstays its own timeout yields a timeout row, not a stuck shard.

    The call runs in a daemon thread: a hung call is abandoned (it cannot block the shard's exit, which a
    ThreadPoolExecutor worker would, since those are joined at interpreter shutdown).
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["row"] = dict(verify_fn(timeout_s=timeout_s, **kwargs))
        except Exception as exc:  # noqa: BLE001 - any verifier bug must cost one row, never the shard
            box["error"] = traceback.format_exception_only(type(exc), exc)[-1].strip()

    worker = threading.Thread(target=target, name=f"verify-{kwargs.get('kernel_id')}", daemon=True)
    worker.start()
    worker.join(timeout_s + GRACE_S if timeout_s else None)
    if worker.is_alive():
        return {"status": TIMEOUT, "error": f"no verdict within {timeout_s + GRACE_S:.0f} s (shard backstop)"}
    if "error" in box:
        return {"status": HARNESS_ERROR, "error": box["error"]}
    return box["row"]


def _sha(s: str | None) -> str:
    return hashlib.sha256((s or "").encode()).hexdigest()


def item_sources(item: Mapping[str, Any]) -> dict[str, str]:
    """The content hashes a verdict row records (lethe.verifier's ``sources`` field) for this item."""
    return {"ref_sha256": _sha(item.get("reference")), "cand_sha256": _sha(item.get("candidate"))}


def still_valid(row: Mapping[str, Any], sources: Mapping[str, str], *, seed: int, device: str) -> bool:
    """True when a checkpointed row was produced for the same reference, candidate, seed, device and verifier code.

    Resuming by id alone would keep a stale verdict after the corpus or the seed changed; the row's own
    ``sources`` hashes say which kernel it judged.
    """
    try:
        got = json.loads(row.get("sources") or "{}")
    except (TypeError, ValueError):
        return False
    if not isinstance(got, dict) or any(got.get(k) != v for k, v in sources.items()):
        return False
    try:
        if int(row.get("seed", -1)) != int(seed):
            return False
    except (TypeError, ValueError):
        return False
    if not _same_verifier_code(row):
        return False
    return device == "auto" or row.get("device") in (device, "", None)


def _same_verifier_code(row: Mapping[str, Any]) -> bool:
    """A row graded by other verifier code is stale (the gates or tolerances may have changed since). Rows
    without a recorded digest (stand-in verifiers, harness errors) are judged by sources and seed alone."""
    try:
        recorded = json.loads(row.get("environment") or "{}").get("verifier_code")
    except (TypeError, ValueError, AttributeError):
        return True
    if not recorded:
        return True
    from lethe.verifier.api import code_digest

    return recorded == code_digest()


def run_shard(
    items: Iterable[Mapping[str, Any]],
    checkpoint: str | os.PathLike[str],
    *,
    verify_fn: VerifyFn,
    profiles: Iterable[str],
    device: str,
    seed: int,
    timeout_s: float,
    corpus: str,
    shard_label: str = "",
    progress: bool = True,
    max_attempts: int | None = MAX_ATTEMPTS,
    verify_many_fn: Callable[..., Iterable[Mapping[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """Verify every (item, profile) not yet in ``checkpoint``; return all rows of this shard in item order.

    With ``verify_many_fn`` (``api.verify_profiles``'s signature), an item's pending profiles are graded from
    one reference run and one candidate run; otherwise ``verify_fn`` runs once per profile.

    Corpus metadata (op_class, final_speedup) is attached to each row here, not by the verifier, so that the
    verdict never depends on it and aggregation can apply the funnel to every row.

    An item whose verification was started ``max_attempts`` times on earlier runs without producing a row
    (the shard process died each time) gets a ``crash`` row instead of another attempt; None retries forever.
    """
    from tqdm import tqdm

    items = list(items)
    profiles = list(profiles)
    checkpoint = Path(checkpoint)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    wanted = {(str(it["id"]), p): item_sources(it) for it in items for p in profiles}
    # Later lines win: a row redone after its kernel changed supersedes the stale one.
    done = {}
    for r in read_checkpoint(checkpoint):
        key = (str(r["id"]), r.get("profile"))
        if key in wanted and still_valid(r, wanted[key], seed=seed, device=device):
            done[key] = r
    todo = [(it, p) for it in items for p in profiles if (str(it["id"]), p) not in done]
    bar = tqdm(total=len(items) * len(profiles), initial=len(items) * len(profiles) - len(todo),
               desc=f"audit {corpus} {shard_label}".strip(), unit="kernel", disable=not progress, file=sys.stderr)
    code = _verifier_digest()
    started = read_attempts(checkpoint)
    groups: dict[str, tuple[Mapping[str, Any], list[str]]] = {}
    for it, prof in todo:
        groups.setdefault(str(it["id"]), (it, []))[1].append(prof)
    with open(checkpoint, "a", encoding="utf-8") as fh, open(attempts_path(checkpoint), "a", encoding="utf-8") as afh:
        for kid, (it, profs) in groups.items():
            t0 = time.monotonic()
            got: dict[str, dict[str, Any]] = {}
            ready = []
            for prof in profs:
                akey = attempt_key(it, prof, seed=seed, code=code)
                n_started = started.get(akey, 0)
                if not it.get("candidate"):
                    got[prof] = {"status": NO_CANDIDATE, "error": it.get("extract_error") or "no candidate"}
                elif max_attempts is not None and n_started >= max_attempts:
                    got[prof] = {"status": CRASH, "seconds": 0.0,
                                 "environment": json.dumps({"verifier_code": code} if code else {}, sort_keys=True),
                                 "error": f"the shard process died while verifying this item on {n_started} "
                                          f"attempts (no row was written; not retried again, "
                                          f"max_attempts={max_attempts})"}
                else:
                    # Recorded (and fsynced) before the call: if this call takes the process down, the next run
                    # knows which item was in flight.
                    _append(afh, {"key": akey, "id": kid, "profile": prof, "attempt": n_started + 1})
                    started[akey] = n_started + 1
                    ready.append(prof)
            common = {"ref_src": it["reference"], "cand_src": it.get("candidate"), "device": device, "seed": seed,
                      "kernel_id": kid, "corpus": corpus}
            if verify_many_fn is not None and len(ready) > 1:
                # One reference run and one candidate run grade every pending profile (api.verify_profiles).
                res = _guarded(lambda **kw: {"rows": list(verify_many_fn(**kw))}, timeout_s, profiles=ready, **common)
                rows_of = {r.get("profile"): dict(r) for r in res.get("rows", [])}
                for prof in ready:
                    got[prof] = rows_of.get(prof) or {k: v for k, v in res.items() if k != "rows"} or {
                        "status": HARNESS_ERROR, "error": f"the verifier returned no row for profile {prof}"}
            else:
                for prof in ready:
                    got[prof] = _guarded(verify_fn, timeout_s, profile=prof, **common)
            for prof in profs:
                row = got[prof]
                if not row.get("sources") or row.get("sources") == "{}":
                    row["sources"] = json.dumps(item_sources(it), sort_keys=True)
                row.update(id=kid, profile=prof, corpus=corpus, op_class=it.get("op_class"),
                           final_speedup=it.get("final_speedup"), shard=shard_label,
                           device=row.get("device") or device, seed=row.get("seed", seed))
                if not row.get("seconds") and row.get("status") != CRASH:
                    row["seconds"] = round(time.monotonic() - t0, 3)
                row = complete_row(row)
                _append(fh, row)
                done[(kid, prof)] = row
                bar.update(1)
    bar.close()
    return [done[(str(it["id"]), p)] for it in items for p in profiles]


# ------------------------------------------------------------------------------------------------ files


def _arrow_schema():
    """The verdict schema of lethe.verifier.records plus the corpus fields aggregation needs."""
    import pyarrow as pa

    from lethe.verifier import records as R

    return pa.schema(list(R.ARROW_SCHEMA) + [pa.field("final_speedup", pa.float64()), pa.field("shard", pa.string())])


def complete_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Fill the fields of lethe.verdict/1 a shard-made row lacks (no_candidate, harness_error, backstop timeout).

    Rows from the verifier already have every field; rows the shard makes itself get "na" gates and empty
    environment, so the one parquet schema holds both.
    """
    from lethe.verifier import records as R

    out = {"schema": R.SCHEMA_VERSION, "corpus": "", "op_class": "", "error": "", "profile": "strict",
           "device": "", "seed": 0, "seconds": 0.0, "compile_seconds": 0.0, "weights_copied": False,
           "output_aliasing": False, "environment": "{}", "sources": "{}", "final_speedup": None, "shard": "",
           "isolation": "not run: the shard made this row without a sandboxed process", "tamper_proof": False}
    out.update({k: v for k, v in row.items() if v is not None or k == "final_speedup"})
    if not out.get("gates"):
        out["gates"] = R.na_gates(f"row status {out.get('status')}", int(out.get("seed") or 0))
    out["error"] = out["error"] or ""
    return out


def write_parquet(rows: list[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Rows to parquet with the verdict schema (+ corpus fields), atomically (temp file, then rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    full = [complete_row(r) for r in rows]
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in full], schema=schema)
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def read_parquet(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows back as nested dicts (``row["gates"]["EXC-01"]["status"]``)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def gather(shard_files: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Concatenate shard parquets into one, sorted by (id, profile); duplicates are an error, not merged."""
    rows: list[dict[str, Any]] = []
    for f in shard_files:
        rows.extend(read_parquet(f))
    seen: set[tuple[str, str]] = set()
    for r in rows:
        key = (str(r["id"]), str(r.get("profile")))
        if key in seen:
            raise ValueError(f"row {key} appears in two shards")
        seen.add(key)
    rows.sort(key=lambda r: ((0, int(r["id"])) if str(r["id"]).isdigit() else (1, str(r["id"])), str(r.get("profile"))))
    write_parquet(rows, out)
    return rows


def main(argv: list[str] | None = None) -> int:
    """CLI: one shard of one corpus file; used by tests that kill the process, and usable by hand."""
    from lethe.corpora.items import load_items, shard

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--corpus-file", required=True)
    ap.add_argument("--shard", type=int, required=True)
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profiles", default="strict")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--timeout-s", type=float, default=300)
    ap.add_argument("--verifier", default=None, help="module:function (default lethe.verifier.api:verify)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--max-attempts", type=int, default=MAX_ATTEMPTS,
                    help="attempts (each ended by the shard process dying) before an item gets a crash row; "
                         "0 or less retries forever")
    a = ap.parse_args(argv)
    items = shard(load_items(a.corpus_file, a.corpus), a.shard, a.shards)
    rows = run_shard(items, a.checkpoint, verify_fn=resolve(a.verifier), profiles=a.profiles.split(","),
                     device=a.device, seed=a.seed, timeout_s=a.timeout_s, corpus=a.corpus,
                     shard_label=f"{a.shard + 1}/{a.shards}", progress=not a.no_progress,
                     max_attempts=a.max_attempts if a.max_attempts > 0 else None)
    write_parquet(rows, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
