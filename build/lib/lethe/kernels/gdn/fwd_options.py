"""The Triton forward's options, named once: the wrappers, the autograd entry and the experiments read them here
(this module imports nothing, so the CPU-only paths can use the names without importing Triton)."""

# tl.dot input precision of the Triton forward (and the Triton backward's scan); "tf32x3" keeps the ladder green,
# single-pass "tf32" does not (results/gdn/fwd_variants, docs/native.md)
DOT_PRECISIONS = ("tf32x3", "tf32", "ieee")
DOT_PRECISION_DEFAULT = "tf32x3"

# How the WY step inverts each chunk's unit lower-triangular (I + A):
#   "split"   three kernels: A, then the inverse row by row in a kernel of its own (in place, small enough for
#             several CTAs per SM), then the products W and U. The default: on the H200 (d_v 128, T 4k, 2^20
#             head-tokens) 0.65 + 1.13 + 1.87 ms against 7.4 ms for "rows" (results/gdn/launch_sweep).
#   "rows"    the same arithmetic in one kernel (forward substitution while A and the products stay in registers).
#   "blocked" the inverse from 16 x 16 diagonal blocks on tensor cores; slower on the H200 (10.4 ms).
WY_INVERSES = ("split", "rows", "blocked")
WY_INVERSE_DEFAULT = "split"

# The output kernel's products (P = tril(Qg Kg^T), Qg S, P delta) feed o and nothing else -- the backward reads T, W,
# the states and delta, and recomputes the rest -- so their precision is a knob of its own: None follows
# dot_precision; "tf32rn" rounds the operands to TF32 to nearest before a single-pass product (the tensor core
# otherwise truncates them, "tf32"). The default "auto" is "tf32rn" for bf16/fp16 inputs under the default
# dot_precision, and dot_precision otherwise (float32 inputs keep float32-grade products; a dot_precision other than
# the default, "tf32" or "ieee", is honoured everywhere -- passing "tf32x3" itself cannot be told from the default:
# for 3xTF32 throughout with 16-bit inputs set output_precision and the kernels' PREC to "tf32x3", docs/gdn.md §3). Why "tf32rn" for 16-bit inputs: replayed on the CPU first (experiments/gdn/fwd_error_sources.py,
# results/gdn/fwd_error_sources.json: o within the 5e-3 pin on all 14 bf16 arms), then on the H200 (4e002d7): the
# hybrid-tc ladder bf16 + fp16 28/28, every gradient bitwise the default's, o's worst bf16 error 3.30e-3 (unchanged;
# largest increase 2.3e-3 -> 2.7e-3), fp16 o at most 8.1e-4; the output kernel 64 wgmma, no spills, instead of 192 +
# 416 B spills; fwd+bwd 23.92 vs 25.78 ms at d_v 128, T 4k (results/native/profile, docs/native.md).
# what one kernel's tl.dot may run at (its PREC): tl.dot's own precisions, or single-pass TF32 on operands rounded to
# nearest first
KERNEL_PRECISIONS = (*DOT_PRECISIONS, "tf32rn")
OUTPUT_PRECISIONS = (None, "auto", *KERNEL_PRECISIONS)
OUTPUT_PRECISION_DEFAULT = "auto"


# The same rule for the other forward kernels, through the PREC of their launch entries. "auto" in A, W/U and the
# state scan since e746f01: the H200 ladders 28/28 (bf16 + fp16) at that commit, the worst arm unchanged; the price is
# TF32-grade forward intermediates and final state for 16-bit inputs (within 7e-4 of float64 instead of 3e-7; the
# ladder's stage rung, docs/gdn.md §4)
# (kernels/gdn/triton_fwd.FWD_LAUNCH): None follows dot_precision, "auto" is "tf32rn" for bf16/fp16 inputs under the
# default dot_precision, any of KERNEL_PRECISIONS is taken as given (an experiment's override applies to every input
# dtype). Which kernels are "auto", and the H200 ladders that decided it, are recorded in FWD_LAUNCH.
LAUNCH_PRECISIONS = (None, "auto", *KERNEL_PRECISIONS)


def resolve_precision(prec: str | None, dot_precision: str, sixteen_bit_inputs: bool) -> str:
    """The tl.dot precision a kernel runs at for its setting ``prec`` (one of LAUNCH_PRECISIONS), the forward's
    ``dot_precision`` and the inputs' dtype: "auto" -> "tf32rn" for 16-bit inputs under the default dot precision
    and ``dot_precision`` otherwise (float32 inputs keep float32-grade products; a dot_precision other than the
    default is honoured everywhere); None -> ``dot_precision``; anything else as given."""
    if prec not in LAUNCH_PRECISIONS:
        raise ValueError(f"a kernel precision must be one of {LAUNCH_PRECISIONS}, got {prec!r}")
    if prec == "auto":
        return "tf32rn" if sixteen_bit_inputs and dot_precision == DOT_PRECISION_DEFAULT else dot_precision
    return prec or dot_precision


def resolve_output_precision(output_precision: str | None, dot_precision: str, sixteen_bit_inputs: bool) -> str:
    """The output kernel's tl.dot precision for these options and inputs (see OUTPUT_PRECISIONS above)."""
    if output_precision not in OUTPUT_PRECISIONS:
        raise ValueError(f"output_precision must be one of {OUTPUT_PRECISIONS}, got {output_precision!r}")
    return resolve_precision(output_precision, dot_precision, sixteen_bit_inputs)


# Which kernels a scalar-gate KDA call (a per-head g [B, T, H]) runs on under the Triton-based backends: "auto" its
# own (kernels/gdn/scalar_gate.py: bf16 products of the raw inputs, the decays as [C, C] factors), "general" the
# general per-channel kernels (the control)
GATE_FORMS = ("auto", "general")
GATE_FORM_DEFAULT = "auto"
