"""kernels/gdn/fwd_options.py: how the output kernel's precision is chosen from the options and the inputs."""

import pytest
from lethe.kernels.gdn.fwd_options import DOT_PRECISIONS, OUTPUT_PRECISION_DEFAULT, resolve_output_precision


def test_auto_rounds_to_tf32_for_sixteen_bit_inputs_under_the_default_dot_precision_only():
    assert OUTPUT_PRECISION_DEFAULT == "auto"
    assert resolve_output_precision("auto", "tf32x3", sixteen_bit_inputs=True) == "tf32rn"
    # float32 inputs keep float32-grade products; a chosen dot_precision is honoured
    assert resolve_output_precision("auto", "tf32x3", sixteen_bit_inputs=False) == "tf32x3"
    for prec in DOT_PRECISIONS[1:]:
        assert resolve_output_precision("auto", prec, sixteen_bit_inputs=True) == prec


@pytest.mark.parametrize("sixteen", [True, False])
def test_explicit_choices_win_and_none_follows_dot_precision(sixteen):
    assert resolve_output_precision(None, "ieee", sixteen) == "ieee"
    for prec in ("tf32", "tf32rn", "tf32x3", "ieee"):
        assert resolve_output_precision(prec, "tf32x3", sixteen) == prec
    with pytest.raises(ValueError, match="output_precision"):
        resolve_output_precision("bf16", "tf32x3", sixteen)
