"""One candidate run graded under several profiles gives the rows that separate runs would give."""

from lethe.verifier import fixtures as F
from lethe.verifier import records
from lethe.verifier.api import verify, verify_profiles
from lethe.verifier.testing import inprocess_runner

PROFILES = ("strict", "cuda-default", "fast-math")


def _strip(row):
    return records.deterministic_view(row)  # minus the wall-clock seconds and compile_seconds


def test_profiles_from_one_run_equal_separate_runs():
    flushing, ref = F.SCALE_FTZ, F.SCALE_REF
    together = verify_profiles(ref, flushing, profiles=PROFILES, device="cpu", seed=3, runner=inprocess_runner)
    assert [r["profile"] for r in together] == list(PROFILES)
    for row in together:
        alone = verify(ref, flushing, profile=row["profile"], device="cpu", seed=3, runner=inprocess_runner)
        assert _strip(alone) == _strip(row)
    # The profiles must actually disagree somewhere for this test to mean anything: flushing subnormals is a
    # strict-profile EXC-02 failure and allowed under cuda-default.
    exc02 = {r["profile"]: r["gates"]["EXC-02"]["status"] for r in together}
    assert exc02["strict"] == "fail" and exc02["cuda-default"] != "fail", exc02
