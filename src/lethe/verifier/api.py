"""verify(): reference process first, then one candidate process, then pure grading (in this process, or in a
sandboxed one with ``grade_isolated``: :func:`grade`).

Order matters and is enforced here: the float64 reference runs (or is fetched from the cache) before the
candidate is loaded, in a different sandboxed process; the candidate process receives inputs, reference weights
and upstream gradients only. One candidate process runs every probe after a single load/compile.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

from lethe.sandbox import extensions
from lethe.verifier import battery
from lethe.verifier import profiles as PR
from lethe.verifier import records as R
from lethe.verifier import tolerance as T

_REF_CACHE: dict[str, tuple[Any, dict, dict]] = {}
_REF_CACHE_MAX = 16
# RES-02 compiles every launched Triton kernel ahead of time for these targets (lethe.aot), GPU or not.
AOT_TARGETS = ("sm_90a", "sm_100a")
CUDA_SOURCE = re.compile(r"load_inline|cpp_extension|cuda_sources|__global__")


def _sandbox():
    from lethe.sandbox import run_isolated

    return run_isolated


# Device nodes the CUDA (NVIDIA) and ROCm drivers need: without any of them no GPU is available to torch.
_GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd")


def resolve_device(device: str) -> str:
    """"cpu" or "cuda"; "auto" is "cuda" when torch sees a GPU. A process that has not imported torch and has
    no GPU driver device node answers "cpu" without importing it (torch would say the same, seconds later)."""
    if device == "auto":
        if "torch" not in sys.modules and not any(os.path.exists(n) for n in _GPU_DEVICE_NODES):
            return "cpu"
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu, cuda or auto, got {device!r}")
    return device


REFERENCE_DEVICES = ("auto", "cpu", "cuda")


# The GPU reference computes on the H200 (its GPU tests pass there, and an audit ran level-2 problems with it),
# but the trusted corpus has not been re-verified with it: until it has, "auto" keeps the CPU reference whose
# specificity is measured, and "cuda" is opt-in.
AUTO_REFERENCE_DEVICE_ON_CUDA = "cpu"


def resolve_reference_device(reference_device: str, device: str) -> str:
    """Where the float64 reference runs for a verification on ``device`` (already resolved): "auto" is the CPU
    (AUTO_REFERENCE_DEVICE_ON_CUDA says what it is for a CUDA verification: the GPU reference is opt-in until the
    trusted corpus has been verified with it, docs/verifier.md); "cuda" for a CPU verification is refused,
    since nothing says a GPU may be used."""
    if reference_device not in REFERENCE_DEVICES:
        raise ValueError(f"reference_device must be one of {REFERENCE_DEVICES}, got {reference_device!r}")
    if reference_device == "auto":
        return AUTO_REFERENCE_DEVICE_ON_CUDA if device == "cuda" else "cpu"
    if reference_device == "cuda" and device != "cuda":
        raise ValueError("reference_device='cuda' needs a CUDA verification (device='cuda' or 'auto' with a GPU)")
    return reference_device


_DIGEST: tuple[tuple, str] | None = None


def code_digest() -> str:
    """SHA-256 over the verifier's own sources (gates, probes, tolerances, reference, worker...): two rows with
    the same digest were graded by the same code, so a resumed audit may reuse one (lethe.audit.shard).
    Re-read only when a source file's name, size or modification time changed since the last call (every row
    asks for it)."""
    global _DIGEST
    paths = sorted(Path(__file__).parent.glob("*.py"))
    stamp = tuple((p.name, st.st_size, st.st_mtime_ns) for p in paths for st in (p.stat(),))
    if _DIGEST is not None and _DIGEST[0] == stamp:
        return _DIGEST[1]
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    _DIGEST = (stamp, h.hexdigest()[:16])
    return _DIGEST[1]


_LIBRARIES: dict | None = None


_CONSTANTS: dict | None = None


def _default_constants() -> dict:
    """T.as_dict() of the (frozen) default constants, built once."""
    global _CONSTANTS
    if _CONSTANTS is None:
        _CONSTANTS = T.as_dict()
    return dict(_CONSTANTS)


def _library_versions() -> dict:
    """lethe.provenance.library_versions, read once per process (installed versions do not change under a running
    verifier; the first read and the modules' own strings agree, tests/test_provenance.py)."""
    global _LIBRARIES
    if _LIBRARIES is None:
        from lethe.provenance import library_versions

        _LIBRARIES = library_versions()
    return dict(_LIBRARIES)


def environment(device: str) -> dict:
    """What makes a row reproducible: library versions, device, plan and tolerance versions, the verifier's code
    digest (no host, no time). Where the reference ran is added once it has run (:func:`reference_environment`)."""
    from lethe.provenance import gpu_info

    env = {"libraries": _library_versions(), "machine": platform.machine(), "device": device,
           "plan": battery.PLAN_VERSION, "tolerance": _default_constants(), "schema": R.SCHEMA_VERSION,
           "verifier_code": code_digest()}
    if device == "cuda":
        info = gpu_info(driver=False)
        env["gpu"] = {k: info.get(k) for k in ("gpu", "capability", "cuda_runtime")}
    return env


def reference_environment(rres: dict, requested: str) -> dict:
    """The row's record of the float64 reference: the device it was computed on and, when that is not the
    device asked for, why (a CUDA reference that fell back to the CPU is never silent)."""
    out = {"reference_device": rres.get("reference_device") or requested}
    if rres.get("reference_fallback"):
        out["reference_fallback"] = str(rres["reference_fallback"])[:800]
    return out


def _sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


# The float64 reference's own budget (wall clock, memory above the sandbox's preload). Generous: the reference
# runs every probe in float64 on one CPU thread; callers narrow or widen it (lethe verify --ref-timeout,
# --ref-memory-mb; verify(..., ref_timeout_s=, ref_memory_mb=)).
REF_TIMEOUT_S = 600.0
REF_MEMORY_MB = 16384
# A CUDA candidate's extension build step: nvcc on torch's headers takes tens of seconds, more on a loaded host.
BUILD_TIMEOUT_S = 900.0


def run_reference(ref_src: str, seed: int, *, only_gates: list[str] | None = None,
                  timeout_s: float = REF_TIMEOUT_S, memory_mb: int = REF_MEMORY_MB, runner=None,
                  interpret: bool = False, device: str = "cpu", floors_for: dict | None = None):
    """Reference results for (source, seed[, gate filter], device), cached per input set: the plan is a pure
    function of these, so the key is the hash of the source, the seed, the plan version, the filter and the
    device asked for. Only successful runs are cached, so the budget (which decides success, never the results)
    is not part of the key.

    ``device="cuda"`` computes it on the GPU (lethe.verifier.reference.enter_cuda_rules); when that cannot be
    done (fault "cuda", or the process did not survive CUDA) it is computed on the CPU, and
    ``result["reference_fallback"]`` says why. ``result["reference_device"]`` is where it was computed.

    Returns (sandbox status, result, arrays, raw sandbox result); when the reference cannot grade anything,
    ``result["error"]`` says why, including which budget tripped and in which phase (:func:`reference_error`).

    ``floors_for`` (probe id -> request, :func:`second_pass_requests`) runs the reference's second pass instead
    (lethe.verifier.reference.second_pass): only those probes' floors, on ``device`` as given (the first pass's
    reference device), cached in this process only.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"reference device must be cpu or cuda, got {device!r}")
    key = _sha(json.dumps([_sha(ref_src), seed, battery.PLAN_VERSION, sorted(only_gates or []), interpret, device]
                          + ([floors_for] if floors_for else []), sort_keys=True))
    if key in _REF_CACHE:
        return _REF_CACHE[key]
    disk_key = None
    if runner is None and not floors_for:
        # Shared across processes (lethe.verifier.refcache): on only where children are OS-isolated.
        from lethe.verifier import refcache

        disk_key = refcache.key(ref_src, seed, only_gates, interpret, device)
        hit = refcache.load(disk_key)
        if hit is not None:
            result, arrays, meta = hit
            from lethe.sandbox.runner import SandboxResult

            raw = SandboxResult(status="ok", result=result, arrays=arrays, detail="from the reference cache",
                                isolation=str(meta.get("isolation", "")), tamper_proof=bool(meta.get("tamper_proof")))
            out = ("ok", result, arrays, raw)
            _remember(key, out)
            return out
    res = _reference_process(ref_src, seed, only_gates, interpret, timeout_s, memory_mb, runner, device, floors_for)
    result = dict(res.result or {})
    fallback = cuda_fallback_reason(res, result) if device == "cuda" and not floors_for else None
    if fallback is not None:
        res = _reference_process(ref_src, seed, only_gates, interpret, timeout_s, memory_mb, runner, "cpu")
        result = dict(res.result or {})
        result["reference_fallback"] = fallback
    if res.status != "ok" or not result.get("ok"):
        result["ok"] = False
        result["error"] = reference_error(res, result, timeout_s=timeout_s, memory_mb=memory_mb)
    out = (res.status, result, res.arrays or {}, res)
    if res.status == "ok" and result.get("ok"):
        _remember(key, out)
        if disk_key is not None and getattr(res, "tamper_proof", False):
            from lethe.verifier import refcache

            refcache.store(disk_key, result, res.arrays or {}, isolation=res.isolation, tamper_proof=True)
    return out


def _reference_process(ref_src: str, seed: int, only_gates, interpret: bool, timeout_s: float, memory_mb: int,
                       runner, device: str, floors_for: dict | None = None):
    """One sandboxed run of the float64 reference on ``device`` (a CUDA one gets the GPU the way a candidate
    does: lethe.sandbox.runner, device="cuda"; same isolation otherwise)."""
    return (runner or _sandbox())("lethe.verifier.reference:run_reference",
                                  payload={"ref_src": ref_src, "seed": seed, "only_gates": only_gates or [],
                                           "interpret": interpret, "device": device,
                                           "floors_for": floors_for or {},
                                           "budget": {"timeout_s": timeout_s, "memory_mb": memory_mb}},
                                  timeout_s=timeout_s, memory_mb=memory_mb, device=device,
                                  max_file_mb=battery.REF_RESULT_MB)


def cuda_fallback_reason(res, result: dict) -> str | None:
    """Why a CUDA reference run must be redone on the CPU, or None when its outcome stands.

    Redone: the reference said CUDA cannot compute it under the float64 + determinism rules (fault "cuda"), or
    its process crashed or failed outside the reference's own report (a CUDA driver error, a device it could
    not open). Stands: success, and every fault the CPU would report the same way (a broken reference, its
    time budget, a reduced-precision output); a run out of time on the GPU would be slower still on the CPU."""
    if res.status == "ok" and result.get("ok"):
        return None
    if res.status == "ok" and result.get("fault") == "cuda":
        return f"reference on CUDA not possible: {result.get('error')}"
    if res.status in ("crash", "error", "exit", "bad_result"):
        return f"reference process on CUDA ended with {res.status}: {str(getattr(res, 'detail', ''))[:400]}"
    return None


def _remember(key: str, out: tuple) -> None:
    if len(_REF_CACHE) >= _REF_CACHE_MAX:
        _REF_CACHE.pop(next(iter(_REF_CACHE)))
    _REF_CACHE[key] = out


def _last_phase(stderr_tail: str) -> str:
    """The last phase the reference announced on stderr (lethe.verifier.reference.PHASE_MARK), or ""."""
    from lethe.verifier.reference import PHASE_MARK

    lines = [ln for ln in (stderr_tail or "").splitlines() if ln.startswith(PHASE_MARK)]
    return lines[-1][len(PHASE_MARK):].strip() if lines else ""


def reference_error(res, result: dict, *, timeout_s: float, memory_mb: int) -> str:
    """Why the reference cannot grade: its own report when it made one (it names the budget and phase when a
    limit tripped inside it), else what the sandbox saw, worded by the limit it enforced from outside."""
    if res.status == "ok" and result.get("error"):
        return str(result["error"])
    phase = _last_phase(getattr(res, "stderr_tail", ""))
    where = f" while {phase}" if phase else ""
    detail = getattr(res, "detail", "") or ""
    if res.status == "timeout":
        return f"reference exceeded its {timeout_s:g} s time budget{where} (stopped by the sandbox: {detail})"
    if res.status == "oom":
        return f"reference exceeded its {memory_mb} MB memory budget{where} ({detail.splitlines()[0] if detail else 'oom'})"
    return f"reference sandbox {res.status}{where}: {detail}"


def verify(ref_src: str, cand_src: str, *, profile: str = "strict", device: str = "auto", seed: int = 0,
           timeout_s: float = 300, memory_mb: int = 8192, kernel_id: str = "", corpus: str = "",
           op_class: str = "", only_gates: list[str] | None = None, sources: dict | None = None,
           constants: T.Constants = T.DEFAULT, runner=None, ref_timeout_s: float = REF_TIMEOUT_S,
           ref_memory_mb: int = REF_MEMORY_MB, build_timeout_s: float = BUILD_TIMEOUT_S,
           ext_store: str | None = None, reference_device: str = "auto", grade_isolated: bool = False,
           second_pass_floors: dict | None = None) -> dict:
    """Verify one candidate against one reference; returns a lethe.verdict/1 row (see docs/verifier.md).

    ``runner`` replaces ``lethe.sandbox.run_isolated`` (same signature); only tests pass an in-process runner,
    and only for trusted fixture kernels. ``timeout_s``/``memory_mb`` bound the candidate's process,
    ``ref_timeout_s``/``ref_memory_mb`` the float64 reference's, ``build_timeout_s`` a CUDA candidate's
    extension build step (``ext_store``: where builds are kept, see :mod:`lethe.sandbox.extensions`).
    ``reference_device`` says where the float64 reference runs (:func:`resolve_reference_device`).
    ``grade_isolated`` grades in a sandboxed process of its own (:func:`grade`), so this one need not import torch.
    """
    return verify_profiles(ref_src, cand_src, profiles=[profile], device=device, seed=seed, timeout_s=timeout_s,
                           memory_mb=memory_mb, kernel_id=kernel_id, corpus=corpus, op_class=op_class,
                           only_gates=only_gates, sources=sources, constants=constants, runner=runner,
                           ref_timeout_s=ref_timeout_s, ref_memory_mb=ref_memory_mb,
                           build_timeout_s=build_timeout_s, ext_store=ext_store,
                           reference_device=reference_device, grade_isolated=grade_isolated,
                           second_pass_floors=second_pass_floors)[0]


def verify_profiles(ref_src: str, cand_src: str, *, profiles=("strict",), device: str = "auto", seed: int = 0,
                    timeout_s: float = 300, memory_mb: int = 8192, kernel_id: str = "", corpus: str = "",
                    op_class: str = "", only_gates: list[str] | None = None, sources: dict | None = None,
                    constants: T.Constants = T.DEFAULT, runner=None,
                    aot_targets: tuple[str, ...] = AOT_TARGETS, timings: dict | None = None,
                    ref_timeout_s: float = REF_TIMEOUT_S, ref_memory_mb: int = REF_MEMORY_MB,
                    build_timeout_s: float = BUILD_TIMEOUT_S, ext_store: str | None = None,
                    reference_device: str = "auto", grade_isolated: bool = False,
                    second_pass_floors: dict | None = None) -> list[dict]:
    """One row per contract profile from a single reference run and a single candidate run.

    The probe plan does not depend on the profile (profiles change how outputs are graded, never which inputs
    are run), so the candidate executes once and each profile grades the same recorded outputs. The row of a
    profile is identical to what ``verify(..., profile=p)`` returns, except for the wall-clock ``seconds`` and
    ``compile_seconds`` (``records.deterministic_view``).

    ``timings``, when given, receives wall-clock seconds per phase (reference, candidate, aot, grade; the
    reference phase is ~0 on a cache hit): diagnostics for throughput work, never part of a row.

    ``grade_isolated``: grade in a sandboxed process (:func:`grade`) rather than in this one, which then never
    imports torch; for a process that verifies once (the ``lethe verify`` command), not for a long-lived one.

    When a probe fails whose floor the reference refused or whose failure is marginal, the reference's second pass
    measures that probe's floors and the profile is graded again (:func:`second_pass_requests`, per profile, so a
    profile's row does not depend on which other profiles were graded with it); a replay passes
    the requests its row recorded as ``second_pass_floors`` (:func:`recorded_requests`), so it grades with the
    floors the row was graded with.
    """
    t0 = time.perf_counter()
    phase = timings if timings is not None else {}

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        phase[name] = round(now - since, 3)
        return now
    profs = [PR.get(p) for p in profiles]
    dev = resolve_device(device)
    ref_dev = resolve_reference_device(reference_device, dev)
    src_info = {"ref_sha256": _sha(ref_src), "cand_sha256": _sha(cand_src), **(sources or {})}
    env_row = environment(dev)
    base = {"id": kernel_id or src_info["cand_sha256"][:16], "corpus": corpus, "op_class": op_class,
            "device": dev, "seed": int(seed),
            "environment": json.dumps({**env_row, "reference_device": ref_dev}, sort_keys=True),
            "sources": json.dumps(src_info, sort_keys=True)}

    ran: list[tuple[str, Any]] = []  # (role, SandboxResult) of every sandboxed process this row depends on

    def finish(**kw) -> list[dict]:
        secs = round(time.perf_counter() - t0, 3)
        return [R.make_row(**base, **isolation_fields(ran), profile=prof.name, seconds=secs, **kw) for prof in profs]

    # Under the Triton CPU interpreter the plan caps its shape variants harder (probes.NUMEL_CAP_INTERPRET):
    # the interpreter runs every program of the grid in Python.
    interpret = dev == "cpu" and "triton" in cand_src
    rstatus, rres, rarr, rraw = run_reference(ref_src, seed, only_gates=only_gates, runner=runner,
                                              interpret=interpret, timeout_s=ref_timeout_s,
                                              memory_mb=ref_memory_mb, device=ref_dev)
    ran.append(("reference", rraw))
    base["environment"] = json.dumps({**env_row, **reference_environment(rres, ref_dev)}, sort_keys=True)
    t1 = lap("reference_s", t0)
    phase["reference_device"] = rres.get("reference_device") or ref_dev
    if rstatus != "ok" or not rres.get("ok"):
        return finish(status="ref_broken", error=str(rres["error"])[:2000])

    if dev == "cpu" and CUDA_SOURCE.search(cand_src):
        return finish(status="not_auditable", error="CUDA (load_inline) candidate: not auditable on a CPU-only machine")

    build = {}
    if dev == "cuda" and CUDA_SOURCE.search(cand_src):
        # The extension is built once per source (and toolchain) in its own sandboxed step; the candidate
        # process below imports that build and never runs a compiler (lethe.sandbox.extensions).
        root, marker, bres = extensions.ensure_built(cand_src, runner=runner or _sandbox(), device=dev,
                                                     timeout_s=build_timeout_s, memory_mb=max(memory_mb, 16384),
                                                     store=ext_store)
        if bres is not None:
            ran.append(("build", bres))
        t1 = lap("build_s", t1)
        phase["build_cached"] = bres is None
        if not marker["ok"]:
            kind = getattr(bres, "status", "") if marker.get("transient") else "compile"
            status = {"timeout": "timeout", "crash": "crash"}.get(kind, "compile_fail")
            return finish(status=status, error=f"extension build: {marker['error']}"[:2000],
                          compile_seconds=round(marker.get("seconds", 0.0), 3))
        build = {"ext_root": str(root), "seconds": marker.get("seconds", 0.0)}
    send = {k: v for k, v in rarr.items()
            if k.startswith(("sd/", "init/")) or re.match(r"p/.*/(in|alt|up)\d+$", k)}
    probes_payload = [{k: m[k] for k in ("id", "action", "dtype", "inputs")} for m in rres["probes"]
                      if m["status"] == "ok"]
    env = {"TRITON_INTERPRET": "1"} if interpret else {"TRITON_INTERPRET": None}
    payload = {"cand_src": cand_src, "seed": int(seed), "device": dev, "init": rres["init"],
               "param_shapes": rres["param_shapes"], "probes": probes_payload}
    extra = {}
    if build:
        payload["ext_root"] = build["ext_root"]
        extra["read_paths"] = (build["ext_root"],)
    cres = (runner or _sandbox())("lethe.verifier.worker:run_candidate", payload=payload, arrays=send,
                                  timeout_s=timeout_s, memory_mb=memory_mb, device=dev, env=env,
                                  max_file_mb=battery.CAND_RESULT_MB, **extra)
    ran.append(("candidate", cres))
    t1 = lap("candidate_s", t1)
    phase["candidate_child_s"] = round(getattr(cres, "seconds", 0.0), 3)
    ps = (cres.result or {}).get("probe_seconds") or {}
    phase["candidate_probes_s"] = round(sum(ps.values()), 3)
    phase["slowest_probes"] = sorted(ps.items(), key=lambda kv: -kv[1])[:3]
    for key in ("load", "to_device", "resources", "body"):
        phase[f"candidate_{key}_s"] = round((cres.result or {}).get(f"{key}_seconds", 0.0) or 0.0, 3)
    phase["extensions"] = (cres.result or {}).get("extensions")
    phase["candidate_stderr_tail"] = (getattr(cres, "stderr_tail", "") or "")[-400:]
    if cres.status == "timeout":
        return finish(status="timeout", error=f"candidate exceeded {timeout_s}s: {cres.detail}"[:2000])
    if cres.status != "ok":
        tail = (cres.stderr_tail or "")[-600:]
        if "File too large" in (cres.detail or ""):
            # Only outputs larger than the float64 reference's (other shapes, or wider than 8-byte elements)
            # can exceed the cap (battery.CAND_RESULT_MB), so this is the candidate's fault, said as such.
            return finish(status="crash", error=(f"candidate's outputs exceed the {battery.CAND_RESULT_MB} MB "
                                                 f"result cap, which holds the float64 reference's outputs: "
                                                 f"{cres.detail}")[:2000])
        return finish(status="crash", error=f"sandbox {cres.status}: {cres.detail} {tail}"[:2000])
    cand = cres.result or {}
    stage = cand.get("stage")
    if stage in ("compile", "load"):
        if cand.get("interp_limit") or cand.get("no_cuda"):
            return finish(status="not_auditable", error=f"{stage}: {cand.get('error')}"[:2000])
        return finish(status="compile_fail" if stage == "compile" else "load_fail",
                      error=str(cand.get("error"))[:2000], compile_seconds=round(cand.get("compile_seconds", 0) + build.get("seconds", 0.0), 3))
    base_probe = cand.get("probes", {}).get("rand0", {})
    if base_probe.get("interp_limit") or base_probe.get("no_cuda"):
        return finish(status="not_auditable", error=f"base input: {base_probe.get('error')}"[:2000],
                      compile_seconds=round(cand.get("compile_seconds", 0) + build.get("seconds", 0.0), 3),
                      weights_copied=bool(cand.get("weights_copied")))

    if aot_targets and "triton" in cand_src and (not only_gates or "RES-02" in only_gates):
        cand["resources"] = list(cand.get("resources") or []) + _aot_pass(
            cand_src, rres, send, seed, aot_targets, timeout_s, memory_mb, runner, cand, ran)
        t1 = lap("aot_s", t1)

    aliasing = any(p.get("alias_input") or p.get("alias_param") or p.get("overwritten_by_later_call")
                   for p in cand.get("probes", {}).values() if isinstance(p, dict))
    graded = grade(rres, rarr, cand, cres.arrays or {}, profs, seed=int(seed), device=dev, constants=constants,
                   only_gates=only_gates, isolated=grade_isolated, runner=runner, timeout_s=ref_timeout_s,
                   memory_mb=ref_memory_mb, timings=phase)
    # The second pass is asked for per profile, from that profile's own failures, so that a profile's row is the
    # row a run of that profile alone gives; profiles asking for the same probes share one second pass.
    ran_ok = {m["id"] for m in rres["probes"] if m["status"] == "ok"}
    groups: dict[str, tuple[dict, list]] = {}
    for prof in profs:
        req = {pid: r for pid, r in merge_requests(second_pass_requests({prof.name: graded[prof.name]}, rres),
                                                    second_pass_floors or {}).items() if pid in ran_ok}
        if req:
            groups.setdefault(json.dumps(req, sort_keys=True), (req, []))[1].append(prof)
    ran_of = {prof.name: list(ran) for prof in profs}
    if groups:
        t1 = lap("first_grade_s", t1)
    for requests, group in groups.values():
        sstatus, sres, sarr, sraw = run_reference(ref_src, seed, runner=runner, interpret=interpret,
                                                  timeout_s=ref_timeout_s, memory_mb=ref_memory_mb,
                                                  device=rres.get("reference_device") or ref_dev,
                                                  floors_for=requests)
        rres2, rarr2 = _merged(rres, rarr, sres if sstatus == "ok" else {"probes": []}, sarr, requests,
                               failure="" if sstatus == "ok" and sres.get("ok")
                               else str(sres.get("error") or sstatus)[:300])
        phase.setdefault("second_pass_probes", []).append(sorted(requests))
        graded.update(grade(rres2, rarr2, cand, cres.arrays or {}, group, seed=int(seed), device=dev,
                            constants=constants, only_gates=only_gates, isolated=grade_isolated, runner=runner,
                            timeout_s=ref_timeout_s, memory_mb=ref_memory_mb, timings=phase))
        for prof in group:
            ran_of[prof.name].append(("reference second pass", sraw))
    if groups:
        t1 = lap("second_pass_s", t1)
    rows = []
    for prof in profs:
        rows.append(R.make_row(**base, **isolation_fields(ran_of[prof.name]), profile=prof.name,
                               seconds=round(time.perf_counter() - t0, 3),
                               status="gated", gates=graded[prof.name],
                               compile_seconds=round(cand.get("compile_seconds", 0) + build.get("seconds", 0.0), 3),
                               weights_copied=bool(cand.get("weights_copied")), output_aliasing=bool(aliasing)))
    lap("grade_s", t1)
    return rows


def _summaries(evidence: dict) -> list[dict]:
    """The comparison summaries (gates.compare) in one probe's evidence: a value gate's outputs, CMP-02's checks."""
    found = list(evidence.get("outputs") or [])
    found += list((evidence.get("checks") or {}).values())
    return [s for s in found if isinstance(s, dict)]


def second_pass_requests(graded: dict[str, dict], ref: dict) -> dict[str, dict]:
    """Which probes the reference's second pass measures floors for (lethe.verifier.reference.second_pass), from
    every profile's gate rows: probe id -> {"mult": draws multiplier, "store": storage model}.

    A probe is asked for when a gate of battery.SECOND_PASS_GATES failed on it by values alone (no shape mismatch,
    no non-finite class changed: no floor can change those) and its worst failing element is within
    SECOND_PASS_RATIO of its bound, or SECOND_PASS_RATIO_UNMEASURED where its floor was not measured (refused by
    the budget's shares, or raised: "floor" in its evidence) or where one forward of the probe is cheap (the plan's
    estimate ``est_s`` at most SECOND_PASS_CHEAP_S: a few draws' maximum can sit far below an honest error where the
    signs cancel, two equal stored values moved by the same sign, and more draws cost little there). Each is asked for SECOND_PASS_MULT times the first
    pass's draws and, on a forward probe, the storage model in the probe's dtype; the reference measures the draws
    the plan's estimates say fit its budget (reference.second_pass). A pure function of the rows and the
    reference's plan, so the same candidate asks for the same probes on every machine."""
    run = {m["id"]: m for m in ref.get("probes") or [] if m.get("status") == "ok"}
    out: dict[str, dict] = {}
    for rows in graded.values():
        for gid, row in rows.items():
            if gid not in battery.SECOND_PASS_GATES or row.get("status") != "fail":
                continue
            probes = (json.loads(row.get("evidence") or "{}").get("probes") or {})
            for pid, ev in probes.items():
                if pid not in run or not isinstance(ev, dict) or ev.get("status") != "fail" or ev.get("second_pass"):
                    continue
                failed = [s for s in _summaries(ev) if not s.get("ok")]
                if not failed or any(s.get("why") or s.get("new_nonfinite") or s.get("lost_nonfinite")
                                     for s in failed):
                    continue
                worst = max(float(s.get("max_err_over_tol") or 0.0) for s in failed)
                cheap = float(run[pid].get("est_s") or math.inf) <= battery.SECOND_PASS_CHEAP_S
                if worst > (battery.SECOND_PASS_RATIO_UNMEASURED if ev.get("floor") or cheap
                            else battery.SECOND_PASS_RATIO):
                    continue
                unmeasured = not (run[pid].get("cond") or {}).get("draws")
                req = {"mult": battery.SECOND_PASS_MULT, "store": True, "unmeasured": unmeasured}
                out[pid] = merge_requests({pid: req}, out)[pid]
    return dict(sorted(out.items()))


def merge_requests(a: dict[str, dict], b: dict[str, dict]) -> dict[str, dict]:
    """Two sets of second-pass requests as one: per probe the larger multiplier, either's storage model, and
    ``unmeasured`` when either says the first pass measured no floor."""
    out = {k: dict(v) for k, v in a.items()}
    for pid, req in b.items():
        have = out.get(pid, {"mult": 1, "store": False, "unmeasured": False})
        out[pid] = {"mult": max(int(have.get("mult", 1)), int(req.get("mult", 1))),
                    "store": bool(have.get("store") or req.get("store")),
                    "unmeasured": bool(have.get("unmeasured") or req.get("unmeasured"))}
    return dict(sorted(out.items()))


def recorded_requests(row: dict) -> dict[str, dict]:
    """The second-pass requests a recorded row was graded with (each probe's ``second_pass`` in its gates'
    evidence), for a replay of one of its gates."""
    out: dict[str, dict] = {}
    for g in (row.get("gates") or {}).values():
        probes = json.loads(g.get("evidence") or "{}").get("probes") or {}
        for pid, ev in probes.items():
            req = ev.get("second_pass") if isinstance(ev, dict) else None
            if req:
                out = merge_requests(out, {pid: {k: req[k] for k in ("mult", "store", "unmeasured") if k in req}})
    return out


def merge_second_pass(ref: dict, ref_arrays: dict, second: dict, second_arrays: dict, requests: dict[str, dict],
                      failure: str = "") -> tuple[dict, dict]:
    """The first pass's result and arrays with the second pass's floors in place of the requested probes' own
    (new objects; the cached first pass is never changed). Each requested probe's meta records its request as
    ``second_pass``, with ``not_measured`` and the reason where the second pass could not measure it (``failure``:
    the whole pass did not run); such a probe keeps the first pass's floors."""
    done = {m["id"]: m for m in second.get("probes") or []}
    measured = set()
    probes = []
    for m in ref.get("probes") or []:
        req = requests.get(m["id"])
        if req is None:
            probes.append(m)
            continue
        m = dict(m)
        got = done.get(m["id"])
        if not failure and got is not None and got.get("status") == "ok":
            for k in battery.SECOND_PASS_META:
                if k in got:
                    m[k] = got[k]
            m["second_pass"] = {**req, "mult_run": int(got.get("mult", req.get("mult", 1)))}
            measured.add(m["id"])
        else:
            why = failure or (got or {}).get("reason") or "the second pass returned nothing for this probe"
            m["second_pass"] = {**req, "not_measured": str(why)[:300]}
        probes.append(m)
    arrays = dict(ref_arrays)
    arrays.update({k: v for k, v in second_arrays.items() if k.split("/")[1] in measured})
    return {**ref, "probes": probes}, arrays


# The merged results (merge_second_pass) of the last few second passes, kept with the objects they were made from,
# so that candidates after the first of a cached reference and second pass are graded against the same objects and
# reuse the bounds kept with them (_ref_memo).
_MERGED: dict[tuple, tuple] = {}
_MERGED_MAX = 2


def _merged(ref: dict, ref_arrays: dict, second: dict, second_arrays: dict, requests: dict[str, dict],
            failure: str = "") -> tuple[dict, dict]:
    key = (id(ref), id(ref_arrays), id(second), id(second_arrays), json.dumps(requests, sort_keys=True), failure)
    hit = _MERGED.pop(key, None)
    if hit is None or any(a is not b for a, b in zip(hit[:4], (ref, ref_arrays, second, second_arrays),
                                                     strict=True)):
        hit = (ref, ref_arrays, second, second_arrays,
               merge_second_pass(ref, ref_arrays, second, second_arrays, requests, failure))
    _MERGED[key] = hit  # most recent last
    while len(_MERGED) > _MERGED_MAX:
        _MERGED.pop(next(iter(_MERGED)))
    return hit[4]


def grade(ref: dict, ref_arrays: dict, cand: dict, cand_arrays: dict, profs: list, *, seed: int, device: str,
          constants: T.Constants = T.DEFAULT, only_gates: list[str] | None = None, isolated: bool = False,
          runner=None, timeout_s: float = REF_TIMEOUT_S, memory_mb: int = REF_MEMORY_MB,
          timings: dict | None = None) -> dict[str, dict]:
    """Every profile's gate rows (profile name -> gate id -> row) from one reference and one candidate run,
    sharing one comparison memo.

    In this process, or with ``isolated`` in a sandboxed process (``lethe.verifier.gates:grade_process``, forked
    from the zygote that has torch imported): the same code on the same arrays and JSON results, so the same
    rows, and this process never imports torch. That process runs only our grading code on data; if it cannot
    deliver (any failure, a gate that ran out of memory under its cap, a profile or constants it cannot be sent),
    the grading is done here, so where it ran never changes a verdict. ``timings`` receives ``grade_where``."""
    sendable = (isinstance(constants, T.Constants)
                and all(PR.PROFILES.get(getattr(p, "name", None)) == p for p in profs))
    if isolated and sendable:
        arrays = {**{f"r/{k}": v for k, v in ref_arrays.items()}, **{f"c/{k}": v for k, v in cand_arrays.items()}}
        res = (runner or _sandbox())("lethe.verifier.gates:grade_process",
                                     payload={"ref": ref, "cand": cand, "profiles": [p.name for p in profs],
                                              "seed": int(seed), "device": device,
                                              "constants": T.as_dict(constants), "only_gates": only_gates,
                                              "threads": _grading_threads()},
                                     arrays=arrays, timeout_s=timeout_s, memory_mb=memory_mb, device="cpu",
                                     env={"TRITON_INTERPRET": None})
        out = (res.result or {}).get("gates") if res.status == "ok" else None
        if isinstance(out, dict) and set(out) == {p.name for p in profs} and not (res.result or {}).get("memory_error"):
            if timings is not None:
                timings["grade_where"] = "sandboxed process"
            return out
        if timings is not None:
            timings["grade_where"] = f"here (the grading process: {res.status} {str(res.detail)[:200]})"
    from lethe.verifier import gates as G

    memo: dict = {}
    ref_memo = _ref_memo(ref, ref_arrays)
    out = {}
    for prof in profs:
        bundle = G.Bundle(ref=ref, ref_arrays=ref_arrays, cand=cand, cand_arrays=cand_arrays, profile=prof,
                          seed=int(seed), device=device, constants=constants, memo=memo, ref_memo=ref_memo)
        out[prof.name] = {g: r.to_row() for g, r in G.grade(bundle, only=only_gates).items()}
    if timings is not None:
        timings.setdefault("grade_where", "here")
    return out


# Reference-only values of grading (tolerances and floors: gates.Bundle.ref_memo) kept for the references graded
# last, so that candidates after the first of a cached reference do not recompute them: at most _REF_MEMO_MAX
# references and _REF_MEMO_MB of arrays each. Keyed by the reference's own result and arrays objects (those of
# _REF_CACHE, held here so neither can be replaced by another under the same id).
_REF_MEMO: dict[tuple[int, int], tuple[dict, dict, Any]] = {}
_REF_MEMO_MAX = 2
_REF_MEMO_MB = 512


def _ref_memo(ref: dict, ref_arrays: dict):
    from lethe.verifier import gates as G

    key = (id(ref), id(ref_arrays))
    hit = _REF_MEMO.pop(key, None)
    if hit is None or hit[0] is not ref or hit[1] is not ref_arrays:
        hit = (ref, ref_arrays, G.RefMemo(_REF_MEMO_MB << 20))
    _REF_MEMO[key] = hit  # most recent last
    while len(_REF_MEMO) > _REF_MEMO_MAX:
        _REF_MEMO.pop(next(iter(_REF_MEMO)))
    return hit[2]


def _grading_threads() -> int:
    """The torch threads grading would have here (OMP_NUM_THREADS, else this process's CPUs): large outputs are
    compared with torch on the host's cores (gates.TORCH_COMPARE_MIN_NUMEL), and a sandboxed child starts
    single-threaded. Speed only: grading's results do not depend on the thread count."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        n = 0
    return n if n > 0 else len(os.sched_getaffinity(0))


def _aot_pass(cand_src: str, rres: dict, send: dict, seed: int, targets, timeout_s: float, memory_mb: int,
              runner, cand: dict, ran: list) -> list[dict]:
    """RES-02 ahead of time, in a third sandboxed process (worker.run_aot); failures become cand["aot_error"]."""
    base = next((m for m in rres["probes"] if m["id"] == "rand0" and m["status"] == "ok"), None)
    if base is None:
        return []
    keys = {s["key"] for s in base["inputs"] if s["t"] == "tensor"} | {k for k in send if k.startswith("init/")}
    res = (runner or _sandbox())("lethe.verifier.worker:run_aot",
                                 payload={"cand_src": cand_src, "seed": int(seed), "init": rres["init"],
                                          "inputs": base["inputs"], "targets": list(targets), "timeout_s": timeout_s},
                                 arrays={k: send[k] for k in keys}, timeout_s=timeout_s, memory_mb=memory_mb,
                                 device="cpu", env={"TRITON_INTERPRET": None})
    ran.append(("aot", res))
    if res.status != "ok":
        cand["aot_error"] = f"{res.status}: {res.detail}"[:400]
        return []
    return list((res.result or {}).get("resources") or [])


def isolation_fields(ran: list[tuple[str, Any]]) -> dict:
    """The row's ``isolation`` and ``tamper_proof`` from the sandboxed processes it depends on: tamper-proof only
    when every one of them (reference, candidate, AOT compile) reported full operating-system isolation.

    One description when they all agree; otherwise each role's own, so a row never claims more than its weakest
    process had. A runner that is not the sandbox (tests' in-process runner) reports nothing: "none"."""
    if not ran:
        return {"isolation": "not run: no sandboxed process", "tamper_proof": False}
    desc = [(role, getattr(res, "isolation", "") or "none: the runner reported no isolation") for role, res in ran]
    proof = all(bool(getattr(res, "tamper_proof", False)) for _, res in ran)
    kinds = {d for _, d in desc}
    text = desc[0][1] if len(kinds) == 1 else "; ".join(f"{role}: {d}" for role, d in desc)
    return {"isolation": text[:1000], "tamper_proof": proof}


def verdict(row: dict) -> str:
    """"pass" when the row was gated, CMP-01 passed and no gate failed or errored; "fail" when gated otherwise;
    the row status (compile_fail, not_auditable, ...) when it never reached grading."""
    if row["status"] != "gated":
        return row["status"]
    st = {g: v["status"] for g, v in row["gates"].items()}
    if any(s in ("fail", "error") for s in st.values()):
        return "fail"
    return "pass" if st.get("CMP-01") == "pass" else "fail"


def failed_gates(row: dict) -> list[str]:
    return [g for g, v in row["gates"].items() if v["status"] in ("fail", "error")]


def verify_files(ref_path: str | Path, cand_path: str | Path, **kw) -> dict:
    """verify() on two source files, decoded as Python decodes them (BOM, PEP 263 coding line)."""
    from lethe.verifier.sources import read_source

    ref_path, cand_path = Path(ref_path), Path(cand_path)
    kw.setdefault("sources", {"ref_path": str(ref_path), "cand_path": str(cand_path)})
    return verify(read_source(ref_path), read_source(cand_path), **kw)


def replay(row: dict, gate: str, *, ref_path: str | None = None, cand_path: str | None = None,
           runner=None) -> dict:
    """Re-run one gate of a recorded row from its recorded seed/profile/device; say whether it reproduces
    (same status and same evidence)."""
    src = json.loads(row.get("sources") or "{}")
    rp = ref_path or src.get("ref_path")
    cp = cand_path or src.get("cand_path")
    if not rp or not cp:
        raise ValueError("row records no source paths; pass ref_path and cand_path")
    new = verify_files(rp, cp, profile=row["profile"], device=row["device"], seed=int(row["seed"]),
                       kernel_id=row["id"], corpus=row["corpus"], only_gates=[gate], runner=runner,
                       second_pass_floors=recorded_requests(row))
    old_g, new_g = row["gates"][gate], new["gates"][gate]
    from lethe.verifier.sources import read_source

    same_src = (_sha(read_source(rp)) == src.get("ref_sha256")
                and _sha(read_source(cp)) == src.get("cand_sha256"))
    return {"id": row["id"], "gate": gate, "recorded": old_g, "replayed": new_g,
            "row_status": new["status"], "sources_match": same_src,
            "reproduces": old_g["status"] == new_g["status"] and old_g["evidence"] == new_g["evidence"]}
