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
# the states and delta, and recomputes the rest -- so their precision is a knob of its own; None follows
# dot_precision. Replayed on the CPU (experiments/gdn/fwd_error_sources.py, results/gdn/fwd_error_sources.json):
# single-pass TF32 there adds at most 2.1e-3 to o's error, and the H200 default's o error plus that stays under the
# 5e-3 pin on all 14 bf16 ladder arms (worst 4.58e-3). "tf32rn" rounds the operands to TF32 to nearest before the
# single-pass product (the tensor core otherwise truncates them): about a third of that error (7.6e-4 at most).
# Neither has run through the ladder on a GPU: not the default.
OUTPUT_PRECISIONS = (None, *DOT_PRECISIONS, "tf32rn")
OUTPUT_PRECISION_DEFAULT = None
