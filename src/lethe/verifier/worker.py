"""The candidate process: load the candidate once, run every probe, report outputs and in-process facts.

Sandbox entry point "lethe.verifier.worker:run_candidate". It receives probe inputs, the reference's initial
weights and the upstream gradients, never a reference output, so nothing the candidate does in its own process
(monkey-patching torch, reading memory, caching) can make a comparison come out right: all grading happens in
the parent on the arrays this function returns.

Facts that can only be observed in-process are measured here and returned as plain data: output device and
dtype (RES-01), storage aliasing between outputs, inputs, parameters and earlier outputs, input mutation and
"a later call overwrote an earlier output" (ORD-02), and, on a GPU, the compiled Triton kernels' resource
metadata (RES-02).
"""

from __future__ import annotations

import copy
import os
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lethe.corpora import sakana
from lethe.sandbox import extensions
from lethe.verifier.reference import flatten, load_source, overlaps, to_np

TDT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
       "int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8,
       "int16": torch.int16}
NO_CUDA_MARKERS = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "No CUDA GPUs are available",
                   "CUDA driver initialization failed", "no CUDA-capable device", "0 active drivers")


def interpreter_limitation(exc: BaseException, tb: str) -> bool:
    """True for failures of the Triton CPU interpreter itself, not of the kernel (pitfalls.md): a TypeError or
    NotImplementedError raised inside triton/runtime/interpreter.py, e.g. runtime loop bounds under numpy 2."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    if "only 0-dimensional arrays can be converted to Python scalars" in str(exc):
        return True
    return isinstance(exc, (TypeError, NotImplementedError)) and "triton/runtime/interpreter.py" in tb


def _err(exc: BaseException) -> dict:
    tb = traceback.format_exc()
    msg = f"{type(exc).__name__}: {exc}"[:800]
    return {"error": msg, "trace": tb[-2000:], "interp_limit": interpreter_limitation(exc, tb),
            "no_cuda": any(m in msg for m in NO_CUDA_MARKERS)}


def _load_inputs(spec: list[dict], arrays: dict, device: str, dtype_override: str | None = None,
                 prefix_swap: tuple[str, str] | None = None) -> list[Any]:
    xs = []
    for s in spec:
        if s["t"] != "tensor":
            xs.append(s["v"])
            continue
        key = s["key"]
        if prefix_swap is not None:
            key = key.replace(*prefix_swap)
        a = arrays[key]
        # On a GPU the upload is already a fresh copy that the candidate cannot reach past; only a CPU tensor
        # needs its own host copy, so the candidate never shares (or writes into) the received buffer.
        t = torch.from_numpy(np.array(a) if device == "cpu" else a).to(TDT[s["dtype"]])
        xs.append(t.to(device))
    return xs


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _tensor_facts(outs: list[torch.Tensor], xs: list, model: torch.nn.Module) -> dict:
    owned = [t for t in list(model.parameters()) + list(model.buffers())]
    return {
        "devices": [o.device.type for o in outs],
        "dtypes": [str(o.dtype).replace("torch.", "") for o in outs],
        "alias_input": any(overlaps(o, x) for o in outs for x in xs if isinstance(x, torch.Tensor)),
        "alias_param": any(overlaps(o, p) for o in outs for p in owned),
    }


def ieee_fp32_libraries() -> dict:
    """Make the vendor libraries the candidate calls compute float32 as float32 (no TF32) and say how they are set.

    torch's CUDA default lets cuDNN convolutions round their float32 operands to TF32 (10-bit mantissa), a
    property of the process, not of the kernel under test: with it, a candidate that calls a stock convolution
    (and KernelBench's own reference code) fails CMP-01 against the float64 reference under every profile, a
    false fail of correct code. The probes therefore run with TF32 off for cuDNN and cuBLAS and the float32
    matmul precision at "highest"; a candidate that asks for TF32 itself (its own MMA code, or setting the flags
    in its source) is still judged for what it computes. On the CPU these settings change nothing.
    """
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return library_fp32_state()


def library_fp32_state() -> dict:
    """The float32 library settings in force (recorded after the probes: a candidate may have changed them)."""
    return {"cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def run_candidate(payload: dict, arrays: dict, workdir) -> tuple[dict, dict]:
    """Sandbox entry point; see the module docstring."""
    torch.set_num_threads(1)
    ieee_fp32_libraries()
    device = payload.get("device", "cpu")
    seed = int(payload["seed"])
    out: dict[str, np.ndarray] = {}
    t_entry = time.perf_counter()

    def init_inputs() -> list:
        return [torch.from_numpy(np.array(arrays[s["key"]])).to(TDT.get(s["dtype"], torch.float32))
                if s["t"] == "tensor" else s["v"] for s in payload["init"]]

    t0 = time.perf_counter()
    if payload.get("ext_root"):
        # CUDA candidates were built by build_candidate: load_inline imports that build instead of compiling.
        extensions.install("load", payload["ext_root"])
    try:
        ns = load_source(payload["cand_src"], "lethe_candidate", workdir)
        if "ModelNew" not in ns:
            raise NameError("candidate defines no ModelNew")
    except BaseException as exc:  # noqa: BLE001 - compile failure is a row status
        return {"stage": "compile", **_err(exc)}, {}
    compile_s = time.perf_counter() - t0
    try:
        init = init_inputs()
        torch.manual_seed(seed)
        model = ns["ModelNew"](*init)
    except BaseException as exc:  # noqa: BLE001 - load failure is a row status
        return {"stage": "load", "compile_seconds": compile_s, **_err(exc)}, {}
    load_s = time.perf_counter() - t0

    ref_shapes = payload.get("param_shapes", {})
    sd = model.state_dict()
    mine = {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sd.items()}
    weights_copied = False
    if sd and {k: v[0] for k, v in mine.items()} == {k: v[0] for k, v in ref_shapes.items()}:
        model.load_state_dict({k: torch.from_numpy(np.array(arrays[f"sd/{k}"])) for k in sd})
        weights_copied = True
    t_dev = time.perf_counter()
    try:
        model.to(device)  # with parameters on CUDA, this is where the context is created
    except BaseException as exc:  # noqa: BLE001
        return {"stage": "load", "compile_seconds": compile_s, **_err(exc)}, {}
    to_device_s = time.perf_counter() - t_dev
    state0 = copy.deepcopy(model.state_dict())

    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    results: dict[str, dict] = {}
    order = {"float32": 0, "float16": 1, "bfloat16": 2}
    probes = sorted(payload["probes"], key=lambda p: order.get(p["dtype"], 3))
    current = None
    states: dict[str, dict] = {}
    probe_seconds: dict[str, float] = {}  # diagnostics only (throughput work); no gate reads it
    for pm in probes:
        tp = time.perf_counter()
        pid, dt = pm["id"], pm["dtype"]
        if interpret and dt == "bfloat16":
            results[pid] = {"skipped": "bf16 under the Triton interpreter is not trustworthy (pitfalls.md)"}
            continue
        try:
            if dt != current:
                _restore(model, state0)
                if dt != "float32":
                    model.to(TDT[dt])
                states[dt] = copy.deepcopy(model.state_dict())
                current = dt
            model.load_state_dict(states[dt])
            results[pid] = _run_one(model, pm, arrays, device, out, weights_copied)
            _sync(device)
        except BaseException as exc:  # noqa: BLE001 - one probe's failure is graded by its gate
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            results[pid] = _err(exc)
        probe_seconds[pid] = round(time.perf_counter() - tp, 4)

    t_res = time.perf_counter()
    resources = _resources(ns) if device == "cuda" else []
    resources_s = time.perf_counter() - t_res
    declared = ns.get("LETHE_DTYPES", getattr(ns["ModelNew"], "LETHE_DTYPES", None))
    return {
        "stage": "ok",
        "declared_dtypes": [str(d).replace("torch.", "") for d in declared] if declared else None,
        "weights_copied": weights_copied,
        "compile_seconds": compile_s,
        "load_seconds": load_s,
        "probe_seconds": probe_seconds,
        # diagnostics for the latency benchmark (lethe.audit.latency's phase split); no gate reads them
        "to_device_seconds": round(to_device_s, 4),
        "resources_seconds": round(resources_s, 4),
        "body_seconds": round(time.perf_counter() - t_entry, 4),
        "probes": results,
        "resources": resources,
        "interpret": interpret,
        "library_fp32": library_fp32_state(),
        "extensions": extensions.report(),
    }, out


def _restore(model, state0: dict) -> None:
    """Give every parameter and buffer of ``state0`` back its original values *and dtype*, in place (the same
    Parameter objects: a candidate may hold references to them), before a dtype group casts the model.

    Why not ``load_state_dict(state0)``: it copies into the tensors as they are, so after the float16 group the
    float32 weights were rounded to float16 first and the bfloat16 group then ran on bf16(fp16(w)), one bf16 ulp
    off bf16(w) for a few percent of the weights, which the reference uses; PRC-02's bracketed bf16 rows
    amplify that into false fails of correct kernels."""
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if name in state0:
                t.data = state0[name].detach().clone()


def build_candidate(payload: dict, arrays: dict, workdir) -> tuple[dict, dict]:
    """Sandbox entry point "lethe.verifier.worker:build_candidate": import the candidate once so that its
    ``load_inline`` calls build into the extension root (this process's working directory and
    ``TORCH_EXTENSIONS_DIR``), and report each call's argument hash and library (:mod:`lethe.sandbox.extensions`).
    No probe runs and no reference data is sent: the step only compiles."""
    extensions.install("record", workdir)
    t0 = time.perf_counter()
    src_dir = Path(workdir) / ".src"
    src_dir.mkdir(exist_ok=True)
    try:
        ns = load_source(payload["cand_src"], "lethe_candidate", src_dir)
        if "ModelNew" not in ns:
            raise NameError("candidate defines no ModelNew")
        # A candidate that builds its extension lazily (on the first forward) names the build in lethe_build;
        # the second corpus's harness (lethe.corpora.sakana) predates that name and has its own.
        hook = ns.get("lethe_build")
        if hook is None and sakana.TEMPLATE_MARK in payload["cand_src"]:
            hook = ns.get(sakana.BUILD_HOOK)
        if callable(hook):
            hook()
        ok, error = True, ""
    except BaseException as exc:  # noqa: BLE001 - a build failure is the candidate's compile_fail
        ok, error = False, f"{type(exc).__name__}: {exc}"
    return {"ok": ok, "error": error[-4000:], "seconds": time.perf_counter() - t0,
            "extensions": list(extensions.RECORDED)}, {}


def _run_one(model, pm: dict, arrays: dict, device: str, out: dict, weights_copied: bool) -> dict:
    pid, action = pm["id"], pm["action"]
    xs = _load_inputs(pm["inputs"], arrays, device)
    before = [x.clone() if isinstance(x, torch.Tensor) else None for x in xs]
    res: dict[str, Any] = {}
    if action in ("forward", "repeat"):
        calls = 5 if action == "repeat" else 1
        all_outs = []
        with torch.no_grad():
            for i in range(calls):
                outs = flatten(model(*xs))
                _sync(device)
                all_outs.append(outs)
                for k, o in enumerate(outs):
                    out[f"c/{pid}/o{k}" if i == 0 else f"c/{pid}/r{i}/o{k}"] = _snap(o)
        res.update(_tensor_facts(all_outs[0], xs, model))
        res["n_out"] = len(all_outs[0])
        if calls > 1:
            res["same_storage_across_calls"] = any(
                overlaps(a, b) for later in all_outs[1:] for a, b in zip(all_outs[0], later, strict=False))
    elif action == "overwrite":
        alt = _load_inputs(pm["inputs"], arrays, device, prefix_swap=(f"p/{pid}/in", f"p/{pid}/alt"))
        with torch.no_grad():
            first = flatten(model(*xs))
            snap = [o.detach().clone() for o in first]
            second = flatten(model(*alt))
            _sync(device)
        res["overwritten_by_later_call"] = any(
            not _bytes_equal(a, b) for a, b in zip(first, snap, strict=False))
        res["same_storage_across_calls"] = any(overlaps(a, b) for a in first for b in second)
        res.update(_tensor_facts(first, xs, model))
        res["n_out"] = len(first)
    elif action == "backward":
        for x in xs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.requires_grad_(True)
        outs = flatten(model(*xs))
        fouts = [o for o in outs if o.is_floating_point()]
        for k, o in enumerate(outs):
            out[f"c/{pid}/o{k}"] = _snap(o)
        if not fouts or not all(o.requires_grad for o in fouts):
            return {"forward_only": True, "reason": "candidate output carries no autograd graph", "n_out": len(outs)}
        ups = [torch.from_numpy(np.array(arrays[f"p/{pid}/up{k}"])).to(o.dtype).to(o.device)
               for k, o in enumerate(fouts)]
        model.zero_grad(set_to_none=True)
        try:
            torch.autograd.backward(fouts, ups)
        except NotImplementedError as exc:
            return {"forward_only": True, "reason": f"backward not implemented: {exc}"[:300], "n_out": len(outs)}
        _sync(device)
        for j, x in enumerate(xs):
            if isinstance(x, torch.Tensor) and x.requires_grad:
                if x.grad is not None:
                    out[f"c/{pid}/gin{j}"] = _snap(x.grad)
        res["grad_params"] = []
        if weights_copied:
            for name, prm in model.named_parameters():
                if prm.grad is not None:
                    out[f"c/{pid}/gpar/{name}"] = _snap(prm.grad)
                    res["grad_params"].append(name)
        res["n_out"] = len(outs)
        before = [b.detach() if b is not None else None for b in before]
    res["mutated_inputs"] = [j for j, (a, b) in enumerate(zip(xs, before, strict=True))
                             if b is not None and not _bytes_equal(a.detach(), b)]
    return res


def _snap(t: torch.Tensor) -> np.ndarray:
    """to_np(t), minus its second copy when t lives on a device: there .cpu() already made a fresh host tensor
    that nothing else references (the file writer makes a strided result contiguous, as to_np's copy did)."""
    t = t.detach()
    if t.device.type == "cpu":
        return to_np(t)
    h = t.cpu()
    return (h.float() if h.dtype == torch.bfloat16 else h).numpy()


# Same-width integer dtypes to compare element bits through. Only dtypes whose raw bytes are what to_np() yields
# (bfloat16 widens to float32 there, but that widening is a 16-bit shift, so equal bf16 bits <=> equal f32 bits).
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16, torch.int64: torch.int64, torch.int32: torch.int32, torch.int16: torch.int16,
         torch.int8: torch.int8, torch.uint8: torch.uint8, torch.bool: torch.uint8}
# Bound at import, before any candidate source runs in this process (a candidate may reassign torch.equal).
_equal = torch.equal


def _bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Byte-for-byte equality of two tensors' logical contents (NaN payloads and signed zeros included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _BITS.get(a.dtype)
    if bits is not None and a.device == b.device and _plain(a) and _plain(b):
        # On the tensors' own device: the host round trip below costs two device-to-host copies and four host
        # copies per input per probe (a large share of a probe on a GPU), for the same answer.
        return _equal(a.contiguous().view(bits), b.contiguous().view(bits))
    return to_np(a).tobytes() == to_np(b).tobytes()


def _plain(t: torch.Tensor) -> bool:
    # Anything unusual (a subclass, a sparse layout, a lazily conjugated or negated view) takes the reference path.
    return (type(t) is torch.Tensor and t.layout == torch.strided and not t.is_conj() and not t.is_neg()
            and t.device.type != "meta")


def run_aot(payload: dict, arrays: dict, workdir) -> tuple[dict, dict]:
    """Sandbox entry point "lethe.verifier.worker:run_aot" (RES-02 ahead of time, a process of its own).

    Loads the candidate as real (not interpreted) Triton, records the launches one forward on the base input
    makes without executing them (lethe.aot.launches), and compiles each launched kernel for every target
    (sm_90a, sm_100a) on this host: compiled, never executed. It needs its own process because the Triton
    interpreter and the real compiler cannot share one: once either has run, the other fails inside Triton.

    The compile is staged and budgeted (lethe.aot.staged): shared memory and TMEM are judged from TTGIR plus the
    allocation passes first, and a kernel that already breaks them is reported from there without the (possibly
    very slow) full compile; the full compile of the others runs within a per-kernel budget, and what it could
    not establish (registers, spills) is reported as unknown. ``payload["budget"]`` (optional:
    ``{"early_s", "full_s", "total_s"}``) overrides the defaults, which fit the default 300 s sandbox. A staged
    report's ``source`` says which stage its figures come from, so the gate's evidence shows it.
    """
    from lethe.aot.launches import record_launches, res02_reports
    from lethe.aot.staged import CompileBudget

    torch.set_num_threads(1)
    load_source(payload["cand_src"], "lethe_candidate_aot", workdir)
    import sys

    module = sys.modules["lethe_candidate_aot"]
    init = [torch.from_numpy(np.array(arrays[s["key"]])).to(TDT.get(s["dtype"], torch.float32))
            if s["t"] == "tensor" else s["v"] for s in payload["init"]]
    torch.manual_seed(int(payload["seed"]))
    model = module.ModelNew(*init)
    xs = _load_inputs(payload["inputs"], arrays, "cpu")
    with record_launches(execute=False) as launches:
        try:
            with torch.no_grad():
                model(*xs)
        except Exception:  # noqa: BLE001, S110 - nothing was launched, so what follows may fail: irrelevant
            pass
    budget = CompileBudget.configured(payload.get("budget"), timeout_s=payload.get("timeout_s"))
    log: list[dict] = []
    reps = res02_reports(module, list(launches), targets=payload["targets"], budget=budget, log=log)
    out = []
    for r in reps:
        d = r.to_dict()
        d["source"] = "aot" if r.stage == "cubin" or not r.notes else f"aot: {r.notes[0]}"
        if r.stage != "cubin" and r.error is None and not r.violations():
            # A partial report (the full compile ran out of budget) whose known figures fit: the gate judges
            # unknown figures as fitting, so say "unknown" the way the gate understands it, as a non-resource
            # compile outcome (na for this report), rather than letting it pass on registers nobody measured.
            d["error"] = d["source"][len("aot: "):]
        out.append(d)
    return {"resources": out, "n_launches": len(launches), "aot_budget": dict(budget.__dict__), "aot_log": log}, {}


def _resources(ns: dict) -> list[dict]:
    """Resource reports of every Triton kernel the candidate compiled and loaded in this process (RES-02)."""
    try:
        from lethe.aot.triton_aot import reports_from_jit_cache
    except Exception:  # noqa: BLE001 - no aot module: RES-02 becomes na in the parent
        return []
    reps = []
    seen = set()
    for name, obj in sorted(ns.items(), key=lambda kv: kv[0]):
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        try:
            for r in reports_from_jit_cache(obj):
                d = r.to_dict()
                d["symbol"] = name
                reps.append(d)
        except Exception:  # noqa: BLE001, S112 - not a Triton function
            continue
    return reps
