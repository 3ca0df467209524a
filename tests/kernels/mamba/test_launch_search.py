"""The launch-search driver (experiments/mamba/launch_search.py) on the CPU interpreter: its dry run end to end,
the correctness screen that drops a wrong configuration before it is timed, and the --max-s guard."""

import importlib
import json

import pytest
import torch
from lethe.kernels.mamba.forward_chunked_scan.reference import selective_scan_magnitude
from lethe.kernels.mamba.tuning import DEFAULT_CONFIG, LaunchConfig, evaluate_policies

CP = LaunchConfig("chunk_parallel", 4, 4)


def driver():
    return importlib.import_module("experiments.mamba.launch_search")


@pytest.mark.slow
def test_dry_run_writes_rows_and_provenance(tmp_path):
    doc = driver().main(["--dry-run", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "launch_search.json").read_text())
    assert saved["schema"] == "lethe.mamba.launch_search/1" and saved["complete"]
    assert len(saved["rows"]) == 2 * len(saved["grid"]) == 4
    assert all(r["status"] == "ok" and r["median_ms"] > 0 for r in saved["rows"])
    assert json.loads((tmp_path / "provenance.json").read_text())["experiment"] == "mamba_launch_search"
    assert evaluate_policies(doc["rows"])["shapes"] == 2


def test_magnitude_by_scan_is_the_magnitude_recurrence():
    x = driver().draw((2, 9, 5, 3), 0, "cpu")
    Y, H = driver().magnitude(tuple(t.double() for t in x))
    Y_ref, H_ref = selective_scan_magnitude(*(t.double() for t in x))
    torch.testing.assert_close(Y, Y_ref, rtol=1e-12, atol=0)
    torch.testing.assert_close(H, H_ref[:, -1], rtol=1e-12, atol=0)


@pytest.mark.parametrize("wrong_at,caught_by", [(None, "float64 oracle"), (12, "against the default")])
@pytest.mark.slow
def test_a_wrong_configuration_is_dropped_before_it_is_timed(monkeypatch, wrong_at, caught_by):
    d = driver()
    real = d.run_config

    def off_by_a_little(cfg, x):  # a plausible defect: the last step off by a thousandth of its size
        y, h = real(cfg, x)
        if cfg == CP and wrong_at in (None, x[0].shape[1]):
            y = y.clone()
            y[:, -1] += 1e-3 * y[:, -1].abs().max()
        return y, h

    monkeypatch.setattr(d, "run_config", off_by_a_little)
    doc = d.search([DEFAULT_CONFIG, CP], [(1, 12, 4, 3)], (1, 9, 5, 3), "cpu", 1e9, 0.0, 3, log=lambda m: None)
    by = {r["config"]["name"]: r for r in doc["rows"]}
    assert by[DEFAULT_CONFIG.name]["status"] == "ok"
    assert by[CP.name]["status"] == "mismatch" and "median_ms" not in by[CP.name]
    assert caught_by in by[CP.name]["reason"]


def test_max_s_stops_cleanly_with_what_it_has():
    doc = driver().search([DEFAULT_CONFIG, CP], [(1, 12, 4, 3)], (1, 9, 5, 3), "cpu", 0.0, 0.0, 3,
                          log=lambda m: None)
    assert not doc["complete"] and "--max-s" in doc["stopped"] and doc["rows"] == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_search_on_the_gpu_checks_and_times_every_configuration():
    doc = driver().search([DEFAULT_CONFIG, LaunchConfig("chunk_parallel", 64, 4)], [(2, 1000, 96, 16)], (1, 37, 9, 5),
                          "cuda", 1e9, 5.0, 5, log=lambda m: None)
    assert doc["complete"] and doc["sm_count"] > 0
    assert all(r["status"] == "ok" and r["median_ms"] > 0 for r in doc["rows"]), doc["rows"]
    assert doc["policies"]["shapes"] == 1
