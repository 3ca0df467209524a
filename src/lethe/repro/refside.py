"""The reference process of a repro: the float64 reference on variants of one probe.

Sandbox entry point "lethe.repro.refside:run_variants". It loads the reference exactly as the verifier's
reference process does, finds the failing probe in the plan (the plan is a pure function of source, seed and
the interpreter flag), and runs every requested variant of it through the verifier's own probe runner
(``lethe.verifier.reference._run_probe``), so a variant's outputs, its gate-specific extras (``abs_scale`` of a
cancellation probe, the flush-to-zero reference of a subnormal one, the measured sensitivity of an offset
one) and its reduction length are what the verifier itself would compute. A variant is either

* a shape variant: the probe with other values for its shape knobs (``patch``), inputs re-derived from
  ``get_inputs`` under the probe's own seed; or
* a slice: the inputs of a shape variant cut to windows along output axes (:func:`slice_inputs`).

Each variant's arrays are stored under its own id (``p/<vid>/...``), so one process runs a whole round of
candidates and one candidate process runs them all after it.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import replace

import torch

from lethe.verifier import probes as P
from lethe.verifier import reference as R


def slice_inputs(inputs: list, out_ndim: int, windows: list[list]) -> list:
    """Cut every tensor input along the axes that line up with the output axes in ``windows``.

    A window is ``[axis, lo, hi, size, align]``: output axis ``axis`` of size ``size`` is cut to ``[lo, hi)``.
    An input's matching axis is the same index (``align`` "lead": batch-like leading axes, a reduction's
    kept axes) or the same index from the end (``align`` "trail": elementwise ops with broadcast operands); an
    input is cut there only when that axis has the output's size. Whether the cut is legitimate for the
    operator (row-wise, elementwise) is never assumed: the caller keeps a slice only when the reference on
    the cut inputs equals the cut of the reference's outputs."""
    out = list(inputs)
    for axis, lo, hi, size, align in windows:
        for j, x in enumerate(out):
            if not isinstance(x, torch.Tensor):
                continue
            ia = axis if align == "lead" else axis - out_ndim + x.ndim
            if 0 <= ia < x.ndim and x.shape[ia] == size:
                out[j] = x.narrow(ia, lo, hi - lo).contiguous()
    return out


@contextlib.contextmanager
def _given_inputs(inputs: list):
    """Make the verifier's probe runner use ``inputs`` instead of building them from ``get_inputs``: its one
    call to ``probes.make_inputs`` is answered with them (this process is a sandboxed child of its own)."""
    real = P.make_inputs
    P.make_inputs = lambda ns, probe, seed: [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    try:
        yield
    finally:
        P.make_inputs = real


def run_variants(payload: dict, arrays: dict, workdir) -> tuple[dict, dict]:
    """Sandbox entry point; see the module docstring. ``payload``: ref_src, seed, interpret, probe (the failing
    probe's id), variants [{"vid", "patch": [[knob, value], ...], "windows": [...], "out_ndim"}]."""
    torch.set_num_threads(1)
    torch.set_flush_denormal(False)
    seed = int(payload["seed"])
    ns = R.load_source(payload["ref_src"], "lethe_reference", workdir)
    torch.manual_seed(seed)
    init = list(ns["get_init_inputs"]())
    torch.manual_seed(seed)
    model = ns["Model"](*init)
    plan = P.build_plan(ns, seed, interpret=bool(payload.get("interpret")))
    probe = next((p for p in plan if p.id == payload["probe"]), None)
    if probe is None:
        return {"ok": False, "error": f"probe {payload['probe']!r} is not in the plan"}, {}
    out: dict = {}
    init_json = []
    for i, v in enumerate(init):
        if isinstance(v, torch.Tensor):
            out[f"init/{i}"] = R.to_np(v)
            init_json.append({"t": "tensor", "key": f"init/{i}", "dtype": str(v.dtype).replace("torch.", "")})
        else:
            init_json.append({"t": "value", "v": R.jsonable(v)})
    sd = model.state_dict()
    param_shapes = {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sd.items()}
    for k, v in sd.items():
        out[f"sd/{k}"] = R.to_np(v)
    model64 = copy.deepcopy(model).double()
    state64 = {k: v.detach().clone() for k, v in model64.state_dict().items()}
    states = {"float32": state64, "float16": R._round_state(state64, "float16"),
              "bfloat16": R._round_state(state64, "bfloat16")}
    metas = []
    for var in payload["variants"]:
        pv = replace(probe, patch=tuple((str(k), int(v)) for k, v in var.get("patch", probe.patch)), skip="")
        scratch: dict = {}
        if var.get("windows"):
            base = P.make_inputs(ns, pv, seed)
            with _given_inputs(slice_inputs(base, int(var["out_ndim"]), var["windows"])):
                meta = R._run_probe(ns, model64, states, pv, seed, scratch)
        else:
            meta = R._run_probe(ns, model64, states, pv, seed, scratch)
        vid = var["vid"]
        for k, v in scratch.items():
            out[f"p/{vid}/" + k[len(f"p/{probe.id}/"):]] = v
        meta = dict(meta, id=vid, base_id=probe.id)
        for s in meta.get("inputs", []):
            if s["t"] == "tensor":
                s["key"] = f"p/{vid}/" + s["key"][len(f"p/{probe.id}/"):]
        metas.append(meta)
    return {"ok": True, "probe": probe.to_dict(), "probes": metas, "init": init_json, "param_shapes": param_shapes,
            "knobs": shape_knobs(ns, seed)}, out


def shape_knobs(ns: dict, seed: int) -> list[list]:
    """The shape knobs the plan varies (``probes.build_plan``'s rule): the module-level ints ``get_inputs``
    reads and ``get_init_inputs`` does not, else every dimension size >= 2 of the floating base inputs."""
    globs = P.shape_globals(ns)
    if globs:
        return [[name, v] for name, v in globs.items()]
    base = P.call_get_inputs(ns, seed, ())
    sizes = sorted({s for x in base if isinstance(x, torch.Tensor) and x.is_floating_point() for s in x.shape
                    if s >= 2})
    return [[f"__dim__:{s}", s] for s in sizes]


def knobs(payload: dict, arrays: dict, workdir) -> tuple[dict, dict]:
    """Sandbox entry point "lethe.repro.refside:knobs": the reference's shape knobs (:func:`shape_knobs`)."""
    torch.set_num_threads(1)
    ns = R.load_source(payload["ref_src"], "lethe_reference", workdir)
    return {"knobs": shape_knobs(ns, int(payload["seed"]))}, {}
