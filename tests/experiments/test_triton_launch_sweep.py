"""The launch sweep's host logic (the sweep itself needs a GPU): candidates name table entries, best-of summary
(the table overrides it uses: tests/kernels/gdn/test_launch_tables.py)."""

import argparse
import importlib

import pytest


@pytest.fixture(scope="module")
def sweep():
    return importlib.import_module("experiments.gdn.triton_launch_sweep")


def test_every_candidate_kernel_is_in_a_launch_table(sweep):
    for kernel in sweep.CANDIDATES:
        assert kernel in sweep.table_for(kernel)


def test_best_per_kernel_ignores_rows_that_differ_or_failed(sweep):
    rows = [
        dict(kernel="k", V=64, T=4096, status="ok", kernel_ms=2.0, is_default=True, config={"num_warps": 8}),
        dict(kernel="k", V=64, T=4096, status="ok", kernel_ms=1.5, is_default=False, config={"num_warps": 4}),
        dict(kernel="k", V=64, T=4096, status="differs", kernel_ms=0.1, is_default=False, config={"num_warps": 1}),
        dict(kernel="k", V=64, T=4096, status="error", is_default=False, config={"num_warps": 2}),
    ]
    best = sweep.best_per_kernel(rows)["k|V64|T4096"]
    assert best == {"default_ms": 2.0, "best_ms": 1.5, "best_config": {"num_warps": 4}}


def test_split_kernels_are_swept_under_the_split_inverse(sweep):
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    for kernel in sweep.SPLIT_KERNELS:
        assert kernel in FWD_LAUNCH and kernel in sweep.CANDIDATES and kernel in sweep.FORWARD_KERNELS


def test_candidates_are_checked_against_the_launch_entries_before_any_gpu_time(sweep):
    # built-in candidates are all real keys; a misspelt one, an unknown kernel or bad JSON stops the run on the CPU
    sweep.check_candidates(argparse.Namespace(
        kernels=",".join(sweep.CANDIDATES), candidates=None))
    for argv, match in ((["--kernels", "state_fwd_kernel", "--candidates", '[{"PRECISION": "tf32rn"}]'], "PRECISION"),
                        (["--kernels", "no_such_kernel"], "unknown kernels"),
                        (["--kernels", "state_fwd_kernel", "--candidates", "[{PREC: tf32rn}]"], "not JSON")):
        with pytest.raises(SystemExit, match=match):
            sweep.main(["--out", "unused", *argv])
    sweep.check_candidates(argparse.Namespace(
        kernels="state_fwd_kernel,output_fwd_kernel", candidates='[{"BV": 32}]'))
