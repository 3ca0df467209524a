"""lethe.aot.launches: record a candidate's Triton launches and compile exactly those for sm_90a / sm_100a."""

import aot_kernels
import pytest

from lethe.aot import PointerArg, record_launches, reports_from_jit_cache, res02_reports, specialize
from lethe.aot.triton_aot import report_from_compiled

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")


def _record(n=4096, offset=0):
    buf = torch.zeros(n + offset, dtype=torch.float16)
    x = buf[offset:]
    with record_launches(execute=False) as launches:
        out = aot_kernels.launch_add(x, x, x)
    return launches, out


def test_recording_without_a_gpu_describes_arguments():
    launches, out = _record()
    assert out is not None  # the host wrapper ran to completion; no kernel did
    names = [rec.jit.fn.__name__ for rec in launches]
    assert names == ["add", "add_tuned"]
    plain, tuned = launches
    assert plain.args[:3] == (PointerArg("float16", True),) * 3 and plain.args[3] == 4096
    assert plain.kwargs["BLOCK"] == 256 and plain.configs is None
    # the autotuner's whole config list is kept: it may pick any of them on a real device
    assert [c["num_warps"] for c in tuned.configs] == [2, 4]
    assert [c["BLOCK"] for c in tuned.configs] == [256, 1024]


def test_specialize_matches_the_jit_rules():
    launches, _ = _record()
    spec = specialize(launches[0].jit, "sm_100a", launches[0].args, launches[0].kwargs)
    assert spec.signature == {"x_ptr": "*fp16", "y_ptr": "*fp16", "out_ptr": "*fp16", "n": "i32",
                              "BLOCK": "constexpr"}
    assert all(spec.attrs[(i,)] == [["tt.divisibility", 16]] for i in range(4))  # 4096 % 16 == 0
    # an odd length and a misaligned view change the specialisation, exactly as on a GPU
    misaligned = (PointerArg("float16", False), PointerArg("float16", True), PointerArg("float16", True), 1)
    spec = specialize(launches[0].jit, "sm_90a", misaligned, {"BLOCK": 256})
    assert spec.signature["n"] == "constexpr" and spec.constexprs[(3,)] == 1
    assert spec.attrs[(0,)] == [] and spec.attrs[(1,)] == [["tt.divisibility", 16]]


def test_res02_reports_cover_every_launch_config_and_target():
    launches, _ = _record()
    reports = res02_reports(aot_kernels, launches)
    # add: 1 config; add_tuned: 2 configs; each for 2 targets. never_launched has no signature: not reported.
    assert len(reports) == 6
    assert {r.kernel for r in reports} == {"add", "add_tuned"}
    tuned = sorted((r.target, r.num_warps, r.num_stages, r.config["BLOCK"]) for r in reports
                   if r.kernel == "add_tuned")
    assert tuned == [("sm_100a", 2, 1, 256), ("sm_100a", 4, 2, 1024), ("sm_90a", 2, 1, 256), ("sm_90a", 4, 2, 1024)]
    for rep in reports:
        assert rep.error is None and rep.source == "aot"
        assert 0 < rep.registers <= 255 and rep.spill_bytes == 0 and rep.tmem_columns == 0
        assert rep.violations() == []
    # restricting to a subset of kernels filters launches of the others out
    only_add = res02_reports([aot_kernels.add], launches, targets=["sm_90a"])
    assert [(r.kernel, r.target) for r in only_add] == [("add", "sm_90a")]


def test_recorder_restores_triton():
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    before = (JITFunction.run, Autotuner.run)
    _record()
    assert (JITFunction.run, Autotuner.run) == before


def test_reports_from_jit_cache_prefers_driver_figures():
    # Simulate what a GPU run leaves behind: a compiled, loaded kernel in the JIT's per-device cache.
    launches, _ = _record()
    rep_aot = res02_reports([aot_kernels.add], launches, targets=["sm_90a"])[0]
    spec = specialize(aot_kernels.add, "sm_90a", launches[0].args, launches[0].kwargs)
    from triton.backends.compiler import GPUTarget

    kernel = triton.compile(triton.compiler.ASTSource(aot_kernels.add, spec.signature, spec.constexprs, spec.attrs),
                            target=GPUTarget("cuda", 90, 32), options=spec.options)
    kernel.n_regs, kernel.n_spills = 40, 3  # the driver reports spills in 4-byte words
    saved = dict(aot_kernels.add.device_caches)
    try:
        aot_kernels.add.device_caches[0] = ({"key": kernel}, {}, None, None, None)
        (rep,) = reports_from_jit_cache(aot_kernels.add)
    finally:
        aot_kernels.add.device_caches.clear()
        aot_kernels.add.device_caches.update(saved)
    assert rep.source == "device" and rep.target == "sm_90a"
    assert (rep.registers, rep.spill_bytes) == (40, 12)
    assert rep.shared_bytes == rep_aot.shared_bytes and rep.num_warps == rep_aot.num_warps
    # a binary never loaded falls back to the cubin's own figures
    kernel.__dict__.pop("n_regs")
    assert report_from_compiled(kernel, source="device").registers == rep_aot.registers


def test_fit_summary_distinguishes_some_from_all_configs():
    from lethe.aot import ResourceReport, fit_summary

    def rep(kernel, tmem, warps):
        return ResourceReport(target="sm_100a", kernel=kernel, registers=64, shared_bytes=1024, tmem_columns=tmem,
                              spill_bytes=0, num_warps=warps, num_stages=1, config={"num_warps": warps})

    summary = fit_summary([rep("a", 544, 4), rep("a", 0, 2), rep("b", 544, 4), rep("b", 576, 8), rep("c", 64, 4)])
    assert summary["a sm_100a"]["verdict"] == "some configs unlaunchable"
    assert summary["a sm_100a"]["examples"] == [
        {"config": {"num_warps": 4}, "violations": ["tensor memory 544 columns > 512 on sm_100a"]}]
    assert summary["b sm_100a"]["verdict"] == "unlaunchable" and summary["b sm_100a"]["configs_over_limits"] == 2
    assert summary["c sm_100a"] == {"configs": 1, "configs_over_limits": 0, "verdict": "fits", "examples": []}
