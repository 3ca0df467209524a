"""The zygote start mode: same child, same results, much less start-up cost, and no way for one candidate to
reach another through the zygote.

One batch per mode runs the same jobs (a process-state probe, deterministic numerics, the good control
kernel); the tests compare the two batches. Everything else uses numpy-only zygotes, which start in about a
second, so the file stays cheap apart from the spawned torch children it needs for the comparison.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from lethe.sandbox import isolation, run_isolated, run_many
from lethe.sandbox import zygote as Z
from lethe.sandbox.runner import resolve_start

# Every test here starts real sandboxed processes (module-scoped builds, zygotes): minutes on 2 cores.
pytestmark = pytest.mark.slow

HOSTILE = Path(__file__).resolve().parents[2] / "data" / "hostile"
CHEAP = {"preload": ("numpy",), "timeout_s": 20, "memory_mb": 256}


def _reference():
    spec = importlib.util.spec_from_file_location("hostile_ref_z", HOSTILE / "ref.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    a, b = mod.get_inputs()
    return a.numpy(), b.numpy()


def _jobs(start: str) -> list[dict]:
    a, b = _reference()
    x = np.random.default_rng(7).standard_normal((48, 48)).astype(np.float32)
    return [
        {"target": "lethe.sandbox.testing:process_state", "start": start},
        {"target": "lethe.sandbox.testing:numerics", "payload": {"seed": 3}, "arrays": {"x": x}, "start": start},
        {"target": "lethe.sandbox.testing:run_candidate_forward", "start": start,
         "payload": {"cand_src": (HOSTILE / "good" / "cand.py").read_text()}, "arrays": {"x0": a, "x1": b}},
        {"target": "lethe.sandbox.testing:process_state", "start": start},
    ]


@pytest.fixture(scope="module")
def batches():
    """Both modes, same jobs, two at a time. The zygote batch is preceded by one run that boots the zygote,
    so the batch itself sees the steady state an audit sees after its first kernel."""
    t0 = time.monotonic()
    boot = run_isolated("lethe.sandbox.testing:echo", start="zygote")
    boot_s = time.monotonic() - t0
    out = {"boot": boot, "boot_s": boot_s}
    for start in ("zygote", "spawn"):
        t0 = time.monotonic()
        out[start] = run_many(_jobs(start), max_workers=2)
        out[start + "_s"] = time.monotonic() - t0
    for start in ("zygote", "spawn"):
        for r in out[start]:
            assert r.status == "ok", (start, r.status, r.detail, r.stderr_tail[-2000:])
            assert (r.start, r.start_note) == (start, "")
    return out


def _normalise(state: dict) -> dict:
    """Replace what is per run by design (pid, the private directory's name, descriptor numbers, the
    entropy-seeded draws, RLIMIT_AS which is relative to the preload's address space) by placeholders."""
    run_dir = str(Path(state["cwd"]).parent)
    s = {k: v for k, v in state.items()
         if k not in ("pid", "pidns", "random", "np_random", "cpu_s", "session_leader", "pgid_leader")}
    s["env"] = {k: v.replace(run_dir, "<run>") for k, v in state["env"].items()}
    s["c_env"] = {k: v.replace(run_dir, "<run>") for k, v in state["c_env"].items()}
    s["sys_path"] = [p.replace(run_dir, "<run>") for p in state["sys_path"]]
    s["cwd"] = state["cwd"].replace(run_dir, "<run>")
    s["gettempdir"] = state["gettempdir"].replace(run_dir, "<run>")
    s["argv0"] = Path(state["argv0"]).name
    s["fds"] = sorted(state["fds"].values())
    s["limits"] = {k: v for k, v in state["limits"].items() if k != "RLIMIT_AS"}
    return s


def test_forked_child_starts_from_the_state_of_a_spawned_one(batches):
    spawned, forked = _normalise(batches["spawn"][0].result), _normalise(batches["zygote"][0].result)
    for key in spawned:
        assert forked[key] == spawned[key], key
    # The facts the comparison stands for, stated outright.
    assert forked["fds"] == sorted(["/dev/null", "pipe:", "pipe:", "pipe:", "pipe:"])
    # A new session and process group, led by the child the runner waits for. That is the candidate's process
    # itself, except for a spawned child in a pid namespace, which made an outer process to create the namespace
    # (a forked one is forked into a namespace the zygote made); the leader is then out of the namespace's sight.
    spawned_state, forked_state = batches["spawn"][0].result, batches["zygote"][0].result
    in_pidns = batches["zygote"][0].isolation == isolation.FULL
    assert forked_state["session_leader"] == forked_state["pgid_leader"] == "self"
    assert spawned_state["session_leader"] == spawned_state["pgid_leader"] == (
        "outside the pid namespace" if in_pidns else "self")
    assert forked["cuda_initialised"] is False and forked["threads"] >= 1
    assert forked["env"]["PYTHONHASHSEED"] == "0" and forked["main"] == "lethe.sandbox.child"
    # The C-level environment (what the CUDA driver reads) is the run's, not the zygote's.
    assert forked["c_env"]["HOME"] == "<run>/work/.home" and forked["c_env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert batches["zygote"][0].result["limits"]["RLIMIT_AS"][0] > 0


def test_results_are_bit_identical_across_start_modes(batches):
    for i in (1, 2):
        s, z = batches["spawn"][i], batches["zygote"][i]
        assert s.result == z.result
        assert sorted(s.arrays) == sorted(z.arrays) and s.arrays
        for k in s.arrays:
            assert s.arrays[k].dtype == z.arrays[k].dtype and s.arrays[k].shape == z.arrays[k].shape, k
            assert s.arrays[k].tobytes() == z.arrays[k].tobytes(), k


def test_each_forked_child_is_a_new_process_with_fresh_entropy(batches):
    first, second = batches["zygote"][0].result, batches["zygote"][3].result
    zygote_pids = {z.proc.pid for z in Z.live_zygotes()}
    if batches["zygote"][0].isolation == isolation.FULL:
        # Each ran as pid 2 of a pid namespace made for its run, under that namespace's init; the zygote lives
        # in ours.
        own = os.readlink("/proc/self/ns/pid")
        assert first["pid"] == second["pid"] == 2 and own not in (first["pidns"], second["pidns"])
    else:
        assert first["pid"] != second["pid"] and not {first["pid"], second["pid"]} & zygote_pids
    # Copied generator state would make every candidate draw the same "random" numbers.
    assert first["random"] != second["random"] and first["np_random"] != second["np_random"]


def test_zygote_start_is_faster(batches):
    spawn = [r.startup_seconds for r in batches["spawn"]]
    fork = [r.startup_seconds for r in batches["zygote"]]
    load = os.getloadavg()
    print(f"\nload average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"spawn  start-up per run (s): {[round(x, 3) for x in spawn]}  median {statistics.median(spawn):.3f}; "
          f"batch of 4 {batches['spawn_s']:.2f} s")
    print(f"zygote start-up per run (s): {[round(x, 3) for x in fork]}  median {statistics.median(fork):.3f}; "
          f"batch of 4 {batches['zygote_s']:.2f} s; zygote boot (first run) {batches['boot_s']:.2f} s")
    cpu_spawn = [batches["spawn"][i].result["cpu_s"] for i in (0, 3)]
    cpu_fork = [batches["zygote"][i].result["cpu_s"] for i in (0, 3)]
    print(f"child CPU seconds up to the candidate call: spawn {cpu_spawn}, zygote {cpu_fork}")
    assert statistics.median(fork) < statistics.median(spawn) / 2
    assert batches["zygote_s"] < batches["spawn_s"]
    # CPU time does not depend on the machine's load: the fork saves the interpreter start and the imports.
    assert max(cpu_fork) < min(cpu_spawn) / 5


def test_no_trace_of_one_candidate_reaches_the_next():
    first = run_isolated("lethe.sandbox.testing:pollute", start="zygote")
    second = run_isolated("lethe.sandbox.testing:pollute", start="zygote")
    assert first.status == second.status == "ok", (first.detail, second.detail)
    assert second.start == "zygote"
    assert second.result["seen"] == {"patched_allclose": False, "module": False, "attr": False, "env": None}


def test_zygote_is_single_threaded_and_cuda_free():
    run_isolated("lethe.sandbox.testing:echo", start="zygote", **CHEAP)
    zs = Z.live_zygotes()
    assert zs
    for z in zs:
        assert z.info["tasks"] == 1 and z.info["cuda"] is False, z.info
        assert len(os.listdir(f"/proc/{z.proc.pid}/task")) == 1


def test_torch_zygote_has_the_entry_points_loaded_and_stays_fork_safe(batches):
    """With torch preloaded the zygote imports the verifier's sandbox entry points too (zygote.ENTRY_IMPORTS),
    which leave it single-threaded, CUDA-free and without triton (whose settings are read at import)."""
    zs = [z for z in Z.live_zygotes() if "torch" in z.preload]
    assert zs
    for z in zs:
        assert z.info["entry_imports"] == list(Z.ENTRY_IMPORTS["torch"]), z.info
        assert z.info["tasks"] == 1 and z.info["cuda"] is False and z.info["triton"] is False, z.info
        assert len(os.listdir(f"/proc/{z.proc.pid}/task")) == 1


def test_dead_zygote_is_restarted_transparently():
    run_isolated("lethe.sandbox.testing:echo", start="zygote", **CHEAP)
    old = [z for z in Z.live_zygotes() if z.preload == ("numpy",)]
    assert old
    for z in old:
        z.proc.kill()
        z.proc.wait(timeout=10)
    res = run_isolated("lethe.sandbox.testing:echo", payload={"after": 1}, start="zygote", **CHEAP)
    assert res.status == "ok" and (res.start, res.start_note) == ("zygote", ""), (res.detail, res.start_note)
    new = [z for z in Z.live_zygotes() if z.preload == ("numpy",)]
    assert new and not {z.proc.pid for z in new} & {z.proc.pid for z in old}


def test_zygote_killed_mid_run_costs_no_other_row():
    # The zygote can still die under a run (the kernel's OOM killer, an operator's kill): here the test kills it
    # 1.5 s into a 4 s run. Warm it first so the run is forked, not spawned.
    run_isolated("lethe.sandbox.testing:echo", start="zygote", **CHEAP)
    zygotes = [z for z in Z.live_zygotes() if z.preload == ("numpy",)]
    assert zygotes
    killer = threading.Timer(1.5, lambda: [z.proc.kill() for z in zygotes])
    killer.start()
    try:
        victim = run_isolated("lethe.sandbox.testing:sleep_then_echo", payload={"sleep_s": 4.0, "i": 0},
                              arrays={"v": np.arange(4.0)}, start="zygote", **CHEAP)
    finally:
        killer.cancel()
    # The victim lost its zygote mid-run; its row is re-run spawned and comes back complete and correct.
    assert victim.status == "ok", (victim.detail, victim.start_note)
    assert victim.result["payload"] == {"sleep_s": 4.0, "i": 0}
    np.testing.assert_array_equal(victim.arrays["v"], np.arange(4.0) * 2)
    assert victim.start == "spawn" and "zygote died" in victim.start_note, victim.start_note
    # And the next zygote run gets a fresh zygote.
    res = run_isolated("lethe.sandbox.testing:echo", start="zygote", **CHEAP)
    assert res.status == "ok" and res.start == "zygote"


@pytest.mark.skipif(isolation.unavailable_reason() is not None, reason="needs operating-system isolation (root)")
def test_candidate_cannot_kill_its_zygote():
    warm = run_isolated("lethe.sandbox.testing:echo", start="zygote", **CHEAP)
    # Named outright: from a pid namespace of its own the candidate could not find its zygote as its parent.
    zygotes = [z.proc.pid for z in Z.live_zygotes()]
    jobs = [
        {"target": "lethe.sandbox.testing:sleep_then_echo", "payload": {"sleep_s": 3.0, "i": 0},
         "arrays": {"v": np.arange(4.0)}, "start": "zygote", **CHEAP},
        {"target": "lethe.sandbox.testing:kill_parent_if_zygote", "payload": {"delay_s": 1.0, "zygote_pids": zygotes},
         "start": "zygote", **CHEAP},
    ]
    victim, killer = run_many(jobs, max_workers=2)
    # The candidate runs under its own uid (the kernel refuses its SIGKILL) and, in its own pid namespace, cannot
    # even name the zygote; both rows stay forked.
    refusal = "ProcessLookupError" if warm.isolation == isolation.FULL else "PermissionError"
    assert killer.status == "ok" and killer.result == {"killed": False, "refused": refusal}, killer.detail
    assert (killer.start, killer.start_note) == ("zygote", "")
    assert victim.status == "ok" and (victim.start, victim.start_note) == ("zygote", ""), victim.start_note
    np.testing.assert_array_equal(victim.arrays["v"], np.arange(4.0) * 2)


def test_concurrent_callers_get_their_own_results():
    jobs = [{"target": "lethe.sandbox.testing:echo", "payload": {"i": i}, "arrays": {"a": np.full(3, float(i))},
             "start": "zygote", **CHEAP} for i in range(6)]
    res = run_many(jobs, max_workers=3)
    for i, r in enumerate(res):
        assert r.status == "ok" and r.start == "zygote", r.detail
        assert r.result["payload"] == {"i": i}
        np.testing.assert_array_equal(r.arrays["a"], np.full(3, 2.0 * i))


def test_start_mode_selection(monkeypatch):
    monkeypatch.delenv("LETHE_SANDBOX_START", raising=False)
    from lethe.sandbox.runner import DEFAULT_START

    assert resolve_start(None) == DEFAULT_START
    monkeypatch.setenv("LETHE_SANDBOX_START", "spawn")
    assert resolve_start(None) == "spawn"
    assert resolve_start("zygote") == "zygote"
    monkeypatch.setenv("LETHE_SANDBOX_START", "zygote")
    assert resolve_start(None) == "zygote"
    res = run_isolated("lethe.sandbox.testing:echo", **CHEAP)
    assert res.status == "ok" and res.start == "zygote"
    monkeypatch.setenv("LETHE_SANDBOX_START", "forkserver")
    with pytest.raises(ValueError):
        resolve_start(None)


def test_startup_sensitive_environment_gets_its_own_zygote():
    # PYTHONHASHSEED is consumed when the interpreter starts: a forked child cannot change it afterwards, so a
    # run that asks for another value must not be forked from a zygote started with the default one.
    a = run_isolated("lethe.sandbox.testing:env_probe", start="zygote", **CHEAP)
    b = run_isolated("lethe.sandbox.testing:env_probe", start="zygote", env={"PYTHONHASHSEED": "1"}, **CHEAP)
    c = run_isolated("lethe.sandbox.testing:env_probe", start="spawn", env={"PYTHONHASHSEED": "1"}, **CHEAP)
    assert a.status == b.status == c.status == "ok"
    assert b.result["env"]["PYTHONHASHSEED"] == "1"
    assert b.result["hash_of_abc"] == c.result["hash_of_abc"] != a.result["hash_of_abc"]


def test_more_than_one_blas_thread_still_forks_and_matches_spawn():
    # With omp_threads > 1 numpy's OpenBLAS starts worker threads at import; the zygote quiesces them once
    # (through OpenBLAS's own fork handler) and stays single-threaded, and the child restarts them on use.
    opts = CHEAP | {"omp_threads": 2}
    z = run_isolated("lethe.sandbox.testing:blas_probe", start="zygote", **opts)
    s = run_isolated("lethe.sandbox.testing:blas_probe", start="spawn", **opts)
    assert z.status == s.status == "ok", (z.detail, z.start_note, s.detail)
    assert (z.start, z.start_note) == ("zygote", "")
    assert z.arrays["out"].tobytes() == s.arrays["out"].tobytes()
    assert z.result["threads_after"] == s.result["threads_after"]


def test_stuck_zygote_is_replaced_and_the_run_spawned(monkeypatch):
    # A candidate running as root could SIGSTOP its zygote; later runs must not wait out their whole startup
    # budget on it.
    import signal

    from lethe.sandbox import runner

    monkeypatch.setattr(runner, "_FORK_WAIT_S", 1.0)
    run_isolated("lethe.sandbox.testing:echo", start="zygote", **CHEAP)
    stuck = [z for z in Z.live_zygotes() if z.preload == ("numpy",)]
    for z in stuck:
        os.kill(z.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        res = run_isolated("lethe.sandbox.testing:echo", payload={"i": 1}, start="zygote", **CHEAP)
        assert res.status == "ok" and res.result["payload"] == {"i": 1}, res.detail
        assert res.start == "spawn" and "did not fork" in res.start_note, res.start_note
        assert time.monotonic() - t0 < 60
    finally:
        for z in stuck:  # zygotes of other keys were stopped too: dead ones are replaced on next use
            z.proc.kill()
    again = run_isolated("lethe.sandbox.testing:echo", start="zygote", **CHEAP)
    assert again.status == "ok" and (again.start, again.start_note) == ("zygote", ""), again.start_note
