"""Hardware limits a compiled kernel must respect to launch at all, per compilation target.

Why a table of our own: Triton compiles for a ``GPUTarget`` without a GPU and does not refuse a kernel that can
never launch. It checks shared memory and tensor memory only when the binary is loaded on a device
(``CompiledKernel._init_handles`` raises ``OutOfResources``), and an autotuner silently drops such configs. An
ahead-of-time check therefore has to compare the compiled numbers against the limits itself.

Where the numbers come from (all per the NVIDIA documentation, paraphrased):

* CUDA C++ Programming Guide, appendix "Compute Capabilities", table of technical specifications per compute
  capability, columns 9.0 (Hopper: H100/H200) and 10.0 (Blackwell datacenter: B200/GB200):
  - at most 255 32-bit registers per thread; 64 K (65,536) 32-bit registers per SM and per thread block;
  - at most 1,024 threads per block and 64 resident warps per SM;
  - shared memory: 228 KB per SM, of which a single block may use at most 227 KB (232,448 bytes) and only after
    opting in (``cudaFuncAttributeMaxDynamicSharedMemorySize``); without opting in a block gets 48 KB. Triton
    opts in for every kernel, so the opt-in maximum is the limit that applies;
  - local memory (where spills go): 512 KB per thread.
* Register allocation granularity (CUDA occupancy calculator / Programming Guide, "Multiprocessor Level"):
  registers are allocated per warp in units of 256, i.e. a thread's count is rounded up to a multiple of 8.
* Tensor memory (Blackwell only): PTX ISA, section "Tensor Memory" of the ``tcgen05`` instructions. Each CTA's
  TMEM is 128 lanes x 512 columns of 32-bit cells (256 KB per SM); ``tcgen05.alloc`` hands out columns in powers
  of two from 32 to 512, so a kernel that needs more than 512 columns cannot be allocated. Hopper (sm_90) has no
  tensor memory. Triton's own load-time check uses the same 512 (576 only for sm_107, which we do not target).

Spilling is not a hardware limit (local memory is backed by global memory), so ``check`` reports it only when the
caller sets a budget; the RES-02 gate decides the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HardwareLimits:
    """Launch limits of one compilation target (see the module docstring for sources)."""

    target: str
    capability: int  # Triton's GPUTarget arch number (90, 100)
    max_registers_per_thread: int
    registers_per_sm: int
    registers_per_block: int
    register_alloc_unit_per_warp: int
    max_threads_per_block: int
    max_shared_bytes_per_block: int  # opt-in maximum, what Triton requests
    shared_bytes_per_sm: int
    tmem_columns: int  # 0: the target has no tensor memory
    max_local_bytes_per_thread: int


LIMITS: dict[str, HardwareLimits] = {
    "sm_90a": HardwareLimits(
        target="sm_90a",
        capability=90,
        max_registers_per_thread=255,
        registers_per_sm=65536,
        registers_per_block=65536,
        register_alloc_unit_per_warp=256,
        max_threads_per_block=1024,
        max_shared_bytes_per_block=232448,
        shared_bytes_per_sm=233472,
        tmem_columns=0,
        max_local_bytes_per_thread=512 * 1024,
    ),
    "sm_100a": HardwareLimits(
        target="sm_100a",
        capability=100,
        max_registers_per_thread=255,
        registers_per_sm=65536,
        registers_per_block=65536,
        register_alloc_unit_per_warp=256,
        max_threads_per_block=1024,
        max_shared_bytes_per_block=232448,
        shared_bytes_per_sm=233472,
        tmem_columns=512,
        max_local_bytes_per_thread=512 * 1024,
    ),
}

_ALIASES = {"sm_90": "sm_90a", "90": "sm_90a", "sm_100": "sm_100a", "100": "sm_100a"}


def limits_for(target: str | int) -> HardwareLimits:
    """The limits of ``target`` ("sm_90a", "sm_100a"; "sm_90", "sm_100", 90 and 100 are accepted too)."""
    key = str(target)
    key = _ALIASES.get(key, key)
    if key not in LIMITS:
        raise KeyError(f"no hardware limits for target {target!r}; known: {sorted(LIMITS)}")
    return LIMITS[key]


def _get(report: Any, name: str) -> Any:
    return report[name] if isinstance(report, dict) else getattr(report, name)


def block_registers(registers: int, num_warps: int, unit_per_warp: int) -> int:
    """Registers a block really occupies: each warp's share rounded up to the allocation unit."""
    per_warp = registers * 32
    per_warp = -(-per_warp // unit_per_warp) * unit_per_warp
    return per_warp * num_warps


def check(report: Any, target: str | int | None = None, *, max_spill_bytes: int | None = None) -> list[str]:
    """Every launch limit of ``target`` the compiled kernel in ``report`` exceeds; an empty list means it fits.

    ``report`` is a ``ResourceReport`` or a dict with the same fields; ``target`` defaults to the report's own.
    A field that is None (unknown, e.g. registers when no cuobjdump was available) is not judged: the caller sees
    that the figure is missing instead of a false "fits". ``max_spill_bytes`` turns spilling into a violation
    when set (None: spills are reported by the caller, not judged here).
    """
    lim = limits_for(target if target is not None else _get(report, "target"))
    problems: list[str] = []
    num_warps = _get(report, "num_warps")
    regs = _get(report, "registers")
    shared = _get(report, "shared_bytes")
    tmem = _get(report, "tmem_columns")
    spill = _get(report, "spill_bytes")
    threads = num_warps * 32 if num_warps is not None else None

    if threads is not None and threads > lim.max_threads_per_block:
        problems.append(f"threads per block {threads} > {lim.max_threads_per_block} on {lim.target}")
    if regs is not None:
        if regs > lim.max_registers_per_thread:
            problems.append(f"registers per thread {regs} > {lim.max_registers_per_thread} on {lim.target}")
        if num_warps is not None:
            used = block_registers(regs, num_warps, lim.register_alloc_unit_per_warp)
            if used > lim.registers_per_block:
                problems.append(
                    f"registers per block {used} ({regs}/thread x {threads} threads, allocated per warp) "
                    f"> {lim.registers_per_block} on {lim.target}"
                )
    if shared is not None and shared > lim.max_shared_bytes_per_block:
        problems.append(
            f"shared memory {shared} B > {lim.max_shared_bytes_per_block} B per block (opt-in max) on {lim.target}"
        )
    if tmem is not None and tmem > 0:
        if lim.tmem_columns == 0:
            problems.append(f"tensor memory {tmem} columns requested on {lim.target}, which has none")
        elif tmem > lim.tmem_columns:
            problems.append(f"tensor memory {tmem} columns > {lim.tmem_columns} on {lim.target}")
    if spill is not None:
        if spill > lim.max_local_bytes_per_thread:
            problems.append(f"local memory {spill} B/thread > {lim.max_local_bytes_per_thread} B on {lim.target}")
        elif max_spill_bytes is not None and spill > max_spill_bytes:
            problems.append(f"spills {spill} B/thread > budget {max_spill_bytes} B on {lim.target}")
    return problems
