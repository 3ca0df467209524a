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


def test_grading_in_a_sandboxed_process_gives_the_same_rows():
    """grade_isolated sends the two runs' results and arrays to lethe.verifier.gates:grade_process (here through
    the in-process runner, which round-trips them as the sandbox does): every profile's row is unchanged."""
    ref, flushing = F.SCALE_REF, F.SCALE_FTZ
    here = verify_profiles(ref, flushing, profiles=PROFILES, device="cpu", seed=3, runner=inprocess_runner)
    timings, targets = {}, []

    def runner(target, **kw):
        targets.append(target)
        return inprocess_runner(target, **kw)

    there = verify_profiles(ref, flushing, profiles=PROFILES, device="cpu", seed=3, runner=runner,
                            grade_isolated=True, timings=timings)
    assert targets[-1] == "lethe.verifier.gates:grade_process" and timings["grade_where"] == "sandboxed process"
    assert [_strip(r) for r in there] == [_strip(r) for r in here]


def test_a_failed_grading_process_is_graded_here():
    """Where the grading ran never changes a row: a grading process that fails is answered by grading here."""
    from lethe.sandbox import SandboxResult

    ref, cand = F.SUM_REF, F.SUM_SEQUENTIAL
    here = verify(ref, cand, device="cpu", seed=9, runner=inprocess_runner)

    def runner(target, **kw):
        if target.endswith(":grade_process"):
            return SandboxResult(status="oom", detail="test: the grading process ran out of memory")
        return inprocess_runner(target, **kw)

    timings = {}
    rows = verify_profiles(ref, cand, device="cpu", seed=9, runner=runner, grade_isolated=True, timings=timings)
    assert timings["grade_where"].startswith("here (the grading process: oom")
    assert _strip(rows[0]) == _strip(here)
