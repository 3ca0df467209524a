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

A reference is also checked for the faults that would otherwise be charged to a candidate: it must return
float64 for float64 inputs (a float32 output means it computes below the precision it is graded at), and two
runs of its forward on the same base inputs must agree bit for bit (a reference that draws random numbers or
keeps state is not a function a candidate can match). It runs under the time and memory budget the caller
gives it (``payload["budget"]``); exceeding either ends the run with an error naming the limit and the phase
it tripped in, instead of grinding through every probe.

The reference normally runs on the CPU. With ``payload["device"] == "cuda"`` it runs on the GPU under the same
float64 rule plus the settings that make CUDA reproducible (:func:`enter_cuda_rules`): deterministic algorithms
(an op without a deterministic kernel raises instead of running), cuBLAS's fixed workspace, no TF32, no
reduced-precision reductions, autocast off. Inputs are still drawn on the CPU from the same generators, so the
inputs a candidate sees do not depend on where the reference ran; outputs come back as numpy arrays as before.
A probe that raises (or runs out of memory) on CUDA is re-run on the CPU: if it raises there too, the CPU's
report is kept (the reference's own limit); if it runs, the whole run ends with fault ``"cuda"`` and the caller
(``lethe.verifier.api.run_reference``) computes the reference on the CPU instead, recording why.
"""

from __future__ import annotations

import copy
import math
import os
import random
import re
import signal
import sys
import tempfile
import threading
import tokenize
import traceback
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lethe.verifier import battery
from lethe.verifier import probes as P
from lethe.verifier import tolerance as tol
from lethe.verifier.sources import read_source  # noqa: F401 - reference.read_source stays valid

TDT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


class ReferencePrecisionError(TypeError):
    """The float64 reference was handed a reduced-precision tensor (input, parameter or buffer)."""


class CudaReferenceFault(Exception):
    """The reference cannot be computed on CUDA under the float64 + determinism rules (no deterministic float64
    kernel, a tensor it makes on the CPU, no GPU in this process...): the caller computes it on the CPU."""


class ReferenceOverTime(BaseException):
    """The reference ran past its time budget. A BaseException, so the reference's own ``except Exception``
    clauses (and the verifier's per-probe ones) cannot swallow it."""


class _Budget:
    """The reference's time and memory budget and the phase it is in, for errors that say which limit
    tripped and where. The phase is also written to stderr, so that when the sandbox has to stop the process
    from outside (a C call that never returns to Python), the parent can still tell where it was."""

    def __init__(self, budget: dict | None):
        budget = budget or {}
        self.memory_mb = budget.get("memory_mb")
        self.timeout_s = budget.get("timeout_s")
        self.phase = "starting"
        self.est_used = 0.0  # estimated seconds of the forwards run so far (charge), at the plan's fixed rates

    def floor_refusal(self, probe: P.Probe, draws: int, nbytes: int, held_bytes: int) -> str:
        """Why an optional conditioning floor (:func:`measures_optional_floor`) of ``probe``, ``draws`` more runs
        whose spread holds ``nbytes``, must not be measured, or "" when it fits: the floors may take the first
        FLOOR_TIME_SHARE of the time budget and FLOOR_MEMORY_SHARE of the memory budget, so that the probes
        still to run, which every gate needs, are never the ones that run out.

        Both sides are counted from the plan, never read from the clock or the process's memory: time as the
        plan's estimate of one forward at the probe's shape (``extra["est_s"]``, fixed rates) times the forwards
        the reference has run so far (:meth:`charge`) and the draws; memory as the arrays the reference holds
        (``held_bytes``), the spread and the estimated peak of one forward (``extra["est_mb"]``). So whether a
        floor is measured, and with it a verdict, is the same on every machine and under any load (a reference
        that really runs out of time is stopped by the hard budget and excluded, never graded without its floor).
        A probe without an estimate (a reference the plan could not trace) measures its floor."""
        why = self._time_refusal(probe, draws)
        if why:
            return why
        if self.memory_mb:
            peak = int(probe.extra.get("est_mb", 0.0) * 2**20)
            if held_bytes + nbytes + peak > FLOOR_MEMORY_SHARE * self.memory_mb * 2**20:
                return (f"not measured: {held_bytes / 2**20:.0f} MB of arrays held + {nbytes / 2**20:.0f} MB for its "
                        f"spread + {peak / 2**20:.0f} MB for a forward would pass {FLOOR_MEMORY_SHARE:g} x the "
                        f"reference's {self.memory_mb} MB budget")
        return ""

    def _time_refusal(self, probe: P.Probe, draws: int) -> str:
        """The time side of :meth:`floor_refusal`: the estimated work so far plus ``draws`` more runs of ``probe``
        against FLOOR_TIME_SHARE of the budget ("" when it fits, or when there is no budget or no estimate)."""
        est = probe.extra.get("est_s")
        if not self.timeout_s or est is None:
            return ""
        need = draws * est * _draw_forwards(probe)
        if self.est_used + need <= FLOOR_TIME_SHARE * self.timeout_s:
            return ""
        return (f"not measured: an estimated {self.est_used:.3g} s of reference work so far + {need:.3g} s "
                f"for its {draws} draws would pass {FLOOR_TIME_SHARE:g} x the reference's "
                f"{self.timeout_s:g} s budget (the plan's estimates)")

    def charge(self, probe: P.Probe, floor_draws: int) -> None:
        """Count ``probe``'s forwards (:func:`probes.forwards_run`) and its floor's draws at the plan's estimate."""
        est = probe.extra.get("est_s")
        if est is not None and not probe.skip:
            self.est_used += est * (P.forwards_run(probe) + floor_draws * _draw_forwards(probe))

    def charge_unrun(self, probe: P.Probe, shape_floor: bool) -> None:
        """Charge a probe that a gate filter (``only_gates``: a replay or repro of one gate) leaves out as a full run
        would have run it, so that the probes the filter keeps get the floors the full run gave them. Only the time
        rule is replayed: the memory rule reads the arrays this run holds, fewer than a full run's, so a filtered
        run may measure a floor that a full run refused for memory (never the other way)."""
        if probe.skip:
            return
        draws = planned_floor_draws(probe, shape_floor)
        # the test _run_probe makes before measuring an optional floor (its draws include the extra models')
        if draws and measures_optional_floor(probe, shape_floor) and self._time_refusal(
                probe, P.COND_DRAWS + P.extra_draws(probe)):
            draws = 0
        self.charge(probe, draws)

    def enter(self, phase: str) -> None:
        self.phase = phase
        try:
            sys.stderr.write(f"{PHASE_MARK}{phase}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def memory_error(self, exc: BaseException) -> str:
        limit = f"its {self.memory_mb} MB memory budget" if self.memory_mb else "the memory available to it"
        return f"reference exceeded {limit} while {self.phase} ({type(exc).__name__}: {str(exc)[:300]})"

    def time_error(self) -> str:
        return f"reference exceeded its {self.timeout_s:g} s time budget while {self.phase}"


# The shares of the reference's time and memory budgets within which the optional conditioning floors are
# measured (_Budget.floor_refusal): beyond them a probe is graded by its gate's own bound, as the gate did before
# it read the floor, and its evidence says why.
FLOOR_TIME_SHARE = 0.5
FLOOR_MEMORY_SHARE = 0.6


def _draw_forwards(probe: P.Probe) -> int:
    """Forwards one conditioning draw of ``probe`` costs: a forward and a backward (two) for the backward probe."""
    return 3 if probe.action == "backward" else 1


def planned_floor_draws(probe: P.Probe, shape_floor: bool, meta: dict | None = None) -> int:
    """The conditioning-floor draws the reference charges ``probe`` (_Budget.charge): GRAD_COND_DRAWS for the
    backward probe, COND_DRAWS for any other that measures a floor (what the spread reports as its draws), 0 when
    it measures none or (``meta``, a run probe's) the floor was refused or raised. Counted from the plan, so that a
    filtered run charges the probes it leaves out exactly as a full run charges them."""
    if probe.action == "backward":
        n = P.GRAD_COND_DRAWS
    elif P.measures_floor(probe) or (shape_floor and P.is_shape_variant(probe)):
        n = P.COND_DRAWS
    else:
        return 0
    if meta is not None and (meta.get("status") != "ok" or not (meta.get("cond") or {}).get("draws")):
        return 0
    return n


def measures_optional_floor(probe: P.Probe, shape_floor: bool = False) -> bool:
    """A floor the reference measures only within its budget: every probes.measures_floor probe but CMP-01's,
    whose floor is part of CMP-01's bound whatever it costs; with ``shape_floor`` (:func:`ill_conditioned`) also
    the CMP-03 shape variants'."""
    if shape_floor and P.is_shape_variant(probe):
        return True
    return P.measures_floor(probe) and "CMP-01" not in probe.gates


# The largest output (float64 MB) whose CMP-03 shape-variant floor is measured: the variants' arrays are admitted
# into the reference's result file without one (probes.plan), so a floor must stay small beside them.
SHAPE_FLOOR_MAX_MB = 32.0


# How far above CMP-01's value tolerance the base probe's floor must rise for the problem to count as
# ill-conditioned (:func:`ill_conditioned`): a well-conditioned gemm's floor, a sampled maximum, reaches ~2x the
# tolerance on a few elements; a norm of a constant or a batch norm over two samples reaches 1e5x and more.
ILL_FACTOR = 16.0


def ill_conditioned(arrays: dict, base_meta: dict) -> bool:
    """Whether the base probe's conditioning floor rises ILL_FACTOR above CMP-01's value tolerance anywhere: the problem
    amplifies rounding (a batch norm over two samples, a norm of a near-constant channel, an identically zero
    output), a property of the operator that its shape variants share. Only then do the CMP-03 shape variants
    measure a floor (within the optional floors' budget): a well-conditioned problem keeps CMP-03's own bound
    and its variants' cost. Deterministic: it reads the reference's own arrays."""
    for k in range(len(base_meta.get("outputs") or [])):
        r, spread = arrays.get(f"p/{base_meta['id']}/ref{k}"), arrays.get(f"p/{base_meta['id']}/cond{k}")
        if r is None or spread is None or not np.issubdtype(r.dtype, np.floating) or spread.shape != r.shape:
            continue
        vt = tol.value_tol(r, base_meta["dtype"], base_meta["N"])
        if np.any(tol.cond_floor(spread, base_meta["N"]) > ILL_FACTOR * vt):
            return True
    return False


# Prefix of the phase lines the reference writes to stderr (read back by lethe.verifier.api).
PHASE_MARK = "lethe-reference-phase: "


def is_memory_error(exc: BaseException) -> bool:
    """True for an allocation failure: Python's MemoryError, torch's OutOfMemoryError, or the RuntimeError
    torch's CPU allocator raises when RLIMIT_AS refuses it."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    low = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in low or "out of memory" in low)


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
        if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            # Autocast never casts a float64 tensor (its eligibility test excludes float64); off around the call
            # so that no enclosing context reaches tensors the reference makes below float64 itself. A reference
            # that switches it on inside its own forward and returns reduced precision fails the base-probe check.
            with torch.autocast("cuda", enabled=False):
                return self.model(*args)
        return self.model(*args)


def load_source(src: str, name: str, workdir=None) -> dict:
    """Execute a KernelBench-style source as a fresh module, from a real file in ``workdir``: Triton's @jit
    reads its function's source through ``inspect``, which needs a file; the module is registered in
    ``sys.modules`` so dataclasses and similar introspection work."""
    wd = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="lethe-src-"))
    path = wd / f"{name}.py"
    # Python drops a leading byte-order mark when it reads a file; compile() of a str refuses one.
    src = src.removeprefix("\ufeff")
    path.write_bytes(_file_bytes(src))
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    exec(compile(src, str(path), "exec"), mod.__dict__)
    return mod.__dict__


def _file_bytes(src: str) -> bytes:
    """The source encoded the way its PEP 263 coding line (if any) says, so that what ``inspect`` and
    ``linecache`` read back from the file is the text that was executed."""
    try:
        enc, _ = tokenize.detect_encoding(iter(src.encode("utf-8").splitlines(keepends=True)).__next__)
        return src.encode("utf-8" if enc == "utf-8-sig" else enc)
    except (SyntaxError, LookupError, UnicodeEncodeError):
        return src.encode("utf-8", errors="surrogatepass")


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


def reference_inputs(inputs: list, device: str = "cpu") -> list:
    """A probe's inputs as the reference receives them: floating tensors in float64, other tensors copied, on
    the reference's device; Python values as they are. On the CPU a float64 input is passed as is (``.to`` of a
    tensor already float64 is the tensor itself), as it always was."""
    out = [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else
           (x.clone() if isinstance(x, torch.Tensor) else x) for x in inputs]
    if device == "cpu":
        return out
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in out]


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
    pos = torch.randperm(n, generator=gen)[:P.FD_POSITIONS].tolist()
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
    budget = _Budget(payload.get("budget"))
    restore = _arm_deadline(budget.timeout_s)
    try:
        return _run_reference(payload, workdir, budget)
    except ReferenceOverTime:
        return _fault("time", budget.time_error()), {}
    finally:
        restore()


def _fault(kind: str, error: str, trace: str = "") -> dict:
    """The result of a reference that cannot grade anything: ``fault`` names the kind (exception, memory,
    time, reduced_precision_output, nondeterministic), ``error`` says what happened in words."""
    out = {"ok": False, "fault": kind, "error": error}
    if trace:
        out["trace"] = trace
    return out


def _arm_deadline(timeout_s: float | None):
    """Raise ReferenceOverTime in this process shortly before the sandbox's own wall clock would kill it, so
    the error can say which phase overran. Only on the main thread (signals are delivered there); returns
    the function that disarms it."""
    if not timeout_s or threading.current_thread() is not threading.main_thread():
        return lambda: None
    soft = max(0.5 * timeout_s, timeout_s - max(2.0, 0.05 * timeout_s))

    def on_alarm(signum, frame):
        raise ReferenceOverTime()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, soft)

    def restore() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)

    return restore


# cuBLAS is deterministic only with a fixed workspace, chosen before CUDA starts (the sandbox's child environment
# sets the first; torch accepts both).
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")


def enter_cuda_rules() -> None:
    """Make this process compute the float64 reference on CUDA reproducibly, or raise CudaReferenceFault.

    Why each setting: ``use_deterministic_algorithms(True)`` makes an op without a deterministic CUDA kernel
    raise instead of running (scatter-add with atomics, say), so the same seed gives the same bits; cuBLAS is only
    deterministic with a fixed workspace, which must be set before CUDA initialises. TF32, reduced-precision
    reductions and autocast never touch float64 tensors, but they are switched off anyway so that no setting
    of the process can lower what a reference computes below what it computes on the CPU."""
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in CUBLAS_DETERMINISTIC:
        if torch.cuda.is_initialized():
            raise CudaReferenceFault("CUDA was initialised before CUBLAS_WORKSPACE_CONFIG was set: cuBLAS is not "
                                     "deterministic in this process")
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_DETERMINISTIC[0]
    if not torch.cuda.is_available():
        raise CudaReferenceFault("no CUDA device is visible to the reference process")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.set_float32_matmul_precision("highest")
    torch.cuda.init()


class _CpuRules:
    """The CPU reference's settings for a stretch of a CUDA run (deterministic algorithms off, as in a CPU run),
    so that a probe re-run on the CPU computes exactly what the CPU reference computes."""

    def __enter__(self):
        self.was = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(False)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.was)
        return False


def _fails_on_device(meta: dict) -> bool:
    """True when a probe ended "na" because the reference raised or ran out of memory while running it (not a
    skip, not a reference whose get_inputs refused the variant: those do not depend on the device)."""
    return meta["status"] == "na" and (meta.get("fault") == "memory" or meta["reason"].startswith(RAISED))


def _run_reference(payload: dict, workdir, budget: _Budget) -> tuple[dict, dict]:
    torch.set_num_threads(1)
    torch.set_flush_denormal(False)
    device = payload.get("device") or "cpu"
    if device not in ("cpu", "cuda"):
        return _fault("exception", f"reference device must be cpu or cuda, got {device!r}"), {}
    if device == "cuda":
        try:
            enter_cuda_rules()
        except CudaReferenceFault as exc:
            return _fault("cuda", str(exc)), {}
    seed = int(payload["seed"])
    only = set(payload.get("only_gates") or [])
    out_arrays: dict[str, np.ndarray] = {}
    try:
        budget.enter("loading the reference (its module, get_init_inputs and Model(...))")
        ns = load_source(payload["ref_src"], "lethe_reference", workdir)
        for need in ("Model", "get_inputs", "get_init_inputs"):
            if need not in ns:
                raise NameError(f"reference defines no {need}")
        torch.manual_seed(seed)
        init = list(ns["get_init_inputs"]())
        torch.manual_seed(seed)
        model = ns["Model"](*init)
        budget.enter("building inputs for the probe plan (get_inputs, and the forward traced on the meta device to "
                     "size the shape variants)")
        plan = P.build_plan(ns, seed, interpret=bool(payload.get("interpret")))
    except Exception as exc:  # noqa: BLE001 - a broken reference is a row status, reported not raised
        if is_memory_error(exc):
            exc.__traceback__ = None
            return _fault("memory", budget.memory_error(exc)), {}
        return _fault("exception", f"{type(exc).__name__}: {exc}", traceback.format_exc()[-4000:]), {}

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
    model_dev = model64
    if device == "cuda":
        try:
            model_dev = copy.deepcopy(model64).to(device)
        except Exception as exc:  # noqa: BLE001 - a model that cannot move is computed on the CPU instead
            return _fault("cuda", f"the reference model cannot move to CUDA: {type(exc).__name__}: {exc}"[:500]), {}
    if payload.get("floors_for"):
        return second_pass(ns, model_dev, states, plan, payload["floors_for"], seed, budget, device)
    metas = []
    shape_floor = False  # set from the base probe: whether the CMP-03 shape variants measure their floor
    for probe in plan:
        if only and probe.id != "rand0" and not (set(probe.gates) & only):
            budget.charge_unrun(probe, shape_floor)
            continue
        meta = _run_probe(ns, model_dev, states, probe, seed, out_arrays, budget, device,
                          shape_floor=shape_floor)
        if device == "cuda" and _fails_on_device(meta):
            # Whose limit is it? The CPU decides: the same probe, run as the CPU reference runs it, from what the
            # CPU reference would have stored before it (nothing of this probe's).
            for k in [k for k in out_arrays if k.startswith(f"p/{probe.id}/")]:
                del out_arrays[k]
            with _CpuRules():
                on_cpu = _run_probe(ns, model64, states, probe, seed, out_arrays, budget, "cpu",
                                    shape_floor=shape_floor)
            if on_cpu["status"] == "ok":
                return _fault("cuda", f"probe {probe.id} fails on CUDA but runs on the CPU: {meta['reason']}"[:800]), {}
            meta = on_cpu
        budget.charge(probe, planned_floor_draws(probe, shape_floor, meta))
        metas.append(meta)
        if probe.id != "rand0":
            continue
        # The base probe decides whether this reference can grade anything: when it cannot, nothing after
        # it is worth running (a huge or broken reference would otherwise grind through every probe).
        if meta["status"] != "ok":
            kind = meta.get("fault") or "exception"
            return _fault(kind, meta["reason"] if kind == "memory"
                          else f"reference cannot run its own inputs: {meta['reason']}"), {}
        shape_floor = ill_conditioned(out_arrays, meta)
        fault = _base_faults(ns, model_dev, states, probe, seed, out_arrays, meta, budget, device)
        if fault is not None:
            if device == "cuda" and fault[0] == "nondeterministic":
                # Deterministic algorithms were on: two different runs are CUDA's doing until the CPU says otherwise.
                return _fault("cuda", f"on CUDA under deterministic algorithms: {fault[1]}"[:800]), {}
            return _fault(*fault), {}
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
        "reference_device": device,
    }
    return result, out_arrays


# The arrays a second pass returns of a probe: its floors (conditioning_spread) and the offset probe's sensitivity;
# with them the meta entries that describe them (battery.SECOND_PASS_META).
SECOND_PASS_KEY = re.compile(r"p/[^/]+/(?:(?:cond|layer|store|sens|gcond)\d+$|gcondpar/)")


def second_pass(ns: dict, model_dev, states, plan: list, requests: dict, seed: int, budget: _Budget,
                device: str) -> tuple[dict, dict]:
    """The reference's second pass: the floors of the probes a candidate failed, measured after that candidate has
    run (lethe.verifier.api.second_pass_requests says which and how), in a fresh reference process with the
    reference's whole budget to itself.

    Why. The first pass measures its optional floors within shares of the budget (:meth:`_Budget.floor_refusal`)
    so that the probes every gate needs always run, and its conditioning floor is a maximum over a few random
    draws. A correct kernel on a large, ill-conditioned problem then fails where the floor was refused, or where
    one element in millions lands just above a few-draw maximum. Measuring a failing probe's floor afterwards
    costs nothing when the candidate passes, leaks nothing to it (it has finished, and this process never meets
    it), and raises only bounds: every floor is a maximum over a superset of the first pass's draws, so no probe
    the first pass passed can fail.

    Two rounds, each in ascending order of the plan's estimated cost (cheap probes first): the probes whose floors
    the first pass did not measure (``unmeasured`` in the request) at the first pass's draws, then every probe at
    its requested multiple of them where the plan's estimates (:func:`_second_pass_cost`) still fit
    SECOND_PASS_TIME_SHARE of the budget (a probe's second measurement replaces its first). A probe neither round could afford is reported unmeasured ("na") with the
    reason and keeps the first pass's floor; so is every probe the hard time budget cuts off."""
    by_id = {p.id: p for p in plan}
    order = {p.id: i for i, p in enumerate(plan)}
    done: dict[str, dict] = {}
    keep: dict[str, np.ndarray] = {}
    runnable = []
    for pid in requests:
        probe = by_id.get(pid)
        if probe is None or probe.skip:
            done[pid] = {"id": pid, "status": "na", "reason": "not a run probe of this plan"}
        else:
            runnable.append(pid)
    runnable.sort(key=lambda pid: (_second_pass_cost(by_id[pid], {**requests[pid], "mult": 1}), order[pid]))
    rounds = [(pid, 1) for pid in runnable if requests[pid].get("unmeasured")]
    rounds += [(pid, int(requests[pid].get("mult", 1))) for pid in runnable if int(requests[pid].get("mult", 1)) > 1]
    for pid, mult in rounds:
        probe = by_id[pid]
        req = {**requests[pid], "mult": mult}
        cost = _second_pass_cost(probe, req)
        room = SECOND_PASS_TIME_SHARE * budget.timeout_s - budget.est_used if budget.timeout_s else math.inf
        if cost > room:
            if pid not in done:
                done[pid] = {"id": pid, "status": "na", "reason": (
                    f"not measured: an estimated {budget.est_used:.3g} s of second-pass work so far + {cost:.3g} s "
                    f"for this probe would pass {SECOND_PASS_TIME_SHARE:g} x the reference's {budget.timeout_s:g} s "
                    f"budget (the plan's estimates)")}
            continue
        arrays: dict[str, np.ndarray] = {}
        try:
            meta = _run_probe(ns, model_dev, states, probe, seed, arrays, budget, device, request=req)
        except ReferenceOverTime:
            why = budget.time_error()
            for q, _m in rounds:
                done.setdefault(q, {"id": q, "status": "na", "reason": why})
            break
        budget.est_used += cost
        if meta.get("status") != "ok" and done.get(pid, {}).get("status") == "ok":
            continue  # a failed second measurement keeps the first
        keep.update({k: v for k, v in arrays.items() if SECOND_PASS_KEY.match(k) and k.split("/")[1] == pid})
        done[pid] = {"mult": mult, **{k: meta[k] for k in ("id", "status", "reason", *battery.SECOND_PASS_META)
                                      if k in meta}}
    for pid in runnable:  # asked for more draws than the budget allowed, and measured in neither round
        done.setdefault(pid, {"id": pid, "status": "na", "reason": "not measured: no round could afford it"})
    metas = [done[pid] for pid in sorted(done, key=lambda q: order.get(q, len(order)))]
    return {"ok": True, "second_pass": True, "plan_version": P.PLAN_VERSION, "probes": metas,
            "reference_device": device}, keep


# The share of its time budget within which the second pass plans its draws (second_pass): the rest is the
# margin of the plan's estimates.
SECOND_PASS_TIME_SHARE = 0.8


def _second_pass_cost(probe: P.Probe, req: dict) -> float:
    """Estimated seconds of one probe in the second pass at ``req``'s draws: its own forwards and its floors' draws
    at the plan's fixed-rate estimate of one forward at its shape (0 without an estimate)."""
    est = probe.extra.get("est_s")
    if est is None:
        return 0.0
    mult = int(req.get("mult", 1))
    if probe.action == "backward":
        draws = P.GRAD_COND_DRAWS * mult
    else:
        draws = (COND_DRAWS + P.extra_draws(probe)) * mult
        draws += P.STORE_DRAWS * mult if req.get("store") and not P.stores_in_dtype(probe) else 0
        draws += 2 * P.OFFSET_DRAWS * (mult - 1) if probe.kind == "offset" else 0  # as probes.forwards_run counts them
    return est * (P.forwards_run(probe) + draws * _draw_forwards(probe))


# Seed of the global generators for the determinism re-run: any value other than the one the first run saw
# (which is whatever get_inputs left behind), so a forward that draws random numbers draws different ones.
_RERUN_SEED_OFFSET = 0x5EED


def _base_faults(ns: dict, model64, states, probe: P.Probe, seed: int, arrays: dict, meta: dict,
                 budget: _Budget, device: str = "cpu") -> tuple[str, str] | None:
    """(kind, error) when the reference itself is unfit to grade with, judged on its base probe; else None.

    Two faults a candidate must never be charged for: floating outputs below float64 for float64 inputs
    (the reference then carries the rounding the gates measure, so an exact candidate could fail and a
    candidate with the same rounding pass), and a forward that gives different bits on a second run with
    the same inputs and weights (random draws, hidden state, uninitialised memory): there is no one answer
    to compare against. The second run costs one more base forward."""
    low = [(k, o["dtype"]) for k, o in enumerate(meta.get("outputs", []))
           if o["dtype"] in ("float32", "float16", "bfloat16")]
    if low:
        k, dt = low[0]
        return ("reduced_precision_output",
                f"reference returns {dt} (output {k}) when run in float64: it computes below float64, so its "
                f"outputs cannot grade a candidate (cast it to the input dtype, not to a fixed one)")
    pid = probe.id
    budget.enter(f"re-reading the inputs of probe {pid} (determinism check)")
    try:
        # The very inputs of the first run (as shipped to the candidate), not a second get_inputs() call: the
        # question is whether the forward is a function of its inputs.
        inputs = [torch.from_numpy(arrays[s["key"]].copy()) if s["t"] == "tensor" else s["v"]
                  for s in meta["inputs"]]
        model64.load_state_dict(states[probe.dtype])
        ref = Float64Reference(model64)
        x64 = reference_inputs(inputs, device)
        torch.manual_seed(seed + _RERUN_SEED_OFFSET)
        np.random.seed((seed + _RERUN_SEED_OFFSET) % (1 << 32))
        random.seed(seed + _RERUN_SEED_OFFSET)
        budget.enter(f"re-running the forward on probe {pid} (determinism check)")
        with torch.no_grad():
            outs = [o.detach() for o in flatten(ref(*x64))]
    except Exception as exc:  # noqa: BLE001 - a reference that runs once and then raises is not a function
        if is_memory_error(exc):
            exc.__traceback__ = None
            return "memory", budget.memory_error(exc)
        return ("nondeterministic", f"reference ran its base inputs once but raised on a second run with the "
                                    f"same inputs: {type(exc).__name__}: {str(exc)[:300]}")
    n_first = len(meta.get("outputs", []))
    if len(outs) != n_first:
        return ("nondeterministic", f"reference returned {n_first} tensors on its base inputs and {len(outs)} "
                                    f"on a second run with the same inputs")
    for k, o in enumerate(outs):
        first, again = arrays[f"p/{pid}/ref{k}"], to_np(o)
        if first.shape != again.shape or first.dtype != again.dtype or first.tobytes() != again.tobytes():
            diff = ""
            if first.shape == again.shape and first.dtype.kind == "f" and again.dtype.kind == "f":
                d = np.abs(first.astype(np.float64) - again.astype(np.float64))
                d = d[np.isfinite(d)]
                diff = f", largest difference {float(d.max()) if d.size else float('nan'):.3g}"
            return ("nondeterministic",
                    f"reference is nondeterministic: two runs of its forward on the same base inputs "
                    f"(probe {pid}) differ in output {k}{diff} (random draws, hidden state or uninitialised "
                    f"memory in forward); there is no single answer to grade a candidate against")
    return None


# Perturbed re-runs per probe for the conditioning floor: probes.COND_PAIRS antithetic pairs (why pairs: there).
COND_PAIRS, COND_DRAWS = P.COND_PAIRS, P.COND_DRAWS


def cond_unit(dtype: str) -> float:
    """u of the conditioning perturbation for a probe of ``dtype``: the unit roundoff of the accumulator the
    contract requires (tolerance.acc_eps / 2; 2^-24 for fp32/fp16/bf16 data, 2^-53 for fp64). Not the data
    dtype's: half-precision inputs and weights are exact in their dtype, and what rounds inside an honest kernel
    is the fp32 accumulator; a half-precision-wide perturbation would license a half-precision accumulator."""
    return tol.acc_eps(dtype) / 2.0


def _signs(shape, gen: torch.Generator, device) -> torch.Tensor:
    """+-1 per element from ``gen`` (drawn on the CPU, so the same wherever the reference runs)."""
    d = torch.where(torch.rand(tuple(shape), generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    return d if str(device) == "cpu" else d.to(device)


def _rounding_move(t: torch.Tensor, u: float, tiny: float, gen: torch.Generator) -> torch.Tensor:
    """``t`` moved by one rounding of the floating-point model with gradual underflow: t (1 + u d) where |t| >= tiny,
    t + u d tiny sign(t) below, d = +-1 per element from ``gen``; an exact zero kept exact (IEEE rounds it to itself).

    Why max(|t|, tiny): a value below the smallest normal ``tiny`` is stored on the absolute grid of the
    subnormals, with an error up to u * tiny (2^-150 in fp32), not u |t|. A purely relative move leaves that error
    out, and a norm whose statistics underflow multiplies it by 1/sqrt(eps): a correct fp32 conv of subnormal
    inputs followed by a group norm erred 18x above the relative floor (KernelBench L2/61, trusted-corpus defect
    D12). Above ``tiny`` the move is the relative one it always was."""
    d = _signs(t.shape, gen, t.device)
    moved = t * (1.0 + u * d)  # the relative move, exactly as before where |t| >= tiny (the same bits)
    a = t.abs()
    small = a < tiny
    if bool(small.any()):  # most tensors hold no value below tiny: one comparison and no second pass for them
        small &= a > 0
        moved = torch.where(small, t + u * d * torch.sign(t) * tiny, moved)
    return moved


class _PerturbedRun:
    """One draw of the backward-error model: every floating input, parameter and buffer of the model and every
    floating output of each leaf submodule is multiplied by (1 + u * d), d = +-1 per element from ``gen`` (below
    the smallest normal moved by u * tiny instead: :func:`_rounding_move`).

    In a backward draw every leaf's input gradient is multiplied the same way (what an honest backward stores
    between layers: the gradient a bias gradient sums, for one).

    Why all three. A backward-stable fp32 implementation returns the exact answer to a problem whose data are
    perturbed by ~u relative: the inputs and weights (each product of a convolution or gemm is rounded once), and
    -- for a chain of operators -- every intermediate it stores (a convolution's output rounded before a batch
    norm reads it). The last is what makes a norm of a constant non-zero: conv(0) = bias exactly, but the fp32
    mean of the N copies of the bias is not the bias, and the norm divides that rounding by sqrt(var + eps) ~
    sqrt(eps); perturbing the bias itself cannot show it (the norm removes a per-channel constant), perturbing
    the stored conv output elementwise does. An exact zero needs no absolute perturbation: IEEE arithmetic
    rounds an exact zero to itself, a non-zero only arises from non-zero operands, which are perturbed. The
    parameters are restored by the caller (load_state_dict) after the draws."""

    def __init__(self, model64, u: float, gen: torch.Generator, sign: float = 1.0):
        self.model, self.u, self.gen = model64, sign * u, gen
        self.tiny = tol.TINY["float32"]  # the accumulator's smallest normal (u is its unit roundoff)
        self._grad_hooks: list = []

    def _perturb(self, t):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return _rounding_move(t, self.u, self.tiny, self.gen)
        if isinstance(t, (tuple, list)):
            return type(t)(self._perturb(x) for x in t)
        return t

    def _perturb_input_grads(self, mod, args):
        """Forward pre-hook of a leaf in a backward draw: a gradient hook on each of its floating inputs that
        requires grad, so that the gradient with respect to that input is multiplied by (1 + u * d) when the
        backward computes it.

        Why a hook on the input tensors and not ``register_full_backward_hook``: a full backward hook routes the
        module's inputs through an identity autograd Function, and a leaf that modifies its input in place
        (``nn.ReLU(inplace=True)``, in most KernelBench CNNs: L3/18_SqueezeNet, L3/9_ResNet18, VGG, DenseNet, ...)
        then raises ("Output 0 of BackwardHookFunction is a view and is being modified inplace"). The draw failed,
        the spread was not measured, and CMP-02 graded by grad_tol alone: an fp32 network of 26 layers failed on
        its honest rounding (err/tol ~1300 on SqueezeNet's input gradient, 0.15 with the floor). A tensor hook
        registered before an in-place update receives the gradient with respect to the value before it (autograd
        mechanics, "hooks ... when Tensor is modified in-place"), which is the leaf's input gradient. A tensor fed
        to several leaves is moved once per consumer (each hook sees the summed gradient), as each consumer's
        stored contribution was moved before."""
        for t in args:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad:
                self._grad_hooks.append(t.register_hook(self._perturb))
        return None

    def remove_grad_hooks(self) -> None:
        """Remove the gradient hooks of :meth:`_perturb_input_grads` (after the draw's backward): a tensor that
        outlives the draw (a tensor the model keeps and passes to a leaf) must not keep moving gradients."""
        for h in self._grad_hooks:
            h.remove()
        self._grad_hooks.clear()

    def __call__(self, ref: Float64Reference, x64: list):
        with torch.no_grad():
            for t in list(self.model.parameters()) + list(self.model.buffers()):
                if t.is_floating_point():
                    t.copy_(_rounding_move(t, self.u, self.tiny, self.gen))
        leaves = [m for m in self.model.modules() if m is not self.model and not any(True for _ in m.children())]
        hooks = [m.register_forward_hook(lambda mod, inp, out: self._perturb(out)) for m in leaves]
        if torch.is_grad_enabled():
            # the backward stores each leaf's input gradient too (what a bias gradient sums, for one)
            hooks += [m.register_forward_pre_hook(self._perturb_input_grads) for m in leaves]
        try:
            return ref(*[self._perturb(x) for x in x64])
        finally:
            for h in hooks:
                h.remove()


_CONV_TRANSPOSED = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
_PRODUCT_LAYERS = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d) + _CONV_TRANSPOSED
_BATCH_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)
_INSTANCE_NORMS = (torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.InstanceNorm3d)
_NORM_LAYERS = _BATCH_NORMS + _INSTANCE_NORMS + (torch.nn.GroupNorm, torch.nn.LayerNorm)


def _norm_statistics(mod, x: torch.Tensor):
    """(x viewed so that its last axis holds each statistic's elements, the shape to broadcast a per-statistic
    value back onto x, the norm's affine weight broadcastable onto x or None) for a norm layer that computes
    statistics of ``x`` in this call; None when it uses running statistics instead (batch norm in eval mode)."""
    if isinstance(mod, _BATCH_NORMS):
        if not (mod.training or mod.running_mean is None):
            return None
        c = x.shape[1]
        v = x.transpose(0, 1).reshape(c, -1)
        back = (1, c) + (1,) * (x.dim() - 2)
    elif isinstance(mod, _INSTANCE_NORMS):
        if x.dim() < 3:
            return None
        v = x.reshape(x.shape[0], x.shape[1], -1)
        back = tuple(x.shape[:2]) + (1,) * (x.dim() - 2)
    elif isinstance(mod, torch.nn.GroupNorm):
        n, g = x.shape[0], mod.num_groups
        v = x.reshape(n, g, -1)
        return v, (n, g), None  # broadcast per group below
    else:  # LayerNorm over its trailing normalized_shape
        k = len(mod.normalized_shape)
        v = x.reshape(*x.shape[:x.dim() - k], -1)
        back = tuple(x.shape[:x.dim() - k]) + (1,) * k
    w = getattr(mod, "weight", None)
    if w is not None and isinstance(mod, _BATCH_NORMS + _INSTANCE_NORMS):
        w = w.reshape((1, -1) + (1,) * (x.dim() - 2))
    return v, back, w


def layer_terms(mod) -> int:
    """How many products one output element of a gemm/convolution layer sums (at most): in_features; C_in/groups
    x the kernel's size; for a transposed convolution C_in x the kernel's size (its weight is [C_in, C_out/groups,
    k...]; a stride only lowers it)."""
    w = mod.weight
    if isinstance(mod, _CONV_TRANSPOSED):
        return int(w.shape[0] * math.prod(w.shape[2:]))
    return int(w[0].numel())


class _LayerRoundingRun:
    """One draw of the any-order model of ORD-03's cancellation probe: every gemm and convolution layer's output
    y is replaced by y + d * gamma_n * |layer|(|x|), d = +-1 per element from ``gen``, where |layer| is the layer
    with |weight| and |bias| applied to |x| (sum|terms| of each output element, the layer's own) and gamma_n the
    any-order bound of a length-n fp32 reduction (tolerance.sum_gamma, n = :func:`layer_terms`); every norm
    layer that computes statistics (batch norm in training mode, instance, group and layer norm) has its mean
    off by d * gamma_M * mean|x| per statistic of M elements, carried to its output (:func:`_norm_statistics`).

    Why. The probe's rows +B, ..., -B make a layer's products large while its output cancels; an honest fp32
    layer may err by up to gamma_n * sum|terms| there in any order, and that error is then carried by every
    later operator (an activation, a norm, a softmax) to the model's output. ORD-03's own bound measures sum|terms|
    at the output, by the reference on |x|, which after a norm or a saturating activation understates what the
    layer summed by orders of magnitude; this run measures what the layer's worst honest error does downstream
    instead. A running total narrower than fp32 errs by ~2^13 (fp16) to 2^16 (bf16) times gamma_n."""

    def __init__(self, model64, dtype: str, gen: torch.Generator, sign: float = 1.0):
        self.model, self.dtype, self.gen, self.sign = model64, dtype, gen, sign

    def _norm_hook(self, mod, inp, out):
        """A norm layer's mean off by d * gamma_M * mean|x| per statistic (M elements each, summed in any fp32
        order): the output moves by -delta * weight / sqrt(var + eps)."""
        x = inp[0] if inp and isinstance(inp[0], torch.Tensor) else None
        if x is None or not (isinstance(out, torch.Tensor) and out.is_floating_point()):
            return out
        st = _norm_statistics(mod, x)
        if st is None:
            return out
        v, back, w = st
        m = v.shape[-1]
        delta = (self.sign * tol.sum_gamma(m, self.dtype) * _signs(v.shape[:-1], self.gen, x.device)
                 * v.abs().mean(-1))
        shift = delta / torch.sqrt(v.var(-1, unbiased=False) + mod.eps)
        if isinstance(mod, torch.nn.GroupNorm):
            per_channel = x.shape[1] // mod.num_groups
            shift = shift.repeat_interleave(per_channel, dim=1).reshape((x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2))
            w = mod.weight.reshape((1, -1) + (1,) * (x.dim() - 2)) if mod.weight is not None else None
        else:
            shift = shift.reshape(back)
        return out - (shift * w if w is not None else shift)

    def _hook(self, mod, inp, out):
        if not (isinstance(out, torch.Tensor) and out.is_floating_point() and inp
                and isinstance(inp[0], torch.Tensor)):
            return out
        saved = [q.detach().clone() for q in mod.parameters(recurse=False)]
        try:
            with torch.no_grad():
                for q in mod.parameters(recurse=False):
                    q.abs_()
                terms = mod.forward(inp[0].abs(), *inp[1:])
        finally:
            with torch.no_grad():
                for q, v in zip(mod.parameters(recurse=False), saved, strict=True):
                    q.copy_(v)
        g = tol.sum_gamma(layer_terms(mod), self.dtype)
        return out + self.sign * g * _signs(out.shape, self.gen, out.device) * terms

    def __call__(self, ref: Float64Reference, x64: list):
        hooks = [m.register_forward_hook(self._hook) for m in self.model.modules()
                 if isinstance(m, _PRODUCT_LAYERS) and getattr(m, "weight", None) is not None]
        hooks += [m.register_forward_hook(self._norm_hook) for m in self.model.modules()
                  if isinstance(m, _NORM_LAYERS)]
        try:
            return ref(*x64)
        finally:
            for h in hooks:
                h.remove()


# aten operators whose result is exact on operands representable in the data dtype, or that only move data: the
# storage model leaves their results alone (rounding them again would charge a rounding no implementation makes).
_EXACT_OPS = frozenset({
    "_to_copy", "clone", "copy", "detach", "lift_fresh", "lift_fresh_copy", "alias", "contiguous", "cat", "stack",
    "index", "index_select", "gather", "scatter", "select_scatter", "slice_scatter", "masked_fill", "where",
    "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "replication_pad2d", "flip", "roll", "repeat",
    "repeat_interleave", "embedding", "im2col", "col2im", "unfold", "_unsafe_view", "view", "reshape", "expand",
    "permute", "t", "transpose", "unsqueeze", "squeeze", "narrow", "split", "split_with_sizes", "unbind",
    "relu", "abs", "neg", "sign", "clamp", "clamp_min", "clamp_max", "hardtanh", "threshold", "maximum",
    "minimum", "max", "min", "amax", "amin", "sort", "topk", "floor", "ceil", "round", "trunc",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool2d", "max_pool3d",
    "adaptive_max_pool2d", "adaptive_max_pool3d", "native_dropout", "dropout", "zeros", "ones", "empty", "full",
    "zeros_like", "ones_like", "empty_like", "full_like", "fill", "new_zeros", "new_ones", "new_empty", "new_full",
    "scalar_tensor", "arange", "_local_scalar_dense",
})


def _reduced(shape, dims) -> int:
    """The number of elements one output of a reduction over ``dims`` of ``shape`` sums (all of them for none)."""
    if not dims:
        return math.prod(shape)
    dims = [dims] if isinstance(dims, int) else list(dims)
    return math.prod(shape[d] for d in dims) if shape else 1


class _ReductionLengths(TorchDispatchMode):
    """Records the longest reduction any aten operator of one forward runs (``longest``): a convolution's input
    channels per group times its kernel (a transposed one's taps per output), a product's inner dimension, a sum's,
    mean's or variance's reduced elements, a norm's statistic, a softmax's or scan's axis.

    Why. The conditioning floor's K_COND sqrt(N) counts the roundings one output's reduction accumulates, and N read
    from the probe's shapes alone (tolerance.reduction_length: the longest axis, or the numel ratio) misses the
    reductions inside shape-preserving operators: an instance norm's mean over D*H*W = 12,600 values read as
    N = 128 (KernelBench L2/79, trusted-corpus defect D3), a 3-D convolution's 16*27 taps as 16 (L2/61). Only the
    floor reads it (meta["N_floor"]); the gates' own bounds keep N."""

    _SUMS = frozenset({"sum", "mean", "var", "std", "var_mean", "std_mean", "linalg_vector_norm", "norm", "prod",
                       "nansum", "logsumexp"})
    _AXIS = frozenset({"_softmax", "_log_softmax", "softmax", "log_softmax", "cumsum", "cumprod", "logcumsumexp"})

    def __init__(self):
        super().__init__()
        self.longest = 0

    def _length(self, name: str, args, kwargs) -> int:
        a = list(args)
        if name == "convolution" and len(a) >= 9:
            x, w, _b, stride, _pad, _dil, transposed, _op, groups = a[:9]
            k = list(w.shape[2:])
            if transposed:  # weight [Cin, Cout / g, *k]: each output sums Cin / g channels over ceil(k / stride) taps
                return int(w.shape[0] // max(int(groups), 1)) * math.prod(-(-ki // max(int(si), 1))
                                                                    for ki, si in zip(k, stride, strict=False))
            return int(w.shape[1]) * math.prod(k)
        if name in ("mm", "bmm", "matmul", "dot", "mv") and len(a) >= 1 and getattr(a[0], "dim", lambda: 0)() >= 1:
            return int(a[0].shape[-1])
        if name in ("addmm", "baddbmm", "addbmm", "addmv") and len(a) >= 2:
            return int(a[1].shape[-1])
        if name == "native_group_norm" and len(a) >= 8:
            return int(a[3]) // max(int(a[7]), 1) * int(a[5])
        if name == "native_layer_norm" and len(a) >= 2:
            return math.prod(a[1])
        if name in ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                    "_native_batch_norm_legit_functional") and a and a[0].dim() >= 2:
            return a[0].numel() // max(int(a[0].shape[1]), 1)
        if name in self._SUMS and a and isinstance(a[0], torch.Tensor):
            dims = kwargs.get("dim", a[1] if len(a) > 1 and isinstance(a[1], (int, list, tuple)) else None)
            return _reduced(tuple(a[0].shape), dims)
        if name in self._AXIS and len(a) >= 2 and isinstance(a[0], torch.Tensor) and a[0].dim():
            return int(a[0].shape[int(a[1])])
        return 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            self.longest = max(self.longest, self._length(func.overloadpacket.__name__, args, kwargs))
        except Exception:  # noqa: BLE001 - a shape this reader does not know leaves the longest as it was
            pass
        return func(*args, **kwargs)


class _StoreRoundingRun(TorchDispatchMode):
    """One draw of the storage model of PRC-02's half-precision rows: the float64 reference runs with every
    rounding aten operator's floating result multiplied by (1 + u d) once (:func:`_rounding_move`), u the data dtype's unit roundoff and
    d = +-1 per element from ``gen`` (views, in-place updates and the exact or data-moving operators of
    _EXACT_OPS untouched; the inputs and weights, already representable, untouched).

    Why. Run in fp16 or bf16, the reference's own code stores every operator's result in that dtype: a gemm's
    output on the bracketed rows is ~2^7 |w|, its storage rounding ~2^-4 |w|, and a later sum that cancels it
    returns that rounding, which the op-by-op correctly rounded forward reproduces exactly. PRC-02 asks for an
    fp32 accumulator, not for fp32 intermediates, so what storing each result in the data dtype already does to
    the exact answer is a floor under its bound (tolerance.store_floor). A narrow running total stays outside:
    its error is the reduction's own, ~2^13 (fp16) or 2^16 (bf16) times one rounding of its result."""

    def __init__(self, model64, dtype: str, gen: torch.Generator, sign: float = 1.0):
        super().__init__()
        self.u, self.gen, self.tiny = sign * tol.eps(dtype) / 2.0, gen, tol.TINY[dtype]

    def _perturb(self, t):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            return _rounding_move(t, self.u, self.tiny, self.gen)
        if isinstance(t, (tuple, list)):
            return type(t)(self._perturb(x) for x in t)
        return t

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # the mode is off inside its own dispatch, so the perturbation below is not perturbed again
        if (func.overloadpacket.__name__ in _EXACT_OPS
                or any(r.alias_info is not None for r in func._schema.returns)):
            return out
        return self._perturb(out)

    def __call__(self, ref: Float64Reference, x64: list):
        with self:
            return ref(*x64)


def _spread_update(acc: dict, key: str, base: np.ndarray, new: torch.Tensor) -> None:
    """acc[key] = max(acc[key], |new - base|) elementwise; a non-finite difference counts as 0 (a floor must
    never come from an overflow of the perturbed problem)."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: a non-finite difference, zeroed below
        d = np.abs(to_np(new).astype(np.float64) - np.asarray(base, dtype=np.float64))
    d = np.asarray(np.where(np.isfinite(d), d, 0.0), dtype=np.float64)  # an ndarray even for a 0-d output
    acc[key] = d if key not in acc else np.asarray(np.maximum(acc[key], d), dtype=np.float64)


def conditioning_spread(model64, state: dict, x64: list, probe: P.Probe, seed: int, arrays: dict,
                        ups: list | None = None, mult: int = 1, store: bool = False) -> dict:
    """Store, beside a probe's reference arrays, the per-element spread max_k |f(data_k) - f(data)| over
    COND_DRAWS draws of :class:`_PerturbedRun` (COND_PAIRS antithetic pairs): ``p/<id>/cond<k>`` for floating output k of a forward probe
    (and, for ORD-03's cancellation rows, ``p/<id>/layer<k>`` over the LAYER_DRAWS draws of
    :class:`_LayerRoundingRun`, a worst case read without the floor's statistical margin; for PRC-02's
    half-precision rows, ``p/<id>/store<k>`` over the STORE_DRAWS draws of :class:`_StoreRoundingRun`);
    for a backward probe (``ups`` given: the same upstream gradients) ``p/<id>/gcond<j>`` for input j's
    gradient and ``p/<id>/gcondpar/<name>`` for parameter gradients. That spread is what rounding the data
    alone already does to the exact answer; tolerance.cond_floor turns it into a floor under the bounds of
    the gates that read it (CMP-02, and probes.FLOOR_GATES on the probes probes.measures_floor names). Float64, seeded from the probe's own seed (deterministic), before any candidate exists. Returns
    the meta entry (draws, u). The model's state is reloaded from ``state`` afterwards.

    The reference's second pass (:func:`second_pass`) asks for ``mult`` times the draws of each model (the first
    draws are the same ones, from the same generator, so no element's spread falls) and, with ``store``, for the
    storage model's draws on a forward probe of any dtype: storing every operator's result once in the probe's
    dtype is what every implementation of the operator chain does, fp32 included."""
    pid = probe.id
    u = cond_unit(probe.dtype)
    gen = torch.Generator().manual_seed(probe.rng_seed(seed) + 3)
    acc: dict[str, np.ndarray] = {}
    try:
        # ORD-03's cancellation rows also get LAYER_DRAWS draws of the any-order layer model, PRC-02's half-precision
        # rows STORE_DRAWS draws of the storage model (one antithetic pair each); a backward probe neither
        counts = {"cond": COND_DRAWS if ups is None else P.GRAD_COND_DRAWS,
                  "layer": P.LAYER_DRAWS if ups is None and probe.kind == "cancel" else 0,
                  "store": P.STORE_DRAWS if ups is None and P.stores_in_dtype(probe) else 0}
        kinds = [k for k, n in counts.items() for _ in range(n)]
        # the second pass's draws come after the first pass's, which it repeats (the same signs, in order)
        more = {k: n * (mult - 1) for k, n in counts.items()}
        if store and ups is None:
            more["store"] = P.STORE_DRAWS * mult - counts["store"]
        kinds += [k for k, n in more.items() for _ in range(n)]
        runs = {"cond": lambda sign: _PerturbedRun(model64, u, gen, sign=sign),
                "layer": lambda sign: _LayerRoundingRun(model64, probe.dtype, gen, sign=sign),
                "store": lambda sign: _StoreRoundingRun(model64, probe.dtype, gen, sign=sign)}
        for i, kind in enumerate(kinds):
            if i % 2 == 0:
                pair_start = gen.get_state()
            else:  # the same signs again (the forward draws them in the same order), negated
                gen.set_state(pair_start)
            model64.load_state_dict(state)
            ref = Float64Reference(model64)
            sign = 1.0 if i % 2 == 0 else -1.0
            run = runs[kind](sign)
            if ups is None:
                with torch.no_grad():
                    outs = flatten(run(ref, [x.detach() if isinstance(x, torch.Tensor) else x for x in x64]))
                # each model's spread is kept apart: the gates read them with different margins
                for k, o in enumerate(outs):
                    base = arrays.get(f"p/{pid}/ref{k}")
                    if o.is_floating_point() and base is not None and base.shape == tuple(o.shape):
                        _spread_update(acc, f"p/{pid}/{kind}{k}", base, o.detach())
                continue
            xs = [x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point()
                  else x for x in x64]
            try:
                fouts = [o for o in flatten(run(ref, xs)) if o.is_floating_point() and o.requires_grad]
                if len(fouts) != len(ups) or any(o.shape != g.shape for o, g in zip(fouts, ups, strict=False)):
                    return {"draws": 0, "u": u, "reason": "perturbed outputs differ in number or shape"}
                model64.zero_grad(set_to_none=True)
                torch.autograd.backward(fouts, ups)
            finally:
                run.remove_grad_hooks()
            for j, x in enumerate(xs):
                base = arrays.get(f"p/{pid}/gin{j}")
                if base is not None and isinstance(x, torch.Tensor) and x.grad is not None:
                    _spread_update(acc, f"p/{pid}/gcond{j}", base, x.grad)
            for name, prm in model64.named_parameters():
                base = arrays.get(f"p/{pid}/gpar/{name}")
                if base is not None and prm.grad is not None:
                    _spread_update(acc, f"p/{pid}/gcondpar/{name}", base, prm.grad)
    finally:
        model64.zero_grad(set_to_none=True)
        model64.load_state_dict(state)
    arrays.update(acc)
    extra = {f"{k}_draws": kinds.count(k) for k in ("layer", "store") if k in kinds}
    return {"draws": kinds.count("cond"), "u": u, **extra}


# How a probe's reason starts when the reference raised while running it (lethe.verifier.reference._run_probe).
RAISED = "reference raised: "


def _run_probe(ns: dict, model64, states, probe: P.Probe, seed: int, arrays: dict,
               budget: _Budget | None = None, device: str = "cpu", shape_floor: bool = False,
               request: dict | None = None) -> dict:
    """Run one probe of the plan on the float64 reference: its inputs, outputs (gradients for the backward probe)
    and what its gates read beside them (floors, sensitivities, sum|terms|) into ``arrays``; returns its meta.
    ``request`` (the second pass, :func:`second_pass`): measure the probe's floors whatever the budget's shares
    say, with ``mult`` times the draws and, with ``store``, the storage model's."""
    budget = budget or _Budget(None)
    mult = int((request or {}).get("mult", 1))
    pid = probe.id
    meta: dict[str, Any] = {"id": pid, "kind": probe.kind, "gates": list(probe.gates), "action": probe.action,
                            "dtype": probe.dtype, "patch": [list(p) for p in probe.patch], "status": "ok",
                            "reason": ""}
    if probe.extra.get("est_s") is not None:  # the plan's estimate of one forward (api.second_pass_requests)
        meta["est_s"] = float(probe.extra["est_s"])
    if probe.skip:  # planned but not run (the per-problem budget, the interpreter rule): the plan says why
        meta.update(status="na", reason=probe.skip, skip=True)
        return meta

    def out_of_memory(exc: BaseException) -> dict:
        # What this probe already stored is dropped: it is never graded, and the memory is what ran out.
        for k in [k for k in arrays if k.startswith(f"p/{pid}/")]:
            del arrays[k]
        exc.__traceback__ = None
        meta.update(status="na", fault="memory", reason=budget.memory_error(exc)[:500])
        return meta

    budget.enter(f"building inputs for probe {pid}")
    try:
        inputs = P.make_inputs(ns, probe, seed)
        alt = None
        if probe.action == "overwrite":
            alt = P.make_inputs(ns, P.Probe(pid + "_alt", "rand", (), draw=1), seed)
    except Exception as exc:  # noqa: BLE001 - the reference decides which variants are valid
        if is_memory_error(exc):
            return out_of_memory(exc)
        meta.update(status="na", reason=f"reference get_inputs failed: {type(exc).__name__}: {exc}"[:500])
        return meta
    try:
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
        x64 = reference_inputs(inputs, device)
    except Exception as exc:  # noqa: BLE001 - only running out of memory is handled here
        if is_memory_error(exc):
            return out_of_memory(exc)
        raise
    budget.enter(f"running the {'forward and backward' if probe.action == 'backward' else 'forward'} "
                 f"on probe {pid}")
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
            # Drawn on the CPU from the probe's generator wherever the reference runs: the same upstream gradients.
            ups_cpu = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(torch.float64) for o in fouts]
            ups = ups_cpu if device == "cpu" else [u.to(device) for u in ups_cpu]
            model64.zero_grad(set_to_none=True)
            torch.autograd.backward(fouts, ups)
            for k, u in enumerate(ups_cpu):
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
            if "CMP-02" in probe.gates:
                budget.enter(f"measuring the gradients' conditioning on probe {pid}")
                try:
                    meta["cond"] = conditioning_spread(model64, states[probe.dtype], x64, probe, seed, arrays, ups,
                                                       mult=mult)
                except Exception as exc:  # noqa: BLE001 - without a spread the gate grades with grad_tol alone
                    if is_memory_error(exc):
                        raise
                    meta["cond"] = {"draws": 0, "reason": f"{RAISED}{type(exc).__name__}: {exc}"[:300]}
        else:
            before = [x.clone() if isinstance(x, torch.Tensor) else None for x in x64]
            lengths = _ReductionLengths()
            with torch.no_grad(), lengths:
                outs = flatten(ref(*x64))
            meta["op_reduction"] = lengths.longest
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
                                          probe, seed, draws=P.OFFSET_DRAWS * mult)
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
        if is_memory_error(exc):
            return out_of_memory(exc)
        meta.update(status="na", reason=f"{RAISED}{type(exc).__name__}: {exc}"[:500])
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
    refusal = ""
    shape_variant_floor = shape_floor and P.is_shape_variant(probe)
    if measures_optional_floor(probe, shape_floor) and request is None:
        # each draw is one more forward of this probe, charged at the plan's estimate of its shape
        draws = P.COND_DRAWS + P.extra_draws(probe)
        nbytes = sum(8 * int(np.prod(o["shape"])) for o in ometa)
        refusal = budget.floor_refusal(probe, draws, nbytes, sum(int(a.nbytes) for a in arrays.values()))
        if not refusal and shape_variant_floor and nbytes > SHAPE_FLOOR_MAX_MB * 2**20:
            refusal = (f"not measured: the shape variant's {nbytes / 2**20:.0f} MB floor would pass "
                       f"{SHAPE_FLOOR_MAX_MB:g} MB")
        if refusal:
            meta["cond"] = {"draws": 0, "reason": refusal}
    if (P.measures_floor(probe) or shape_variant_floor or (request is not None and probe.action == "forward")) \
            and not refusal:
        budget.enter(f"measuring the outputs' conditioning on probe {pid}")
        try:
            unmutated = [b if b is not None else x for x, b in zip(x64, before, strict=True)]
            meta["cond"] = conditioning_spread(model64, states[probe.dtype], unmutated, probe, seed, arrays,
                                               mult=mult, store=bool((request or {}).get("store")))
        except Exception as exc:  # noqa: BLE001 - without a spread the gate grades with value_tol alone
            if is_memory_error(exc):
                return out_of_memory(exc)
            meta["cond"] = {"draws": 0, "reason": f"{RAISED}{type(exc).__name__}: {exc}"[:300]}
    in_shapes = [tuple(s["shape"]) for s in specs if s["t"] == "tensor"]
    meta["N"] = tol.reduction_length(in_shapes or [()], [tuple(o["shape"]) for o in ometa])
    # the floor's reduction length: the longest reduction an operator of the forward ran, where that is longer
    meta["N_floor"] = max(meta["N"], int(meta.get("op_reduction") or 0))
    return meta
