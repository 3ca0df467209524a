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
PLAN_VERSION = "lethe.plan/10"  # /10: the floors' draws move a value below the smallest normal by u * tiny (the subnormal grid), not u |t|; /9: the second pass in two rounds, cheapest probe first (the floors the first pass did not measure at its draws, then the requested multiple where the estimates fit); /8: the reference's second pass (the floors of the probes a candidate failed, refused by the budget or marginal, measured after it ran; the storage model under every value gate where measured); /7: optional floors admitted by the plan's estimates (extra est_s/est_mb, deterministic), not by the clock or the process's memory; the backward draws move leaf input gradients through tensor hooks (a full backward hook raised on in-place leaves and dropped the CMP-02 floor); /6: storage-model spreads on PRC-02's half-precision rows, the backward's spreads over GRAD_COND_PAIRS pairs with every leaf's input gradient moved too; /5: spreads on every value probe but the shape variants (the floor under every value gate); /4: cond/gcond spreads (conditioning floor of CMP-01/02); /3: shape variants at every size within a traced budget; accb_* rows; cancel B = 2^14
# The reference's second pass (lethe.verifier.reference.second_pass, api.second_pass_requests): the gates whose
# failing probes it measures floors for; how far above its bound a probe may fail and still be re-measured, with
# its floor measured in the first pass and without (cost guards: a probe failing by more is failing by more than
# the floors have moved an honest kernel's error on the trusted corpus, and re-measuring it would only spend the
# budget); how many times the first pass's draws it takes where the plan's estimates say they fit; and what of a
# probe's meta it returns.
SECOND_PASS_GATES = frozenset({"CMP-01", "CMP-02", "CMP-03", "ORD-01", "ORD-03", "PRC-01", "PRC-02", "EXC-01",
                               "EXC-02"})
SECOND_PASS_RATIO = 16.0
SECOND_PASS_RATIO_UNMEASURED = 1e6
SECOND_PASS_CHEAP_S = 0.05  # one forward at most this (the plan's estimate): re-measured up to the unmeasured ratio
SECOND_PASS_MULT = 4
SECOND_PASS_META = ("cond", "offset")
REF_RESULT_MB = 8192  # the reference process's result file cap (RLIMIT_FSIZE), which Budget.result_mb plans within
# The candidate's result file holds its outputs (and gradients) for the same probes the reference planned, each
# element at most 8 bytes where the reference's are float64, so it is never larger than the reference's: the same
# cap admits every candidate whose outputs have the reference's shapes. A smaller cap would charge a correct
# kernel of a large problem as a crash ("File too large") while the plan admitted its probes.
CAND_RESULT_MB = REF_RESULT_MB
