"""The run_isolated / run_many contract, on cheap children (numpy only, no torch import), in both start modes."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from lethe.sandbox import STATUSES, SandboxResult, run_isolated, run_many
from lethe.sandbox.testing import survivors

FAST = {"preload": ("numpy",), "timeout_s": 10, "memory_mb": 256}


@pytest.fixture(params=["spawn", "zygote"])
def fast(request):
    """The cheap run options, once per start mode: the contract does not depend on how the process starts."""
    return FAST | {"start": request.param}


def test_round_trip_keeps_payload_dtypes_and_values(fast):
    arrays = {
        "f32": np.linspace(-1, 1, 7, dtype=np.float32),
        "f16": np.array([1.5, -0.0, np.inf], dtype=np.float16),
        "i64": np.arange(6, dtype=np.int64).reshape(2, 3),
        "b": np.array([True, False]),
    }
    res = run_isolated("lethe.sandbox.testing:echo", payload={"k": [1, "two", None]}, arrays=arrays, **fast)
    assert isinstance(res, SandboxResult)
    assert res.status == "ok", res.detail
    assert (res.start, res.start_note) == (fast["start"], "")
    assert res.returncode == 0 and res.signal is None
    assert res.result["payload"] == {"k": [1, "two", None]}
    assert set(res.arrays) == set(arrays)
    for k, v in arrays.items():
        assert res.arrays[k].dtype == (v * 2).dtype
        np.testing.assert_array_equal(res.arrays[k], v * 2)
    # The private working directory is gone afterwards.
    assert not Path(res.result["cwd"]).exists()


def test_child_environment_is_deterministic_and_private(fast):
    res = run_isolated("lethe.sandbox.testing:env_probe", payload={"extra_keys": ["LETHE_X"]},
                       env={"LETHE_X": "y"}, omp_threads=3, **fast)
    assert res.status == "ok", res.detail
    r = res.result
    env = r["env"]
    assert env["PYTHONHASHSEED"] == "0"
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["LETHE_X"] == "y"
    cwd = Path(r["cwd"])
    assert Path(r["workdir"]) == cwd
    for key in ("HOME", "TMPDIR"):
        assert cwd in Path(env[key]).parents
    assert cwd in Path(r["gettempdir"]).parents
    assert r["rlimit_as"] > 0 and r["rlimit_core"] == 0
    # PYTHONHASHSEED=0 makes str hashing reproducible across runs.
    again = run_isolated("lethe.sandbox.testing:env_probe", **fast)
    assert again.result["hash_of_abc"] == r["hash_of_abc"]


def test_user_lookups_work_under_a_uid_with_no_passwd_entry(fast):
    """torch's cache-path helpers call getpass.getuser(); under a leased uid without a passwd entry it must not
    raise (it did, on the H200, in every CUDA reference child)."""
    import pwd

    res = run_isolated("lethe.sandbox.testing:env_probe", **fast)
    assert res.status == "ok", res.detail
    assert not res.result["getuser"].startswith("error"), res.result["getuser"]
    try:
        pwd.getpwuid(res.result["uid"])
        leased_without_entry = False
    except KeyError:
        leased_without_entry = True
    if not leased_without_entry:
        pytest.skip("the child's uid has a passwd entry here: getuser() would work without the environment")


def test_caller_workdir_is_used_and_kept(tmp_path, fast):
    res = run_isolated("lethe.sandbox.testing:env_probe", workdir=tmp_path / "w", **fast)
    assert res.status == "ok", res.detail
    assert Path(res.result["cwd"]) == (tmp_path / "w").resolve()
    assert (tmp_path / "w").is_dir()


def test_unimportable_target_is_an_error_row(fast):
    res = run_isolated("lethe.sandbox.no_such_module:f", **fast)
    assert res.status == "error"
    assert "cannot import target" in res.detail and "no_such_module" in res.detail


def test_bad_arguments_raise_in_the_parent(fast):
    with pytest.raises(TypeError):
        run_isolated("lethe.sandbox.testing:echo", arrays={"o": np.array([object()])}, **fast)
    with pytest.raises(ValueError):
        run_isolated("lethe.sandbox.testing:echo", device="tpu")
    with pytest.raises(ValueError):
        run_isolated("lethe.sandbox.testing:echo", start="vfork")


def test_output_below_cap_is_kept_as_a_bounded_tail(fast):
    res = run_isolated("lethe.sandbox.testing:chatter", payload={"bytes": 200_000}, tail_bytes=4096, **fast)
    assert res.status == "ok", res.detail
    assert len(res.stdout_tail) <= 4096
    assert res.stdout_tail.endswith("END-OF-CHATTER\n")


def test_output_above_cap_is_a_flood(fast):
    res = run_isolated("lethe.sandbox.testing:chatter", payload={"bytes": 200_000},
                       max_output_bytes=50_000, **fast)
    assert res.status == "output_flood"
    assert "50000" in res.detail


def test_rss_watch_stops_memory_use_without_rlimit(fast):
    # device="cuda" disables RLIMIT_AS (CUDA needs its address reservations), leaving the RSS watch.
    res = run_isolated("lethe.sandbox.testing:hog_and_wait", payload={"mb": 300}, device="cuda",
                       **(fast | {"memory_mb": 100}))
    assert res.status == "oom", res.detail
    assert "process tree memory" in res.detail


@pytest.mark.slow
def test_timeout_kills_forked_children_including_setsid_ones(tmp_path, fast):
    # The pid file lives in the run's own (caller-given) directory: the only place the child may write.
    pid_file = tmp_path / "pids"
    res = run_isolated("lethe.sandbox.testing:fork_and_hang", payload={"n": 8, "pid_file": str(pid_file)},
                       workdir=tmp_path, **(fast | {"timeout_s": 1.5}))
    assert res.status == "timeout"
    pidns, uid, *pids = pid_file.read_text().split()
    pids = [int(p) for p in pids]
    assert len(pids) == 8
    deadline = time.monotonic() + 5
    while survivors(pids, pidns, int(uid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not survivors(pids, pidns, int(uid))


@pytest.mark.parametrize("start", ["spawn", "zygote"])
def test_startup_budget_is_separate_from_the_candidate_budget(start):
    # In zygote mode the budget covers waiting for the zygote's preload as well as the fork.
    res = run_isolated("lethe.sandbox.testing:echo", startup_timeout_s=0.001, preload=("numpy",), start=start)
    assert res.status == "timeout"
    assert "startup" in res.detail


def test_run_many_keeps_order_and_isolates_failures(fast):
    jobs = [
        {"target": "lethe.sandbox.testing:echo", "payload": {"i": 0}, **fast},
        {"payload": {"i": 1}},  # no target: a harness error for this job alone
        {"target": "lethe.sandbox.testing:chatter", "payload": {"bytes": 10_000}, "max_output_bytes": 100, **fast},
        {"target": "lethe.sandbox.testing:echo", "payload": {"i": 3}, **fast},
    ]
    res = run_many(jobs, max_workers=2)
    assert [r.status for r in res] == ["ok", "error", "output_flood", "ok"]
    assert res[0].result["payload"] == {"i": 0} and res[3].result["payload"] == {"i": 3}
    assert "sandbox harness error" in res[1].detail
    assert all(r.status in STATUSES for r in res)


def test_required_isolation_that_is_unavailable_refuses_the_run(monkeypatch, fast):
    from lethe.sandbox import isolation

    monkeypatch.setenv("LETHE_ISOLATION", "require")
    monkeypatch.setattr(isolation, "unavailable_reason", lambda: "pretend: not root")
    res = run_isolated("lethe.sandbox.testing:echo", **fast)
    assert res.status == "error" and "isolation required" in res.detail, res.detail
    assert res.isolation == "none: pretend: not root" and res.tamper_proof is False


def test_unavailable_isolation_is_reported_not_hidden(monkeypatch, fast):
    from lethe.sandbox import isolation

    monkeypatch.setenv("LETHE_ISOLATION", "auto")
    monkeypatch.setattr(isolation, "unavailable_reason", lambda: "pretend: not root")
    res = run_isolated("lethe.sandbox.testing:echo", **fast)
    assert res.status == "ok", res.detail
    assert res.isolation == "none: pretend: not root" and res.tamper_proof is False


@pytest.mark.parametrize("overrides", [None, {"SOME_SETTING": "1"}])
def test_the_verifiers_secrets_do_not_reach_a_child(monkeypatch, fast, overrides):
    # Credentials in the verifier's environment are not a child's to read (with or without run overrides);
    # what the GPU stack and the locale need is passed on.
    monkeypatch.setenv("MY_API_TOKEN", "s3cr3t")
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", "123")
    res = run_isolated("lethe.sandbox.testing:env_probe", payload={"extra_keys": ["MY_API_TOKEN", "CUDA_CACHE_MAXSIZE",
                                                                                 "SOME_SETTING"]},
                       env=overrides, **fast)
    assert res.status == "ok", res.detail
    got = res.result["env"]
    assert got["MY_API_TOKEN"] is None and got["CUDA_CACHE_MAXSIZE"] == "123"
    assert got["SOME_SETTING"] == (overrides or {}).get("SOME_SETTING")


def test_descendants_from_the_kernels_children_lists_match_a_scan_of_every_process():
    """The run loop's cheap tree walk finds what psutil's scan of every process finds (children, grandchildren)."""
    import subprocess
    import time

    import psutil

    from lethe.sandbox import runner as R

    p = subprocess.Popen(["bash", "-c", "sleep 30 & bash -c 'sleep 30 & wait' & wait"])
    try:
        deadline = time.monotonic() + 5
        want = []
        while time.monotonic() < deadline:
            want = sorted(c.pid for c in psutil.Process(p.pid).children(recursive=True))
            if len(want) >= 3:
                break
            time.sleep(0.05)
        got = R._descendant_pids(p.pid)
        if got is None:
            pytest.skip("this kernel keeps no /proc/<pid>/task/<tid>/children lists")
        assert len(want) >= 3 and sorted(got) == want
        assert sorted(x.pid for x in R._tree(p.pid)) == want
    finally:
        for c in psutil.Process(p.pid).children(recursive=True):
            c.kill()
        p.kill()
        p.wait()


def test_a_run_that_fills_its_directory_past_its_disk_budget_is_stopped(fast):
    """Each file under the per-file cap, the run directory as a whole over cap + slack: stopped as a flood
    (one candidate filling the disk would make every later row's result write fail)."""
    res = run_isolated("lethe.sandbox.testing:fill_disk", payload={"files": 40, "mb": 8, "pause_s": 0.05},
                       max_file_mb=16, disk_slack_mb=16, **fast)
    assert res.status == "output_flood", (res.status, res.detail)
    assert "more than its 32 MB disk budget" in res.detail


def test_writes_within_the_disk_budget_are_fine(fast):
    res = run_isolated("lethe.sandbox.testing:fill_disk", payload={"files": 2, "mb": 4},
                       max_file_mb=16, disk_slack_mb=16, **fast)
    assert res.status == "ok", res.detail


def test_disk_verdict_file_flood_and_full_disk(tmp_path, monkeypatch):
    """Past DISK_MAX_ENTRIES entries the directory is a flood whatever their size; on a nearly full disk a run
    that is writing there is stopped, one that is not is left alone."""
    import os
    from types import SimpleNamespace

    from lethe.sandbox import runner

    for i in range(12):
        (tmp_path / f"f{i}").write_bytes(b"x")
    assert runner._disk_verdict([tmp_path], 0, None) == ""
    monkeypatch.setattr(runner, "DISK_MAX_ENTRIES", 10)
    assert "more than 10 files" in runner._disk_verdict([tmp_path], 0, None)
    monkeypatch.setattr(runner, "DISK_MAX_ENTRIES", 1000)
    monkeypatch.setattr(runner.os, "statvfs", lambda p: SimpleNamespace(f_bavail=1, f_frsize=4096))
    assert runner._disk_verdict([tmp_path], 0, None) == ""  # nearly full, but this run wrote almost nothing
    (tmp_path / "big").write_bytes(os.urandom(1 << 20) * 70)
    assert "nearly full" in runner._disk_verdict([tmp_path], 0, None)
