"""What a repro can show (its gates) and its default shrinking budget: the names ``lethe repro``'s argument
parser needs, importable without torch (``lethe.repro.core`` imports it; ``lethe --help`` must not)."""

from __future__ import annotations

# Gates whose property is "every output (or gradient) of one probe is within a tolerance of the float64
# reference": a stored input, expectation and tolerance state them completely.
SUPPORTED_GATES = ("CMP-01", "CMP-02", "CMP-03", "ORD-01", "ORD-03", "PRC-01", "PRC-02", "EXC-01", "EXC-02")
UNSUPPORTED_GATES = {
    "ORD-02": "its property (five byte-identical calls, no aliasing, no input mutation) is about repeated calls "
              "and storage, not one output against a tolerance; replay it with `lethe replay`",
    "RES-01": "its property (output device and dtype) needs no input to show; the row's evidence states it",
    "RES-02": "its property (registers, shared memory against the target's limits) is read from compiled "
              "binaries, not from outputs",
}
DEFAULT_BUDGET_S = 120.0
