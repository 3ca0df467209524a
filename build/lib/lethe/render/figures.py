"""Figures drawn from the paper authors' released records (``data/published/``).

These show the paper's own numbers, not this project's measurements, so every caption carries
:data:`lethe.render.style.PUBLISHED_TAG`. Each function takes the folder of released records and an output
folder, draws one figure in the house style and writes ``<stem>.png`` and ``<stem>.pdf`` through
:func:`save_figure` (byte-deterministic). Plotted values are computed from counts in the files, never typed in.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.ticker import FuncFormatter

from lethe.render.keypath import load_document
from lethe.render.style import OKABE_ITO, PUBLISHED_TAG, new_figure, save_figure, style

GATE_ORDER = ("CMP-01", "CMP-03", "ORD-01", "ORD-02", "ORD-03", "PRC-01", "PRC-02", "EXC-01", "EXC-02", "RES-01")


@dataclass(frozen=True)
class FigureSpec:
    stem: str
    caption: str
    inputs: tuple[str, ...]  # file names inside data/published/
    draw: Callable[[Path, Path], None]


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def gate_failures(published: Path, outdir: Path) -> None:
    """Failing and erroring kernels per gate over the audited population (accepted rows)."""
    drk = load_document(published / "audit_drkernel.json")["accepted_only"]
    gates = drk["gates_overall"]
    order = [g for g in GATE_ORDER if g in gates] + sorted(g for g in gates if g not in GATE_ORDER)
    fails = np.array([gates[g].get("fail", 0) for g in order])
    errors = np.array([gates[g].get("error", 0) for g in order])
    with style():
        fig, ax = new_figure(6.0, 3.4)
        y = np.arange(len(order))[::-1]
        ax.barh(y, fails, color=OKABE_ITO["vermillion"], label="fail")
        ax.barh(y, errors, left=fails, color=OKABE_ITO["sky_blue"], label="error (the gate itself crashed)")
        for yi, f, e in zip(y, fails, errors, strict=True):
            ax.text(f + e + 8, yi, f"{f:,}" + (f" + {e:,}" if e else ""), va="center", fontsize=8)
        ax.set_yticks(y, order)
        ax.set_xlim(0, 1.16 * float((fails + errors).max()))  # room for the count labels
        ax.set_xlabel(f"kernels (of {drk['gated']:,} gated, {drk['denominator']:,} audited)")
        ax.set_title("Failures per contract gate, Dr. Kernel cold-start")
        ax.grid(axis="x")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", title="labels: fail + error", title_fontsize=8)
        save_figure(fig, "published_gate_failures", outdir)


def class_floor(published: Path, outdir: Path) -> None:
    """Each class's own tolerance-free floor, with the corpus floor and its leave-one-class-out range."""
    tol = load_document(published / "audit_tolerance_free.json")["accepted_only"]
    per = tol["per_class_strict"]
    classes = sorted(per, key=lambda c: -per[c]["denominator"])
    own = [per[c]["tolerance_free_findings"] / per[c]["denominator"] for c in classes]
    big_f, big_n = tol["strict_floor"]["rows"], tol["denominator"]
    corpus = big_f / big_n
    loo = [(big_f - per[c]["tolerance_free_findings"]) / (big_n - per[c]["denominator"]) for c in classes]
    with style():
        fig, ax = new_figure(6.0, 3.4)
        x = np.arange(len(classes))
        ax.axhspan(100 * min(loo), 100 * max(loo), color=OKABE_ITO["sky_blue"], alpha=0.25, lw=0,
                   label=f"corpus floor leaving one class out ({_pct(min(loo))}–{_pct(max(loo))})")
        ax.axhline(100 * corpus, color=OKABE_ITO["black"], lw=1.0, ls="--",
                   label=f"corpus floor {_pct(corpus)} ({big_f:,} of {big_n:,})")
        ax.bar(x, [100 * v for v in own], color=OKABE_ITO["blue"], width=0.6, label="class's own floor")
        for xi, c, v in zip(x, classes, own, strict=True):
            ax.text(xi, 100 * v + 1, f"{_pct(v)}\nn={per[c]['denominator']:,}", ha="center", va="bottom",
                    fontsize=7.5)
        ax.set_xticks(x, classes)
        ax.set_ylabel("tolerance-free floor (%)")
        ax.set_ylim(0, 100 * max(own) + 18)
        ax.set_title("Tolerance-free floor per operator class")
        ax.legend(loc="upper right", fontsize=7.5)
        save_figure(fig, "published_class_floor", outdir)


def differential(published: Path, outdir: Path) -> None:
    """KernelBench's check against ours: the 2x2 agreement table, paper-era and hardened check side by side."""
    cv = load_document(published / "crossval_kernelbench.json")
    panels = [("paper-era check (atol 1e-2)", cv["cells_paper_era"]), ("hardened check (atol 1e-4)",
                                                                      cv["cells_hardened"])]
    total = cv["joined_rows"]
    with style():
        fig, axes = new_figure(6.4, 3.0, ncols=2)
        for ax, (title, c) in zip(axes, panels, strict=True):
            grid = np.array([[c["ext_pass_our_pass"], c["ext_pass_our_fail"]],
                             [c["ext_fail_our_pass"], c["ext_fail_our_fail"]]])
            ax.imshow(grid, cmap="cividis", vmin=0, vmax=total)
            for (i, j), v in np.ndenumerate(grid):
                shade = "black" if v > 0.55 * total else "white"
                ax.text(j, i, f"{v:,}\n{_pct(v / total)}", ha="center", va="center", color=shade, fontsize=9)
            ax.set_xticks([0, 1], ["ours: pass", "ours: fail"])
            ax.set_yticks([0, 1], ["KernelBench:\npass", "KernelBench:\nfail"])
            ax.set_title(title, fontsize=9.5)
            ax.grid(False)
            for side in ("top", "right", "left", "bottom"):
                ax.spines[side].set_visible(False)
        fig.suptitle(f"Differential against KernelBench's correctness check ({total:,} kernels)", fontsize=10.5)
        save_figure(fig, "published_differential", outdir)


def elapsed(published: Path, outdir: Path) -> None:
    """How long auditing one kernel took on the authors' B200, over every released row that records it."""
    rows = load_document(published / "audit_rows.jsonl.gz")
    secs = np.array(sorted(float(r["elapsed_s"]) for r in rows
                           if r.get("elapsed_s") is not None and float(r["elapsed_s"]) > 0))
    median = float(np.median(secs))
    lo, hi = math.floor(math.log10(secs.min())), math.ceil(math.log10(secs.max()))
    bins = np.logspace(lo, hi, 10 * (hi - lo) + 1)
    with style():
        fig, ax = new_figure(6.0, 3.0)
        ax.hist(secs, bins=bins, color=OKABE_ITO["bluish_green"])
        ax.axvline(median, color=OKABE_ITO["black"], ls="--", lw=1.0, label=f"median {median:.1f} s")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_xlabel("seconds per kernel (all gates, B200)")
        ax.set_ylabel("kernels")
        ax.set_title(f"Audit time per kernel ({len(secs):,} released rows)")
        ax.legend(loc="upper right")
        save_figure(fig, "published_elapsed", outdir)


FIGURES = (
    FigureSpec("published_gate_failures",
               "Kernels failing (or crashing) each contract gate in the Dr. Kernel cold-start audit, accepted rows; "
               f"{PUBLISHED_TAG}.", ("audit_drkernel.json",), gate_failures),
    FigureSpec("published_class_floor",
               "Tolerance-free floor of each operator class, the corpus floor, and the range the corpus floor "
               f"spans when any one class is left out; {PUBLISHED_TAG}.", ("audit_tolerance_free.json",),
               class_floor),
    FigureSpec("published_differential",
               "Agreement between KernelBench's correctness check and this verifier on the audited kernels, with "
               f"the paper-era and the hardened check; {PUBLISHED_TAG}.", ("crossval_kernelbench.json",),
               differential),
    FigureSpec("published_elapsed",
               "Distribution of the wall-clock time the verifier spent per kernel on the authors' B200; "
               f"{PUBLISHED_TAG}.", ("audit_rows.jsonl.gz",), elapsed),
)


def render_all(published: str | os.PathLike[str], outdir: str | os.PathLike[str],
               stems: tuple[str, ...] | None = None) -> list[str]:
    """Draw every figure (or those named in ``stems``) whose inputs exist; returns the stems drawn."""
    published, outdir = Path(published), Path(outdir)
    done = []
    for spec in FIGURES:
        if stems is not None and spec.stem not in stems:
            continue
        if all((published / name).is_file() for name in spec.inputs):
            spec.draw(published, outdir)
            done.append(spec.stem)
    return done
