"""Ahead-of-time compilation and hardware-limit reports (the backend of the RES-02 gate).

Compiled, not executed: every figure here comes from compiling a kernel for a target (on a CPU host, or read
from a binary already loaded on a GPU); nothing is run on sm_100a, for which we have no hardware.
"""

from lethe.aot.launches import (
    LaunchRecord,
    PointerArg,
    compile_launch,
    compiled_ptx,
    fit_summary,
    record_launches,
    res02_reports,
    specialize,
)
from lethe.aot.limits import LIMITS, HardwareLimits, check, limits_for
from lethe.aot.staged import CompileBudget
from lethe.aot.triton_aot import (
    ResourceReport,
    compile_report,
    count_mma,
    report_from_compiled,
    reports_from_jit_cache,
)

__all__ = [
    "CompileBudget",
    "LIMITS",
    "HardwareLimits",
    "LaunchRecord",
    "PointerArg",
    "ResourceReport",
    "check",
    "compile_launch",
    "compiled_ptx",
    "compile_report",
    "count_mma",
    "fit_summary",
    "limits_for",
    "record_launches",
    "report_from_compiled",
    "reports_from_jit_cache",
    "res02_reports",
    "specialize",
]
