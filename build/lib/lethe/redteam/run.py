"""Run the verifier battery and KernelBench's loose check over a suite; write rows, summary and provenance.

Outputs in ``out_dir`` (``results/red_team/`` or ``results/positive_control/``):

* ``rows.parquet`` -- one ``lethe.verdict/1`` row per kernel (the verifier's schema, ``corpus`` = suite);
* ``loose.parquet`` -- KernelBench's check per kernel, ``paper`` (atol=rtol=1e-2, the era the corpora were
  filtered with) and ``hardened`` variants, as ``lethe.kernelbench.check`` rows keyed by ``id``;
* ``summary.json`` -- the per-kernel table records and the suite totals (see :mod:`lethe.redteam.tables`);
* ``provenance.json`` -- :func:`lethe.provenance.write`.

The loose check is measured, never copied from a manifest: a red-team kernel is only convincing if the check
actually accepts it, on the same torch as the run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lethe.redteam import tables
from lethe.redteam.manifest import Kernel, load_suite

LOOSE_VARIANTS = ("paper", "hardened")
LOOSE_FIELDS = ("id", "variant", "device", "outcome", "compiled", "correct", "dropped", "trials_passed",
                "n_trials", "max_difference", "detail")
_LOOSE_SCHEMA = pa.schema([
    ("id", pa.string()), ("variant", pa.string()), ("device", pa.string()), ("outcome", pa.string()),
    ("compiled", pa.bool_()), ("correct", pa.bool_()), ("dropped", pa.bool_()), ("trials_passed", pa.int64()),
    ("n_trials", pa.int64()), ("max_difference", pa.float64()), ("detail", pa.string()),
])


def verify_kernel(kernel: Kernel, *, profile: str, device: str, seed: int, timeout_s: float = 600) -> dict:
    """The verifier's row for one kernel (id = kernel name, corpus = suite, op_class = style)."""
    from lethe.verifier.api import verify

    return verify(kernel.ref_src, kernel.cand_src, profile=profile, device=device, seed=seed,
                  timeout_s=timeout_s, kernel_id=kernel.name, corpus=kernel.suite,
                  op_class=kernel.manifest["style"],
                  sources={"ref_path": kernel.rel("ref.py"), "cand_path": kernel.rel("cand.py")})


def loose_check(kernel: Kernel, *, device: str, variant: str = "paper", timeout_s: float = 300) -> dict:
    """KernelBench's correctness check on one kernel, in a child process (the candidate may change process
    state, e.g. the flush-to-zero mode, which must not leak into the next kernel)."""
    from lethe.kernelbench.check import check_isolated

    saved = os.environ.get("TRITON_INTERPRET")
    if device == "cpu":
        # The child inherits the environment: Triton candidates run under the interpreter on a CPU host.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        row = check_isolated(kernel.ref_src, kernel.cand_src, variant=variant, device=device,
                             timeout_s=timeout_s)
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
    out = {k: row.get(k) for k in LOOSE_FIELDS}
    out.update(id=kernel.name, variant=variant, device=device)
    return out


def write_loose(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = [{k: r.get(k) for k in LOOSE_FIELDS} for r in rows]
    pq.write_table(pa.Table.from_pylist(clean, schema=_LOOSE_SCHEMA), path)
    return path


def read_loose(path: str | Path) -> list[dict]:
    return pq.read_table(Path(path)).to_pylist()


SLOW_LAST = ("res02_matmul_huge_tiles_smem_triton",)


def run_suite(suite: str, out_dir: str | Path, *, profile: str = "strict", device: str = "cpu",
              seed: int = 20260829, only: list[str] | None = None, data_root: str | Path | None = None,
              log=print) -> dict[str, Any]:
    """Verify and loose-check every kernel of ``suite``; write the four outputs; return the summary.

    ``only`` restricts the run to some kernel names (for iterating on one kernel); the outputs then hold only
    those rows, so the committed results must come from a full run.
    """
    from lethe import provenance
    from lethe.verifier import records

    kernels = load_suite(suite, data_root)
    if only:
        kernels = [k for k in kernels if k.name in set(only)]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, loose = [], []
    # Kernels whose checks are slow to reach a verdict (huge compiles) go last, and every finished row is
    # appended to a JSONL log at once, so a run cut short by a time limit keeps what it measured.
    run_order = sorted(kernels, key=lambda k: k.name in SLOW_LAST)
    with open(out_dir / "rows.partial.jsonl", "w", buffering=1) as partial:
        for k in run_order:
            t0 = time.perf_counter()
            row = verify_kernel(k, profile=profile, device=device, seed=seed)
            rows.append(row)
            for variant in LOOSE_VARIANTS:
                loose.append(loose_check(k, device=device, variant=variant))
            partial.write(json.dumps({"row": row, "loose": loose[-len(LOOSE_VARIANTS):]}, sort_keys=True,
                                     default=str) + "\n")
            if log:
                fired = [g for g, v in row["gates"].items() if v["status"] in ("fail", "error")]
                log(f"[{suite}] {k.name}: {row['status']} fired={fired} targets={list(k.targets)} "
                    f"loose={loose[-2]['outcome']} ({time.perf_counter() - t0:.1f}s)")
    # Outputs list kernels in manifest order, whatever order they ran in.
    rank = {k.name: i for i, k in enumerate(kernels)}
    rows.sort(key=lambda r: rank[r["id"]])
    loose.sort(key=lambda r: rank[r["id"]])
    records.write_rows(rows, out_dir / "rows.parquet")
    write_loose(loose, out_dir / "loose.parquet")
    summary = tables.summarise(suite, kernels, rows, loose)
    summary["run"] = {"profile": profile, "device": device, "seed": seed, "n_rows": len(rows),
                      "partial": bool(only)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    provenance.write(out_dir / "provenance.json", command=f"lethe.redteam.run.run_suite({suite!r})",
                     suite=suite, profile=profile, device=device, seed=seed, n_kernels=len(kernels))
    return summary


def resummarise(suite: str, out_dir: str | Path, data_root: str | Path | None = None) -> dict[str, Any]:
    """Rebuild ``summary.json`` from the committed rows and loose rows after a manifest edit (no new
    measurement: verdicts and loose verdicts are read back, only the manifest-derived fields change)."""
    from lethe.verifier import records

    out_dir = Path(out_dir)
    old = json.loads((out_dir / "summary.json").read_text())
    summary = tables.summarise(suite, load_suite(suite, data_root), records.read_rows(out_dir / "rows.parquet"),
                               read_loose(out_dir / "loose.parquet"))
    summary["run"] = old.get("run", {})
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary
