"""Verdict rows: one versioned schema ("lethe.verdict/1"), written as parquet, read back as nested dicts.

Aggregation code consumes exactly the shape ``read_rows`` returns, e.g. ``row["gates"]["EXC-01"]["status"]``.
Evidence and environment are JSON strings (sorted keys, rounded floats) so the parquet schema stays fixed while
their contents evolve, and so that the same kernel + seed + environment yields the same row bit for bit
(``seconds`` and ``compile_seconds`` are wall-clock figures: kept in the row, excluded by
:func:`deterministic_view`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lethe.verifier.battery import GATE_IDS

SCHEMA_VERSION = "lethe.verdict/2"  # /2: isolation, tamper_proof (what the OS enforced on the sandboxed processes)
ROW_STATUSES = ("gated", "compile_fail", "load_fail", "ref_broken", "not_auditable", "timeout", "crash")
GATE_STATUSES = ("pass", "fail", "na", "error")
WALL_CLOCK_FIELDS = ("seconds", "compile_seconds")

_GATE = pa.struct([("status", pa.string()), ("reason", pa.string()), ("evidence", pa.string()),
                   ("seed", pa.int64())])
ARROW_SCHEMA_V1 = pa.schema([
    ("schema", pa.string()),
    ("id", pa.string()),
    ("corpus", pa.string()),
    ("op_class", pa.string()),
    ("status", pa.string()),
    ("error", pa.string()),
    ("profile", pa.string()),
    ("device", pa.string()),
    ("seed", pa.int64()),
    ("seconds", pa.float64()),
    ("compile_seconds", pa.float64()),
    ("weights_copied", pa.bool_()),
    ("output_aliasing", pa.bool_()),
    ("gates", pa.struct([(g, _GATE) for g in GATE_IDS])),
    ("environment", pa.string()),
    ("sources", pa.string()),
])
ARROW_SCHEMA = pa.schema(list(ARROW_SCHEMA_V1) + [("isolation", pa.string()), ("tamper_proof", pa.bool_())])
# Rows of /1 (written before the sandbox recorded its isolation) stay readable; they carry no isolation claim.
SCHEMAS = {"lethe.verdict/1": ARROW_SCHEMA_V1, SCHEMA_VERSION: ARROW_SCHEMA}
NOT_RECORDED = "not recorded (a lethe.verdict/1 row, made before rows recorded their isolation)"


def is_verdict_schema(schema: pa.Schema) -> bool:
    """True when a parquet file's arrow schema (metadata removed) is one of the verdict schemas."""
    return any(schema.equals(s) for s in SCHEMAS.values())


def na_gates(reason: str, seed: int) -> dict[str, dict]:
    """All twelve gates "na" with one reason (rows that never reached grading)."""
    return {g: {"status": "na", "reason": reason, "evidence": "{}", "seed": seed} for g in GATE_IDS}


def make_row(**fields: Any) -> dict:
    """A complete row with defaults for anything not given; validates statuses."""
    row = {
        "schema": SCHEMA_VERSION, "id": "", "corpus": "", "op_class": "", "status": "gated", "error": "",
        "profile": "strict", "device": "cpu", "seed": 0, "seconds": 0.0, "compile_seconds": 0.0,
        "weights_copied": False, "output_aliasing": False, "gates": None, "environment": "{}", "sources": "{}",
        "isolation": "not run: no sandboxed process", "tamper_proof": False,
    }
    row.update(fields)
    if row["gates"] is None:
        row["gates"] = na_gates(f"row status {row['status']}", row["seed"])
    validate(row)
    return row


def validate(row: dict) -> None:
    """Raise ValueError when a row does not follow the verdict schema it names (lethe.verdict/1 or /2)."""
    if row.get("schema") not in SCHEMAS:
        raise ValueError(f"schema {row.get('schema')!r} not in {sorted(SCHEMAS)}")
    missing = [f.name for f in SCHEMAS[row["schema"]] if f.name not in row]
    if missing:
        raise ValueError(f"verdict row misses {missing}")
    if row["schema"] == SCHEMA_VERSION:
        if not isinstance(row["isolation"], str) or not row["isolation"]:
            raise ValueError("a lethe.verdict/2 row must say how it was isolated")
        if row["tamper_proof"] not in (True, False):
            raise ValueError("tamper_proof must be a bool")
    if row["status"] not in ROW_STATUSES:
        raise ValueError(f"row status {row['status']!r} not in {ROW_STATUSES}")
    if set(row["gates"]) != set(GATE_IDS):
        raise ValueError(f"gates must be exactly {GATE_IDS}")
    for g, v in row["gates"].items():
        if v["status"] not in GATE_STATUSES:
            raise ValueError(f"{g} status {v['status']!r} not in {GATE_STATUSES}")
        json.loads(v["evidence"])
    json.loads(row["environment"])


def write_rows(rows: list[dict], path: str | Path) -> Path:
    """Write rows (validated) to one parquet file with the fixed arrow schema."""
    for r in rows:
        validate(r)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Rows keep the schema they name: a file of /1 rows (results made before isolation was recorded, re-written
    # by their ingest) stays a /1 file byte for byte; any /2 row makes it a /2 file, /1 rows read as not recorded.
    schema = ARROW_SCHEMA_V1 if rows and all(r["schema"] == "lethe.verdict/1" for r in rows) else ARROW_SCHEMA
    table = pa.Table.from_pylist([{f.name: r.get(f.name, _V1_DEFAULTS.get(f.name)) for f in schema}
                                  for r in rows], schema=schema)
    pq.write_table(table, path)
    return path


_V1_DEFAULTS = {"isolation": NOT_RECORDED, "tamper_proof": False}


def read_rows(path: str | Path) -> list[dict]:
    """Rows as nested dicts, in file order."""
    return pq.read_table(Path(path)).to_pylist()


def deterministic_view(row: dict) -> dict:
    """The row minus wall-clock fields: what must be identical for the same kernel + seed + environment."""
    return {k: v for k, v in row.items() if k not in WALL_CLOCK_FIELDS}
