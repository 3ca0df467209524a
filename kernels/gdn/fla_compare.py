"""fla 0.6.0 against our Triton GDN-family path on the H200: (a) correctness, (b) backward timing -- the study
that ``experiments/gdn/fla_compare.py`` drives (its CLI, the plan's wiring and the output folder stay there).

(a) Correctness, for the members fla implements, on the same rounded bf16 inputs (d_k = 128, chunk 64,
    d_v in {64, 128}, T in {1024, 4096}, B = 1, H = 2: the ladder's inputs, experiments/gdn/ladder.py):
    output and every input gradient of fla and of ``chunk_family(..., backend="triton")`` each against the
    float64 oracle (lethe.kernels.gdn.reference, autograd), worst relative error per tensor max|x - ref| / max|ref|
    (the ladder's metric), and fla against ours directly (max|fla - ours| / max|ours|).

    | member | fla op | our call |
    |---|---|---|
    | gdn  (full per-channel) | ``fla.ops.gdn2.chunk_gdn2(q, k, v, g, b, w)`` | ``member="gdn"`` |
    | sgdn (scalar-gate GDN)  | ``fla.ops.gated_delta_rule.chunk_gated_delta_rule(q, k, v, g[B,T,H], beta)`` | ``member="kda"``, per-head g |
    | kda  | ``fla.ops.kda.chunk_kda(q, k, v, g, beta)`` | ``member="kda"`` |
    | gla  | ``fla.ops.gla.chunk_gla(q, k, v, g)`` | ``member="gla"`` |
    | ssd  (scalar decay)     | ``fla.ops.simple_gla.chunk_simple_gla(q, k, v, g=g[B,T,H])`` | ``member="ssd"`` |
    | la   | ``fla.ops.simple_gla.chunk_simple_gla(q, k, v, g=None)`` | ``member="la"`` |

    Conventions read from the wheel: every op takes ``[B, T, H, D]`` (head_first was removed), gates are
    natural-log decays (fla rescales by 1/ln 2 inside), ``scale`` multiplies q (passed explicitly: K ** -0.5).
    fla 0.6.0 refuses the backward of ``chunk_gated_delta_rule`` and ``chunk_simple_gla(g=...)`` on Hopper with
    Triton < 3.7.1 (the #640 guard in ``fla.ops.common.chunk_o.chunk_bwd_dqkwg``); those two run under
    ``lethe.foreign.fla640.bypass()`` and their rows say so. ``chunk_gdn2``, ``chunk_kda`` and ``chunk_gla`` never
    call the guarded function (checked with ``lethe.foreign.fla640.static_guard_facts``). At K = 128 the guarded
    kernel runs its BK = 128 tile, the configuration #640 reports clean.

(b) Timing, bf16, d_k = 128, d_v in {64, 128}, T in {1024, 4096, 16384, 32768}, H = 2 and B = head_tokens/(H T)
    (2**20 head-tokens by default: 16,384 chunks, far more than 132 SMs): fla's chunk_gdn2 and
    chunk_gated_delta_rule and our Triton path on the same member. Each (member, d_v, T) cell first checks
    correctness at that size (fla against ours on the full tensors; both against a float64 chunked reference on
    one head when T <= --slice-check-max-t), then times with CUDA events: per iteration, forward then backward
    (``torch.autograd.grad``), giving the backward alone (event after the forward to event after the backward),
    the forward, and forward+backward; warm-up first, then ``--reps`` rounds over ``--sets`` input sets; median, p10, p90.
    Each row carries FLOPs and minimal HBM bytes of the chunked algorithm (:func:`chunk_counts`) and the roofline
    floor from ceilings measured at the start (bf16 matmul, device copy), plus the spec-sheet floor, labelled.
    An implementation whose check fails (non-finite values, or a worst relative error above ``--check-gate-rel``
    against the float64 slice, or against ours where no slice was checked) is not timed: a ``skip`` row says why.

    ``--heads`` and ``--head-tokens`` take comma-separated lists (the shapes models run: 16 and 32 heads, 2**18 and
    2**20 head-tokens): the sweep then covers every (d_v, H, member, head-tokens, T) in one process, grouped so that
    each fla tuning (its autotune keys and constexprs include H) is followed by every cell it serves, and a shape
    two grid points share (B floored at 1) is timed once (:func:`lethe.kernels.gdn.bench.bench_grid`). Part (a)
    runs at the first H. ``--ours-backend`` picks the backend of "ours" (``triton``, the default, or
    ``hybrid-tc``, which needs the CuTe DSL; the scalar-gate member runs its own Triton kernels under both).
    ``--resume`` (implies ``--append``) leaves out the cells an earlier run in the folder already timed.

    ``--impls`` picks the implementations of (b) (default: every one available). ``native`` is our
    ``chunk_family(..., backend="native")`` (kernels/gdn/native/backend.py): the torch chunked forward and backward
    with the reverse state scan (K1) replaced by the CuTe DSL kernel. It is included by default only when CUDA and
    the CuTe DSL are both importable. It takes the same bf16 tensors as the others; the torch chunked path casts
    them to float32 inside, so its forward, K1 (float32 FFMA) and K2 all compute in float32 and its gradients are
    returned in bf16 (rows: ``compute_dtype``; ``native_k1`` says whether the CuTe kernel actually ran, from a
    count of its host-wrapper calls). That forward materialises [B, H, N, C, C, K] float32 pair tensors
    (32 GiB each at 2**20 head-tokens, K = 128), so native is timed in ``bench_native`` cells of
    ``--native-head-tokens`` (default 2**16) head-tokens, together with fla and ours at that same size so that
    every ratio compares equal work; the large cells carry a ``skip`` row for native saying so.

fla's autotuning (the reason an earlier attempt never finished an op in 100 s): every kernel autotunes on its
first call, compiling its configs one after another. :class:`FlaAutotunePolicy` patches Triton's ``Autotuner``
before fla is imported: (1) all configs of a tuning are compiled in parallel threads (Triton's AsyncCompileMode)
before the autotuner benchmarks them, which keeps fla's full search; (2) the benchmark of each config uses
``--fla-tune-bench-ms`` (warm-up, rep) instead of Triton's 25/100 ms; (3) optionally (``--fla-max-configs N``, or
automatically after a bench tuning slower than ``--fla-slow-tune-s``) only N configs spread over each list are
kept, which can make fla slower and is then reported as a caveat; part (a), which times nothing, tries only
``--fla-correct-configs`` (2: the first and last of each list; a full re-try if they do not fit). fla's autotune keys exclude T (and B, except in its
small cumsum kernels), so it would keep what it picked at the tiny correctness shape; the bench re-tunes once per
(op, d_v) at the first bench shape (``--fla-retune``). ``TRITON_CACHE_DIR`` defaults to a fixed directory so
reruns in one session reuse binaries. Every tuning is a row (kind ``autotune``) and the summary lists the caveats.

Output (``--out``): ``rows.jsonl`` (one JSON object per measurement, appended and flushed as it is made, so a
kill loses nothing), ``summary.json`` (rewritten after every task), ``provenance.json``. Budget: ``--budget-s``;
tasks run in priority order and one is skipped (with a ``skip`` row) when its estimate exceeds the time left;
SIGTERM or an alarm at budget + 10 s ends the run cleanly with the summary written.

The budget loop itself is :func:`lethe.perf.budget.run_tasks`; this module supplies the tasks, their estimates
and the rows a skipped, failed or finished task leaves.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lethe.perf.budget import BudgetKill, kill_on_signals, run_tasks
from lethe.perf.fla_autotune import FlaAutotunePolicy
from lethe.perf.roofline import SPEC_H200, roofline_ms
from lethe.perf.roofline import measure_ceilings as device_ceilings
from lethe.perf.timing import quantile, time_stages

from .bench import (
    MEMBERS,
    NATIVE_MEMBERS,
    bench_batch,
    bench_grid,
    bench_inputs,
    bypass,
    check_row,
    chunk_counts,
    count_native_k1,
    fla_fn,
    grad_name,
    oracle_fn,
    ours_fn,
    rounded_inputs,
)
from .inputs import PIN_E2E, nonfinite, rel_err

SCHEMA = "lethe.gdn.fla_compare/1"
DEFAULT_TRITON_CACHE = "/tmp/lethe-flacmp-triton-cache"

# Every implementation part (b) knows, in the order a cell runs them ("ours" first: the others are checked
# against it). "torch" stands in for fla in --dry-run, where fla cannot run.
BENCH_IMPLS = ("ours", "fla", "native")
DRY_BENCH_IMPLS = ("ours", "torch", "native")


# ----------------------------------------------------------------------------------------------------------
# run state, rows


@dataclass
class Run:
    """One run's state: its options, output folder, device and dtypes, what is compiled or tuned already
    (``seen``, which the estimates read), the rows so far (earlier runs' too under --append), fla's policy, the
    measured ceilings and the meta row."""

    args: argparse.Namespace
    out: Path
    device: str
    dtype: torch.dtype
    g_dtype: torch.dtype
    K: int
    C: int
    impls: tuple  # part (a): ("ours", "fla") on the GPU; ("ours", "torch") in --dry-run (torch stands in for fla)
    bench_impls: tuple = ()  # part (b), from --impls (a subset of BENCH_IMPLS / DRY_BENCH_IMPLS, "ours" first)
    t0: float = field(default_factory=time.perf_counter)
    rows: list = field(default_factory=list)
    seen: set = field(default_factory=set)
    policy: FlaAutotunePolicy | None = None
    ceilings: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def left(self) -> float:
        """Seconds of ``--budget-s`` left."""
        return self.args.budget_s - (time.perf_counter() - self.t0)

    def emit(self, row: dict) -> dict:
        """Stamps ``row`` (schema, seconds since the start), keeps it and appends it to ``rows.jsonl``, flushed and
        synced so that a kill loses nothing; returns the stamped row."""
        row = {"schema": SCHEMA, "t_s": round(time.perf_counter() - self.t0, 2), **row}
        self.rows.append(row)
        with open(self.out / "rows.jsonl", "a") as f:
            f.write(json.dumps(row, sort_keys=True, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return row

    def sync(self) -> None:
        """Waits for the device (no-op on the CPU)."""
        if self.device == "cuda":
            torch.cuda.synchronize()


def log(msg: str) -> None:
    """One progress line on stdout, time-stamped."""
    print(f"[flacmp {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------------------------------
# tasks


@dataclass
class Task:
    """One step of the plan: a correctness cell, a bench cell, or the ceilings / a precompile batch."""

    kind: str  # ceilings | precompile | correct | bench | bench_native | bench_torch
    member: str = ""
    V: int = 0
    T: int = 0
    combos: tuple = ()  # precompile: the launch sets (ours_combos) of the tasks up to the next precompile
    H: int = 0  # bench cells of a multi-valued grid: their heads and head-tokens (0: the run's --heads/--head-tokens)
    HT: int = 0

    @property
    def name(self) -> str:
        """The task's name in rows and the log (``bench gdn V=128 T=4096``; ``... H=16 HT=262144`` in a grid)."""
        if self.kind == "ceilings":
            return self.kind
        if self.kind == "precompile":
            return f"precompile {self.V}"
        return f"{self.kind} {self.member} V={self.V} T={self.T}" + (f" H={self.H} HT={self.HT}" if self.H else "")


def plan(members_correct, members_bench, dvs, lengths_correct, lengths_bench, parts, torch_bench=True,
         native_lengths=(), main_cells=True, heads=(), head_tokens=(), shape=None) -> list[Task]:
    """Priority order. (a) first: the two benchmarked members (gdn, sgdn) at both d_v and both lengths, then the
    other members at d_v = 128 and the short length; (b) the timing sweep, d_v = 128 first, the first length
    first (the one fla is re-tuned at); then the rest of (a) (other members at d_v = 64, the long length);
    then the ``bench_native`` cells (``native_lengths``, empty when native is not timed separately), d_v = 128
    first; last our torch backend at the shortest bench length. ``main_cells=False`` leaves out the sweep itself
    (a run that adds native's cells to an earlier one). ``precompile`` tasks compile our kernels for the tasks
    that follow them (up to the next one): one before everything, one before the second half of the sweep.
    ``heads`` / ``head_tokens`` with more than one value between them make the sweep a grid
    (:func:`lethe.kernels.gdn.bench.bench_grid`: per d_v, each H's members in turn, every head-token count and
    length of one (member, H) together); its tasks carry their H and head-tokens. ``shape(task) -> (B, H)``
    sizes the precompile launch sets (:func:`cell_shape` with the run's options; None: one sequence, the task's H
    or 1)."""
    tasks: list[Task] = ([Task("ceilings")] if "bench" in parts else []) + [Task("precompile", V=0)]
    a_first, a_rest = [], []
    if "correct" in parts:
        core = [m for m in ("gdn", "sgdn") if m in members_correct]
        rest = [m for m in members_correct if m not in core]
        t0 = lengths_correct[0]
        for m in core:
            for V in dvs:
                a_first += [Task("correct", m, V, t0)]
        for m in core:
            for V in dvs:
                a_first += [Task("correct", m, V, T) for T in lengths_correct[1:]]
        for m in rest:
            a_first.append(Task("correct", m, max(dvs), t0))
        for m in rest:
            for V in sorted(dvs, reverse=True):
                for T in lengths_correct:
                    t = Task("correct", m, V, T)
                    if not (V == max(dvs) and T == t0):
                        a_rest.append(t)
    b = []
    grid = len(heads) > 1 or len(head_tokens) > 1
    if "bench" in parts and main_cells:
        if grid:
            b += [Task("bench", m, V, T, H=H, HT=ht)
                  for m, V, T, _, H, ht in bench_grid(members_bench, dvs, heads, head_tokens, lengths_bench)]
        else:
            for V in sorted(dvs, reverse=True):
                for m in members_bench:
                    b += [Task("bench", m, V, T) for T in lengths_bench]
    if "bench" in parts:
        for V in sorted(dvs, reverse=True):
            for m in members_bench:
                if m in NATIVE_MEMBERS:
                    b += [Task("bench_native", m, V, T) for T in native_lengths]
        if torch_bench:
            b += [Task("bench_torch", "gdn", V, min(lengths_bench)) for V in sorted(dvs, reverse=True)]
    sweep = [t for t in b if t.kind == "bench"]
    head = [t for t in sweep if t.V == max(dvs)]
    tail = ([t for t in sweep if t.V != max(dvs)] + a_rest + [t for t in b if t.kind == "bench_native"]
            + [t for t in b if t.kind == "bench_torch"])
    out = tasks + a_first + head + ([Task("precompile", V=1)] if tail else []) + tail
    return assign_combos(out, shape)


def assign_combos(tasks: list[Task], shape=None) -> list[Task]:
    """Gives each precompile task the launch sets of the tasks up to the next one (``shape``: as in
    :func:`plan`); returns ``tasks``."""
    for i, t in enumerate(tasks):
        if t.kind == "precompile":
            nxt = next((j for j in range(i + 1, len(tasks)) if tasks[j].kind == "precompile"), len(tasks))
            t.combos = tuple(ours_combos(tasks[i + 1:nxt], shape))
    return tasks


def cell_shape(args, task: Task) -> tuple[int, int]:
    """(B, H) a correctness or bench task runs at under the run's options."""
    if task.kind == "correct":
        return args.batch, args.heads
    H = task.H or args.heads
    ht = {"bench": task.HT or args.head_tokens, "bench_native": args.native_head_tokens,
          "bench_torch": args.torch_head_tokens}[task.kind]
    return bench_batch(ht, H, task.T), H


def cell_impls(run: Run, task: Task) -> tuple[str, ...]:
    """The implementations a correctness or bench task times or checks."""
    if task.kind == "correct":
        return run.impls
    if task.kind == "bench":
        return tuple(i for i in run.bench_impls if i != "native" or native_in_main(run.args))
    if task.kind == "bench_native":
        return run.bench_impls
    return ("torch",) if task.kind == "bench_torch" else ()


def resume_tasks(run: Run, tasks: list[Task], earlier: list[dict]) -> tuple[list[Task], list[str]]:
    """``--resume``: (the tasks still to do, the names of those left out). A bench cell is left out when every
    implementation it plans has a timed fwd+bwd row at its shape in ``earlier`` (the folder's rows), a
    correctness cell when every one has an ok ``correct`` row; skipped, failed or unreached cells stay. The
    precompile tasks are given the launch sets of what is left."""
    timed, correct = {}, {}
    for r in earlier:
        if r.get("kind") == "bench" and r.get("status") == "ok" and r.get("mode") == "fwd+bwd":
            timed.setdefault((r["member"], r["V"], r["T"], r["B"], r.get("H"), r.get("cell", "bench")),
                             set()).add(r["impl"])
        elif r.get("kind") == "correct" and r.get("status") == "ok":
            correct.setdefault((r["member"], r["V"], r["T"]), set()).add(r["impl"])
    keep, done = [], []
    for t in tasks:
        need = set(cell_impls(run, t))
        if t.kind == "correct":
            have = correct.get((t.member, t.V, t.T), set())
        elif t.kind in ("bench", "bench_native", "bench_torch"):
            f = task_fields(run, t)
            have = timed.get((t.member, t.V, t.T, f["B"], f["H"], t.kind), set())
        else:
            keep.append(t)
            continue
        if need and need <= have:
            done.append(t.name)
        else:
            keep.append(t)
    return assign_combos(keep, lambda t: cell_shape(run.args, t)), done


def estimate_s(run: Run, task: Task) -> float:
    """Seconds a task is expected to take, from what is already compiled/tuned (the budget's skip rule)."""
    a = run.args
    if task.kind == "ceilings":
        return 10.0
    if task.kind == "precompile":
        return a.est_precompile_s if task.combos else 0.0
    NT = -(-task.T // run.C)
    ours = 1.0 if ("ours", task.V, NT) in run.seen else (6.0 if ("ours", task.V) in run.seen else a.est_ours_compile_s)
    H = task.H or a.heads
    # fla's tunings are per H as well (H is in its autotune keys and a constexpr of its kernels)
    fla = 2.0 if ("fla", task.member, task.V, H) in run.seen else a.est_fla_tune_s
    if task.kind == "correct":
        fla_c = 2.0 if ("fla", task.member, task.V) in run.seen else a.est_fla_correct_s
        return ours + (fla_c if "fla" in run.impls else ours) + 2.0 + 3.0 * task.T / 1024
    if task.kind == "bench":
        retune = a.est_fla_retune_s if ("fla_tuned_at_bench", task.member, task.V, H) not in run.seen else 0.0
        return ours + fla + retune + a.est_bench_cell_s
    if task.kind == "bench_native":
        # the CuTe kernel is compiled per (B*H, N, d_v, erase): every length at this size is a new binary
        native = 2.0 if ("native", task.V, task.T) in run.seen else a.est_native_compile_s
        return ours + (fla if "fla" in run.bench_impls else 0.0) + native + a.est_bench_cell_s + 10.0
    return a.est_bench_cell_s + 10.0


def run_task(run: Run, task: Task) -> None:
    """Runs one task of the plan (its rows are emitted by the cell it runs)."""
    if task.kind == "ceilings":
        measure_ceilings(run)
    elif task.kind == "precompile":
        precompile_ours(run, [c for c in task.combos if ("ours_combo", *c) not in run.seen])
    elif task.kind == "correct":
        correctness_cell(run, task.member, task.V, task.T)
    elif task.kind == "bench":
        main = tuple(i for i in run.bench_impls if i != "native" or native_in_main(run.args))
        if "native" in run.bench_impls and "native" not in main:
            skip_native_at_size(run, task.member, task.V, task.T, heads=task.H or None, head_tokens=task.HT or None)
        bench_cell(run, task.member, task.V, task.T, impls=main, head_tokens=task.HT or None, heads=task.H or None)
    elif task.kind == "bench_native":
        bench_cell(run, task.member, task.V, task.T, impls=run.bench_impls, head_tokens=run.args.native_head_tokens,
                   cell="bench_native")
    elif task.kind == "bench_torch":
        bench_cell(run, task.member, task.V, task.T, impls=("torch",), head_tokens=run.args.torch_head_tokens,
                   cell="bench_torch")


def ours_backend(args) -> str:
    """The chunk_family backend "ours" stands for (``--ours-backend``; runs before the option: triton)."""
    return getattr(args, "ours_backend", "triton")


def tune_label(member: str, V: int, H: int, args) -> str:
    """The key of a bench tuning in the meta row's ``fla_tuned_at`` (``gdn V=128``; ``gdn V=128 H=16`` when the
    sweep covers several H)."""
    return f"{member} V={V}" + (f" H={H}" if len(getattr(args, "bench_heads", [args.heads])) > 1 else "")


def native_in_main(args) -> bool:
    """Whether native fits the main cells' size (then it runs there and no bench_native cells are planned)."""
    return args.native_head_tokens >= args.head_tokens


def native_meta(args, bench_impls) -> dict | None:
    """Where native is timed (the meta row's ``native``; None when it is not part of this run)."""
    if "native" not in bench_impls:
        return None
    main = native_in_main(args)
    return {"head_tokens": args.head_tokens if main else args.native_head_tokens, "in_main_cells": main,
            "lengths": list(args.bench_lengths if main else args.native_lengths),
            "members": sorted(set(args.bench_members) & NATIVE_MEMBERS)}


def budget_skip_row(run: Run, task: Task, estimate_s: float) -> dict:
    """The ``skip`` row of a task not started because its estimate exceeds the time left."""
    return {"kind": "skip", "task": task.name, "reason": "budget", "left_s": round(run.left(), 1),
            "estimate_s": estimate_s, **task_fields(run, task)}


def task_fields(run: Run, task: Task) -> dict:
    """Where a skipped or failed task would have landed in the bench table: member, d_v, T, B, H, cell."""
    ht = {"bench": task.HT or run.args.head_tokens, "bench_native": run.args.native_head_tokens,
          "bench_torch": run.args.torch_head_tokens}.get(task.kind)
    if ht is None:
        return {}
    H = task.H or run.args.heads
    B = bench_batch(ht, H, task.T)
    # the counts let the table show the floor of a cell that was never timed
    return {"member": task.member, "V": task.V, "T": task.T, "B": B, "H": H, "cell": task.kind, "head_tokens": ht,
            "counts": chunk_counts(task.member, B, H, task.T, run.K, task.V, run.C, in_bytes=run.dtype.itemsize)}


# ----------------------------------------------------------------------------------------------------------
# our kernels, compiled up front


def ours_combos(tasks: list[Task], shape=None) -> list[tuple[bool, bool, int, int, int, int]]:
    """(erase, scalar-gate path, d_v, T, B, H) of every Triton launch set the plan will make. A binary is keyed
    by more than d_v and erase: the scan kernels take the chunk count as a compile-time constant (each T its own),
    the integer arguments T and H are specialised (1, multiples of 16), some tiles follow B*H (the scans' BV), and
    the prologue's pointers carry the input dtype; so each cell's own shape is recorded (``shape``: as in
    :func:`plan`). The scalar-gate member (sgdn: KDA with a per-head g) runs :mod:`.scalar_gate`'s kernels."""
    out = set()
    for t in tasks:
        if t.kind in ("correct", "bench", "bench_native"):
            B, H = shape(t) if shape is not None else (1, t.H or 1)
            spec = MEMBERS[t.member]
            sg = spec["scalar_gate"] and spec["ours_member"] == "kda"
            out.add((spec["erase"], sg, t.V, t.T, B, H))
    return sorted(out)


def record_ours(run: Run, combos) -> tuple[dict, list[str]]:
    """({key: LaunchRecord}, errors): every Triton launch our wrappers make for ``combos`` (:func:`ours_combos`),
    recorded without launching (``lethe.aot.record_launches(execute=False)``), identical ones once. Each combo runs
    the general Triton path's forward and backward, or the scalar-gate path's for sgdn, on zero device tensors of
    the cell's shape in the run's dtypes, with a zero final-state gradient as autograd hands the backward one (a
    compile-time flag of the scans). A combo that cannot be recorded is named in ``errors``."""
    from lethe.aot import record_launches

    from .fwd_options import DOT_PRECISION_DEFAULT
    from .scalar_gate import sg_chunk_bwd, sg_chunk_fwd
    from .triton_bwd import triton_chunk_bwd
    from .triton_fwd import decay_floor_check_off, triton_chunk_fwd

    recs, errors = {}, []
    K, dev = run.K, run.device

    def z(*shape, dtype=None):
        return torch.zeros(*shape, device=dev, dtype=dtype or run.dtype)

    for combo in combos:
        erase, sg, V, T, B, H = combo
        B, H = max(1, B), max(1, H)
        try:
            with record_launches(execute=False) as launches, decay_floor_check_off():
                if sg:  # chunk_family(member="kda") with g and beta [B, T, H]: the scalar-gate kernels
                    q, k, v = z(B, T, H, K), z(B, T, H, K), z(B, T, H, V)
                    o, S, ctx = sg_chunk_fwd(q, k, v, z(B, T, H, dtype=run.g_dtype), z(B, T, H), K ** -0.5, run.C,
                                             None, DOT_PRECISION_DEFAULT)
                    sg_chunk_bwd(torch.zeros_like(o), ctx, torch.zeros_like(S))
                else:
                    q, k, v, w = z(B, T, H, K), z(B, T, H, K), z(B, T, H, V), z(B, T, H, V)
                    g = z(B, T, H, K, dtype=run.g_dtype)
                    b = z(B, T, H, K) if erase else None
                    o, S, ctx = triton_chunk_fwd(q, k, v, g, b, w, K ** -0.5, run.C)
                    triton_chunk_bwd(torch.zeros_like(o), ctx, torch.zeros_like(S))
            for r in launches:
                recs.setdefault(launch_key(r), r)
        except Exception as exc:  # noqa: BLE001 - only time is at stake
            errors.append(f"{list(combo)}: {type(exc).__name__}: {exc}"[:200])
    return recs, errors


def launch_key(r) -> tuple:
    """What makes two recorded launches the same binary request: the kernel, its described arguments, its
    meta-parameters."""
    return id(r.jit), repr(r.args), repr(sorted(r.kwargs.items()))


def precompile_ours(run: Run, combos) -> None:
    """Compile every binary our wrappers will launch, in parallel threads, before anything runs.

    The launches are recorded by :func:`record_ours` (nothing launches; each is kept with its arguments reduced to
    dtype + alignment), then every distinct one goes through the JIT's own ``run(..., warmup=True)`` under
    Triton's AsyncCompileMode, which compiles into the same per-device cache a real launch reads. A failure here
    only costs time: the first real launch then compiles as usual."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.perf_counter()
    recs, record_errors = record_ours(run, combos)
    t_rec = time.perf_counter() - t0
    err = None
    if run.device == "cuda":
        try:
            from triton.runtime._async_compile import AsyncCompileMode

            with ThreadPoolExecutor(max_workers=run.args.fla_workers) as ex, AsyncCompileMode(ex, ignore_errors=True):
                for r in recs.values():
                    r.jit.run(*r.args, grid=(1,), warmup=True, **r.kwargs)
        except Exception as exc:  # noqa: BLE001 - only time is at stake
            err = f"{type(exc).__name__}: {exc}"[:300]
        torch.cuda.empty_cache()
    run.seen.update(("ours", c[2]) for c in combos)
    run.seen.update(("ours", c[2], -(-c[3] // run.C)) for c in combos)
    run.seen.update(("ours_combo", *c) for c in combos)
    run.emit({"kind": "precompile", "impl": "ours", "combos": [list(c) for c in combos], "launches": len(recs),
              "distinct_kernels": len({(r.jit.fn.__name__, repr(sorted(r.kwargs.items()))) for r in recs.values()}),
              "record_s": round(t_rec, 2), "seconds": round(time.perf_counter() - t0, 2), "error": err,
              "record_errors": record_errors, "executed": run.device == "cuda"})
    log(f"precompiled our kernels: {len(recs)} distinct launches over {len(combos)} shapes in "
        f"{time.perf_counter() - t0:.1f} s{' (' + err + ')' if err else ''}"
        + (f"; {len(record_errors)} shapes not recorded: {record_errors[0]}" if record_errors else ""))


# ----------------------------------------------------------------------------------------------------------
# ceilings


def measure_ceilings(run: Run) -> None:
    """The device's bf16 / TF32 matmul rates and copy bandwidth (:func:`lethe.perf.roofline.measure_ceilings`)."""
    if run.device != "cuda":
        run.ceilings = {"measured": False, "reason": "no GPU (dry run)"}
        run.emit({"kind": "ceilings", **run.ceilings})
        return
    run.ceilings = device_ceilings()
    run.emit({"kind": "ceilings", **run.ceilings, "spec": SPEC_H200})
    c = run.ceilings
    log(f"ceilings: bf16 {c['bf16_matmul_tflops']:.0f} TFLOP/s, tf32 {c['tf32_matmul_tflops']:.0f} TFLOP/s, "
        f"copy {c['copy_tbps']:.2f} TB/s")


# ----------------------------------------------------------------------------------------------------------
# (a) correctness


def _impl_call(run: Run, impl: str, member: str):
    """(callable, uses the #640 bypass) for one implementation of ``member``."""
    if impl == "fla":
        return fla_fn(member), MEMBERS[member]["guarded"]
    if impl == "ours":
        return ours_fn(member, ours_backend(run.args), run.C), False
    if impl == "torch":
        return ours_fn(member, "torch", run.C), False
    if impl == "native":
        return ours_fn(member, "native", run.C), False
    raise KeyError(impl)


def fwd_bwd(run: Run, impl: str, member: str, leaves: dict, do: torch.Tensor, scale: float):
    """One forward + backward; returns (o, {grad name: grad}, seconds, bypassed)."""
    fn, guarded = _impl_call(run, impl, member)
    t0 = time.perf_counter()
    with bypass(guarded):
        o = fn(leaves, scale)
        grads = torch.autograd.grad(o, list(leaves.values()), do)
    run.sync()
    return o.detach(), {grad_name(n): g for n, g in zip(leaves, grads, strict=True)}, time.perf_counter() - t0, guarded


def _inputs_correct(run: Run, member: str, V: int, T: int) -> tuple[dict, torch.Tensor]:
    """The ladder's inputs (float64 master on the CPU, same seed), rounded to the run's dtypes, on the device."""
    a = run.args
    return rounded_inputs(member, a.batch, T, a.heads, run.K, V, a.seed, run.dtype, run.device, g_dtype=run.g_dtype)


def guard_probe(run: Run, member: str, low: dict, do: torch.Tensor, scale: float) -> dict:
    """The guarded fla op once *without* the bypass: records fla's refusal (or that it ran)."""
    from lethe.foreign import fla640

    state = fla640.guard_state()
    leaves = {n: t.clone().requires_grad_() for n, t in low.items()}
    try:
        o = fla_fn(member)(leaves, scale)
        torch.autograd.grad(o, list(leaves.values()), do)
        run.sync()
        return {"guard_state": state, "refused": False}
    except RuntimeError as exc:
        return {"guard_state": state, "refused": fla640.GUARD_MESSAGE_MARK in str(exc), "message": str(exc)[:300]}


def correctness_cell(run: Run, member: str, V: int, T: int) -> None:
    """Part (a) at one (member, d_v, T): every impl of the run against the float64 oracle on the same rounded
    inputs (a ``correct`` row each), the two against each other (an ``agree`` row), and once, for sgdn with fla,
    the #640 guard probe."""
    a = run.args
    scale = run.K ** -0.5
    low, do = _inputs_correct(run, member, V, T)
    base = {"member": member, "fla_op": MEMBERS[member]["fla_op"], "V": V, "T": T, "B": a.batch, "H": a.heads,
            "K": run.K, "chunk": run.C, "dtype": str(run.dtype).replace("torch.", ""),
            "g_dtype": str(run.g_dtype).replace("torch.", ""), "ours_backend": ours_backend(a)}
    # float64 oracle on exactly the rounded values every implementation receives
    t0 = time.perf_counter()
    odev = a.oracle_device or run.device
    ref_leaves = {n: t.double().to(odev).requires_grad_() for n, t in low.items()}
    ref = oracle_fn(member)(ref_leaves, scale)
    ref_grads = torch.autograd.grad(ref, list(ref_leaves.values()), do.double().to(odev))
    ref_t = {"o": ref.detach(), **{grad_name(n): g for n, g in zip(ref_leaves, ref_grads, strict=True)}}
    del ref_leaves, ref, ref_grads
    oracle_s = time.perf_counter() - t0
    if run.policy is not None:
        run.policy.set_max_configs(a.fla_correct_configs, "correctness phase (speed not measured here)")
    if member == "sgdn" and "fla" in run.impls and ("guard_probe",) not in run.seen:
        run.seen.add(("guard_probe",))
        if run.policy is not None:
            run.policy.phase = f"guard probe {member} V={V} T={T}"
        run.emit({"kind": "guard_probe", **base, **guard_probe(run, member, low, do, scale)})
    outs = {}
    for impl in run.impls:
        leaves = {n: t.clone().requires_grad_() for n, t in low.items()}
        key = ("fla", member, V) if impl == "fla" else (impl, V)
        first = key not in run.seen
        if run.policy is not None:
            run.policy.phase = f"correct {member} V={V} T={T}"
        try:
            try:
                o, grads, secs, bypassed = fwd_bwd(run, impl, member, leaves, do, scale)
            except Exception as exc:
                if impl != "fla" or run.policy is None or not run.policy.max_configs or not _resource_error(exc):
                    raise
                # a capped tuning may have kept only configs that do not fit: tune in full and try once more
                run.policy.set_max_configs(0, f"retry of {member} V={V} after an error under the cap")
                run.policy.reset("retry without the correctness cap")
                leaves = {n: t.clone().requires_grad_() for n, t in low.items()}
                o, grads, secs, bypassed = fwd_bwd(run, impl, member, leaves, do, scale)
        except Exception as exc:  # noqa: BLE001 - recorded as this arm's finding
            run.emit({"kind": "correct", "impl": impl, **base, "status": "error",
                      "error": f"{type(exc).__name__}: {exc}"[:600], "trace": traceback.format_exc()[-1500:]})
            continue
        run.seen.update({key, (impl, V, -(-T // run.C))} if impl != "fla" else {key, (*key, a.heads)})
        got = {"o": o, **grads}
        errs = {n: rel_err(got[n].to(ref_t[n].device), ref_t[n]) for n in ref_t}
        worst = max(errs, key=errs.get)
        outs[impl] = got
        run.emit({"kind": "correct", "impl": impl, **base, "status": "ok", "errors": errs,
                  "worst_rel_err": errs[worst], "worst_tensor": worst, "pin": PIN_E2E,
                  "within_pin": bool(errs[worst] <= PIN_E2E),
                  "nonfinite": {n: nonfinite(t) for n, t in got.items()},
                  "grad_dtypes": {n: str(t.dtype).replace("torch.", "") for n, t in grads.items()},
                  "bypass_640": bypassed, "first_call": first, "seconds": round(secs, 3),
                  "oracle_s": round(oracle_s, 2),
                  "fla_max_configs": run.policy.max_configs if (impl == "fla" and run.policy) else None})
        log(f"correct {impl:<5} {member:<4} V={V:<3} T={T:<5} worst {worst} {errs[worst]:.2e}"
            f"{' (bypass)' if bypassed else ''} {secs:.1f}s{' incl. compile/tune' if first else ''}")
    if len(outs) == 2:
        (ia, ta), (ib, tb) = sorted(outs.items(), key=lambda kv: kv[0] != run.impls[-1])  # other impl vs ours
        errs = {n: rel_err(ta[n], tb[n]) for n in ta}
        worst = max(errs, key=errs.get)
        run.emit({"kind": "agree", **base, "a": ia, "b": ib, "metric": "max|a - b| / max|b|", "errors": errs,
                  "worst_rel_err": errs[worst], "worst_tensor": worst})
    del outs, ref_t
    if run.device == "cuda":
        torch.cuda.empty_cache()


def _resource_error(exc: BaseException) -> bool:
    """A launch that did not fit or did not compile (what a capped config list can run into)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in ("OutOfResources", "out of resource", "PTXASError", "CompilationError"))


def _maybe_cap_fla(run: Run, first_call_s: float, member: str, V: int) -> None:
    """After a slow bench-shape tuning, cap the later ones so the rest of the plan stays in budget."""
    a = run.args
    if run.policy is None or run.meta.get("bench_max_configs") or a.fla_fallback_configs <= 0:
        return
    if first_call_s > a.fla_slow_tune_s:
        run.meta["bench_max_configs"] = a.fla_fallback_configs
        run.policy.set_max_configs(a.fla_fallback_configs, f"bench tuning of fla {member} V={V} took "
                                   f"{first_call_s:.0f} s > --fla-slow-tune-s {a.fla_slow_tune_s:.0f}; later "
                                   "bench tunings capped")


# ----------------------------------------------------------------------------------------------------------
# (b) timing


def _slice_check(run: Run, member: str, leaves: dict, do: torch.Tensor, results: dict, scale: float) -> dict:
    """Each implementation's first head of the first batch element against the float64 chunked reference
    (lethe.kernels.gdn.chunked through chunk_family(backend="torch"), validated against the oracle by the CPU tests).
    Heads are independent, so the sliced problem's gradients are the full problem's gradients sliced."""
    sl = lambda t: t[0:1, :, 0:1]  # noqa: E731
    x64 = {n: sl(t.detach()).double().requires_grad_() for n, t in leaves.items()}
    ref = ours_fn(member, "torch", run.C)(x64, scale)
    g64 = torch.autograd.grad(ref, list(x64.values()), sl(do).double())
    ref_t = {"o": ref.detach(), **{grad_name(n): g for n, g in zip(x64, g64, strict=True)}}
    out = {}
    for impl, got in results.items():
        errs = {n: rel_err(sl(got[n]), ref_t[n]) for n in ref_t}
        out[impl] = {"errors": errs, "worst_rel_err": max(errs.values()), "worst_tensor": max(errs, key=errs.get)}
    return out


def bench_base(run: Run, member: str, V: int, T: int, head_tokens: int | None = None,
               cell: str = "bench", heads: int | None = None) -> tuple[int, dict, dict]:
    """(B, chunk_counts, the fields every row of this cell carries); ``heads`` / ``head_tokens`` default to the
    run's --heads / --head-tokens (their first values)."""
    a = run.args
    H = heads or a.heads
    ht = head_tokens or a.head_tokens
    B = bench_batch(ht, H, T)
    counts = chunk_counts(member, B, H, T, run.K, V, run.C, in_bytes=run.dtype.itemsize)
    base = {"member": member, "fla_op": MEMBERS[member]["fla_op"], "V": V, "T": T, "B": B, "H": H, "K": run.K,
            "chunk": run.C, "dtype": str(run.dtype).replace("torch.", ""),
            "g_dtype": str(run.g_dtype).replace("torch.", ""), "cell": cell, "head_tokens": ht,
            "ours_backend": ours_backend(a), "counts": counts}
    return B, counts, base


def native_pair_gib(counts: dict, K: int) -> float:
    """GiB of one [B, H, N, C, C, K] float32 tensor of the torch chunked forward (what bounds native's size)."""
    return counts["chunks"] * counts["C"] ** 2 * K * 4 / 2**30


def skip_native_at_size(run: Run, member: str, V: int, T: int, heads: int | None = None,
                        head_tokens: int | None = None) -> None:
    """The ``skip`` row for native in a main cell too large for its torch chunked forward."""
    _, counts, base = bench_base(run, member, V, T, head_tokens, heads=heads)
    a = run.args
    run.emit({"kind": "skip", "task": f"timing native {member} V={V} T={T}", "impl": "native", **base,
              "reason": f"native not run at B*H*T = {a.head_tokens}: its torch chunked forward makes [B,H,N,C,C,K] "
                        f"float32 tensors of {native_pair_gib(counts, run.K):.3g} GiB each here; timed at "
                        f"B*H*T = {a.native_head_tokens} (bench_native cells)"})


def native_labels(run: Run, k1_calls: int | None) -> dict:
    """Fields of every native row: what it computed in, and whether the CuTe K1 ran."""
    if k1_calls is None:
        k1 = "unknown (K1 wrapper not found)"
    elif k1_calls > 0:
        k1 = "cute-dsl"
    elif run.device != "cuda":
        k1 = "torch scan (fallback: no CUDA)"
    else:  # the backend's own test says it should have run; the count cannot tell a fallback from a rename
        k1 = "not seen (0 calls of the K1 wrapper counted)"
    return {"compute_dtype": "float64" if run.dtype == torch.float64 else "float32", "native_k1": k1,
            "native_k1_calls": k1_calls}


def timing_rows(run: Run, impl: str, base: dict, counts: dict, samples: dict, reps: int, nsets: int,
                first_s: float, guarded: bool, peak_gib: float | None, extra: dict | None = None) -> list[dict]:
    """The three ``bench`` rows (bwd, fwd, fwd+bwd) of one timed impl, with FLOPs, bytes and both floors."""
    a = run.args
    rows = []
    for mode, key, flops, nbytes in (("bwd", "bwd", counts["bwd_flops"], counts["bwd_bytes"]),
                                     ("fwd", "fwd", counts["fwd_flops"], counts["fwd_bytes"]),
                                     ("fwd+bwd", "total", counts["fwd_flops"] + counts["bwd_flops"],
                                      counts["fwd_bytes"] + counts["bwd_bytes"])):
        xs = samples[key]
        med = statistics.median(xs)
        row = {"kind": "bench", "impl": impl, **base, "status": "ok", "mode": mode, "median_ms": med,
               "p10_ms": quantile(xs, 0.1), "p90_ms": quantile(xs, 0.9), "n": len(xs), "reps": reps,
               "sets": nsets, "flops": flops, "bytes": nbytes, "tflops": flops / (med * 1e-3) / 1e12,
               "first_call_s": round(first_s, 2), "bypass_640": guarded, "cell_peak_mem_gib": peak_gib,
               "timer": "cuda events" if run.device == "cuda" else "perf_counter (dry run)", **(extra or {})}
        if mode == "bwd":
            row["bytes_with_states"] = counts["bwd_bytes_with_states"]
        if run.ceilings.get("measured"):
            fl = roofline_ms(flops, nbytes, run.ceilings["bf16_matmul_tflops"], run.ceilings["copy_tbps"])
            row.update(floor_ms=fl, over_floor=med / fl, floor_basis="measured bf16 matmul + copy")
        fs = roofline_ms(flops, nbytes, SPEC_H200["bf16_dense_tflops"], SPEC_H200["hbm_tbps"])
        row.update(floor_spec_ms=fs, over_floor_spec=med / fs)
        if impl == "fla" and run.policy is not None:
            row["fla_autotune"] = {**run.policy.describe(), "tuned_at": run.meta.get("fla_tuned_at", {}).get(
                tune_label(base["member"], base["V"], base["H"], a)), "retune": a.fla_retune}
        rows.append(row)
    return rows


def bench_cell(run: Run, member: str, V: int, T: int, impls, head_tokens: int | None = None,
               cell: str = "bench", heads: int | None = None) -> None:
    """Part (b) at one (member, d_v, T) and size: a first call per impl (compile / tune), the correctness check at
    that size (a ``bench_check`` row), then the timing of each impl that passed (three ``bench`` rows each) or a
    ``skip`` / ``error`` row saying why not. fla re-tunes at the first cell of each (member, d_v, H)."""
    a = run.args
    scale = run.K ** -0.5
    B, counts, base = bench_base(run, member, V, T, head_tokens, cell, heads=heads)
    H = base["H"]
    # our kernels index with 32-bit offsets: B*H*T_pad*max(K, V) and chunks*K*V must stay below 2**31
    if max(counts["chunks"] * run.C * max(run.K, V), counts["chunks"] * run.K * V) >= 2**31:
        run.emit({"kind": "skip", "task": f"{cell} {member} V={V} T={T}", "reason": "int32 offsets in our kernels",
                  **base})
        return
    if run.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    sets = [bench_inputs(member, B, T, H, run.K, V, run.dtype, run.g_dtype, a.seed + 1000 + i, run.device)
            for i in range(a.sets)]
    # fla re-tunes at a bench shape (its autotune keys ignore T, and B except in the cumsum kernels; they hold H,
    # which its kernels also take as a constexpr), with its full config lists unless capped
    retuned = False
    if "fla" in impls and run.policy is not None:
        tkey = ("fla_tuned_at_bench", member, V, H)
        run.policy.set_max_configs(run.meta.get("bench_max_configs", a.fla_max_configs), "bench phase")
        if a.fla_retune == "per-size" or tkey not in run.seen:
            retuned = True
            run.policy.phase = f"bench {member} V={V} T={T}"
            run.policy.reset(f"re-tune at bench shape B={B} T={T}")
            run.seen.add(tkey)
            run.meta.setdefault("fla_tuned_at", {})[tune_label(member, V, H, a)] = {"B": B, "T": T, "H": H}
    # 1) first call per impl (compile / tune), results kept for the correctness check at this size
    first, results, extra = {}, {}, {}
    for impl in impls:
        leaves, do = sets[0]
        try:
            with count_native_k1() if impl == "native" else contextlib.nullcontext({}) as k1:
                o, grads, secs, _ = fwd_bwd(run, impl, member, leaves, do, scale)
        except Exception as exc:  # noqa: BLE001
            run.emit({"kind": "bench", "impl": impl, **base, "status": "error",
                      "error": f"{type(exc).__name__}: {exc}"[:600], "trace": traceback.format_exc()[-1500:]})
            continue
        first[impl] = secs
        results[impl] = {"o": o, **grads}
        extra[impl] = native_labels(run, k1["calls"]) if impl == "native" else {}
        if impl == "fla" and retuned:
            _maybe_cap_fla(run, secs, member, V)
        run.seen.update({("fla", member, V), ("fla", member, V, H)} if impl == "fla" else {(impl, V)})
        if impl != "fla":
            run.seen.add((impl, V, -(-T // run.C)))
        if impl == "native":
            run.seen.add(("native", V, T))
    if not results:
        return
    # 2) correctness at this size: every other impl vs ours (the validated path), and the float64 slice
    vs_ours = {}
    if "ours" in results:
        for impl in results:
            if impl != "ours":
                vs_ours[impl] = {n: rel_err(results[impl][n], results["ours"][n]) for n in results["ours"]}
    nonfin = {impl: sum(nonfinite(t) for t in r.values()) for impl, r in results.items()}
    if T <= a.slice_check_max_t:
        try:
            sl = _slice_check(run, member, sets[0][0], sets[0][1], results, scale)
            vs_slice = {impl: v["errors"] for impl, v in sl.items()}
        except Exception as exc:  # noqa: BLE001
            vs_slice = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    else:
        vs_slice = {"skipped": f"T > --slice-check-max-t {a.slice_check_max_t}"}
    check = run.emit(check_row(base, vs_ours, nonfin, vs_slice, a.check_gate_rel))
    for impl, c in check.get("vs_ours_by_impl", {}).items():
        log(f"bench check {member} V={V} T={T}: {impl} vs ours worst {c['worst_tensor']} {c['worst_rel_err']:.2e}")
    del results
    # 3) timing, of the impls that passed the check
    for impl in first:
        why = check["gate"]["failed"].get(impl)
        if why is not None:
            run.emit({"kind": "skip", "task": f"timing {impl} {member} V={V} T={T}", "impl": impl, **base,
                      "reason": f"correctness check failed: {why}"})
            log(f"not timing {impl} {member} V={V} T={T}: {why}")
            continue
        if impl == "fla" and run.policy is not None:
            run.policy.phase = f"bench {member} V={V} T={T} (timing)"
        fn, guarded = _impl_call(run, impl, member)
        try:
            with bypass(guarded):
                samples, reps, iter_s = _time_impl(run, fn, sets, scale)
        except Exception as exc:  # noqa: BLE001
            run.emit({"kind": "bench", "impl": impl, **base, "status": "error",
                      "error": f"{type(exc).__name__}: {exc}"[:600]})
            continue
        if not samples["total"]:
            run.emit({"kind": "skip", "task": f"timing {impl} {member} V={V} T={T}", "impl": impl, **base,
                      "reason": "budget", "left_s": round(run.left(), 1), "iter_s": iter_s})
            continue
        peak = torch.cuda.max_memory_allocated() / 2**30 if run.device == "cuda" else None
        for row in timing_rows(run, impl, base, counts, samples, reps, len(sets), first[impl], guarded, peak,
                               extra[impl]):
            run.emit(row)
            log(f"bench {impl:<6} {member:<4} V={V:<3} T={T:<5} B={B:<4} {row['mode']:<7} median "
                f"{row['median_ms']:8.3f} ms [{row['p10_ms']:.3f}, {row['p90_ms']:.3f}] n={row['n']}"
                + (f"  {row['over_floor']:.1f}x floor" if "over_floor" in row else ""))
    del sets
    if run.device == "cuda":
        torch.cuda.empty_cache()


def _time_impl(run: Run, fn, sets, scale):
    """Warm-up, then reps x sets timed iterations (forward, then backward, between events of the one runner,
    :func:`lethe.perf.timing.time_stages`); reps shrink to what the budget allows (>= --min-reps, else nothing is
    timed). Returns ({"fwd", "bwd", "total"} -> ms lists, reps, seconds per iteration)."""
    a = run.args
    cuda = run.device == "cuda"
    stages = [lambda i, _: fn(sets[i % len(sets)][0], scale),
              lambda i, o: torch.autograd.grad(o, list(sets[i % len(sets)][0].values()), sets[i % len(sets)][1])]
    w0 = time.perf_counter()
    time_stages(stages, max(1, a.warmup), cuda=cuda)
    iter_s = (time.perf_counter() - w0) / max(1, a.warmup)
    room = run.left() - a.reserve_s
    reps = min(a.reps, int(room / max(iter_s * len(sets), 1e-6)))
    samples = {"fwd": [], "bwd": [], "total": []}
    if reps < min(a.min_reps, a.reps):
        return samples, 0, iter_s
    t = time_stages(stages, reps * len(sets), cuda=cuda)
    samples.update(fwd=t.stages[0], bwd=t.stages[1], total=t.total)
    return samples, reps, iter_s


# ----------------------------------------------------------------------------------------------------------
# summary


def caveats(run: Run) -> list[str]:
    """What a reader of the summary must know to read the numbers: how fla was tuned (and whether capped), where
    its #640 guard was bypassed, what ours and native include."""
    out = []
    p = run.policy
    if p is not None:
        n_tunes = len(p.events)
        capped = [e for e in p.events if e["benchmarked"] < e["after_fla_prune"]]
        bench_capped = [e for e in capped if e["phase"].startswith("bench")]
        out.append(f"fla autotuning: {n_tunes} tunings; configs compiled in parallel threads before benchmarking "
                   f"({'on' if p.parallel else 'off'}); each config benchmarked with do_bench warm-up/rep "
                   f"{p.bench_ms[0]:g}/{p.bench_ms[1]:g} ms instead of Triton's 25/100 ms.")
        if len(capped) > len(bench_capped):
            out.append(f"part (a) ran fla with at most {run.args.fla_correct_configs} configs per autotuned kernel "
                       f"({len(capped) - len(bench_capped)} tunings; nothing is timed there, and the bench "
                       "re-tunes with the full lists); the tile config changes only fla's summation order.")
        if bench_capped:
            out.append(f"fla's bench tunings were CAPPED for {len(bench_capped)} kernels ({p.select} selection; "
                       f"changes: {p.changes}): those kernels may run a config fla's full search would not pick, "
                       "so fla's times there may be slower than its best (an upper bound on its best time).")
        else:
            out.append("fla's bench tunings searched its full config lists (no cap).")
        out.append(f"fla re-tuning policy for the bench: {run.args.fla_retune} (fla's keys ignore T, and B "
                   f"except in its cumsum kernels; shapes tuned at: {run.meta.get('fla_tuned_at', {})}).")
        out.append("fla ran with FLA_DISABLE_BACKEND_DISPATCH=1 (pure Triton, no TileLang/FlashQLA) and its "
                   "defaults otherwise (disable_recompute=False: its backward recomputes forward intermediates).")
    used = sorted({r["member"] for r in run.rows if r.get("bypass_640")})
    if used:
        out.append(f"fla's #640 guard was bypassed (lethe.foreign.fla640.bypass) for: {used}; at K=128 the guarded "
                   "kernel uses BK=128, the tile #640 reports clean; the correctness rows check it.")
    out.append(f"ours: chunk_family(backend='{ours_backend(run.args)}') (the scalar-gate member on its own Triton "
               "kernels); times include its torch prologue/epilogue (float32 conversions, chunk cumsum, gate "
               "products), its gradients are returned in the input dtype.")
    if "native" in run.bench_impls:
        k1 = sorted({r.get("native_k1") for r in run.rows if r.get("kind") == "bench" and r.get("impl") == "native"
                     and r.get("status") == "ok"})
        out.append("native: chunk_family(backend='native') on the same input tensors; the torch chunked forward and "
                   "backward compute in float32 with K1, and K2 where its shape is supported, replaced by the CuTe DSL kernels (K1 in the timed rows: "
                   f"{k1 or 'none timed'}); timed at B*H*T = {run.args.native_head_tokens}"
                   + ("" if native_in_main(run.args) else
                      f" (bench_native cells, with fla and ours timed again at that size), not at {run.args.head_tokens}")
                   + ".")
    return out


def summarize(run: Run, complete: bool) -> dict:
    """Writes ``summary.json`` (schema :data:`SCHEMA`) from every row so far and returns it: correctness,
    agreement, bench checks, median times per cell with fla/ours and native/fla ratios, skips, errors, autotuning,
    caveats and the number of runs in the folder."""
    corr = [r for r in run.rows if r["kind"] == "correct"]
    bench = [r for r in run.rows if r["kind"] == "bench" and r.get("status") == "ok"]
    by = {}
    for r in bench:  # B and H are part of the key: bench_native cells time ours and fla again at a smaller size,
        # and a grid over heads has shapes that differ in H alone (B = 1 at T = 32768)
        by.setdefault((r["member"], r["V"], r["T"], r["B"], r.get("H") or 0, r["mode"]), {})[r["impl"]] = r["median_ms"]
    speed = [{"member": m, "V": V, "T": T, "B": B, "H": H, "mode": mode, **{f"{k}_ms": v for k, v in d.items()},
              **({"fla_over_ours": d["fla"] / d["ours"]} if "fla" in d and "ours" in d else {}),
              **({"native_over_fla": d["native"] / d["fla"]} if "fla" in d and "native" in d else {})}
             for (m, V, T, B, H, mode), d in sorted(by.items())]
    doc = {
        "schema": SCHEMA, "complete": complete, "seconds": round(time.perf_counter() - run.t0, 1),
        "args": {k: v for k, v in vars(run.args).items()}, "meta": run.meta, "ceilings": run.ceilings,
        "spec": SPEC_H200,
        "correctness": [{k: r.get(k) for k in ("impl", "member", "V", "T", "status", "worst_rel_err",
                                                "worst_tensor", "within_pin", "bypass_640", "errors", "error")}
                        for r in corr],
        "agreement": [{k: r.get(k) for k in ("member", "V", "T", "a", "b", "worst_rel_err", "worst_tensor")}
                      for r in run.rows if r["kind"] == "agree"],
        "bench_checks": [{k: r.get(k) for k in ("member", "V", "T", "B", "cell", "vs_ours", "vs_ours_by_impl",
                                                "vs_float64_slice", "nonfinite", "gate")}
                         for r in run.rows if r["kind"] == "bench_check"],
        "speed": speed,
        "skipped": [r for r in run.rows if r["kind"] == "skip"],
        "errors": [{k: r.get(k) for k in ("kind", "impl", "member", "V", "T", "error")}
                   for r in run.rows if r.get("status") == "error"],
        "autotune": {"policy": run.policy.describe() if run.policy else None,
                     "tunings": len(run.policy.events) if run.policy else 0,
                     "precompile_s": round(sum(e["precompile_s"] for e in run.policy.events), 1) if run.policy else 0,
                     "bench_s": round(sum(e["bench_s"] for e in run.policy.events
                                          if e["bench_s"] == e["bench_s"]), 1) if run.policy else 0},
        "caveats": caveats(run),
        "runs": sum(1 for r in run.rows if r["kind"] == "meta"),  # more than one after --append
    }
    (run.out / "summary.json").write_text(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
    return doc


def print_summary(doc: dict) -> None:
    """The summary on stdout, for the device log."""
    print("\n=== (a) correctness: worst max-rel error vs float64 oracle ===")
    for r in doc["correctness"]:
        w = r.get("worst_rel_err")
        print(f"{r['impl']:<6}{r['member']:<5} V={r['V']:<4} T={r['T']:<6} "
              + (f"{w:.2e} ({r['worst_tensor']})" if w is not None else f"ERROR {str(r.get('error'))[:80]}")
              + ("  [#640 bypass]" if r.get("bypass_640") else ""))
    for r in doc["agreement"]:
        print(f"agree {r['a']} vs {r['b']} {r['member']:<5} V={r['V']:<4} T={r['T']:<6} "
              f"{r['worst_rel_err']:.2e} ({r['worst_tensor']})")
    print("\n=== (b) timing: median ms ===")
    for r in doc["speed"]:
        ms = "  ".join(f"{k[:-3]} {v:8.3f}" for k, v in r.items() if k.endswith("_ms"))
        print(f"{r['member']:<5} V={r['V']:<4} T={r['T']:<6} B={r['B']:<5} {r['mode']:<8} {ms}"
              + (f"  fla/ours {r['fla_over_ours']:.2f}" if "fla_over_ours" in r else ""))
    if doc["skipped"]:
        print(f"\nskipped: {len(doc['skipped'])}: " + "; ".join(s["task"] for s in doc["skipped"][:10]))
    print("\ncaveats:")
    for c in doc["caveats"]:
        print(" -", c)


# ----------------------------------------------------------------------------------------------------------
# setup


def resolve_impls(spec: str, dry_run: bool, cuda: bool, cute: bool) -> tuple[str, ...]:
    """Part (b)'s implementations in run order. ``auto``: everything that can run here; native needs CUDA and
    the CuTe DSL (asked for explicitly in the dry run it runs on the CPU, where its backend keeps the torch scan,
    which exercises the plumbing only)."""
    known = DRY_BENCH_IMPLS if dry_run else BENCH_IMPLS
    if spec == "auto":
        asked = {"ours", "torch"} if dry_run else {"ours", "fla"} | ({"native"} if cuda and cute else set())
    else:
        asked = {i for i in spec.split(",") if i}
        if "native" in asked and not dry_run and not (cuda and cute):
            raise SystemExit("--impls native needs CUDA and the CuTe DSL (lethe.kernels.gdn.native.cute_dsl_available())")
    return tuple(i for i in known if i in asked)


def setup_env(args) -> None:
    """Environment that must be in place before Triton's kernels are decorated and fla is imported."""
    os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
    os.environ.setdefault("TRITON_CACHE_DIR", DEFAULT_TRITON_CACHE)
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def run_meta(args, impls, bench_impls, device: str, cute: bool) -> dict:
    """The meta row's fields known before fla is imported (main adds fla's and the device's on the GPU)."""
    return {"impls": list(impls), "bench_impls": list(bench_impls), "device": device, "torch": torch.__version__,
            "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR"),
            "fla_disable_backend_dispatch": os.environ.get("FLA_DISABLE_BACKEND_DISPATCH"),
            "cute_dsl_available": cute, "native": native_meta(args, bench_impls)}


def start_fla(run: Run, wheel: Path | None = None) -> dict:
    """Installs the bounded autotuning (:class:`FlaAutotunePolicy`, from the run's ``--fla-*`` options) on ``run``
    before fla is imported, imports fla and every op the study calls (so all of fla's autotuners exist before any
    tuning), and returns the meta row's fla and device fields. ``wheel``: the carried fla wheel, whose guard is
    checked statically where it exists. Needs fla and the GPU; raises SystemExit when fla cannot be imported."""
    args = run.args
    policy = FlaAutotunePolicy(max_configs=args.fla_max_configs, select=args.fla_select,
                               workers=args.fla_workers, bench_ms=args.fla_tune_bench_ms,
                               parallel=args.fla_precompile == "parallel", sink=run.emit)
    policy.install()  # before fla's modules build their autotuners
    run.policy = policy
    meta = {}
    try:
        import fla
        import triton

        from lethe.foreign import fla640
        fla640.check_guard_target()
        meta.update(fla=getattr(fla, "__version__", None), fla_path=str(Path(fla.__file__).parent),
                    triton=triton.__version__, guard_state=fla640.guard_state(),
                    gpu=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                    fla_dispatch_disabled=bool(__import__("fla.backends", fromlist=["x"])._DISPATCH_DISABLED))
        for m in MEMBERS:
            fla_fn(m)
        meta["fla_autotuners"] = len(policy.tuners)
    except Exception as exc:
        raise SystemExit(f"fla is not importable ({exc}); install the carried wheel (docs/gdn.md §8)") from exc
    if wheel is not None and wheel.exists():
        try:
            from lethe.foreign import fla640

            meta["guard_static_facts"] = fla640.static_guard_facts(wheel)
        except Exception as exc:  # noqa: BLE001
            meta["guard_static_facts"] = {"error": str(exc)[:200]}
    return meta


def run_plan(run: Run, tasks: list[Task]) -> bool:
    """Runs ``tasks`` under ``--budget-s`` (:func:`lethe.perf.budget.run_tasks`): a task whose estimate exceeds the
    time left leaves a ``skip`` row, one that raises a ``task_error`` row, every one that ran a ``task_done`` row,
    and ``summary.json`` is rewritten after each. SIGTERM or the alarm at budget + 10 s leaves a ``killed`` row.
    fla's autotune patch is uninstalled on the way out. Returns whether the plan ran to its end."""

    def failed(task: Task, exc: Exception) -> None:
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            run.emit({"kind": "task_error", "task": task.name, "error": f"OOM: {exc}"[:400], **task_fields(run, task)})
            if run.device == "cuda":
                torch.cuda.empty_cache()
            return
        run.emit({"kind": "task_error", "task": task.name, "error": f"{type(exc).__name__}: {exc}"[:600],
                  "trace": traceback.format_exc()[-2000:], **task_fields(run, task)})
        log(f"task error {task.name}: {exc}")

    def done(task: Task, seconds: float) -> None:
        run.emit({"kind": "task_done", "task": task.name, "seconds": round(seconds, 1)})
        summarize(run, complete=False)

    try:
        with kill_on_signals(run.args.budget_s):
            run_tasks(tasks, left=run.left, estimate=lambda t: estimate_s(run, t), run=lambda t: run_task(run, t),
                      skipped=lambda t, est: run.emit(budget_skip_row(run, t, est)), failed=failed, done=done,
                      name=lambda t: t.name, log=log)
        return True
    except BudgetKill as exc:
        run.emit({"kind": "killed", "reason": str(exc), "left_s": round(run.left(), 1)})
        log(f"stopped: {exc}")
        return False
    finally:
        if run.policy is not None:
            run.policy.uninstall()
