"""Record the Triton launches a candidate makes, then compile each launched kernel ahead of time for every target.

RES-02 asks whether a candidate's kernels fit real hardware: the GPU it ran on, *and* the targets it claims
(sm_90a, sm_100a) even when no such GPU is here. A Triton kernel's resource needs depend on how it is
specialised at launch (dtypes, 16-byte alignment of pointers, integers equal to 1 or divisible by 16, constexpr
meta-parameters, num_warps / num_stages / maxnreg), so compiling a ``@triton.jit`` function "in general" is not
enough: we compile exactly what the candidate launched.

How:

1. :func:`record_launches` wraps ``JITFunction.run`` (what ``kernel[grid](...)`` and every autotuner / heuristics
   wrapper end up calling) and ``Autotuner.run`` in the candidate's process. Each call is stored as a
   :class:`LaunchRecord`: the arguments with every tensor replaced by a :class:`PointerArg` (dtype + whether its
   address is 16-byte aligned, which is all the specialisation looks at, so no device memory is kept), plus the
   autotuner's full config list when the kernel is autotuned. With ``execute=False`` nothing is launched and an
   autotuner does not benchmark: its first config is pushed through the wrapper chain so heuristics still run,
   which makes recording work on a CPU-only host as long as the candidate's Python can build its arguments.
2. :func:`specialize` replays a record through Triton's *own* binder for a chosen ``GPUTarget`` (the same code
   path ``JITFunction.run`` uses, minus the device), giving the signature, constexprs and attributes the JIT would
   have compiled.
3. :func:`res02_reports` compiles every launched kernel of the candidate for each target and each autotune config
   it could have picked, and returns one :class:`~lethe.aot.triton_aot.ResourceReport` per compilation; judge
   them with :func:`lethe.aot.limits.check` (or ``report.violations()``).

Compiled, not executed: the reports describe binaries; none of them runs here.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lethe.aot.triton_aot import (
    ResourceReport,
    _error_summary,
    _ptxas_version,
    report_from_compiled,
    target_arch,
    target_name,
    unwrap_jit,
)

LAUNCH_OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@dataclass(frozen=True)
class PointerArg:
    """A tensor argument reduced to what Triton's specialisation reads: element type and 16-byte alignment."""

    dtype_name: str  # e.g. "bfloat16"
    aligned16: bool = True

    @property
    def dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype_name)

    def data_ptr(self) -> int:
        return 256 if self.aligned16 else 8


def describe(arg: Any) -> Any:
    """``arg`` with tensors (anything with ``data_ptr()`` and ``dtype``) replaced by :class:`PointerArg`."""
    if isinstance(arg, PointerArg):
        return arg
    if hasattr(arg, "data_ptr") and hasattr(arg, "dtype") and callable(arg.data_ptr):
        return PointerArg(str(arg.dtype).replace("torch.", ""), arg.data_ptr() % 16 == 0)
    if isinstance(arg, tuple) and not hasattr(arg, "_fields"):
        return tuple(describe(a) for a in arg)
    return arg


@dataclass
class LaunchRecord:
    """One recorded launch of a ``@triton.jit`` function (arguments described, not kept)."""

    jit: Any  # the JITFunction
    args: tuple
    kwargs: dict[str, Any]
    configs: list[dict[str, Any]] | None = None  # the autotuner's configs (all_kwargs()), when autotuned

    @property
    def name(self) -> str:
        fn = self.jit.fn
        return f"{fn.__module__}.{fn.__qualname__}"


@dataclass
class _State:
    records: list[LaunchRecord] = field(default_factory=list)
    execute: bool = True
    local: threading.local = field(default_factory=threading.local)


def _launch_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: describe(v) for k, v in kwargs.items() if k not in ("grid", "warmup")}


@contextlib.contextmanager
def record_launches(execute: bool = True) -> Iterator[list[LaunchRecord]]:
    """Record every Triton launch made inside the block; yields the (growing) list of :class:`LaunchRecord`.

    ``execute=True`` (a candidate on a real GPU): launches and autotuning proceed as usual. ``execute=False``
    (no GPU): nothing is launched, ``kernel[grid](...)`` returns None, autotuners do not benchmark.
    Not re-entrant across threads' patches: use one recorder per process at a time.
    """
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    state = _State(execute=execute)
    orig_jit_run = JITFunction.run
    orig_tuner_run = Autotuner.run

    def jit_run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            configs = getattr(state.local, "configs", None)
            state.records.append(LaunchRecord(self, tuple(describe(a) for a in args), _launch_kwargs(kwargs),
                                              configs=configs))
        if not state.execute:
            return None
        return orig_jit_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    def tuner_run(self, *args, **kwargs):
        previous = getattr(state.local, "configs", None)
        state.local.configs = [dict(c.all_kwargs()) for c in self.configs]
        try:
            if state.execute:
                return orig_tuner_run(self, *args, **kwargs)
            # No benchmarking without a device: push the first config through the rest of the wrapper chain
            # (heuristics, the JIT binder) so the launch is recorded with every derived meta-parameter.
            return self.fn.run(*args, **kwargs, **self.configs[0].all_kwargs())
        finally:
            state.local.configs = previous

    JITFunction.run = jit_run
    Autotuner.run = tuner_run
    try:
        yield state.records
    finally:
        JITFunction.run = orig_jit_run
        Autotuner.run = orig_tuner_run


@dataclass
class Specialization:
    """What the JIT would compile for one launch on one target."""

    signature: dict[str, str]
    constexprs: dict[Any, Any]
    attrs: dict[Any, Any]
    options: dict[str, Any]


def specialize(jit_fn: Any, target: str | int, args: tuple, kwargs: dict[str, Any]) -> Specialization:
    """Run Triton's own launch binder for ``target`` on recorded arguments (no device involved)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    jit = unwrap_jit(jit_fn)
    backend = make_backend(GPUTarget("cuda", target_arch(target), 32))
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    kwargs = dict(kwargs)
    bound, spec, opts = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, spec, opts)
    return Specialization(signature, constexprs, attrs, dict(options.__dict__))


def _compile(jit: Any, arch: int, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Triton's ``CompiledKernel`` for one launch on ``arch``, the compiler's own output swallowed."""
    import triton
    from triton.backends.compiler import GPUTarget

    spec = specialize(jit, arch, args, kwargs)
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        return triton.compile(triton.compiler.ASTSource(jit, spec.signature, spec.constexprs, spec.attrs),
                              target=GPUTarget("cuda", arch, 32), options=spec.options)


def compiled_ptx(jit_fn: Any, target: str | int, args: tuple, kwargs: dict[str, Any]) -> str:
    """The PTX of one recorded launch compiled for ``target`` (what :func:`compile_launch` measures), for reading
    the generated code itself: which instructions a change adds or removes."""
    return _compile(unwrap_jit(jit_fn), target_arch(target), args, kwargs).asm["ptx"]


def compile_launch(jit_fn: Any, target: str | int, args: tuple, kwargs: dict[str, Any]) -> ResourceReport:
    """Compile one recorded launch for ``target`` exactly as the JIT would specialise it, and report resources."""
    import triton

    jit = unwrap_jit(jit_fn)
    arch = target_arch(target)
    options = {k: kwargs[k] for k in LAUNCH_OPTION_KEYS if kwargs.get(k) is not None}
    config = {**options, **{k: v for k, v in kwargs.items() if k in jit.arg_names and _is_constexpr(jit, k)}}
    try:
        kernel = _compile(jit, arch, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - a kernel that does not compile is a RES-02 finding, not a crash
        rep = ResourceReport(
            target=target_name(arch), kernel=jit.fn.__name__, registers=None, shared_bytes=None, tmem_columns=None,
            spill_bytes=None, num_warps=int(options.get("num_warps", 4)), num_stages=int(options.get("num_stages", 3)),
            triton_version=triton.__version__, maxnreg=options.get("maxnreg"), source="aot",
            error=_error_summary(exc),
        )
        rep.config = _jsonable(config)
        return rep
    rep = report_from_compiled(kernel, source="aot", ptxas=_ptxas_version(arch))
    rep.config = _jsonable(config)
    return rep


def _is_constexpr(jit: Any, name: str) -> bool:
    idx = jit.arg_names.index(name)
    return bool(jit.params[idx].is_constexpr)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def discover_kernels(module_or_kernels: Any) -> dict[int, tuple[str, Any]]:
    """The Triton kernels a module defines (or the given kernels): ``id(JITFunction) -> (name, outermost object)``."""
    from triton.runtime.jit import JITFunction

    if isinstance(module_or_kernels, types.ModuleType):
        candidates: Iterable[Any] = vars(module_or_kernels).values()
    elif isinstance(module_or_kernels, dict):
        candidates = module_or_kernels.values()
    elif isinstance(module_or_kernels, JITFunction) or hasattr(module_or_kernels, "fn"):
        candidates = [module_or_kernels]
    else:
        candidates = module_or_kernels
    found: dict[int, tuple[str, Any]] = {}
    for obj in candidates:
        try:
            jit = unwrap_jit(obj)
        except TypeError:
            continue
        found[id(jit)] = (jit.fn.__name__, obj)
    return found


def expand_configs(record: LaunchRecord) -> list[dict[str, Any]]:
    """Launch kwargs for every configuration the launch could have run with.

    An autotuned launch expands to one entry per autotune config (each config's meta-parameters and options
    override the recorded ones), since the autotuner may pick any of them and silently drops those that do not
    fit; a plain launch is its own single configuration.
    """
    if not record.configs:
        return [dict(record.kwargs)]
    out = []
    for cfg in record.configs:
        kw = {k: v for k, v in record.kwargs.items() if k not in LAUNCH_OPTION_KEYS}
        kw.update(cfg)
        out.append(kw)
    return out


@dataclass
class _Job:
    """One (launch, configuration, target) of the staged AOT pass."""

    record: LaunchRecord
    kwargs: dict[str, Any]
    target: str
    arch: int
    spec: Specialization | None
    config: dict[str, Any]
    options: dict[str, Any]
    report: ResourceReport | None = None
    early: dict[str, Any] | None = None


def _config_of(jit: Any, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    options = {k: kwargs[k] for k in LAUNCH_OPTION_KEYS if kwargs.get(k) is not None}
    config = {**options, **{k: v for k, v in kwargs.items() if k in jit.arg_names and _is_constexpr(jit, k)}}
    return options, _jsonable(config)


def _plain_report(job: _Job, **fields: Any) -> ResourceReport:
    import triton

    rep = ResourceReport(
        target=job.target, kernel=job.record.jit.fn.__name__, registers=None, shared_bytes=None, tmem_columns=None,
        spill_bytes=None, num_warps=int(job.options.get("num_warps", 4)),
        num_stages=int(job.options.get("num_stages", 3)), triton_version=triton.__version__,
        maxnreg=job.options.get("maxnreg"), source="aot", **fields,
    )
    rep.config = job.config
    return rep


def _jobs(module_or_kernels: Any, launches: Iterable[LaunchRecord], targets: Iterable[str]) -> list[_Job]:
    """The distinct (kernel, specialisation, configuration, target) to compile, in launch order."""
    from lethe.aot.triton_aot import _error_summary

    kernels = discover_kernels(module_or_kernels)
    targets = list(targets)
    jobs: list[_Job] = []
    seen: set[tuple] = set()
    for record in launches:
        if id(record.jit) not in kernels:
            continue
        for kwargs in expand_configs(record):
            for target in targets:
                arch = target_arch(target)
                options, config = _config_of(record.jit, kwargs)
                job = _Job(record, kwargs, target_name(arch), arch, None, config, options)
                try:
                    job.spec = specialize(record.jit, arch, record.args, kwargs)
                    spec = job.spec
                    key = (id(record.jit), target, repr(spec.signature), repr(spec.constexprs), repr(spec.attrs),
                           repr(sorted(spec.options.items())))
                except Exception as exc:  # noqa: BLE001 - the binder's refusal is the report
                    key = (id(record.jit), target, repr(record.args), repr(sorted(kwargs.items())))
                    job.report = _plain_report(job, error=_error_summary(exc))
                if key in seen:
                    continue
                seen.add(key)
                jobs.append(job)
    return jobs


def res02_reports(module_or_kernels: Any, launches: Iterable[LaunchRecord],
                  targets: Iterable[str] = ("sm_90a", "sm_100a"), *, budget: Any = None,
                  log: list[dict[str, Any]] | None = None) -> list[ResourceReport]:
    """Ahead-of-time resource reports for every launched Triton kernel of a candidate, for every target.

    ``module_or_kernels``: the candidate module (every ``@triton.jit`` / autotune / heuristics object in it
    counts) or an iterable of such objects. ``launches``: the records from :func:`record_launches`; launches of
    kernels outside ``module_or_kernels`` (library kernels) are ignored. One report per distinct
    (kernel, specialisation, configuration, target); kernels never launched are not reported (there is no
    signature to compile them with). Each report's ``config`` names the launch configuration.

    Compilation is staged and budgeted (:mod:`lethe.aot.staged`, ``budget`` a
    :class:`~lethe.aot.staged.CompileBudget`, default ``CompileBudget()``): first, for every job, TTGIR plus the
    allocation passes, which fix shared memory and TMEM; a job that already breaks a limit there is reported
    from that stage (``stage="ttgir"``, registers/spills None) without the full compile. The others are then
    compiled in full within ``budget.full_s`` each; when that runs out, the early figures are reported with
    registers and spills None and a note. ``log`` (optional) receives one timing entry per step.
    """
    from lethe.aot import staged

    budget = budget if budget is not None else staged.CompileBudget()
    parallel = budget.parallel or staged.default_parallel()
    t0 = time.monotonic()

    def left(cap: float | None) -> float:
        cap = float("inf") if cap is None else cap
        if budget.total_s is None:
            return cap
        return min(cap, budget.total_s - (time.monotonic() - t0))

    jobs = _jobs(module_or_kernels, launches, targets)
    import triton

    version = triton.__version__
    # 1. the early step for every job: shared memory and TMEM are known before any expensive compile starts
    todo = [job for job in jobs if job.report is None]
    results = staged.run_forked_all(
        [(lambda job=job: staged.early_figures(job.record.jit, job.arch, job.spec), lambda: left(budget.early_s))
         for job in todo], parallel)
    for job, res in zip(todo, results, strict=True):
        _log(log, job, staged.EARLY_STAGE, res)
        if res.status != "ok":
            continue  # the full compile reports a compiler error itself; a budget note follows otherwise
        job.early = res.value
        if staged.early_violations(job.early, job.target):
            job.report = staged.report_from_early(job.early, target=job.target, triton_version=version,
                                                  maxnreg=job.options.get("maxnreg"), note=staged.early_note())
            job.report.config = job.config
    # 2. the full compile (registers, spills, PTX counts) of the jobs that fit so far
    todo = [job for job in jobs if job.report is None]
    allotted: dict[int, float] = {}

    def full_budget(i: int) -> float:
        allotted[i] = left(budget.full_s)
        return allotted[i]

    results = staged.run_forked_all(
        [(lambda job=job: staged.full_report(job.record.jit, job.arch, job.spec), lambda i=i: full_budget(i))
         for i, job in enumerate(todo)], parallel)
    for i, (job, res) in enumerate(zip(todo, results, strict=True)):
        _log(log, job, staged.FULL_STAGE, res)
        if res.status == "ok":
            rep = ResourceReport(**res.value)
            if job.early is not None:
                note = staged.consistency_note(job.early, rep)
                if note:
                    rep.notes.append(note)
        elif res.status == "error":
            rep = _plain_report(job, error=res.detail)
        else:
            if res.status == "crash":
                why = f"failed: {res.detail}"
            elif budget.full_s is None or allotted.get(i, 0.0) < budget.full_s:
                why = f"was stopped when the pass's {budget.total_s:g} s budget ran out"
            else:
                why = f"did not finish within its {budget.full_s:g} s budget"
            if job.early is not None:
                rep = staged.report_from_early(job.early, target=job.target, triton_version=version,
                                               maxnreg=job.options.get("maxnreg"), note=staged.budget_note(why))
            else:
                rep = _plain_report(job, error=staged.unknown_error(why))
        rep.config = job.config
        job.report = rep
    return [job.report for job in jobs]


def _log(log: list[dict[str, Any]] | None, job: _Job, step: str, res: Any) -> None:
    if log is None:
        return
    log.append({"kernel": job.record.jit.fn.__name__, "target": job.target, "config": job.config, "step": step,
                "status": res.status, "seconds": round(res.seconds, 3), "detail": res.detail[:200]})


def fit_summary(reports: Iterable[ResourceReport], *, max_spill_bytes: int | None = None) -> dict[str, dict]:
    """Per (kernel, target): how many compiled configurations fit, and the verdict RES-02 should draw.

    ``"fits"``: every configuration fits; ``"some configs unlaunchable"``: the autotuner would silently drop
    some (the mamba#904 situation: report, the kernel still runs, possibly on a slow config);
    ``"unlaunchable"``: no configuration fits, so the kernel cannot run on that target at all.
    """
    groups: dict[str, list[ResourceReport]] = {}
    for rep in reports:
        groups.setdefault(f"{rep.kernel} {rep.target}", []).append(rep)
    out = {}
    for key, reps in sorted(groups.items()):
        bad = [(r.config or {"num_warps": r.num_warps, "num_stages": r.num_stages}, r.violations(
            max_spill_bytes=max_spill_bytes)) for r in reps]
        bad = [(cfg, v) for cfg, v in bad if v]
        verdict = "fits" if not bad else ("unlaunchable" if len(bad) == len(reps) else "some configs unlaunchable")
        out[key] = {"configs": len(reps), "configs_over_limits": len(bad), "verdict": verdict,
                    "examples": [{"config": cfg, "violations": v} for cfg, v in bad[:3]]}
    return out
