"""The probe plan: which inputs every gate is graded on, derived deterministically from (reference, seed).

A probe is a named input set plus an action. Inputs are built by the reference process (the only place the
reference source is executed) from the reference's own ``get_inputs()`` and the seed, then shipped as arrays to
the candidate process, so the two processes see bit-identical inputs and the candidate never sees an output.

Shape variants follow the KernelBench convention: module-level integer constants (``batch_size``, ``dim``,
``N``...) that ``get_inputs`` reads are patched one at a time and ``get_inputs`` is re-run; a constant that
``get_init_inputs`` also reads is left alone, because changing it would change the model, not the input. When a
reference has no such constant, every occurrence of one dimension size across its floating inputs is replaced
instead (so the two K's of a matmul change together). The reference then decides which variants are valid: a
variant it cannot run is "na" for its gate, never a candidate failure.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from lethe.verifier import tolerance as tol

PLAN_VERSION = "lethe.plan/2"  # /2: the ORD-03 "offset" probe
NUMEL_CAP = 1 << 21  # elements per input tensor in any variant: keeps float64 reference runs in seconds
# The Triton CPU interpreter runs every program of the grid in Python: variants that multiply the grid by
# thousands would take minutes per probe, so a plan built for the interpreter caps the variants harder.
NUMEL_CAP_INTERPRET = 1 << 15
MAX_SHAPE_VARIANTS = 6
MAX_LONG_VARIANTS = 3
LONG_LEN = 4099  # a prime > 4096: fp16 running totals stall at 2048, bf16 at 256 (PRC-02)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
# ORD-03 "offset" probe (see offset_values / offset_condition): rows M + u, u uniform in [-1, 1).
OFFSET = 2.0**12  # M: (M/std(u))^2 * eps32 = 6 >> 1, so E[x^2] - E[x]^2 in fp32 is all rounding; M^2 << FMAX
OFFSET_DRAWS = 4  # eps-relative perturbations the reference is re-run on to measure its own sensitivity
# Shift invariance: |f(M + u) - f(u)| <= OFFSET_INVARIANCE_RTOL * (RMS of f(u)) in float64. Far above float64's
# rounding at this condition (~eps64 * M/std ~ 1e-12) and far below any real dependence on the offset.
OFFSET_INVARIANCE_RTOL = 1e-6


@dataclass(frozen=True)
class Probe:
    """One input set + action. ``kind`` names the input construction, ``patch`` the shape variant."""

    id: str
    kind: str
    gates: tuple[str, ...]
    action: str = "forward"  # forward | repeat | backward | overwrite
    dtype: str = "float32"
    patch: tuple[tuple[str, int], ...] = ()
    draw: int = 0  # which torch seed offset get_inputs() runs under
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    def rng_seed(self, seed: int) -> int:
        """Seed of this probe's private generator: depends on the plan seed and the probe id only, so filtering
        a plan (replaying one gate) does not change any probe's inputs."""
        return (seed * 1_000_003 + zlib.crc32(self.id.encode())) % (2**63 - 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gates"] = list(self.gates)
        d["patch"] = [list(p) for p in self.patch]
        return d


def _primes_around(v: int) -> list[int]:
    def is_prime(n: int) -> bool:
        return n >= 2 and all(n % k for k in range(2, int(n**0.5) + 1))

    out = []
    below = next((n for n in range(v - 1, 1, -1) if is_prime(n)), None)
    above = next(n for n in range(v + 1, 2 * v + 3) if is_prime(n))
    if below is not None and below >= 2:
        out.append(below)
    out.append(above)
    return out


def shape_globals(ns: dict) -> dict[str, int]:
    """Module-level int constants read by get_inputs but not by get_init_inputs (see module docstring)."""
    gi = ns.get("get_inputs")
    gii = ns.get("get_init_inputs")
    if gi is None or not hasattr(gi, "__code__"):
        return {}
    init_names = set(gii.__code__.co_names) if gii is not None and hasattr(gii, "__code__") else set()
    out = {}
    for name in gi.__code__.co_names:
        v = ns.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0 and name not in init_names:
            out[name] = v
    return dict(sorted(out.items()))


def call_get_inputs(ns: dict, seed: int, patch: tuple[tuple[str, int], ...]) -> list[Any]:
    """get_inputs() under ``torch.manual_seed(seed)`` with module globals (or dimension sizes) patched."""
    glob_patch = [(k, v) for k, v in patch if not k.startswith("__dim__")]
    dim_patch = {int(k.split(":")[1]): v for k, v in patch if k.startswith("__dim__")}
    saved = {k: ns[k] for k, _ in glob_patch}
    try:
        for k, v in glob_patch:
            ns[k] = v
        torch.manual_seed(seed)
        inputs = list(ns["get_inputs"]())
    finally:
        ns.update(saved)
    if dim_patch:
        gen = torch.Generator().manual_seed(seed)
        new = []
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                shape = [dim_patch.get(s, s) for s in x.shape]
                y = torch.randn(shape, generator=gen, dtype=x.dtype)
                new.append(y.abs() if bool((x >= 0).all()) else y)
            else:
                new.append(x)
        inputs = new
    return inputs


def variant_numel(ns: dict, patch: tuple[tuple[str, int], ...], base_shapes: list[tuple[int, ...]]) -> int | None:
    """Largest input numel of a shape variant, found without allocating: get_inputs() runs on the meta
    device (a global can enter several dimensions, e.g. an image's height and width, so scaling is not
    linear). None when the variant cannot even be shaped."""
    dim_patch = {int(k.split(":")[1]): v for k, v in patch if k.startswith("__dim__")}
    if dim_patch:
        return max((int(torch.Size([dim_patch.get(d, d) for d in s]).numel()) for s in base_shapes), default=1)
    try:
        with torch.device("meta"):
            xs = call_get_inputs(ns, 0, patch)
    except Exception:  # noqa: BLE001 - an unshapeable variant is simply not planned
        return None
    return max((int(x.numel()) for x in xs if isinstance(x, torch.Tensor)), default=1)


def build_plan(ns: dict, seed: int, *, interpret: bool = False) -> list[Probe]:
    """The full, ordered probe list for a reference namespace. Pure in (ns source, seed)."""
    base = call_get_inputs(ns, seed, ())
    float_shapes = [tuple(x.shape) for x in base if isinstance(x, torch.Tensor) and x.is_floating_point()]
    cap = NUMEL_CAP_INTERPRET if interpret else NUMEL_CAP

    P: list[Probe] = [
        Probe("rand0", "rand", ("CMP-01", "CMP-03", "PRC-01", "RES-01"), draw=0),
        Probe("rand1", "rand", ("CMP-01",), draw=1),
        Probe("rand2", "rand", ("CMP-01",), draw=2),
        Probe("zeros", "zeros", ("CMP-01",)),
        Probe("large", "large", ("CMP-01",)),
        Probe("small", "small", ("CMP-01",)),
        Probe("subnormal", "subnormal", ("CMP-01", "EXC-02")),
        Probe("nonfinite", "nonfinite", ("EXC-01",)),
        Probe("repeat", "rand", ("ORD-02",), action="repeat", draw=0),
        Probe("overwrite", "rand", ("ORD-02",), action="overwrite", draw=0),
        Probe("grad", "rand", ("CMP-02",), action="backward", draw=0),
        Probe("ord01", "positive", ("ORD-01",)),
        Probe("cancel", "cancel", ("ORD-03",)),
        Probe("offset", "offset", ("ORD-03",)),
        Probe("prc_fp16", "rand", ("PRC-01", "RES-01"), dtype="float16", draw=0),
        Probe("prc_bf16", "rand", ("PRC-01", "RES-01"), dtype="bfloat16", draw=0),
        Probe("acc_fp16", "ones", ("PRC-02",), dtype="float16"),
        Probe("acc_bf16", "ones", ("PRC-02",), dtype="bfloat16"),
        Probe("accb_fp16", "accum", ("PRC-02",), dtype="float16"),
        Probe("accb_bf16", "accum", ("PRC-02",), dtype="bfloat16"),
    ]

    globs = shape_globals(ns)
    if globs:
        knobs = [(name, v) for name, v in globs.items()]
    else:
        sizes = sorted({s for shp in float_shapes for s in shp if s >= 2})
        knobs = [(f"__dim__:{s}", s) for s in sizes]

    n_shape = 0
    for name, v in knobs:
        for nv in _primes_around(v):
            if n_shape >= MAX_SHAPE_VARIANTS:
                break
            numel = variant_numel(ns, ((name, nv),), float_shapes)
            if numel is None or numel > cap:
                continue
            label = name.replace("__dim__:", "dim")
            P.append(Probe(f"shape_{label}={nv}", "rand", ("CMP-03",), patch=((name, nv),), draw=3))
            n_shape += 1

    n_long = 0
    for name, v in knobs:
        if n_long >= MAX_LONG_VARIANTS or v >= LONG_LEN:
            continue
        numel = variant_numel(ns, ((name, LONG_LEN),), float_shapes)
        if numel is None or numel > cap:
            continue
        label = name.replace("__dim__:", "dim")
        patch = ((name, LONG_LEN),)
        P += [
            Probe(f"long_{label}", "rand", ("CMP-01",), patch=patch, draw=4),
            Probe(f"ord01_{label}", "positive", ("ORD-01",), patch=patch),
            Probe(f"cancel_{label}", "cancel", ("ORD-03",), patch=patch),
            Probe(f"acc_fp16_{label}", "ones", ("PRC-02",), dtype="float16", patch=patch),
            Probe(f"acc_bf16_{label}", "ones", ("PRC-02",), dtype="bfloat16", patch=patch),
            Probe(f"accb_fp16_{label}", "accum", ("PRC-02",), dtype="float16", patch=patch),
            Probe(f"accb_bf16_{label}", "accum", ("PRC-02",), dtype="bfloat16", patch=patch),
        ]
        n_long += 1
    return P


def make_inputs(ns: dict, probe: Probe, seed: int) -> list[Any]:
    """Materialise a probe's inputs in the probe's dtype (floating tensors only; others untouched)."""
    raw = call_get_inputs(ns, seed + probe.draw, probe.patch)
    gen = torch.Generator().manual_seed(probe.rng_seed(seed))
    d = probe.dtype
    tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[d]
    out: list[Any] = []
    first_float = True
    for x in raw:
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            out.append(x)
            continue
        shape = x.shape
        k = probe.kind
        if k == "rand":
            y = x.to(torch.float64)
        elif k == "zeros":
            y = torch.zeros(shape, dtype=torch.float64)
        elif k == "large":
            y = torch.randn(shape, generator=gen, dtype=torch.float64) * tol.LARGE[d]
        elif k == "small":
            y = torch.randn(shape, generator=gen, dtype=torch.float64) * tol.SMALL
        elif k == "subnormal":
            # Strictly below the smallest normal (2^-126 for fp32 = 1.175494e-38, which is itself NORMAL):
            # magnitudes in [tiny/64, tiny/2), random signs, never zero.
            mag = tol.TINY[d] * (torch.rand(shape, generator=gen, dtype=torch.float64) * (0.5 - 1 / 64) + 1 / 64)
            sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
            y = mag * sign
        elif k == "positive":
            y = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.5 + 0.5
        elif k == "ones":
            # a serial 16-bit running total of ones stalls at 2048 (fp16) / 256 (bf16); a scan's outputs carry
            # the stall too (the bracketed "accum" rows cannot grade a scan: its outputs hold B)
            y = torch.ones(shape, dtype=torch.float64)
        elif k == "accum":
            # Only the first floating input carries the bracketed corners (as for "cancel"); the others are ones,
            # so every product with it is exact.
            y = accumulation_values(shape) if first_float else torch.ones(shape, dtype=torch.float64)
        elif k == "cancel":
            # Only the first floating input carries the +B/-B pair: it is the operand whose last axis is
            # reduced in the common layouts (x for row reductions, A for A @ B); putting B in every operand
            # would multiply B by B and test dynamic range instead of order.
            y = cancellation_values(shape, gen, d) if first_float else torch.rand(shape, generator=gen,
                                                                                   dtype=torch.float64) + 0.5
        elif k == "offset":
            # Only the first floating input is offset (the operand a normalisation centres); the others keep
            # the reference's own draw (affine weights, a second operand): they are valid inputs by definition.
            y = offset_values(shape, gen) if first_float else x.to(torch.float64)
        elif k == "nonfinite":
            y = torch.randn(shape, generator=gen, dtype=torch.float64)
            if first_float and y.numel() > 0:
                flat = y.view(-1)
                pos = torch.randperm(flat.numel(), generator=gen)[:3]
                specials = [float("nan"), float("inf"), float("-inf")]
                for p, v in zip(pos.tolist(), specials, strict=False):
                    flat[p] = v
        else:  # pragma: no cover - plan and builder are written together
            raise ValueError(f"unknown probe kind {k}")
        out.append(y.to(tdt))
        first_float = False
    return out


# PRC-02 "accum" probe (see accumulation_values): corner magnitude and small value, exact in fp16 and bf16.
ACC_BIG = 2.0**7
ACC_SMALL = 2.0**-14


def accumulation_values(shape) -> torch.Tensor:
    """PRC-02 input: ACC_SMALL = 2^-14 everywhere, plus ACC_BIG * prod_a t(i_a) at the corners, with t(0) = +1,
    t(n_a - 1) = -1 and t = 0 in between along every axis of length >= 3 (t = 1 on shorter axes).

    Every line through two corners, along any axis, is then +B, v, ..., v, -B (B = 2^7, v = 2^-14), and the
    corners of any plane alternate in sign, so whichever axes a kernel reduces, some of its outputs sum such a
    row, whose exact value is the small terms' total (~N v). The values are exact in fp16 and bf16, |x| <= B
    keeps x^2 (and a sum of two squares) inside fp16's range, and v is fp16's smallest normal, so no input is
    subnormal.

    Why it exposes a running total narrower than fp32 whatever its block size. A kernel that sums blocks of B_k
    terms at fp32 and adds the block sums into a 16-bit total holds ~B in that total from the first block on;
    half an ulp of B = 2^7 is 2^-4 in fp16 and 2^-1 in bf16, and a block sum of small terms is B_k * 2^-14, so
    every block sum is rounded away while B_k <= 2^10 (fp16; ties round to B's even significand) or B_k <=
    2^13 (bf16): the row comes out as 0, or as the last block's terms, instead of ~N v. An fp32 total is exact
    in every order: every partial sum is a multiple of 2^-14 below 2^10, which fp32's 24 bits represent. At the
    4099-long variants that covers fp16 block sizes up to 1024 (larger blocks leave at most four block sums,
    whose rounding is within the output's own fp16 rounding and the tolerance) and every bf16 block size below
    the row length; a plain ones input, by contrast, is summed exactly by an fp16 total of any block of 32 or
    more (power-of-two block sums stay multiples of the total's ulp below 65504).
    """
    y = torch.full(tuple(shape), ACC_SMALL, dtype=torch.float64)
    if len(shape) == 0 or y.numel() == 0:  # nothing to bracket
        return y
    corner = torch.ones((), dtype=torch.float64)
    for a, n in enumerate(shape):
        t = torch.ones(n, dtype=torch.float64)
        if n >= 3:
            t = torch.zeros(n, dtype=torch.float64)
            t[0], t[-1] = 1.0, -1.0
        view = [1] * len(shape)
        view[a] = n
        corner = corner * t.reshape(view)
    return torch.where(corner != 0, ACC_BIG * corner, y)


# ORD-03 "cancel" probe (see cancellation_values): the magnitude of the +B/-B pair bracketing the small terms.
CANCEL_BIG = 2.0**14


def cancellation_values(shape, gen: torch.Generator, dtype: str = "float32") -> torch.Tensor:
    """Cancellation along the last axis: +B first, -B last, small terms in [0.5, 1.5) between, B = CANCEL_BIG.

    While a running total holds B, every small term is added to a number 2^14 times its own size. In an
    accumulator of p mantissa bits that addition keeps the term only if it exceeds half an ulp of B,
    B * 2^-p: with fp32 (p = 23) half an ulp is 2^-10, so a total of any order keeps every term to ~2^-10 and
    tolerance.ord03_bound -- the worst case of fp32 summation in *any* order, blocked or serial, with any block
    structure -- holds by construction; with fp16 or TF32 (p = 10) half an ulp is 8 and with bf16 (p = 7) 64, so
    a running total kept in any of them rounds every term (products of the other operand's U[0.5, 1.5) values
    included, < 2.25) away and returns ~0 instead of sum(small) ~ N. B = 2^14 is the smallest power of two at
    which half an fp16/TF32 ulp exceeds twice the largest product (2^13 would keep some), it is exact in every
    dtype and fp16's range holds B plus any partial sum of the probe (< 65504). ``dtype`` is the probe dtype
    (accepted for symmetry with the other constructors; the construction does not depend on it).
    """
    y = torch.rand(shape, generator=gen, dtype=torch.float64) + 0.5
    if len(shape) == 0 or shape[-1] < 3:
        return y
    y[..., 0] = CANCEL_BIG
    y[..., -1] = -CANCEL_BIG
    return y


def offset_values(shape, gen: torch.Generator) -> torch.Tensor:
    """ORD-03 offset rows: M + u with M = OFFSET = 2^12 and u uniform in [-1, 1) (std 0.58), float64.

    A row whose mean is large against its spread is the input on which the one-pass variance E[x^2] - E[x]^2
    cancels catastrophically: in fp32, E[x^2] ~ 2^24 is rounded to a multiple of ulp(2^24) = 2 while the
    variance is 1/3. Operators that centre their input (two-pass or Welford variance, max-subtracted softmax)
    are unaffected beyond the condition of the problem, which the reference measures (:func:`offset_condition`).
    M stays far from overflow: M^2 * N < 2^45 for N < 2^21, and the fp32 ulp of M (2^-11) still resolves u.
    """
    return OFFSET + (torch.rand(shape, generator=gen, dtype=torch.float64) * 2.0 - 1.0)


def offset_condition(run, x64: list[Any], outs: list[torch.Tensor], probe: Probe, seed: int) -> dict:
    """Applicability and conditioning of the ORD-03 offset probe, measured on the float64 reference.

    ``run(*inputs)`` returns the reference's flattened outputs; ``x64`` are the probe inputs in float64 (the first
    floating one offset by OFFSET) and ``outs`` the reference's outputs on them. Pure in (reference, probe, seed).

    1. Applicability: the probe is meaningful only for an operator that is invariant to the offset, i.e. one whose
       reduction centres or normalises its input (layer/batch/group/instance norm, softmax, log-softmax,
       cross-entropy, variance). There the offset changes nothing mathematically and only exposes algorithms that
       are not backward stable. For any other operator (a sum, a matmul, a scan, attention's Q) the output scales
       with M, and the cancellation probe already covers its order. The reference is run once more on the input
       with the offset removed; the probe applies when every output agrees within OFFSET_INVARIANCE_RTOL (integer
       outputs exactly). ``{"applies": False, "reason": ...}`` otherwise (the probe is then "na").
    2. Sensitivity (:func:`eps_sensitivity`): the reference is re-run on OFFSET_DRAWS inputs perturbed
       elementwise by one relative eps of the probe dtype, with signs drawn from this probe's own generator.
       ``sens[k]`` = max over draws of |f(x') - f(x)| for floating output k (None otherwise);
       tolerance.ord03_offset_bound turns it into the bound.
    """
    def clone(xs):
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]

    first = next((j for j, x in enumerate(x64) if isinstance(x, torch.Tensor) and x.is_floating_point()), None)
    if first is None:
        return {"applies": False, "reason": "offset probe: no floating input to offset"}
    floats = [o.is_floating_point() for o in outs]
    if not any(floats):
        return {"applies": False, "reason": "offset probe: no floating output to grade"}
    centred = clone(x64)
    centred[first] = centred[first] - OFFSET  # exact: the fp32-rounded values are representable after the shift
    with torch.no_grad():
        back = [o.detach() for o in run(*centred)]
    dev = 0.0
    if len(back) != len(outs) or any(a.shape != b.shape or a.dtype != b.dtype
                                     for a, b in zip(back, outs, strict=True)):
        return {"applies": False, "reason": "offset probe: removing the offset changes the outputs' shapes"}
    for a, b, fl in zip(outs, back, floats, strict=True):
        if not fl:
            if not torch.equal(a, b):
                return {"applies": False, "reason": "offset probe: an integer output depends on the offset"}
            continue
        scale = float(b.pow(2).mean().sqrt()) if b.numel() else 0.0
        diff = (a - b).abs()
        d = float(diff.max()) if diff.numel() else 0.0
        if not math.isfinite(d) or not math.isfinite(scale):
            return {"applies": False, "reason": "offset probe: the reference is not finite on offset or centred rows"}
        rel = d / scale if scale > 0 else (0.0 if d == 0 else math.inf)
        dev = max(dev, rel)
    if dev > OFFSET_INVARIANCE_RTOL:
        return {"applies": False, "invariance_dev": dev,
                "reason": f"offset probe applies to shift-invariant operators only (output moves by {dev:.3g} "
                          f"relative when the offset {OFFSET:g} is removed); the cancel probe covers this one"}
    gen = torch.Generator().manual_seed(probe.rng_seed(seed) + 2)
    try:
        sens = eps_sensitivity(run, x64, outs, tol.EPS[probe.dtype], gen)
    except ValueError as exc:
        return {"applies": False, "reason": f"offset probe: {exc}"}
    return {"applies": True, "sens": sens, "invariance_dev": dev, "offset": OFFSET, "draws": OFFSET_DRAWS}


def eps_sensitivity(run, x64: list[Any], outs: list[torch.Tensor], e: float, gen: torch.Generator,
                    draws: int = OFFSET_DRAWS) -> list[torch.Tensor | None]:
    """Per-element sensitivity of a float64 operator to relative input perturbations of size ``e``.

    Every floating input x becomes x * (1 + e * d), d in {-1, +1}^shape from ``gen``; the result for floating
    output k is max over ``draws`` draws of |f(x') - f(x)| (None for other outputs). Random signs rather than d
    uniform in [-1, 1] keep each element's own perturbation at full size, so the per-element maximum does not
    collapse by chance. Raises ValueError when a perturbed input changes the output shapes or makes an output
    non-finite (no finite sensitivity to report).
    """
    floats = [o.is_floating_point() for o in outs]
    sens = [torch.zeros_like(o) if fl else None for o, fl in zip(outs, floats, strict=True)]
    for _ in range(draws):
        pert = []
        for x in x64:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                d = torch.where(torch.rand(x.shape, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
                pert.append(x * (1.0 + e * d))
            else:
                pert.append(x.clone() if isinstance(x, torch.Tensor) else x)
        with torch.no_grad():
            po = [o.detach() for o in run(*pert)]
        if len(po) != len(outs) or any(a.shape != b.shape for a, b in zip(po, outs, strict=True)):
            raise ValueError("a perturbed input changes the outputs' shapes")
        for k, fl in enumerate(floats):
            if not fl:
                continue
            diff = (po[k] - outs[k]).abs()
            if not bool(torch.isfinite(diff).all()):
                raise ValueError("the reference is not finite on eps-perturbed inputs")
            sens[k] = torch.maximum(sens[k], diff)
    return sens
