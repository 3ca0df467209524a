"""The float64 reference's own time and memory budget (issue 23): a reference too big or too slow for its
budget fails fast, with a ref_broken row whose error names the limit that tripped and the phase it tripped in.

These run the real sandbox (RLIMIT_AS and the wall clock are what is under test), with small budgets so that
each finishes in seconds.
"""

from __future__ import annotations

import time

import pytest

from lethe.verifier import api
from lethe.verifier import fixtures as K

HUGE_INPUT_REF = K.HEADER + '''
class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(2**31)]


def get_init_inputs():
    return []
'''

SLOW_FORWARD_REF = K.HEADER + '''
import time


class Model(nn.Module):
    def forward(self, x):
        time.sleep(120)
        return x * 2.0


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

# The reference's own deadline is a SIGALRM; with it blocked, only the sandbox's wall clock can stop this one,
# and the error must still say where it was.
UNINTERRUPTIBLE_REF = K.HEADER + '''
import signal
import time


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(120)
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def _verify(ref: str, **kw) -> tuple[dict, float]:
    api._REF_CACHE.clear()
    t0 = time.monotonic()
    row = api.verify(ref, K.as_candidate(ref), device="cpu", seed=0, timeout_s=60, memory_mb=1024,
                     only_gates=["CMP-01"], **kw)
    return row, time.monotonic() - t0


def test_huge_input_fails_fast_on_the_memory_budget():
    row, secs = _verify(HUGE_INPUT_REF, ref_memory_mb=512)
    assert row["status"] == "ref_broken", row["error"]
    assert "reference exceeded its 512 MB memory budget while building inputs" in row["error"], row["error"]
    assert secs < 120, secs


def test_slow_reference_fails_on_its_time_budget_naming_the_phase():
    row, secs = _verify(SLOW_FORWARD_REF, ref_timeout_s=6)
    assert row["status"] == "ref_broken", row["error"]
    # The forward first runs while the plan is sized (traced on the meta device), then on rand0: either phase
    # names the forward.
    err = row["error"]
    assert "reference exceeded its 6 s time budget while " in err and "forward" in err.split(" while ", 1)[1], err
    assert secs < 90, secs


@pytest.mark.slow
def test_sandbox_backstop_still_names_the_limit_and_phase():
    row, secs = _verify(UNINTERRUPTIBLE_REF, ref_timeout_s=5)
    assert row["status"] == "ref_broken", row["error"]
    assert "reference exceeded its 5 s time budget while building inputs for the probe plan" in row["error"], \
        row["error"]
    assert "stopped by the sandbox" in row["error"]
    assert secs < 90, secs


@pytest.mark.parametrize("kw", [{"ref_timeout_s": 7.5}, {"ref_memory_mb": 777}])
def test_budget_reaches_the_reference_sandbox(kw):
    """verify's keyword arguments are the limits the reference's sandbox is started with."""
    seen = {}

    def runner(target, payload=None, arrays=None, **opts):
        seen[target] = (opts, payload.get("budget"))
        from lethe.sandbox import SandboxResult

        return SandboxResult(status="error", detail="stop here")

    api._REF_CACHE.clear()
    row = api.verify(K.SCALE_REF, K.as_candidate(K.SCALE_REF), device="cpu", runner=runner, **kw)
    opts, budget = seen["lethe.verifier.reference:run_reference"]
    want_t = kw.get("ref_timeout_s", api.REF_TIMEOUT_S)
    want_m = kw.get("ref_memory_mb", api.REF_MEMORY_MB)
    assert (opts["timeout_s"], opts["memory_mb"]) == (want_t, want_m)
    assert budget == {"timeout_s": want_t, "memory_mb": want_m}
    assert row["status"] == "ref_broken" and "stop here" in row["error"]


def test_candidate_result_cap_admits_what_the_reference_plan_admits():
    """The candidate's result file may be as large as the reference's (its outputs have the reference's shapes
    in at most 8-byte elements): a smaller cap charged a correct kernel of a large problem as a crash."""
    from lethe.verifier import battery

    seen = {}
    real = api._sandbox()

    def runner(target, payload=None, arrays=None, **opts):
        seen[target] = opts
        return real(target, payload=payload, arrays=arrays, **opts)

    api._REF_CACHE.clear()
    row = api.verify(K.SCALE_REF, K.as_candidate(K.SCALE_REF), device="cpu", runner=runner)
    assert row["status"] == "gated", row.get("error")
    ref_cap = seen["lethe.verifier.reference:run_reference"]["max_file_mb"]
    assert ref_cap == battery.REF_RESULT_MB
    assert seen["lethe.verifier.worker:run_candidate"].get("max_file_mb", 4096) >= ref_cap


def test_an_oversized_candidate_result_is_named_as_such():
    """A candidate whose result write hits the cap gets a crash row whose error names the cap, not a bare
    sandbox message."""
    from lethe.sandbox import SandboxResult

    real = api._sandbox()

    def runner(target, payload=None, arrays=None, **opts):
        if target == "lethe.verifier.worker:run_candidate":
            return SandboxResult(status="bad_result",
                                 detail="could not serialise result: OSError: [Errno 27] File too large")
        return real(target, payload=payload, arrays=arrays, **opts)

    api._REF_CACHE.clear()
    row = api.verify(K.SCALE_REF, K.as_candidate(K.SCALE_REF), device="cpu", runner=runner)
    assert row["status"] == "crash"
    assert "result cap" in row["error"] and "File too large" in row["error"], row["error"]
