"""The calibration table and figure (this project's sweep) and the published calibration table.

A pair whose honest kernel fails the gate, or whose defects all pass it, is labelled "not separated"; a
margin under ``sweep.THIN`` is labelled "thin" -- the table never hides a weak calibration behind a ratio.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lethe.calibration.sweep import THIN
from lethe.render import Column, render_table
from lethe.render.style import PALETTE, PUBLISHED_TAG, new_figure, save_figure, style

SCI = "{:.2e}"
RATIO = "{:,.1f}"


def verdict(row: dict[str, Any]) -> str:
    if not row.get("honest_passes_gate", False):
        return "not separated (honest kernel fails)"
    if row.get("defect_onset") is None:
        return "not separated (no defect fails)"
    if not row.get("clean_separation", False):
        return "not separated"
    return "thin" if row.get("thin_margin") else "clean"


def table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"gate": r["gate_id"], "operator": r["operator"], "op_class": r["op_class"],
             "floor": r["honest_floor"], "trip": r["trip_point"], "onset": r["defect_onset"],
             "defect": r["onset_defect"] or "", "m1": r["margin_trip_over_floor"],
             "m2": r["margin_onset_over_trip"], "verdict": verdict(r)} for r in rows]


COLUMNS = [Column("gate", "gate", align="l"), Column("operator", "operator", align="l"),
           Column("op_class", "class", align="l"), Column("floor", "honest floor", SCI),
           Column("trip", "trip point", SCI), Column("onset", "defect onset", SCI),
           Column("defect", "onset defect", align="l"), Column("m1", "trip/floor", RATIO),
           Column("m2", "onset/trip", RATIO), Column("verdict", "separation", align="l")]


def render_table_files(sweep_path: str | Path, md: str | Path, tex: str | Path) -> None:
    data = json.loads(Path(sweep_path).read_text())
    render_table(
        table_rows(data["rows"]), COLUMNS,
        "Threshold calibration of the thresholded gates on trusted operators (this project's sweep, CPU, "
        "float64 references).",
        "tab:calibration", md, tex,
        notes=["Errors are max|out - ref| / max|ref| on the gate's probe; the trip point is the smallest uniform "
               "multiplicative error that fails the gate (geometric bisection, relative width 1e-3); the onset is "
               "the smallest error among the realistic defects the gate catches.",
               f"A margin below {THIN:g}x is reported as thin. Tolerance constants: "
               + ", ".join(f"{k}={v:g}" for k, v in sorted(data["constants"].items())) + "."])


def render_figure(sweep_path: str | Path, outdir: str | Path, stem: str = "calibration") -> None:
    """One panel per gate: per operator, the floor, trip point and defect onset on a log axis."""
    data = json.loads(Path(sweep_path).read_text())
    rows = data["rows"]
    gates = list(dict.fromkeys(r["gate_id"] for r in rows))
    with style():
        fig, axes = new_figure(7.0, 1.0 + 0.9 * len(gates), nrows=len(gates), sharex=True)
        axes = [axes] if len(gates) == 1 else list(axes)
        for ax, gid in zip(axes, gates, strict=True):
            sub = [r for r in rows if r["gate_id"] == gid]
            for y, r in enumerate(sub):
                lo = r["honest_floor"]
                hi = r["defect_onset"] if r["defect_onset"] is not None else r["trip_point"]
                ax.plot([lo, hi], [y, y], color="#BBBBBB", lw=1, zorder=1)
                ax.scatter([lo], [y], color=PALETTE[4], marker="o", s=18, zorder=2,
                           label="honest floor" if y == 0 else None)
                ax.scatter([r["trip_point"]], [y], color=PALETTE[7], marker="|", s=160, zorder=3,
                           label="trip point" if y == 0 else None)
                if r["defect_onset"] is not None and math.isfinite(r["defect_onset"]):
                    ax.scatter([r["defect_onset"]], [y], color=PALETTE[5], marker="x", s=22, zorder=2,
                               label="defect onset" if y == 0 else None)
            ax.set_yticks(range(len(sub)), [r["operator"] for r in sub])
            ax.set_ylim(-0.7, len(sub) - 0.3)
            ax.set_xscale("log")
            ax.set_ylabel(gid, rotation=0, ha="right", va="center")
            ax.grid(True, axis="x")
        axes[0].legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3)
        axes[-1].set_xlabel("max |out - ref| / max |ref|  (log)")
        fig.tight_layout()
        save_figure(fig, stem, outdir)


PUBLISHED_COLUMNS = [Column("gate", "gate", align="l"), Column("kind", "kind", align="l"),
                     Column("floor", "honest floor", SCI), Column("trip", "trip point", SCI),
                     Column("onset", "real-error onset", SCI), Column("m1", "trip/floor", RATIO),
                     Column("m2", "onset/trip", RATIO), Column("clean", "clean separation"),
                     Column("detail", "rationale / defect", align="l")]


def published_rows(pub: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per gate; margins recomputed from the published floor/trip/onset (not copied)."""
    out = []
    for g in pub["gates"]:
        floor, trip, onset = g.get("honest_floor"), g.get("trip_point"), g.get("real_error_onset")
        detail = g.get("defect") or g.get("rationale", "")
        if g["gate_id"] == "PRC-02" and "sweep_over_N" in g:
            first = next((s["seq_len"] for s in g["sweep_over_N"] if s["fp16_carry_fails"]), None)
            detail = f"{g['rationale']}; fp16 carry first fails at N={first}"
        out.append({"gate": g["gate_id"], "kind": g["kind"].replace("_", "-"), "floor": floor, "trip": trip,
                    "onset": onset, "m1": trip / floor if floor and trip else None,
                    "m2": onset / trip if onset and trip else None, "clean": g.get("clean_separation"),
                    "detail": detail})
    return out


def render_published(pub_path: str | Path, md: str | Path, tex: str | Path) -> None:
    pub = json.loads(Path(pub_path).read_text())
    shape = "x".join(str(s) for s in pub["shape"])
    rows = published_rows(pub)
    thin = [f"{r['gate']} ({name} {r[k]:.1f}x)" for r in rows for k, name in (("m1", "trip/floor"),
            ("m2", "onset/trip")) if r[k] is not None and r[k] < THIN]
    thin_note = (f"Thin by this project's {THIN:g}x rule although published as clean: " + ", ".join(thin) + "."
                 if thin else f"No published margin is below this project's {THIN:g}x thin rule.")
    render_table(rows, PUBLISHED_COLUMNS,
                 f"Threshold calibration on {pub['op']} (shape {shape}, {pub['device']}) -- {PUBLISHED_TAG}.",
                 "tab:calibration-published", md, tex,
                 notes=["Margins are recomputed here from the published floor, trip point and onset.",
                        "Tolerance-free gates have no floor or trip point; they are calibrated by an honest kernel "
                        "passing and a seeded defect failing.", thin_note])
