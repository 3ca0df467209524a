"""``lethe repro``: one recorded gate failure as a minimised, standalone failing case.

Given a verdict row and one of its failed gates, :func:`make_repro`

1. re-derives the gate's first failing probe from the row's seed and plan (the probe inputs are a pure function
   of the reference source, the seed and the plan) and runs it: the reference in its own sandboxed process
   (:mod:`lethe.repro.refside`), the candidate in another (the verifier's own ``worker.run_candidate``: it is
   untrusted code), graded by the verifier's own gate function;
2. confirms the failure reproduces the same way as recorded (:func:`same_way`);
3. shrinks (:func:`shrink`): shape knobs first (each knob halved, and set to the primes below the halves, one
   knob at a time, all candidates of a round in one reference and one candidate process), then windows
   around the first bad element along each output axis, kept only where the reference on the cut input
   equals the cut of the reference's output (the operator is elementwise or row-wise along that axis). A
   variant is kept when it fails the same gate the same way and has fewer input elements;
4. writes the directory (:func:`write_directory`): ``test_repro.py`` (torch + pytest), ``repro_harness.py``
   (a copy of :mod:`lethe.repro.standalone`), ``candidate.py`` and ``reference.py`` (the sources),
   ``inputs.safetensors`` (inputs, weights, the float64 expectation, the gate's tolerance, what the candidate
   returned in the sandbox) and ``README.md``.

The tolerance stored is the one the gate applied: the gate function runs as in ``lethe verify`` and every
comparison it makes is recorded (:func:`_recording`), so no tolerance rule is restated here.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lethe.repro.scope import DEFAULT_BUDGET_S, SUPPORTED_GATES, UNSUPPORTED_GATES
from lethe.verifier import gates as G
from lethe.verifier import probes as P
from lethe.verifier import profiles as PR

TENSOR_FILE = "inputs.safetensors"
# The reference on a cut input must equal the cut of its output to this relative precision (float64
# rounding of a reordered but mathematically identical computation stays far below it).
SLICE_RTOL = 1e-9


class ReproError(Exception):
    """Why no repro was written; ``code`` is the CLI exit code (lethe.verifier.verdict's scheme)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


@dataclass
class Context:
    ref_src: str
    cand_src: str
    seed: int
    device: str
    profile: PR.Profile
    gate: str
    probe: str
    interpret: bool
    runner: Any
    timeout_s: float = 300.0
    memory_mb: int = 8192


@dataclass
class Trial:
    """One variant of the failing probe, run and graded."""

    vid: str
    patch: list
    windows: list
    status: str = "na"  # the gate's status on this variant alone
    entry: dict = field(default_factory=dict)  # the gate's per-probe evidence
    meta: dict = field(default_factory=dict)
    comparisons: list = field(default_factory=list)  # (check key, ref, cand, dtype, tol, alt, result)
    ref_arrays: dict = field(default_factory=dict)
    cand_arrays: dict = field(default_factory=dict)
    cand_result: dict = field(default_factory=dict)
    init: list = field(default_factory=list)

    @property
    def elements(self) -> int:
        return sum(int(np.prod(s["shape"])) for s in self.meta.get("inputs", []) if s["t"] == "tensor")

    @property
    def signature(self) -> dict | None:
        return signature(self.entry)


def signature(entry: dict) -> dict | None:
    """How one probe failed, from the gate's per-probe evidence (the same structure in a stored row and a
    fresh grading): the first failing output or gradient check and the classes of its bad elements
    (value beyond tolerance, new / lost / wrong non-finite, shape), or the probe-level reason's class."""
    if entry.get("status") != "fail":
        return None
    if "outputs" in entry:
        items = [(f"output {k}", s) for k, s in enumerate(entry["outputs"])]
    elif "checks" in entry:
        items = sorted(entry["checks"].items())
    else:
        reason = entry.get("reason", "")
        cls = "raised" if "candidate raised" in reason else "outputs" if "outputs, reference" in reason else "other"
        return {"where": "probe", "classes": [cls]}
    for where, s in items:
        if s.get("ok", True):
            continue
        if s.get("why") == "shape":
            return {"where": where, "classes": ["shape"]}
        if "n_bad" not in s:
            return {"where": where, "classes": [s.get("why", "other")]}
        nf = {k: int(s.get(k, 0)) for k in ("new_nonfinite", "lost_nonfinite", "wrong_nonfinite")}
        classes = [k for k, v in nf.items() if v]
        if int(s["n_bad"]) - sum(nf.values()) > 0:
            classes.append("value")
        return {"where": where, "classes": sorted(classes)}
    return {"where": "probe", "classes": ["other"]}


def same_way(original: dict | None, new: dict | None) -> bool:
    """A variant fails "the same way" when the same output (or gradient) fails with a non-empty subset of the
    original's classes of bad elements. A subset, not the same set: cutting to a window around the first bad
    element legitimately leaves out other bad elements of other classes, while a class the original never
    showed would be a different failure."""
    if original is None or new is None:
        return False
    return new["where"] == original["where"] and bool(new["classes"]) and set(new["classes"]) <= set(
        original["classes"])


@contextlib.contextmanager
def _recording(into: list):
    """Record every comparison the gate functions make (they call ``gates.compare`` by its module name), so
    the repro stores exactly the tolerance the gate applied."""
    real = G.compare

    def compare(ref, cand, dtype, tol_arr, profile, alt_ref=None):
        res = real(ref, cand, dtype, tol_arr, profile, alt_ref=alt_ref)
        into.append((ref, cand, dtype, tol_arr, alt_ref, res))
        return res

    G.compare = compare
    try:
        yield
    finally:
        G.compare = real


def _send(arrays: dict) -> dict:
    """What the candidate may receive (lethe.verifier.api's rule): weights, init inputs, probe inputs and
    upstream gradients, never a reference output."""
    return {k: v for k, v in arrays.items()
            if k.startswith(("sd/", "init/")) or re.match(r"p/.*/(in|alt|up)\d+$", k)}


def run_round(ctx: Context, variants: list[dict]) -> list[Trial]:
    """Run and grade a batch of variants: one reference process, one candidate process."""
    from lethe.verifier import api

    res = ctx.runner("lethe.repro.refside:run_variants",
                     payload={"ref_src": ctx.ref_src, "seed": ctx.seed, "interpret": ctx.interpret,
                              "probe": ctx.probe, "variants": variants},
                     timeout_s=api.REF_TIMEOUT_S, memory_mb=api.REF_MEMORY_MB, device="cpu",
                     max_file_mb=P.REF_RESULT_MB)
    rres = res.result or {}
    if res.status != "ok" or not rres.get("ok"):
        raise ReproError(f"reference process failed: {res.status} {rres.get('error') or res.detail}"[:600], 4)
    rarr = res.arrays or {}
    trials = [Trial(vid=v["vid"], patch=v.get("patch", []), windows=v.get("windows", []), meta=m)
              for v, m in zip(variants, rres["probes"], strict=True)]
    ok = [t for t in trials if t.meta["status"] == "ok"]
    if not ok:
        return trials
    env = {"TRITON_INTERPRET": "1"} if ctx.interpret else {"TRITON_INTERPRET": None}
    payload = {"cand_src": ctx.cand_src, "seed": ctx.seed, "device": ctx.device, "init": rres["init"],
               "param_shapes": rres["param_shapes"],
               "probes": [{k: t.meta[k] for k in ("id", "action", "dtype", "inputs")} for t in ok]}
    cres = ctx.runner("lethe.verifier.worker:run_candidate", payload=payload, arrays=_send(rarr),
                      timeout_s=ctx.timeout_s, memory_mb=ctx.memory_mb, device=ctx.device, env=env)
    cand = cres.result or {}
    if cres.status != "ok" or cand.get("stage") != "ok":
        for t in trials:
            t.status, t.entry = "error", {"status": "error",
                                          "reason": f"candidate {cres.status}: {cand.get('error') or cres.detail}"}
        return trials
    carr = cres.arrays or {}
    for t in ok:
        rec: list = []
        b = G.Bundle(ref={"probes": [t.meta]}, ref_arrays=rarr, cand=cand, cand_arrays=carr, profile=ctx.profile,
                     seed=ctx.seed, device=ctx.device)
        with _recording(rec):
            gr = G.GATES[ctx.gate](b)
        t.status = gr.status
        t.entry = gr.evidence.get("probes", {}).get(t.vid, {"status": gr.status, "reason": gr.reason})
        prefix = f"p/{t.vid}/"
        by_id = {id(v): k for k, v in rarr.items() if k.startswith(prefix)}
        t.comparisons = [(by_id[id(r)][len(prefix):], r, c, d, tl, a, s) for r, c, d, tl, a, s in rec
                         if id(r) in by_id]
        t.ref_arrays = {k: v for k, v in rarr.items() if k.startswith((prefix, "sd/", "init/"))}
        t.cand_arrays = {k: v for k, v in carr.items() if k.startswith(f"c/{t.vid}/")}
        t.cand_result = {"declared_dtypes": cand.get("declared_dtypes"), "weights_copied": cand.get("weights_copied"),
                         "probe": (cand.get("probes") or {}).get(t.vid, {})}
        t.init = rres["init"]
    return trials


def _knob_values(v: int) -> list[int]:
    """Smaller values for a shape knob of value ``v``: its halvings down to 1, and the largest prime at or
    below each (a size that is a multiple of no block size keeps a tail-handling failure alive)."""
    out = set()
    h = v // 2
    while h >= 1:
        out.add(h)
        p = next((n for n in range(h, 1, -1) if P._is_prime(n)), None)
        if p is not None:
            out.add(p)
        h //= 2
    return sorted(x for x in out if x < v)


def _patch(knobs: dict, values: dict) -> list:
    return [[k, int(v)] for k, v in sorted(values.items()) if v != knobs[k]]


def _slice_valid(prev: Trial, new: Trial, axis: int, lo: int, hi: int, size: int) -> bool:
    """The reference on the cut inputs equals the cut of the reference's outputs (every output)."""
    k = 0
    while f"p/{prev.vid}/ref{k}" in prev.ref_arrays:
        old = prev.ref_arrays[f"p/{prev.vid}/ref{k}"]
        got = new.ref_arrays.get(f"p/{new.vid}/ref{k}")
        if got is None:
            return False
        want = old
        if old.ndim > axis and old.shape[axis] == size:
            want = np.take(old, np.arange(lo, hi), axis=axis)
        if want.shape != got.shape:
            return False
        if want.dtype.kind == "f":
            scale = float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0.0)))) if want.size else 0.0
            if not np.allclose(got, want, rtol=SLICE_RTOL, atol=SLICE_RTOL * scale, equal_nan=True):
                return False
        elif not np.array_equal(got, want):
            return False
        k += 1
    return k > 0


def shrink(ctx: Context, first: Trial, knobs: dict, budget_s: float, log=None) -> tuple[Trial, list[str]]:
    """Delta-debug ``first`` to the smallest variant that fails the same gate the same way; returns it and the
    steps taken, in words. Stops when no candidate of a round helps or ``budget_s`` is spent."""
    t_end = time.monotonic() + budget_s
    want = first.signature
    best, steps = first, []
    values = dict(knobs)
    values.update({k: v for k, v in first.patch})
    n = 0

    def better(trials: list[Trial], check=None) -> Trial | None:
        good = [t for t in trials if same_way(want, t.signature) and t.elements < best.elements
                and (check is None or check(t))]
        return min(good, key=lambda t: (t.elements, t.vid)) if good else None

    progress = True
    while progress and time.monotonic() < t_end:
        progress = False
        variants = []
        for name, v in sorted(values.items()):
            for nv in _knob_values(v):
                n += 1
                variants.append({"vid": f"v{n}", "patch": _patch(knobs, {**values, name: nv})})
        if not variants:
            break
        pick = better(run_round(ctx, variants))
        if pick is not None:
            changed = {k: v for k, v in pick.patch} | {k: knobs[k] for k in knobs if k not in dict(pick.patch)}
            steps.append(f"shape knobs {dict(sorted(changed.items()))}: {best.elements} -> {pick.elements} elements")
            values = changed
            best, progress = pick, True
    if best.meta.get("action") == "backward":
        return best, steps  # gradients do not line up with output axes: shape knobs only
    where = want["where"]
    k = int(where.split()[1]) if where.startswith("output ") else 0
    axis = 0
    while time.monotonic() < t_end:
        shape = best.meta["outputs"][k]["shape"]
        if axis >= len(shape):
            break
        size = shape[axis]
        comp = next((c for c in best.comparisons if c[0] == f"ref{k}" and not c[6]["ok"]), None)
        if size <= 1 or comp is None or not comp[6].get("first_bad"):
            axis += 1
            continue
        t = comp[6]["first_bad"][0][axis]
        in_ndims = {len(s["shape"]) for s in best.meta["inputs"] if s["t"] == "tensor"}
        aligns = ["lead"] + (["trail"] if in_ndims != {len(shape)} else [])
        variants, spans = [], {}
        length = 1
        while length < size:
            lo = max(0, min(t - length // 2, size - length))
            for align in aligns:
                n += 1
                vid = f"v{n}"
                spans[vid] = (lo, lo + length)
                variants.append({"vid": vid, "patch": best.patch, "out_ndim": len(shape),
                                 "windows": best.windows + [[axis, lo, lo + length, size, align]]})
            length *= 2
        prev = best
        pick = better(run_round(ctx, variants),
                      check=lambda tr, prev=prev, size=size, axis=axis: _slice_valid(prev, tr, axis, *spans[tr.vid],
                                                                                      size))
        if pick is not None:
            lo, hi = spans[pick.vid]
            steps.append(f"output axis {axis} cut to [{lo}, {hi}) of {size}: {best.elements} -> {pick.elements} "
                         f"elements")
            best = pick
        axis += 1
    if log:
        for s in steps:
            log(s)
    return best, steps


def recorded_probe(row: dict, gate: str) -> tuple[str, dict]:
    """The first failing probe of ``gate`` in ``row`` (the gate's reason starts with its id) and its recorded
    per-probe evidence."""
    g = row["gates"].get(gate)
    if g is None or g["status"] != "fail":
        raise ReproError(f"gate {gate} did not fail in row {row['id']!r} (status "
                         f"{g['status'] if g else 'absent'}): there is no failure to reproduce", 2)
    pid = g["reason"].split(":", 1)[0].strip()
    ev = json.loads(g.get("evidence") or "{}")
    entry = ev.get("probes", {}).get(pid)
    if entry is None:
        raise ReproError(f"row {row['id']!r} records no evidence for probe {pid!r} of {gate}", 2)
    return pid, entry


def make_repro(row: dict, gate: str, out_dir: str | Path, *, ref_path: str | None = None,
               cand_path: str | None = None, shrink_input: bool = True, budget_s: float = DEFAULT_BUDGET_S,
               runner=None, device: str | None = None, command: str = "", log=None) -> dict:
    """Write a standalone repro of ``gate``'s failure in ``row`` to ``out_dir``; returns a summary dict
    (``original_elements``, ``elements``, ``shrink_factor``, ``signature``, ``steps``, ``files``...).

    Raises :class:`ReproError` (with the CLI's exit code) when the gate is not one a stored input can show,
    the row's gate did not fail, the row's device is not available here, or the failure does not reproduce.
    ``device`` re-derives the case on another device than the row's (the summary says so)."""
    from lethe.verifier import api
    from lethe.verifier.reference import read_source

    if gate in UNSUPPORTED_GATES:
        raise ReproError(f"{gate} has no standalone repro: {UNSUPPORTED_GATES[gate]}", 2)
    if gate not in SUPPORTED_GATES:
        raise ReproError(f"unknown gate {gate!r}; gates are {', '.join(G.GATE_IDS)}", 2)
    pid, recorded = recorded_probe(row, gate)
    src = json.loads(row.get("sources") or "{}")
    rp, cp = ref_path or src.get("ref_path"), cand_path or src.get("cand_path")
    if not rp or not cp:
        raise ReproError("the row records no source paths; pass the reference and candidate paths", 2)
    try:
        ref_src, cand_src = read_source(rp), read_source(cp)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise ReproError(f"cannot read the sources: {type(exc).__name__}: {exc}", 2) from exc
    dev = device or row["device"]
    if dev == "cuda" and not torch.cuda.is_available():
        raise ReproError(f"row {row['id']!r} was graded on cuda and this machine has no CUDA device "
                         f"(pass --device cpu to re-derive it on the CPU)", 3)
    if dev == "cpu" and api.CUDA_SOURCE.search(cand_src):
        raise ReproError("CUDA (load_inline) candidate: not runnable on a CPU-only machine", 3)
    ctx = Context(ref_src=ref_src, cand_src=cand_src, seed=int(row["seed"]), device=dev,
                  profile=PR.get(row["profile"]), gate=gate, probe=pid,
                  interpret=dev == "cpu" and "triton" in cand_src, runner=runner or api._sandbox())
    t0 = time.monotonic()
    first = run_round(ctx, [{"vid": pid}])[0]
    want = signature(recorded)
    if not same_way(want, first.signature) or set(first.signature["classes"]) != set(want["classes"]):
        raise ReproError(f"{gate} on probe {pid} does not reproduce as recorded: recorded {want}, now "
                         f"{first.signature or first.status} ({first.entry.get('reason', '')[:300]})", 1)
    knobs = {}
    if shrink_input:
        knobs = {k: v for k, v in _knobs(ctx)}
    best, steps = (shrink(ctx, first, knobs, max(0.0, budget_s - (time.monotonic() - t0)), log=log)
                   if shrink_input else (first, []))
    info = {"id": row["id"], "gate": gate, "probe": pid, "profile": row["profile"], "seed": int(row["seed"]),
            "device": dev, "row_device": row["device"], "signature": best.signature,
            "original_elements": first.elements, "elements": best.elements,
            "shrink_factor": first.elements / best.elements if best.elements else None,
            "patch": best.patch, "windows": best.windows, "steps": steps, "command": command,
            "shrink_seconds": round(time.monotonic() - t0, 1)}
    info["files"] = write_directory(Path(out_dir), ctx, best, info)
    return info


def _knobs(ctx: Context) -> list:
    """The reference's shape knobs (lethe.repro.refside.shape_knobs), read by a reference process."""
    res = ctx.runner("lethe.repro.refside:knobs", payload={"ref_src": ctx.ref_src, "seed": ctx.seed},
                     timeout_s=120.0, device="cpu")
    if res.status != "ok":
        raise ReproError(f"reference process failed: {res.status} {res.detail}"[:600], 4)
    return res.result["knobs"]


def _tensor(a, dtype: str | None = None) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(np.asarray(a)).copy())
    return t.to(getattr(torch, dtype)) if dtype else t


def case_tensors(best: Trial, ctx: Context) -> tuple[dict[str, torch.Tensor], dict]:
    """The tensor file's contents and the case description for one graded variant."""
    from lethe.repro import standalone as S

    prefix = f"p/{best.vid}/"
    tensors: dict[str, torch.Tensor] = {}
    inputs = []
    for j, s in enumerate(best.meta["inputs"]):
        if s["t"] == "tensor":
            tensors[f"in/{j}"] = _tensor(best.ref_arrays[s["key"]], s["dtype"])
            inputs.append({"t": "tensor", "key": f"in/{j}", "dtype": s["dtype"]})
        else:
            inputs.append(s)
    init = []
    for s in best.init:
        if s["t"] == "tensor":
            tensors[s["key"]] = _tensor(best.ref_arrays[s["key"]], s["dtype"] if s["dtype"] in S.DTYPES else None)
        init.append(s)
    for k, v in best.ref_arrays.items():
        if k.startswith("sd/"):
            tensors[k] = _tensor(v)
        elif k.startswith(prefix) and re.match(r"up\d+$", k[len(prefix):]):
            tensors[f"up/{k[len(prefix) + 2:]}"] = _tensor(v)
    checks = []
    for key, ref, cand, dtype, tol_arr, alt, _res in best.comparisons:
        tensors[f"expected/{key}"] = _tensor(ref)
        tensors[f"tolerance/{key}"] = _tensor(np.asarray(tol_arr, dtype=np.float64))
        tensors[f"lethe/{key}"] = _tensor(cand)
        if alt is not None:
            tensors[f"alt/{key}"] = _tensor(alt)
        checks.append({"key": key, "skip_nan": bool(ctx.profile.allow_nan_nonpropagation), "dtype": dtype})
    spec = {"gate": ctx.gate, "probe": ctx.probe, "seed": ctx.seed, "device": ctx.device,
            "dtype": best.meta["dtype"], "action": best.meta["action"], "inputs": inputs, "init": init,
            "checks": checks, "n_out": len(best.meta["outputs"]), "interpret": ctx.interpret,
            "raised": "error" in (best.cand_result.get("probe") or {}),
            "profile": ctx.profile.name}
    return tensors, spec


def write_directory(out: Path, ctx: Context, best: Trial, info: dict) -> list[str]:
    """Write the repro directory (see the module docstring); returns the file names written."""
    from lethe.repro import standalone as S
    from lethe.repro import template

    out.mkdir(parents=True, exist_ok=True)
    tensors, spec = case_tensors(best, ctx)
    S.write_tensors(out / TENSOR_FILE, tensors, {"case": json.dumps(spec, sort_keys=True)})
    (out / "candidate.py").write_text(ctx.cand_src, encoding="utf-8")
    (out / "reference.py").write_text(ctx.ref_src, encoding="utf-8")
    shutil.copyfile(Path(S.__file__), out / "repro_harness.py")
    (out / "test_repro.py").write_text(template.test_file(spec, info), encoding="utf-8")
    margin = [c[6] for c in best.comparisons if not c[6]["ok"]]
    (out / "README.md").write_text(template.readme(spec, info, margin[0] if margin else {}), encoding="utf-8")
    (out / "case.json").write_text(json.dumps(info, indent=1, sort_keys=True, default=str) + "\n")
    return sorted(p.name for p in out.iterdir())
