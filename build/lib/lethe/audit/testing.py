"""A deterministic stand-in for ``lethe.verifier.api.verify`` used by tests and the CI fixture audit.

It never executes the candidate: the verdict is a pure function of the sources, so a test can predict every
row and tell a redone row from a resumed one. It returns real ``lethe.verdict/1`` rows (via
``lethe.verifier.records.make_row``), so everything downstream sees the production schema.
``LETHE_FAKE_VERIFY_SLEEP`` slows each call (kill-and-resume tests need rows in flight when the process
dies); ``LETHE_FAKE_VERIFY_LOG`` names a file that gets one line per call, so a test can count how often each
kernel was verified.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from lethe.verifier import records as R
from lethe.verifier.gates import GATE_IDS


def fake_verify(ref_src: str, cand_src: str, *, profile: str = "strict", device: str = "cpu", seed: int = 0,
                timeout_s: float = 300, kernel_id: str = "", corpus: str = "", **_: Any) -> dict[str, Any]:
    """A verdict row whose gate outcomes are drawn from a hash of (sources, profile, seed)."""
    log = os.environ.get("LETHE_FAKE_VERIFY_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{kernel_id}\t{profile}\n")
    time.sleep(float(os.environ.get("LETHE_FAKE_VERIFY_SLEEP", "0")))
    h = hashlib.sha256(f"{ref_src}\0{cand_src}\0{profile}\0{seed}".encode()).digest()
    gates = {g: {"status": "fail" if h[i] < 40 else "pass", "reason": "fake verdict" if h[i] < 40 else "",
                 "evidence": "{}", "seed": int(seed)} for i, g in enumerate(GATE_IDS)}
    return R.make_row(id=kernel_id, corpus=corpus, profile=profile, device=device, seed=int(seed), gates=gates,
                      output_aliasing=h[20] < 8, environment=json.dumps({"fake_verifier": True}))
