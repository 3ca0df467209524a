"""lethe.kernels.gdn.native.bench_stages on the CPU: the guarded stage loop (errors and budget skips recorded,
the next stage still run), the merge start and the summary printed last."""

import json

from lethe.kernels.gdn.native import bench, bench_stages


def cpu_run(**kw):
    return bench.BenchRun(device="cpu", **kw)


def test_run_stages_guards_each_stage(capsys):
    def boom(run, out, quick):
        raise RuntimeError("kaput")

    def fill(run, out, quick):
        out["k2_timing"] = [{"quick": quick}]

    out = {"k2_timing_error": "from an earlier run", "ceilings_skipped": "budget", "timing": "kept"}
    bench_stages.run_stages(cpu_run(), out, ["k2_timing", "ceilings"], True,
                     functions={"ceilings": boom, "k2_timing": fill})
    assert "RuntimeError: kaput" in out["ceilings_error"] and "ceilings_skipped" not in out
    assert out["k2_timing"] == [{"quick": True}] and "k2_timing_error" not in out
    assert out["timing"] == "kept" and {"ceilings_wall_s", "k2_timing_wall_s"} <= set(out)
    printed = capsys.readouterr().out
    assert printed.index("stage ceilings") < printed.index("stage k2_timing")  # STAGES order, not the list's
    out = {}
    bench_stages.run_stages(cpu_run(budget_s=-1), out, ["ceilings"], False, functions={"ceilings": boom})
    assert out == {"ceilings_skipped": "budget"}
    assert "stage ceilings: skipped (budget -1 s)" in capsys.readouterr().out
    assert list(bench_stages.stage_functions()) == list(bench_stages.STAGES)


def test_start_from_a_merge(tmp_path):
    assert bench_stages.start_from(None) == {}
    f = tmp_path / "bench.json"
    f.write_text(json.dumps({"timing": [1]}))
    assert bench_stages.start_from(str(f)) == {"timing": [1], "merged_from": {"file": str(f), "provenance": None}}
    (tmp_path / "provenance.json").write_text(json.dumps({"git_sha": "abc"}))
    assert bench_stages.start_from(str(f))["merged_from"]["provenance"] == {"git_sha": "abc"}
    assert "merge_error" in bench_stages.start_from(str(tmp_path / "missing.json"))


def test_summary_lines():
    out = {"ceilings": {"copy_GBps": 1.0},
           "k2_correctness": [{"V": 64, "passed": True, "dA_rel_vs_torch32": 0.0, "dA_torch32_rel_vs_f64_pipeline": 1.0}],
           "k2_timing": [{"T": 128, "V": 64, "BH": 2, "native_ms": 0.12345, "floor_ms": 0.1, "chunks": 4},
                         {"T": 256, "V": 64, "BH": 2, "skipped": "budget"}]}
    lines = bench_stages.summary_lines(out, ["k2_correctness", "k2_timing"])
    assert lines == ['{"copy_GBps": 1.0}',
                     "k2 corr d_v=64 passed=True {'dA_rel_vs_torch32': '0.0e+00'}",
                     "k2_timing T=128 V=64 BH=2 {'native_ms': 0.123, 'floor_ms': 0.1}",
                     "k2_timing T=256 V=64 BH=2 {'skipped': 'budget'}"]
    assert bench_stages.summary_lines(out, ["ceilings"]) == ['{"copy_GBps": 1.0}']  # rows of stages not run: not shown
