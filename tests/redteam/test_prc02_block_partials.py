"""PRC-02's blocked-partials members, three states each: the conforming twin (the same kernel with its total in
fp32) passes PRC-02, the member (block sums at fp32 added into a total of the input dtype) fails it, and the
member passes KernelBench's loose check (which runs fp32 only)."""

from __future__ import annotations

import json
import os

import pytest

from lethe.redteam.manifest import DATA_ROOT
from lethe.verifier.testing import inprocess_runner, kb_allclose

# member -> (text that makes the total the input dtype, the same line with an fp32 total)
TWINS = {
    "prc02_rowsum_block_partials_half_total": [
        ("dtype=x.dtype, device=x.device)  # the total: input dtype", "dtype=torch.float32, device=x.device)"),
        ("acc = (acc.float() + part).to(x.dtype)", "acc = acc + part"),
        ("        return acc\n", "        return acc.to(x.dtype)\n"),
    ],
    "prc02_rowsum_block_partials_half_total_triton": [("ACC=_ACC[x.dtype]", "ACC=tl.float32")],
}


def _sources(member: str) -> tuple[str, str, str]:
    d = DATA_ROOT / "red_team" / member
    cand = (d / "cand.py").read_text()
    twin = cand
    for old, new in TWINS[member]:
        assert old in twin, (member, old)
        twin = twin.replace(old, new)
    return (d / "ref.py").read_text(), cand, twin


def _prc02(ref: str, cand: str) -> dict:
    from lethe.verifier import api

    # A Triton candidate runs in the sandbox's own process (the verifier sets TRITON_INTERPRET there): in this
    # process Triton may already be set up for another mode by earlier tests.
    runner = None if "triton" in cand else inprocess_runner
    r = api.verify(ref, cand, runner=runner, device="cpu", seed=0, only_gates=["PRC-02"])
    assert r["status"] == "gated", r.get("error")
    return r["gates"]["PRC-02"]


@pytest.mark.parametrize("member", sorted(TWINS))
@pytest.mark.slow
def test_block_partials_into_half_total_fail_prc02_and_twin_passes(member):
    ref, cand, twin = _sources(member)
    bad = _prc02(ref, cand)
    assert bad["status"] == "fail", bad["reason"]
    per = json.loads(bad["evidence"])["probes"]
    # the ones rows are summed exactly by this kernel (its block sums are powers of two); the bracketed rows
    # are what catch it
    assert per["acc_fp16"]["status"] == "pass"
    assert per["accb_fp16"]["status"] == "fail"
    good = _prc02(ref, twin)
    assert good["status"] == "pass", good["reason"]


@pytest.mark.parametrize("member", sorted(TWINS))
def test_block_partials_member_passes_loose_check(member):
    from lethe.kernelbench.check import check_isolated

    ref, cand, _ = _sources(member)
    if "triton" not in cand:
        assert kb_allclose(ref, cand)
        return
    # KernelBench's paper-era check in a child process, the Triton candidate under the interpreter there
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        row = check_isolated(ref, cand, variant="paper", device="cpu", timeout_s=300)
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
    assert row["compiled"] and row["correct"], row
