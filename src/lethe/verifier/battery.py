"""The battery's names, importable without torch: its gate ids, the probe plan's version and the reference
result file cap.

Why a module of its own: the command line (argument choices, ``--help``), the verdict-row schema and the
reference cache key need these names, and ``lethe.verifier.gates`` / ``lethe.verifier.probes`` import torch
(seconds) at import. They re-export them, so ``gates.GATE_IDS`` and ``probes.PLAN_VERSION`` stay valid.
"""

from __future__ import annotations

GATE_IDS = ("CMP-01", "CMP-02", "CMP-03", "ORD-01", "ORD-02", "ORD-03",
            "PRC-01", "PRC-02", "EXC-01", "EXC-02", "RES-01", "RES-02")
# /2: the ORD-03 "offset" probe; /3: shape and long variants at every size under a per-problem cost budget
# (Budget), a smaller variant per knob, skipped variants kept in the plan with their reason
PLAN_VERSION = "lethe.plan/7"  # /7: optional floors admitted by the plan's estimates (extra est_s/est_mb, deterministic), not by the clock or the process's memory; the backward draws move leaf input gradients through tensor hooks (a full backward hook raised on in-place leaves and dropped the CMP-02 floor); /6: storage-model spreads on PRC-02's half-precision rows, the backward's spreads over GRAD_COND_PAIRS pairs with every leaf's input gradient moved too; /5: spreads on every value probe but the shape variants (the floor under every value gate); /4: cond/gcond spreads (conditioning floor of CMP-01/02); /3: shape variants at every size within a traced budget; accb_* rows; cancel B = 2^14
REF_RESULT_MB = 8192  # the reference process's result file cap (RLIMIT_FSIZE), which Budget.result_mb plans within
# The candidate's result file holds its outputs (and gradients) for the same probes the reference planned, each
# element at most 8 bytes where the reference's are float64, so it is never larger than the reference's: the same
# cap admits every candidate whose outputs have the reference's shapes. A smaller cap would charge a correct
# kernel of a large problem as a crash ("File too large") while the plan admitted its probes.
CAND_RESULT_MB = REF_RESULT_MB
