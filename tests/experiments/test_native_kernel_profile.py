"""experiments/native/kernel_profile.py: the command line (the profile itself, lethe.kernels.gdn.native.kernel_profile,
is tested in tests/kernels/gdn_native/test_kernel_profile.py; the script needs a GPU)."""

import importlib

import pytest


def test_the_command_line_refuses_a_misspelt_name_before_it_looks_for_a_gpu():
    prof = importlib.import_module("experiments.native.kernel_profile")
    with pytest.raises(SystemExit) as exc:
        prof.main(["--out", "unused", "--impls", "hybrid-tc,hybrid-tc@tf16"])
    assert exc.value.code == 2
