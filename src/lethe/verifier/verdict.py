"""The typed view of one verdict row: what ``lethe.verify`` returns, what ``lethe verify --json`` prints, and the
exit codes of the command line.

A row (``lethe.verifier.records``) is the storage form: flat, parquet-friendly, evidence as JSON strings. A
:class:`Verdict` is the reading form: per gate its status, its margin (the largest error over tolerance of any
compared output, > 1 means out of contract), the probes that failed it and where; the failures grouped by the
probe that exposed them, because one root cause (an fp16 accumulator, say) shows up in every gate that uses
that probe's inputs; and the failing gates grouped by root cause (``lethe.verifier.causes``). ``to_json`` is the
stable machine-readable contract (schema ``VERIFY_OUTPUT_SCHEMA``, the JSON Schema file
``lethe/schemas/verify_output.schema.json`` ships with the package).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# /3 adds causes; /2 added reference_device and reference_fallback (docs/verifier.md, "CLI").
VERIFY_OUTPUT_SCHEMA = "lethe.verify-output/3"

# Exit codes of `lethe verify` (and the batch command, for its worst row).
EXIT_PASS = 0  # every applicable gate passed
EXIT_VIOLATION = 1  # the kernel violates a gate, or failed to compile, load or finish
EXIT_USAGE = 2  # usage or input error (missing file, bad option)
EXIT_NOT_AUDITABLE = 3  # the reference is broken, or the kernel cannot be audited on this machine
EXIT_HARNESS = 4  # the verifier itself failed (sandbox harness error, internal error)
EXIT_CODES = {EXIT_PASS: "every applicable gate passes", EXIT_VIOLATION: "the kernel violates a gate",
              EXIT_USAGE: "usage or input error", EXIT_NOT_AUDITABLE: "reference broken or kernel not auditable here",
              EXIT_HARNESS: "harness failure"}

# What each probe feeds the kernel, in words (probe ids from lethe.verifier.probes; patterns for the variants).
PROBE_WORDS = [
    (r"rand(\d+)$", "random inputs from get_inputs(), draw {0}"),
    (r"zeros$", "all-zero inputs"),
    (r"large$", "inputs of large magnitude, near the top of the dtype's range"),
    (r"small$", "inputs of small magnitude"),
    (r"subnormal$", "inputs below the dtype's smallest normal number"),
    (r"nonfinite$", "NaN, +Inf and -Inf injected at chosen positions"),
    (r"repeat$", "the same input five times (determinism)"),
    (r"overwrite$", "a second call that overwrites the first call's input (aliasing)"),
    (r"grad$", "a backward pass for a given upstream gradient"),
    (r"ord01(_.+)?$", "same-sign inputs, where any summation order is exact up to rounding"),
    (r"cancel(_.+)?$", "rows of +B, many small terms, -B: a running total drops the small terms"),
    (r"offset$", "rows M + u with a mean large against their spread"),
    (r"prc_(fp16|bf16)$", "the base inputs in {0}"),
    (r"acc_(fp16|bf16)(_.+)?$", "{0} inputs along a long reduction axis (accumulator width)"),
    (r"shape_(.+)=(\d+)$", "a shape variant: {0} set to {1}"),
    (r"long_(.+)$", "a long variant of {0} (past fp16/bf16 exact-integer range)"),
]


def describe_probe(pid: str) -> str:
    """The probe ``pid`` in words (``pid`` itself when it matches no known pattern)."""
    for pat, words in PROBE_WORDS:
        m = re.match(pat, pid)
        if m:
            return words.format(*m.groups())
    return pid


@dataclass(frozen=True)
class Check:
    """One compared output (or gradient, or property check) of one probe."""

    probe: str
    what: str
    ok: bool
    n: int | None = None
    n_bad: int | None = None
    max_err_over_tol: float | None = None
    max_abs_err: float | None = None
    new_nonfinite: int | None = None
    lost_nonfinite: int | None = None
    first_bad: list | None = None

    def words(self) -> str:
        """The margin in words, e.g. ``output 0: 1536 of 1536 elements out of contract, max err/tol 1.95e+05``."""
        parts = []
        if self.n_bad is not None and self.n is not None:
            parts.append(f"{self.n_bad} of {self.n} elements out of contract")
        if self.max_err_over_tol is not None:
            parts.append(f"max err/tol {self.max_err_over_tol:.3g}")
        if self.max_abs_err is not None:
            parts.append(f"max |err| {self.max_abs_err:.3g}")
        if self.new_nonfinite:
            parts.append(f"{self.new_nonfinite} non-finite where the reference is finite")
        if self.lost_nonfinite:
            parts.append(f"{self.lost_nonfinite} finite where the reference is non-finite")
        if self.first_bad:
            parts.append(f"first at {self.first_bad[0]}")
        return f"{self.what}: " + (", ".join(parts) if parts else ("ok" if self.ok else "failed"))


@dataclass(frozen=True)
class GateVerdict:
    """One gate of one row."""

    gate: str
    status: str  # pass | fail | na | error
    reason: str
    seed: int
    checks: tuple[Check, ...] = ()
    evidence: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def margin(self) -> float | None:
        """The largest error over tolerance of any compared output (> 1: out of contract); None when the gate
        compared no values (a property gate, or na)."""
        vals = [c.max_err_over_tol for c in self.checks if c.max_err_over_tol is not None]
        return max(vals) if vals else None

    @property
    def failing_probes(self) -> list[str]:
        return sorted({c.probe for c in self.checks if not c.ok})

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "seed": self.seed, "margin": self.margin,
                "failing_probes": self.failing_probes,
                "failures": [c.words() for c in self.checks if not c.ok][:20], "evidence": self.evidence}


def _checks(evidence: dict) -> tuple[Check, ...]:
    out = []
    for pid, p in sorted((evidence.get("probes") or {}).items()):
        if not isinstance(p, dict):
            continue
        items = [(f"output {i}", o) for i, o in enumerate(p.get("outputs") or [])]
        items += [(f"gradient of {k}" if p.get("checks") and k.startswith(("input", "param")) else k, o)
                  for k, o in sorted((p.get("checks") or {}).items())]
        for what, o in items:
            if not isinstance(o, dict):
                continue
            ok = bool(o.get("ok", p.get("status") != "fail"))
            out.append(Check(pid, what, ok, o.get("n"), o.get("n_bad"), _num(o.get("max_err_over_tol")),
                             _num(o.get("max_abs_err")), o.get("new_nonfinite"), o.get("lost_nonfinite"),
                             o.get("first_bad")))
        if not items and p.get("status") == "fail":
            out.append(Check(pid, p.get("reason") or "failed", False))
    return tuple(out)


def _num(x: Any) -> float | None:
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class Verdict:
    """One verified kernel: the verdict, each gate's status and margin, and the row it was read from."""

    id: str
    verdict: str  # pass | fail | a row status that never reached grading (compile_fail, ref_broken, ...)
    status: str
    profile: str
    device: str
    seed: int
    seconds: float
    error: str
    isolation: str
    tamper_proof: bool
    gates: dict[str, GateVerdict]
    row: dict = field(repr=False, compare=False)
    # Where the float64 reference was computed ("cpu" | "cuda"; None for a row that does not record it) and, when
    # a CUDA reference fell back to the CPU, why.
    reference_device: str | None = None
    reference_fallback: str | None = None

    @classmethod
    def from_row(cls, row: dict) -> Verdict:
        from lethe.verifier import api

        gates = {}
        for g, v in row["gates"].items():
            try:
                ev = json.loads(v["evidence"])
            except (TypeError, ValueError):
                ev = {}
            gates[g] = GateVerdict(g, v["status"], v["reason"], int(v["seed"]), _checks(ev), ev)
        try:
            env = json.loads(row.get("environment") or "{}")
        except (TypeError, ValueError):
            env = {}
        return cls(id=row["id"], verdict=api.verdict(row), status=row["status"], profile=row["profile"],
                   device=row["device"], seed=int(row["seed"]), seconds=float(row["seconds"]), error=row["error"],
                   isolation=row.get("isolation", ""), tamper_proof=bool(row.get("tamper_proof", False)),
                   gates=gates, row=row, reference_device=env.get("reference_device"),
                   reference_fallback=env.get("reference_fallback"))

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def failed_gates(self) -> list[str]:
        return [g for g, v in self.gates.items() if v.status in ("fail", "error")]

    @property
    def exit_code(self) -> int:
        """See ``EXIT_CODES``."""
        if self.passed:
            return EXIT_PASS
        if self.status in ("ref_broken", "not_auditable"):
            return EXIT_NOT_AUDITABLE
        if "sandbox harness error" in self.error or any(v.status == "error" for v in self.gates.values()):
            return EXIT_HARNESS
        return EXIT_VIOLATION

    def by_probe(self) -> dict[str, list[str]]:
        """Failing gates grouped by the probe that exposed them: {probe id: [gate, ...]}, probes in the order of
        how many gates they fail (one bad accumulator fails every gate that runs its inputs)."""
        groups: dict[str, list[str]] = {}
        for g, v in self.gates.items():
            if v.status != "fail":
                continue
            for pid in v.failing_probes or ["(no probe named)"]:
                groups.setdefault(pid, []).append(g)
        return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    def replay_command(self, rows_path: str = "ROWS.parquet", gate: str | None = None) -> str:
        """The command that re-runs one failing gate of this row from its seed (needs the row stored with
        ``lethe verify --out``)."""
        g = gate or (self.failed_gates[0] if self.failed_gates else "CMP-01")
        return f"lethe replay {rows_path} {self.id} {g}"

    def to_json(self) -> dict[str, Any]:
        """The ``lethe verify --json`` document (schema ``VERIFY_OUTPUT_SCHEMA``); its ``causes`` are
        ``reward()["causes"]``."""
        from lethe import __version__
        from lethe.verifier.causes import root_causes

        return {"schema": VERIFY_OUTPUT_SCHEMA, "lethe_version": __version__, "id": self.id,
                "verdict": self.verdict, "status": self.status, "exit_code": self.exit_code,
                "profile": self.profile, "device": self.device, "seed": self.seed, "seconds": self.seconds,
                "error": self.error, "isolation": self.isolation, "tamper_proof": self.tamper_proof,
                "reference_device": self.reference_device, "reference_fallback": self.reference_fallback,
                "weights_copied": bool(self.row.get("weights_copied")),
                "output_aliasing": bool(self.row.get("output_aliasing")),
                "failed_gates": self.failed_gates,
                "by_probe": self.by_probe(),
                "causes": root_causes(self),
                "gates": {g: v.to_json() for g, v in self.gates.items()}}

    def reward(self) -> dict[str, Any]:
        """A compact signal for a reward loop: pass/fail per gate, margins (err/tol), the failing probes in words
        (``why``) and the failing gates grouped by root cause (``causes``, :func:`lethe.verifier.causes.root_causes`:
        one fp16 accumulator is one cause, not seven failed gates). (Docs: docs/verifier.md, "Reward loops".)"""
        from lethe.verifier.causes import root_causes

        return {"passed": self.passed, "status": self.status,
                "gates": {g: v.status == "pass" for g, v in self.gates.items() if v.status != "na"},
                "margins": {g: v.margin for g, v in self.gates.items() if v.margin is not None},
                "why": {pid: {"gates": gs, "probe": describe_probe(pid)} for pid, gs in self.by_probe().items()},
                "causes": root_causes(self)}


def output_schema() -> dict:
    """The JSON Schema of ``Verdict.to_json`` (shipped as package data)."""
    from importlib import resources

    return json.loads(resources.files("lethe").joinpath("schemas/verify_output.schema.json").read_text())
