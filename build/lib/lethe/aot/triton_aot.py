"""Ahead-of-time resource reports for Triton kernels: compile for sm_90a / sm_100a on a CPU, read what it needs.

What is measured, per (kernel, specialization, target, num_warps, num_stages[, maxnreg]):

* ``shared_bytes`` and ``tmem_columns``: Triton's own compile metadata (``metadata.shared``, ``metadata.tmem_size``),
  the figures its loader later compares against the device (it does not compare them at compile time);
* ``registers`` and ``spill_bytes``: the cubin's resource usage as printed by the ``cuobjdump -res-usage`` that
  Triton's wheel bundles (``REG``; ``STACK`` + ``LOCAL`` bytes per thread). ``CompiledKernel.n_regs`` would only be
  filled when the binary is loaded on a GPU, which a CPU host cannot do;
* MMA instruction counts, static (each instruction counted once where it appears in the PTX text, loops not
  unrolled): ``wgmma.mma_async`` (Hopper), ``tcgen05.mma`` (Blackwell), ``mma.sync`` (the pre-Hopper fallback),
  plus the matching TTGIR ops as a cross-check.

Everything here is *compiled, not executed*: no kernel runs, and on sm_100a nothing could (there is no B200 here).

Two sources give the same ``ResourceReport``: :func:`compile_report` (ahead of time, any target, no GPU) and
:func:`report_from_compiled` / :func:`reports_from_jit_cache` (a kernel that really ran on a GPU: Triton's
driver-filled ``n_regs`` / ``n_spills``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

# Triton 3.9 warns when this is unset; the default value is what every release before used.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

TARGETS = {"sm_90a": 90, "sm_100a": 100}


@dataclass
class ResourceReport:
    """What one compiled Triton kernel needs from the hardware, for one target and one launch configuration."""

    target: str
    kernel: str
    registers: int | None
    shared_bytes: int | None
    tmem_columns: int | None
    spill_bytes: int | None
    num_warps: int
    num_stages: int
    mma: dict[str, int] = field(default_factory=dict)
    triton_version: str = ""
    maxnreg: int | None = None
    source: str = "aot"  # "aot": compiled on the host for `target`; "device": read from a kernel loaded on a GPU
    ptxas: str | None = None  # which bundled ptxas produced the cubin (version line), when known
    config: dict[str, Any] = field(default_factory=dict)  # launch configuration (options + constexpr meta-params)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # compilation failed: the other figures are None
    # The compiler stage the figures come from: "cubin" (a full compile, or a binary loaded on a GPU) or "ttgir"
    # (TTGIR plus the shared/tensor-memory allocation passes: shared_bytes, tmem_columns and num_warps are
    # known, registers and spills are None). See lethe.aot.staged.
    stage: str = "cubin"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def violations(self, *, max_spill_bytes: int | None = None) -> list[str]:
        """The target's launch limits this kernel exceeds (``lethe.aot.limits.check``)."""
        from lethe.aot.limits import check

        if self.error is not None:
            return [f"did not compile for {self.target}: {self.error}"]
        return check(self, self.target, max_spill_bytes=max_spill_bytes)


def target_arch(target: str | int) -> int:
    """Triton's GPUTarget arch number for "sm_90a" / "sm_100a" (ints pass through)."""
    if isinstance(target, int):
        return target
    key = target if target in TARGETS else f"{target}a"
    if key not in TARGETS:
        raise ValueError(f"unsupported target {target!r}; use one of {sorted(TARGETS)}")
    return TARGETS[key]


def target_name(arch: int) -> str:
    return f"sm_{arch}a"


def _triton():
    import triton

    return triton


def _bin_dir() -> str:
    return os.path.join(os.path.dirname(_triton().__file__), "backends", "nvidia", "bin")


def cuobjdump_path() -> str | None:
    """The cuobjdump bundled with the imported Triton wheel (it reads the cubins that wheel's ptxas writes)."""
    bundled = os.path.join(_bin_dir(), "cuobjdump")
    if os.access(bundled, os.X_OK):
        return bundled
    return shutil.which("cuobjdump")


_RES_RE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def parse_res_usage(text: str) -> dict[str, int] | None:
    """REG / STACK / SHARED / LOCAL of the first function in ``cuobjdump -res-usage`` output, or None."""
    m = _RES_RE.search(text)
    if m is None:
        return None
    return dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, m.groups()), strict=True))


def cubin_res_usage(cubin: bytes) -> dict[str, int] | None:
    """Register and local-memory figures of a cubin, via the bundled cuobjdump (None when unavailable)."""
    tool = cuobjdump_path()
    if tool is None or not cubin:
        return None
    with tempfile.TemporaryDirectory(prefix="lethe_aot_") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        out = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=False)
    return parse_res_usage(out.stdout)


# PTX instructions may carry a guard predicate ("@%p3 tcgen05.mma...").
_PTX_PATTERNS = {
    "wgmma": re.compile(r"^\s*(?:@!?%\w+\s+)?wgmma\.mma_async\b", re.M),
    "tcgen05_mma": re.compile(r"^\s*(?:@!?%\w+\s+)?tcgen05\.mma\b", re.M),
    "mma_sync": re.compile(r"^\s*(?:@!?%\w+\s+)?mma\.sync\b", re.M),
    "tcgen05_alloc": re.compile(r"^\s*(?:@!?%\w+\s+)?tcgen05\.alloc\b", re.M),
    "trap": re.compile(r"^\s*(?:@!?%\w+\s+)?trap;", re.M),
}
_TTGIR_PATTERNS = {
    "ttgir_tc_gen5_mma": re.compile(r"ttng\.tc_gen5_mma\b"),
    "ttgir_warp_group_dot": re.compile(r"ttng\.warp_group_dot\b"),
    "ttgir_tmem_alloc": re.compile(r"ttng\.tmem_alloc\b"),
}


def count_mma(ptx: str, ttgir: str | None = None) -> dict[str, int]:
    """Static counts of MMA-class instructions in PTX (and of the TTGIR ops they lower from, when given)."""
    counts = {name: len(rx.findall(ptx)) for name, rx in _PTX_PATTERNS.items()}
    if ttgir:
        counts.update({name: len(rx.findall(ttgir)) for name, rx in _TTGIR_PATTERNS.items()})
    return counts


def _target_of(metadata: Any) -> str:
    tgt = metadata.target
    arch = getattr(tgt, "arch", None)
    if arch is None and isinstance(tgt, (tuple, list)):
        arch = tgt[1]
    if arch is None and isinstance(tgt, dict):
        arch = tgt["arch"]
    return target_name(int(arch))


def _notes(rep: ResourceReport) -> list[str]:
    notes = []
    mma = rep.mma
    if rep.tmem_columns and rep.tmem_columns > 512 and mma.get("trap", 0) and not mma.get("tcgen05_mma", 0):
        # Triton's TMEM allocator gives up and emits a trap-only body: the cubin's registers describe the trap.
        notes.append("TMEM allocation failed at compile time: the kernel body is a trap, so its register and "
                      "spill figures describe the trap, not the kernel")
    return notes


def report_from_compiled(kernel: Any, *, source: str, ptxas: str | None = None,
                         registers: int | None = None, spill_bytes: int | None = None) -> ResourceReport:
    """A ``ResourceReport`` from a Triton ``CompiledKernel`` (its metadata, PTX, TTGIR and cubin).

    Registers and spills: when the caller passes driver figures (a kernel loaded on a GPU) they win; otherwise
    the cubin is read with cuobjdump.
    """
    triton = _triton()
    md = kernel.metadata
    asm = getattr(kernel, "asm", {}) or {}
    ptx = asm.get("ptx", "") or ""
    mma = count_mma(ptx, asm.get("ttgir"))
    if registers is None or spill_bytes is None:
        usage = cubin_res_usage(asm.get("cubin", b""))
        if usage is not None:
            registers = usage["REG"] if registers is None else registers
            spill_bytes = usage["STACK"] + usage["LOCAL"] if spill_bytes is None else spill_bytes
    tmem = getattr(md, "tmem_size", None)
    rep = ResourceReport(
        target=_target_of(md),
        kernel=md.name,
        registers=registers,
        shared_bytes=int(md.shared),
        tmem_columns=int(tmem) if tmem is not None else 0,
        spill_bytes=spill_bytes,
        num_warps=int(md.num_warps),
        num_stages=int(md.num_stages),
        mma=mma,
        triton_version=triton.__version__,
        maxnreg=getattr(md, "maxnreg", None),
        source=source,
        ptxas=ptxas,
    )
    rep.notes = _notes(rep)
    return rep


def _ptxas_version(arch: int) -> str | None:
    """Version line of the ptxas Triton uses for ``arch`` (Triton picks ptxas-blackwell for newer archs)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas  # 3.6+: arch-aware

        ptxas = get_ptxas(arch) if "arch" in get_ptxas.__code__.co_varnames else get_ptxas()
        path = getattr(ptxas, "path", ptxas)
    except Exception:  # older/newer layouts: fall back to the plain bundled ptxas
        path = os.path.join(_bin_dir(), "ptxas")
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return f"{os.path.basename(str(path))}: {lines[-1]}" if lines else None


def _error_summary(exc: BaseException) -> str:
    """The informative lines of a compiler exception (ptxas 'fatal'/C7xxx lines), not the PTX it embeds."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    key = [ln for ln in lines if re.search(r"error|C7\d\d\d|out of|resource|fatal", ln, re.I)]
    return " | ".join((key or lines[:1] or [type(exc).__name__])[:4])[:600]


def compile_report(jit_fn: Any, signature: dict[str, str], constexprs: dict[Any, Any], target: str | int,
                   num_warps: int = 4, num_stages: int = 3, *, attrs: dict | None = None,
                   maxnreg: int | None = None) -> ResourceReport:
    """Compile ``jit_fn`` for ``target`` on this host (no GPU) and report its resource needs.

    ``signature`` maps every parameter name to a Triton type ("*bf16", "i32", "fp32", ... or "constexpr");
    ``constexprs`` gives the constexpr values (by name or by Triton's index path). ``attrs`` are the JIT's
    specialization attributes keyed by index path (``{(0,): [["tt.divisibility", 16]]}``); when None, every
    pointer parameter is marked 16-byte aligned, which is what the JIT infers for torch allocations. Integer
    arguments equal to 1 and multiples of 16 are specialised by the JIT too: pass them through ``constexprs`` /
    ``attrs``, or use :func:`lethe.aot.launches.specialize` which derives all of this from real arguments.
    A compile failure is returned as a report with ``error`` set, not raised: for RES-02 it is a finding.
    """
    triton = _triton()
    from triton.backends.compiler import GPUTarget

    jit = unwrap_jit(jit_fn)
    arch = target_arch(target)
    if attrs is None:
        names = list(signature)
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if str(signature[n]).startswith("*")}
    options: dict[str, Any] = {"num_warps": num_warps, "num_stages": num_stages}
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    name = getattr(jit, "__name__", None) or jit.fn.__name__
    # On a ptxas failure Triton prints the whole PTX as a "reproducer" before raising; keep it out of logs.
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            src = triton.compiler.ASTSource(fn=jit, signature=dict(signature), constexprs=dict(constexprs),
                                            attrs=attrs)
            kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as exc:  # noqa: BLE001 - any compiler failure is a reportable outcome
        return ResourceReport(
            target=target_name(arch), kernel=name, registers=None, shared_bytes=None, tmem_columns=None,
            spill_bytes=None, num_warps=num_warps, num_stages=num_stages, triton_version=triton.__version__,
            maxnreg=maxnreg, source="aot", error=_error_summary(exc),
        )
    rep = report_from_compiled(kernel, source="aot", ptxas=_ptxas_version(arch))
    rep.maxnreg = maxnreg
    return rep


def unwrap_jit(obj: Any) -> Any:
    """The JITFunction under Triton's Autotuner / Heuristics wrappers (each keeps the wrapped one in ``.fn``)."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(obj, JITFunction):
        obj = getattr(obj, "fn", None)
        seen += 1
        if obj is None or seen > 8:
            raise TypeError("not a Triton @jit function (nor an autotune/heuristics wrapper of one)")
    return obj


def reports_from_jit_cache(fn: Any) -> list[ResourceReport]:
    """Reports for every binary a kernel compiled *and loaded on a GPU* in this process (the on-device path).

    Reads Triton's per-device kernel cache of the JITFunction (under any autotune/heuristics wrapper). Registers
    and spills come from the driver (``n_regs``; ``n_spills`` is the local-memory size in 4-byte words), filled
    when the binary was loaded; a binary Triton refused to load (OutOfResources) still has its metadata, and is
    reported with cuobjdump figures and a note.
    """
    jit = unwrap_jit(fn)
    reports = []
    for entry in list(getattr(jit, "device_caches", {}).values()):
        kernel_cache = entry[0]
        for kernel in list(kernel_cache.values()):
            if hasattr(kernel, "result"):  # async compile future
                kernel = kernel.result()
            regs = kernel.__dict__.get("n_regs")
            spills = kernel.__dict__.get("n_spills")
            rep = report_from_compiled(
                kernel, source="device", registers=regs, spill_bytes=None if spills is None else 4 * int(spills)
            )
            if regs is None:
                rep.notes.append("binary never loaded on the device: registers/spills read from the cubin")
            reports.append(rep)
    return reports
