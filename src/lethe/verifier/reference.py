"""The float64 reference: run in its own process, before and apart from any candidate.

Why float64 and why a wrapper that refuses anything else: every gate measures a candidate's distance to the
*mathematical* operator; a reference in the candidate's own precision would share its rounding and hide exactly
the errors the gates look for (accumulator width, reduction order, underflow). ``Float64Reference`` raises
``ReferencePrecisionError`` on any non-float64 floating input, parameter or buffer, so the reference can never
be silently used as (or compared like) a reduced-precision candidate.

``run_reference`` is the sandbox entry point ("lethe.verifier.reference:run_reference"): it executes the
reference source, builds the probe plan, materialises every probe's inputs and returns them together with the
reference outputs, float64 autograd gradients (cross-checked by central finite differences) and the reference's
initial weights, as plain arrays.
"""

from __future__ import annotations

import copy
import math
import sys
import tempfile
import traceback
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lethe.verifier import probes as P
from lethe.verifier import tolerance as tol

TDT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


class ReferencePrecisionError(TypeError):
    """The float64 reference was handed a reduced-precision tensor (input, parameter or buffer)."""


class Float64Reference:
    """A model that may only ever run in float64; see the module docstring for why it refuses."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self._check_model()

    def _check_model(self) -> None:
        for kind, it in (("parameter", self.model.named_parameters()), ("buffer", self.model.named_buffers())):
            for name, t in it:
                if t.is_floating_point() and t.dtype != torch.float64:
                    raise ReferencePrecisionError(f"reference {kind} {name!r} is {t.dtype}, not torch.float64")

    def __call__(self, *args: Any) -> Any:
        self._check_model()
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64:
                raise ReferencePrecisionError(f"reference input {i} is {a.dtype}; the reference runs in float64 only")
        return self.model(*args)


def load_source(src: str, name: str, workdir=None) -> dict:
    """Execute a KernelBench-style source as a fresh module, from a real file in ``workdir``: Triton's @jit
    reads its function's source through ``inspect``, which needs a file; the module is registered in
    ``sys.modules`` so dataclasses and similar introspection work."""
    wd = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="lethe-src-"))
    path = wd / f"{name}.py"
    path.write_text(src)
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    exec(compile(src, str(path), "exec"), mod.__dict__)
    return mod.__dict__


def flatten(out: Any) -> list[torch.Tensor]:
    """Every tensor a forward returned, depth first; Python numbers become 0-d tensors."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten(o)]
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return [torch.tensor(out, dtype=torch.float64)]
    return []


def to_np(t: torch.Tensor) -> np.ndarray:
    """Exact numpy copy; bfloat16 widens to float32 (exact), since numpy has no bfloat16."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy().copy()


def jsonable(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    raise TypeError(f"init/input value of type {type(v).__name__} is not JSON-able")


def _round_state(state: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    """The float64 state a reduced-precision candidate effectively has: weights rounded through ``dtype``."""
    return {k: (v.to(TDT[dtype]).to(torch.float64) if v.is_floating_point() else v.clone())
            for k, v in state.items()}


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when two tensors share any byte of storage."""
    if a.device != b.device:
        return False
    a0, a1 = _storage_span(a)
    b0, b1 = _storage_span(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


def _fd_check(ref: Float64Reference, x64: list, ups: list[torch.Tensor], gin0: torch.Tensor, j: int,
              gen: torch.Generator) -> dict:
    """Central differences of L(x) = sum_k <up_k, y_k(x)> at a few positions of float input j vs autograd."""
    base = x64[j].detach()
    n = base.numel()
    if n == 0:
        return {"checked": 0, "ok": True, "max_err": 0.0}
    pos = torch.randperm(n, generator=gen)[:4].tolist()
    scale = float(gin0.abs().max()) if gin0.numel() else 0.0
    worst, ok = 0.0, True
    for p in pos:
        xv = float(base.view(-1)[p])
        h = 1e-6 * max(1.0, abs(xv))
        vals = []
        for sgn in (1.0, -1.0):
            xs = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in x64]
            xs[j].view(-1)[p] = xv + sgn * h
            with torch.no_grad():
                outs = [o for o in flatten(ref(*xs)) if o.is_floating_point()]
            vals.append(sum(float((u * o).sum()) for u, o in zip(ups, outs, strict=False)))
        fd = (vals[0] - vals[1]) / (2 * h)
        g = float(gin0.view(-1)[p])
        err = abs(fd - g)
        lim = tol.DEFAULT.FD_RTOL * (abs(g) + scale) + 1e-9
        worst = max(worst, err / lim if lim > 0 else 0.0)
        ok = ok and (err <= lim or not math.isfinite(fd))
    return {"checked": len(pos), "ok": bool(ok), "max_err_over_limit": worst}


def run_reference(payload: dict, arrays: dict, workdir) -> tuple[dict, dict]:
    """Sandbox entry point; see the module docstring. Never raises for a broken reference: it reports."""
    torch.set_num_threads(1)
    torch.set_flush_denormal(False)
    seed = int(payload["seed"])
    only = set(payload.get("only_gates") or [])
    out_arrays: dict[str, np.ndarray] = {}
    try:
        ns = load_source(payload["ref_src"], "lethe_reference", workdir)
        for need in ("Model", "get_inputs", "get_init_inputs"):
            if need not in ns:
                raise NameError(f"reference defines no {need}")
        torch.manual_seed(seed)
        init = list(ns["get_init_inputs"]())
        torch.manual_seed(seed)
        model = ns["Model"](*init)
        plan = P.build_plan(ns, seed, interpret=bool(payload.get("interpret")))
    except Exception as exc:  # noqa: BLE001 - a broken reference is a row status, reported not raised
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-4000:]}, {}

    init_json: list = []
    for i, v in enumerate(init):
        if isinstance(v, torch.Tensor):
            out_arrays[f"init/{i}"] = to_np(v)
            init_json.append({"t": "tensor", "key": f"init/{i}", "dtype": str(v.dtype).replace("torch.", "")})
        else:
            init_json.append({"t": "value", "v": jsonable(v)})

    sd = model.state_dict()
    param_shapes = {}
    for k, v in sd.items():
        out_arrays[f"sd/{k}"] = to_np(v)
        param_shapes[k] = [list(v.shape), str(v.dtype).replace("torch.", "")]
    model64 = copy.deepcopy(model).double()
    state64 = {k: v.detach().clone() for k, v in model64.state_dict().items()}
    states = {"float32": state64, "float16": _round_state(state64, "float16"),
              "bfloat16": _round_state(state64, "bfloat16")}
    # A reference may legitimately be float32-only for non-float state (e.g. int buffers): only floats are cast.
    metas = []
    for probe in plan:
        if only and probe.id != "rand0" and not (set(probe.gates) & only):
            continue
        metas.append(_run_probe(ns, model64, states, probe, seed, out_arrays))
    base = next((m for m in metas if m["id"] == "rand0"), None)
    ok = base is None or base["status"] == "ok"
    result = {
        "ok": ok,
        "error": None if ok else f"reference cannot run its own inputs: {base['reason']}",
        "plan_version": P.PLAN_VERSION,
        "probes": metas,
        "init": init_json,
        "param_shapes": param_shapes,
        "shape_globals": P.shape_globals(ns),
    }
    return result, out_arrays


def _run_probe(ns: dict, model64, states, probe: P.Probe, seed: int, arrays: dict) -> dict:
    pid = probe.id
    meta: dict[str, Any] = {"id": pid, "kind": probe.kind, "gates": list(probe.gates), "action": probe.action,
                            "dtype": probe.dtype, "patch": [list(p) for p in probe.patch], "status": "ok",
                            "reason": ""}
    try:
        inputs = P.make_inputs(ns, probe, seed)
        alt = None
        if probe.action == "overwrite":
            alt = P.make_inputs(ns, P.Probe(pid + "_alt", "rand", (), draw=1), seed)
    except Exception as exc:  # noqa: BLE001 - the reference decides which variants are valid
        meta.update(status="na", reason=f"reference get_inputs failed: {type(exc).__name__}: {exc}"[:500])
        return meta
    specs = []
    for j, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            arrays[f"p/{pid}/in{j}"] = to_np(x)
            specs.append({"t": "tensor", "key": f"p/{pid}/in{j}", "dtype": str(x.dtype).replace("torch.", ""),
                          "shape": list(x.shape)})
        else:
            specs.append({"t": "value", "v": jsonable(x)})
    if alt is not None:
        for j, x in enumerate(alt):
            if isinstance(x, torch.Tensor):
                arrays[f"p/{pid}/alt{j}"] = to_np(x)
    meta["inputs"] = specs

    model64.load_state_dict(states[probe.dtype])
    ref = Float64Reference(model64)
    x64 = [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else
           (x.clone() if isinstance(x, torch.Tensor) else x) for x in inputs]
    gen = torch.Generator().manual_seed(probe.rng_seed(seed) + 1)
    try:
        if probe.action == "backward":
            leaves = []
            for x in x64:
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    x.requires_grad_(True)
                    leaves.append(x)
            outs = flatten(ref(*x64))
            fouts = [o for o in outs if o.is_floating_point() and o.requires_grad]
            if not fouts:
                meta.update(status="na", reason="reference output is not differentiable")
                return meta
            ups = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(torch.float64) for o in fouts]
            model64.zero_grad(set_to_none=True)
            torch.autograd.backward(fouts, ups)
            for k, u in enumerate(ups):
                arrays[f"p/{pid}/up{k}"] = u.to(torch.float32).numpy().copy()
            gin_keys = []
            for j, x in enumerate(x64):
                if isinstance(x, torch.Tensor) and x.requires_grad:
                    g = x.grad if x.grad is not None else torch.zeros_like(x)
                    arrays[f"p/{pid}/gin{j}"] = to_np(g)
                    gin_keys.append(j)
            gpar = []
            for name, prm in model64.named_parameters():
                if prm.grad is not None:
                    arrays[f"p/{pid}/gpar/{name}"] = to_np(prm.grad)
                    gpar.append(name)
            meta["grad_inputs"] = gin_keys
            meta["grad_params"] = gpar
            meta["n_up"] = len(ups)
            if gin_keys:
                j0 = gin_keys[0]
                detached = [x.detach() if isinstance(x, torch.Tensor) else x for x in x64]
                meta["fd"] = _fd_check(ref, detached, ups, torch.from_numpy(arrays[f"p/{pid}/gin{j0}"]), j0, gen)
            outs = [o.detach() for o in outs]
        else:
            before = [x.clone() if isinstance(x, torch.Tensor) else None for x in x64]
            with torch.no_grad():
                outs = flatten(ref(*x64))
            meta["ref_mutates"] = [j for j, (a, b) in enumerate(zip(x64, before, strict=True))
                                   if b is not None and not torch.equal(a, b)]
            meta["ref_aliases_input"] = any(overlaps(o, x) for o in outs for x in x64 if isinstance(x, torch.Tensor))
            if probe.kind == "subnormal":
                tiny = tol.TINY[probe.dtype]
                xf = [torch.where(x.abs() < tiny, torch.zeros_like(x), x)
                      if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in x64]
                with torch.no_grad():
                    fouts = flatten(ref(*xf))
                for k, o in enumerate(fouts):
                    o = o.detach()
                    if o.is_floating_point():
                        o = torch.where(o.abs() < tiny, torch.zeros_like(o), o)
                    arrays[f"p/{pid}/ftz{k}"] = to_np(o)
            if probe.kind in ("cancel", "accum"):  # sum|terms| of rows whose output cancels
                xa = [x.abs() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in x64]
                with torch.no_grad():
                    aouts = flatten(ref(*xa))
                meta["abs_scale"] = max((tol.output_scale(to_np(o)) for o in aouts if o.is_floating_point()),
                                        default=0.0)
            if probe.kind == "offset":  # ORD-03: applies to shift-invariant operators; their sensitivity
                unmutated = [b if b is not None else x for x, b in zip(x64, before, strict=True)]
                cond = P.offset_condition(lambda *xs: flatten(ref(*xs)), unmutated, [o.detach() for o in outs],
                                          probe, seed)
                if not cond["applies"]:
                    for j in range(len(inputs)):
                        arrays.pop(f"p/{pid}/in{j}", None)  # never shipped to the candidate
                    meta.update(status="na", reason=cond["reason"][:500])
                    return meta
                for k, sk in enumerate(cond["sens"]):
                    if sk is not None:
                        arrays[f"p/{pid}/sens{k}"] = to_np(sk)
                meta["offset"] = {k: cond[k] for k in ("offset", "draws", "invariance_dev")}
    except Exception as exc:  # noqa: BLE001 - an input the reference cannot run is "na" for its gate
        meta.update(status="na", reason=f"reference raised: {type(exc).__name__}: {exc}"[:500])
        return meta
    if not outs:
        meta.update(status="na", reason="reference returned no tensor")
        return meta
    ometa = []
    for k, o in enumerate(outs):
        o = o.detach()
        arrays[f"p/{pid}/ref{k}"] = to_np(o)
        ometa.append({"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")})
    meta["outputs"] = ometa
    in_shapes = [tuple(s["shape"]) for s in specs if s["t"] == "tensor"]
    meta["N"] = tol.reduction_length(in_shapes or [()], [tuple(o["shape"]) for o in ometa])
    return meta
