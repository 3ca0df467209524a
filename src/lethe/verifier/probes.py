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

Which variants are run is decided per problem, at every size, by a cost model (:class:`Budget`,
:func:`forward_cost`, :class:`_Coster`): the reference's float64 forward is traced on the meta device (nothing
is computed), counting FLOPs, bytes moved and the peak working set, at the base shape and at one smaller size
per knob, and each variant's cost is extrapolated from the two; a variant runs when it fits a budget
proportional to the base forward's own estimated cost, and a variant that does not fit is kept in the plan as a
skipped probe whose reason gives the estimate and the budget (:attr:`Probe.skip`), so a gate that ends "na"
says exactly why.
"""

from __future__ import annotations

import contextlib
import math
import weakref
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lethe.verifier import tolerance as tol
from lethe.verifier.battery import PLAN_VERSION, REF_RESULT_MB  # noqa: F401 - probes.PLAN_VERSION stays valid

# The Triton CPU interpreter runs every program of the grid in Python, so there the candidate, not the float64
# reference, is the expensive side (Budget.interpret_mult states the rule).
NUMEL_CAP_INTERPRET = 1 << 15
MAX_SHAPE_VARIANTS = 9  # admitted CMP-03 variants: three per knob for three knobs, one per knob for nine
MAX_LONG_VARIANTS = 3
SHAPE_PRIORITY = ("above", "half", "below")  # the order shape variants are admitted in (build_plan)
LONG_LEN = 4099  # a prime > 4096: fp16 running totals stall at 2048, bf16 at 256 (PRC-02)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
# ORD-03 "offset" probe (see offset_values / offset_condition): rows M + u, u uniform in [-1, 1).
OFFSET = 2.0**12  # M: (M/std(u))^2 * eps32 = 6 >> 1, so E[x^2] - E[x]^2 in fp32 is all rounding; M^2 << FMAX
OFFSET_DRAWS = 4  # eps-relative perturbations the reference is re-run on to measure its own sensitivity
FD_POSITIONS = 4  # input positions of the backward probe's central-difference check of the float64 gradient
# Shift invariance: |f(M + u) - f(u)| <= OFFSET_INVARIANCE_RTOL * (RMS of f(u)) in float64. Far above float64's
# rounding at this condition (~eps64 * M/std ~ 1e-12) and far below any real dependence on the offset.
OFFSET_INVARIANCE_RTOL = 1e-6


@dataclass(frozen=True)
class Budget:
    """How much the probes away from the base shape may cost one problem, and the cost model behind it.

    Why a budget and not an element cap: KernelBench's own sizes (a 4096 x 4096 matmul, 16 x 64 x 256 x 256
    norms) are far above any cap that keeps the smallest problems fast, and a cap silently removes exactly the
    probes (shape variants, long axes) that catch hard-coded shapes. The base shape is graded on some thirty
    float64 forwards anyway (draws, adversarial values, precisions, gradients, finite differences, ORD-03), so
    variants that together cost a few more base forwards keep a verification's cost proportional to the
    problem's own at every size.

    Cost model. The reference's float64 forward is traced on the meta device (:func:`forward_cost`): FLOPs of
    the matmul / convolution / attention class (``torch.utils.flop_counter``) and bytes read and written by every
    operator, the peak of the float64 tensors alive at once plus inputs and parameters; a variant's counts are
    extrapolated from the base and one smaller traced size of its knob (:class:`_Coster`). Estimated seconds
    = flops / ``flop_rate`` + bytes / ``byte_rate``. The rates are the slowest float64 rates of one thread of
    the CI machine class (the reference process runs one thread): direct float64 convolution for FLOPs (GEMM
    runs several times faster), element-wise operators for bytes, counted as bytes in plus bytes out. They are
    fixed constants, not measured at run time, so the plan (and the verdict row) is the same on every machine:
    the seconds are an estimate, approximate by a small factor, never a measurement.

    Rules, applied to each variant in admission order (the first that fails gives the skip reason):

    * Triton CPU interpreter (the candidate is interpreted): a variant's largest input may have at most
      max(``interpret_numel``, ``interpret_mult`` x the base's largest input) elements. The interpreter's cost
      is its grid, linear in the elements; the base already runs about twenty times, so variants near the
      base's size are affordable and a long axis that multiplies the grid by hundreds is not;
    * memory: the variant's estimated peak <= min(``mem_ceiling_mb``, max(``mem_floor_mb``, ``mem_mult`` x the
      base forward's)). The multiplier admits every near-original variant (a knob of 1 -> 2 doubles the input
      at most); the ceiling is half the candidate sandbox's default 8 GiB, which also holds the inputs and
      outputs of every probe;
    * time: the variants of one pool (CMP-03 shape variants; long-axis variants, each costing one forward per
      probe and two for ``cancel``) together <= max(``floor_s``, ``base_mult`` x the base forward's estimated
      seconds). The multiplier is the rule for big problems: a 4096 x 4096 matmul gets its near-original and
      half-size variants and is refused a 4099-long axis on a second knob with the estimate. The floor is the
      rule for small ones, whose long axis multiplies a cheap base by hundreds or thousands (a batch of 16 or a
      recurrence over 64 steps set to 4099) and still costs less than a minute of estimated reference time;
      it keeps the long-axis probes that the repository's own small problems (the GDN recurrences among them)
      have always run;
    * returned arrays: the reference process sends every probe's arrays back in one result file, which the
      sandbox caps (``result_mb``: the reference's ``max_file_mb``, ``REF_RESULT_MB``). The base-shape probes
      come first: each returns its inputs, float64 outputs and conditioning spreads (:func:`returned_bytes`),
      and when they do not all fit (KernelBench's largest inputs) they are admitted one per gate first, within
      ``result_mb`` (:func:`_admit_base`; the refused ones are skipped with the estimate). All admitted variants
      (both pools) together return at most min(``held_mb``, ``result_mb`` - what the admitted base probes
      return): a variant must never turn a verification that fits into one that cannot return its result. The
      plan does not depend on a gate filter, so a CMP-03-only run gets the variants a full run would.
    """

    flop_rate: float = 2.5e9
    byte_rate: float = 1.0e9
    base_mult: float = 8.0
    floor_s: float = 60.0
    mem_floor_mb: float = 1024.0
    mem_mult: float = 2.0
    mem_ceiling_mb: float = 4096.0
    held_mb: float = 2048.0
    result_mb: float = float(REF_RESULT_MB)  # the bracketed and long PRC-02 rows make a big problem's base probes ~4 GB
    interpret_numel: int = NUMEL_CAP_INTERPRET
    interpret_mult: float = 1.25


BUDGET = Budget()


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
    # Non-empty: the plan keeps the probe but it is not run, and this says why (over the per-problem budget,
    # the interpreter rule, a shape the reference cannot build); its gates see it as "na" with this reason.
    skip: str = ""

    def rng_seed(self, seed: int) -> int:
        """Seed of this probe's private generator: depends on the plan seed and the probe id only, so filtering
        a plan (replaying one gate) does not change any probe's inputs."""
        return (seed * 1_000_003 + zlib.crc32(self.id.encode())) % (2**63 - 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["gates"] = list(self.gates)
        d["patch"] = [list(p) for p in self.patch]
        return d


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % k for k in range(2, math.isqrt(n) + 1))


def shape_values(v: int) -> list[tuple[str, int]]:
    """The sizes a shape knob of value ``v`` is set to, by tier: ``below`` (the largest prime < v), ``above``
    (the smallest prime > v), ``half`` (the largest prime <= v // 2, when below ``below``).

    Primes are multiples of no block size, so a kernel that drops the tail of a BLOCK-sized loop, or that only
    handles multiples of its tile, fails on every one of them. ``below`` and ``above`` sit next to the original:
    a kernel that hard-codes the original size pads or reads past a smaller input and slices or ignores the
    tail of a larger one, and both are one size away from the shape it was tested at. ``half`` is the
    affordable variant of a big problem (about half its cost or less), so a knob keeps a variant even when the
    budget refuses the near-original ones.
    """
    out = []
    below = next((n for n in range(v - 1, 1, -1) if _is_prime(n)), None)
    if below is not None:
        out.append(("below", below))
    out.append(("above", next(n for n in range(v + 1, 2 * v + 3) if _is_prime(n))))
    half = next((n for n in range(v // 2, 1, -1) if _is_prime(n)), None)
    if half is not None and below is not None and half < below:
        out.append(("half", half))
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


@dataclass(frozen=True)
class Cost:
    """Estimated cost of one float64 forward of the reference (the model of :class:`Budget`)."""

    flops: int  # matmul / convolution / attention class, as torch.utils.flop_counter counts them
    moved: int  # bytes read and written by every non-view operator
    peak: int  # bytes: the most float64 intermediates alive at once, plus inputs and parameters
    seconds: float
    how: str  # "traced" on the meta device, or how the estimate was scaled when the reference cannot be traced
    out: int = 0  # bytes of the float64 outputs, which the reference returns for every probe

    @property
    def mb(self) -> float:
        return self.peak / 2**20


class _Work(TorchDispatchMode):
    """Counts, for every operator a forward dispatches: FLOPs of the operators torch's FLOP counter has a formula
    for (matmul, convolution, attention: ``torch.utils.flop_counter.flop_registry``; composite operators such as
    linear or einsum arrive here already decomposed into them), bytes read and written by every non-view
    operator, and the peak bytes of the tensors the operators created that are alive at once (an output that
    aliases an input -- a view, an in-place result -- allocates nothing). torch's own FlopCounterMode is not
    used: entering it imports torch._dynamo, seconds in every reference process."""

    _ops: dict = {}  # operator -> (FLOP formula or None, is a view, aliases an input): shared, immutable facts

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # No torch.compile runs under this mode, so its __torch_dispatch__ needs no dynamo-disable wrapper; the
        # wrapper would import torch._dynamo on first use.
        return False

    def __init__(self):
        super().__init__()
        self.flops = 0
        self.moved = 0
        self.live = 0
        self.peak = 0
        self._refs: dict[int, tuple[weakref.ref, int]] = {}

    def _gone(self, ref: weakref.ref) -> None:
        self.live -= self._refs.pop(id(ref))[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        facts = self._ops.get(func)
        if facts is None:
            # Imported here, not at module level: torch.utils.flop_counter imports triton, and a process that
            # imports triton before it sets TRITON_INTERPRET gets compiled, not interpreted, kernels.
            from torch.utils.flop_counter import flop_registry

            facts = self._ops[func] = (flop_registry.get(func.overloadpacket), func.is_view,
                                       any(r.alias_info is not None for r in func._schema.returns))
        formula, view, alias = facts
        out = func(*args, **kwargs)
        if formula is not None:
            self.flops += int(formula(*args, **kwargs, out_val=out))
        if view:
            return out
        outs = _tensors(out)
        self.moved += sum(t.nbytes for t in _tensors(args)) + sum(t.nbytes for t in _tensors(list(kwargs.values())))
        self.moved += sum(t.nbytes for t in outs)
        if not alias:
            for t in outs:
                ref = weakref.ref(t, self._gone)
                self._refs[id(ref)] = (ref, t.nbytes)
                self.live += t.nbytes
            self.peak = max(self.peak, self.live)
        return out


def _tensors(x) -> list[torch.Tensor]:
    """The tensors in an operator's arguments or results (nested lists and tuples)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return []


def forward_cost(model: torch.nn.Module, inputs: list[Any], budget: Budget = BUDGET) -> Cost:
    """Trace one forward of ``model`` on ``inputs`` (float64; on the meta device nothing is computed) and price
    it with ``budget``'s rates. Raises whatever the forward raises."""
    meta = any(isinstance(x, torch.Tensor) and x.is_meta for x in inputs)
    fixed = sum(t.nbytes for t in list(model.parameters()) + list(model.buffers()))
    fixed += sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor))
    work = _Work()
    with torch.no_grad(), (torch.device("meta") if meta else contextlib.nullcontext()), work:
        out = model(*inputs)
    out_bytes = sum(t.numel() * 8 for t in _tensors(out))
    del out
    return Cost(work.flops, work.moved, fixed + work.peak, _seconds(work.flops, work.moved, budget), "traced",
                out_bytes)


def shipped_bytes(inputs: list[Any], cost: Cost, probe: Probe | None = None) -> int:
    """Bytes the reference returns for one probe of these inputs (float64 meta tensors) and this cost: its inputs
    in the probe's dtype (fp32 for a variant: the widest) and its float64 outputs, plus what the probe's action
    adds (reference.run_reference): the fp32 upstream gradients and float64 input gradients of ``backward``, the
    second inputs of ``overwrite``, the flush-to-zero outputs of ``subnormal``."""
    width = 2 if probe is not None and probe.dtype in ("float16", "bfloat16") else 4
    floats = sum(x.numel() for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point())
    others = sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor) and not x.is_floating_point())
    n = floats * width + others + cost.out
    if probe is not None and probe.action == "backward":
        n += cost.out // 2 + floats * 8
    if probe is not None and probe.action == "overwrite":
        n += floats * width + others
    if probe is not None and probe.kind == "subnormal":
        n += cost.out
    return n


# Perturbed re-runs per probe for the conditioning floor (tolerance.cond_floor, reference.conditioning_spread):
# COND_PAIRS fresh sets of independent signs d, each run as +d and as -d (an antithetic pair), so 2 * COND_PAIRS
# re-runs; the per-element maximum over them is what the gates read. Why pairs: behind a one-sided operator
# (relu, clamp, max) of a value that is exactly at the kink -- relu of the mean of group-normalised values,
# exactly 0 -- a single draw moves the value to the flat side half of the time and shows no spread at all; with
# +d and -d one of the two lands on the sloped side wherever the first-order change is non-zero.
COND_PAIRS = 2
COND_DRAWS = 2 * COND_PAIRS
# The backward probe's gradient spreads take twice the pairs: they also move every stored input gradient of a leaf
# (reference._PerturbedRun), and where a gradient is exactly 0 in exact arithmetic (a bias in front of a
# mean-removing norm) the floor is its whole bound, so a maximum over two pairs falls below an honest fp32 residue
# on some elements (the gemm -> batch norm of tests/verifier/test_reference.py, over a dozen seeds: two of them with
# two pairs); four pairs keep it under.
GRAD_COND_PAIRS = 2 * COND_PAIRS
GRAD_COND_DRAWS = 2 * GRAD_COND_PAIRS
# ORD-03's cancellation probe adds one antithetic pair of the any-order layer model (reference._LayerRoundingRun)
LAYER_DRAWS = 2
# PRC-02's half-precision probes add one antithetic pair of the storage model (reference._StoreRoundingRun)
STORE_DRAWS = 2
HALF_DTYPES = ("float16", "bfloat16")


def stores_in_dtype(probe: "Probe") -> bool:
    """Whether the reference measures the storage model's spread (reference._StoreRoundingRun) on ``probe``: a
    forward PRC-02 probe in a 16-bit dtype. Why only there: run in its data dtype, the reference's own code stores
    every operator's result in that dtype, and PRC-02's rows are built to make such a result large (2^7 |w|
    after a gemm) and cancel it later; the contract's fp32 accumulator says nothing about those stores."""
    return probe.action == "forward" and "PRC-02" in probe.gates and probe.dtype in HALF_DTYPES


def extra_draws(probe: "Probe") -> int:
    """The reference forwards a floor-measuring probe runs beyond COND_DRAWS: the layer model's on ORD-03's
    cancellation rows, the storage model's on PRC-02's half-precision rows."""
    return (LAYER_DRAWS if probe.kind == "cancel" else 0) + (STORE_DRAWS if stores_in_dtype(probe) else 0)

#: The value gates whose bound is raised to the conditioning floor where the reference measured one. Every one
#: of them grades outputs against a bound scaled by the output; an ill-conditioned output (a norm of a constant
#: channel, a batch norm over two samples, a convolution cancelled by an add) carries an honest fp32 error far
#: above that scale on any of their probes, and the floor -- a measurement of the problem, not a constant --
#: stays about half of each bound's own term on well-conditioned outputs, so no defect a gate exists for hides
#: under it (tolerance module docstring, "Conditioning").
FLOOR_GATES = frozenset({"CMP-01", "CMP-03", "ORD-01", "ORD-03", "PRC-01", "PRC-02", "EXC-01", "EXC-02"})


def measures_floor(probe: Probe) -> bool:
    """Whether the reference measures the conditioning spread of ``probe``'s outputs: every forward probe of a
    FLOOR_GATES gate, at the base shape and on the long-axis variants (where a reduction's length, and with it
    the amplification of a norm's statistics, is largest), but not the CMP-03 shape variants. Those are
    admitted one forward each under the per-problem budget (:func:`plan`); COND_DRAWS more forwards each would
    cost them the variants at KernelBench's sizes that catch hard-coded shapes, so CMP-03 grades them with its
    own bound alone unless the base probe shows the problem ill-conditioned (reference.ill_conditioned: then
    they measure an optional, budgeted floor). The long-axis groups are charged the floor's forwards when they
    are admitted. (The
    backward probe's gradient spreads are measured for CMP-02 apart, reference.conditioning_spread with
    upstream gradients.)"""
    if probe.action != "forward" or not FLOOR_GATES.intersection(probe.gates):
        return False
    return not is_shape_variant(probe)


def is_shape_variant(probe: Probe) -> bool:
    """A CMP-03 shape variant (a forward probe at a patched shape graded by CMP-03 alone)."""
    return probe.action == "forward" and bool(probe.patch) and tuple(probe.gates) == ("CMP-03",)


def returned_bytes(inputs: list[Any], cost: Cost, probe: Probe) -> int:
    """Everything one probe of these inputs puts in the reference's result: :func:`shipped_bytes` plus the
    conditioning spreads (reference.conditioning_spread: float64, one per floating output of a forward probe
    that :func:`measures_floor`, one per floating input's gradient of the backward probe)."""
    n = shipped_bytes(inputs, cost, probe)
    if probe.action == "backward":
        n += 8 * sum(x.numel() for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point())
    elif measures_floor(probe):
        n += cost.out
    return n


# The order in which the base-shape probes are admitted when their arrays do not all fit the result file: one
# probe for every gate first, the gates whose probe returns least first (rand0 also anchors the row), then the
# rest in plan order.
BASE_PRIORITY = ("rand0", "nonfinite", "repeat", "ord01", "cancel", "acc_fp16", "prc_fp16", "grad", "accb_fp16",
                 "subnormal")


def _admit_base(P: list[Probe], coster: _Coster, budget: Budget) -> list[Probe]:
    """The base-shape probes, each admitted (in BASE_PRIORITY order, then plan order) while the arrays of all
    admitted ones fit the reference's result file (``budget.result_mb``); a refused one stays in the plan with
    its reason in ``skip``. Why: at KernelBench's largest sizes (a 16384 x 4096 input) the twenty base probes
    return more than the reference may hold or write, and without this the reference runs out of memory and the
    whole row is lost; with it the gates keep the probes that fit. A problem whose probes all fit is unchanged."""
    if coster.base is None:
        return P
    sizes = {p.id: returned_bytes(coster.base_meta, coster.base, p) for p in P}
    limit = budget.result_mb * 2**20
    if sum(sizes.values()) <= limit:
        return P
    order = [pid for pid in BASE_PRIORITY if pid in sizes] + [p.id for p in P if p.id not in BASE_PRIORITY]
    spent, skip = 0, {}
    for pid in order:
        if pid == "rand0" or spent + sizes[pid] <= limit:
            spent += sizes[pid]
            continue
        skip[pid] = (f"over the per-problem budget: returning {sizes[pid] / 2**20:.4g} MB of arrays > "
                     f"{(limit - spent) / 2**20:.4g} MB left of the {budget.result_mb:g} MB result file (base "
                     f"probes admitted one per gate first)")
    return [replace(p, skip=skip[p.id]) if p.id in skip else p for p in P]


def _seconds(flops: float, moved: float, budget: Budget) -> float:
    return flops / budget.flop_rate + moved / budget.byte_rate


def _meta64(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    return torch.empty_like(x, device="meta", dtype=torch.float64 if x.is_floating_point() else x.dtype)


def _numel(xs: list[Any]) -> tuple[int, int]:
    """(largest, total) element count of the tensors in ``xs``."""
    ns = [int(x.numel()) for x in xs if isinstance(x, torch.Tensor)]
    return max(ns, default=1), sum(ns)


def _exponent(at_base: float, at_p: float, ratio: float) -> float:
    """e with at_p = at_base * ratio^e (0 when the quantity does not grow, or is absent)."""
    if at_base <= 0 or at_p <= 0 or ratio == 1:
        return 0.0 if at_p <= at_base else 1.0
    return max(0.0, math.log(at_p / at_base) / math.log(ratio))


class _Coster:
    """Costs of the reference's float64 forward at the base shape and at any variant (see :class:`Budget`).

    The reference is traced (:func:`forward_cost`) at the base shape and, per knob, at one more size p no larger
    than twice the base (the knob's ``half`` value, else ``below``, else ``above``); a variant's FLOPs, bytes
    moved and peak of intermediates are then extrapolated from those two traces as powers of the knob's value
    (the exponents are measured, e.g. 3 for a square matmul's N, 1 for a batch or an unrolled recurrence's
    length), and its input bytes are exact. Tracing only at sizes up to twice the base keeps the cost of
    costing below the base run's own, however large the variant (a long axis of 4099 in a Python loop would
    trace for as long as it runs). The model is built and traced on the meta device (nothing is computed); a
    reference that cannot be traced there (an ``.item()``, an operator without a meta kernel) is traced for real,
    on the same two sizes. A knob with no traceable second size is scaled by the ratio r of total input
    elements: time as r^1.5 (a square matmul's work in its input elements) when r > 1, else as r."""

    def __init__(self, ns: dict, seed: int, base_inputs: list[Any], budget: Budget):
        self.ns, self.seed, self.budget = ns, seed, budget
        self.base_inputs = base_inputs
        self.base_meta = [_meta64(x) for x in base_inputs]
        self.meta = True
        self.model = None
        self.base: Cost | None = None
        self.base_error = ""
        self.fits: dict[str, tuple[int, Cost] | str] = {}
        try:
            with torch.device("meta"):
                torch.manual_seed(seed)
                model = ns["Model"](*list(ns["get_init_inputs"]()))
            self.model = model.to(torch.float64)
            self.base = forward_cost(self.model, self.base_meta, budget)
            return
        except Exception:  # noqa: BLE001 - a reference that does not trace on meta is traced for real
            pass
        self.meta = False
        try:
            torch.manual_seed(seed)
            self.model = ns["Model"](*list(ns["get_init_inputs"]())).to(torch.float64)
            self.base = forward_cost(self.model, [_f64(x) for x in base_inputs], budget)
        except Exception as exc:  # noqa: BLE001 - the base run itself will report the reference as broken
            self.base_error = f"{type(exc).__name__}: {exc}"[:200]

    def inputs(self, patch: tuple[tuple[str, int], ...]) -> list[Any]:
        """The variant's inputs as float64 meta tensors (raises what the reference's get_inputs raises)."""
        dim_patch = {int(k.split(":")[1]): v for k, v in patch if k.startswith("__dim__")}
        if dim_patch:
            return [torch.empty([dim_patch.get(d, d) for d in x.shape], device="meta", dtype=x.dtype)
                    if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in self.base_meta]
        with torch.device("meta"):
            return [_meta64(x) for x in call_get_inputs(self.ns, 0, patch)]

    def _trace(self, patch) -> Cost:
        xs = self.inputs(patch)
        if not self.meta:
            xs = [_f64(x) for x in call_get_inputs(self.ns, self.seed, patch)]
        return forward_cost(self.model, xs, self.budget)

    def _fit(self, name: str, v: int) -> tuple[int, Cost] | str:
        """The second traced size of knob ``name`` and its cost, or why there is none."""
        if name not in self.fits:
            why = "no second size traces"
            for _tier, p in sorted(shape_values(v), key=lambda tv: ("half", "below", "above").index(tv[0])):
                if p > 2 * v:
                    continue
                try:
                    self.fits[name] = (p, self._trace(((name, p),)))
                    break
                except Exception as exc:  # noqa: BLE001 - try the next size
                    why = f"{type(exc).__name__}: {exc}"[:160]
            else:
                self.fits[name] = why
        return self.fits[name]

    def cost(self, name: str, v: int, nv: int, inputs: list[Any]) -> Cost | str:
        """The cost of the variant that sets knob ``name`` from ``v`` to ``nv`` (``inputs``: its meta inputs),
        or why there is none."""
        b = self.base
        if b is None:
            return f"no cost estimate: the reference's own base forward raised {self.base_error}"
        fixed = sum(t.nbytes for t in list(self.model.parameters()) + list(self.model.buffers()))
        in_bytes = sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor))
        base_in = sum(x.nbytes for x in self.base_meta if isinstance(x, torch.Tensor))
        fit = self._fit(name, v)
        label = name.replace("__dim__:", "dim")
        if isinstance(fit, str):
            r = _numel(inputs)[1] / max(_numel(self.base_meta)[1], 1)
            g = r ** (1.5 if r > 1 else 1.0)
            return Cost(int(b.flops * g), int(b.moved * g), int(fixed + in_bytes + (b.peak - fixed - base_in) * r),
                        b.seconds * g, f"scaled by input elements x{r:.3g}: {label} has {fit}", int(b.out * r))
        p, c = fit
        if nv == p:
            return c
        ratio, k = p / v, nv / v
        flops = b.flops * k ** _exponent(b.flops, c.flops, ratio)
        moved = b.moved * k ** _exponent(b.moved, c.moved, ratio)
        p_in = sum(x.nbytes for x in self.inputs(((name, p),)) if isinstance(x, torch.Tensor))
        mid_b, mid_p = b.peak - fixed - base_in, c.peak - fixed - p_in
        mid = mid_b * k ** _exponent(mid_b, mid_p, ratio)
        out = b.out * k ** _exponent(b.out, c.out, ratio)
        e = _exponent(b.seconds, c.seconds, ratio)
        return Cost(int(flops), int(moved), int(fixed + in_bytes + mid), _seconds(flops, moved, self.budget),
                    f"traced at {label}={v} and {p}, scaled as {label}^{e:.2g}", int(out))


def _f64(x: Any) -> Any:
    return x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


@dataclass
class _Pool:
    """One budget (see Budget): seconds for the CMP-03 shape variants or for the long-axis variants; bytes of
    returned arrays for both."""

    total: float
    spent: float = 0.0
    base: float = 0.0  # returned arrays: what the base probes take first


def _refusal(coster: _Coster, knob: tuple[str, int], nv: int, pool: _Pool, held: _Pool, forwards: int,
             probes: int, base_largest: int, interpret: bool, budget: Budget,
             costs: dict | None = None) -> str:
    """Why the variant setting ``knob`` (name, value) to ``nv`` is not run (its Probe.skip), or "" when it fits
    and is charged to ``pool`` (its ``forwards`` reference forwards) and ``held`` (the arrays of its
    ``probes`` probes); an admitted variant's estimated seconds and peak MB per forward go to ``costs[(name, nv)]``."""
    name, v = knob
    try:
        xs = coster.inputs(((name, nv),))
    except Exception as exc:  # noqa: BLE001 - the reference's own error at this shape
        return f"reference get_inputs raised at this shape: {type(exc).__name__}: {exc}"[:400]
    largest = _numel(xs)[0]
    if interpret:
        lim = max(budget.interpret_numel, int(budget.interpret_mult * base_largest))
        if largest > lim:
            return (f"Triton CPU interpreter rule: largest input {largest} elements > {lim} = max(2^"
                    f"{int(math.log2(budget.interpret_numel))}, {budget.interpret_mult:g} x the base's "
                    f"{base_largest})")
    c = coster.cost(name, v, nv, xs)
    if isinstance(c, str):
        return c[:400]
    base = coster.base
    mem_lim = min(budget.mem_ceiling_mb, max(budget.mem_floor_mb, budget.mem_mult * base.mb))
    need = forwards * c.seconds
    est = f"estimated {need:.3g} s / {c.mb:.4g} MB"
    if c.how != "traced":
        est += f" ({c.how})"
    if c.mb > mem_lim:
        return (f"over the per-problem budget: {est} > {mem_lim:.4g} MB (min({budget.mem_ceiling_mb:g} MB, "
                f"max({budget.mem_floor_mb:g} MB, {budget.mem_mult:g} x the base forward's {base.mb:.4g} MB)))")[:400]
    if pool.spent + need > pool.total:
        return (f"over the per-problem budget: {est} > {pool.total - pool.spent:.3g} s left of {pool.total:.3g} s "
                f"(max({budget.floor_s:g} s, {budget.base_mult:g} x the base forward's estimated "
                f"{base.seconds:.3g} s))")[:400]
    ship = probes * shipped_bytes(xs, c) / 2**20
    if held.spent + ship > held.total:
        return (f"over the per-problem budget: {est}, returning {ship:.4g} MB of arrays > "
                f"{held.total - held.spent:.4g} MB left of {held.total:.4g} MB for variants (the "
                f"{budget.result_mb:g} MB result file less the base probes' {held.base:.4g} MB, at most "
                f"{budget.held_mb:g} MB)")[:400]
    pool.spent += need
    held.spent += ship
    if costs is not None:
        costs[(name, nv)] = (c.seconds, c.mb)
    return ""


def build_plan(ns: dict, seed: int, *, interpret: bool = False, budget: Budget | None = None) -> list[Probe]:
    """The full, ordered probe list for a reference namespace. Pure in (ns source, seed, interpret, budget;
    ``budget`` defaults to the module's BUDGET).

    Shape variants (CMP-03) are admitted tier by tier in SHAPE_PRIORITY order (:func:`shape_values`), each tier
    over every knob, so every knob is varied before any knob is varied twice; long-axis variants follow, one
    knob at a time. Each is admitted by :func:`_refusal` (the rules of :class:`Budget`); a refused one stays in
    the plan with its reason in ``skip``. At most MAX_SHAPE_VARIANTS and MAX_LONG_VARIANTS are admitted;
    variants past those counts are not planned."""
    budget = budget or BUDGET
    base = call_get_inputs(ns, seed, ())
    float_shapes = [tuple(x.shape) for x in base if isinstance(x, torch.Tensor) and x.is_floating_point()]
    base_largest = _numel(base)[0]

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
    if not knobs:
        return P
    coster = _Coster(ns, seed, base, budget)
    P = _admit_base(P, coster, budget)
    base_s = coster.base.seconds if coster.base is not None else 0.0
    costs: dict[tuple[str, int], tuple[float, float]] = {}

    def pool() -> _Pool:
        return _Pool(max(budget.floor_s, budget.base_mult * base_s))

    # Admission (budget, count cap) in priority order: ``above`` first, the only tier that catches a kernel
    # whose loop bounds or slices stop at the original size; then ``half``, the affordable smaller one; then
    # ``below``. The plan lists the variants by tier in size order (below, above, half), every knob per tier.
    base_ship = 0.0
    if coster.base is not None:
        base_ship = sum(returned_bytes(coster.base_meta, coster.base, p) for p in P if not p.skip) / 2**20
    shape_pool = pool()
    held = _Pool(max(0.0, min(budget.held_mb, budget.result_mb - base_ship)), base=base_ship)
    tiers = {name: dict(shape_values(v)) for name, v in knobs}
    shape_skip: dict[tuple[str, str], str] = {}
    n_shape = 0
    for tier in SHAPE_PRIORITY:
        for name, v in knobs:
            nv = tiers[name].get(tier)
            if nv is None or n_shape >= MAX_SHAPE_VARIANTS:
                continue
            why = _refusal(coster, (name, v), nv, shape_pool, held, 1, 1, base_largest, interpret, budget, costs)
            shape_skip[(tier, name)] = why
            n_shape += not why
    for tier in ("below", "above", "half"):
        for name, _v in knobs:
            if (tier, name) in shape_skip:
                nv = tiers[name][tier]
                label = name.replace("__dim__:", "dim")
                P.append(Probe(f"shape_{label}={nv}", "rand", ("CMP-03",), patch=((name, nv),), draw=3,
                               skip=shape_skip[(tier, name)]))

    long_pool = pool()
    n_long = 0
    for name, v in knobs:
        if n_long >= MAX_LONG_VARIANTS or v >= LONG_LEN:
            continue
        label = name.replace("__dim__:", "dim")
        patch = ((name, LONG_LEN),)
        first = len(P)
        P += [
            Probe(f"long_{label}", "rand", ("CMP-01",), patch=patch, draw=4),
            Probe(f"ord01_{label}", "positive", ("ORD-01",), patch=patch),
            Probe(f"cancel_{label}", "cancel", ("ORD-03",), patch=patch),
            Probe(f"acc_fp16_{label}", "ones", ("PRC-02",), dtype="float16", patch=patch),
            Probe(f"acc_bf16_{label}", "ones", ("PRC-02",), dtype="bfloat16", patch=patch),
            Probe(f"accb_fp16_{label}", "accum", ("PRC-02",), dtype="float16", patch=patch),
            Probe(f"accb_bf16_{label}", "accum", ("PRC-02",), dtype="bfloat16", patch=patch),
        ]
        group = P[first:]
        # cancel also runs the reference on |x| and LAYER_DRAWS layer-model draws; a probe that measures the floor
        # runs COND_DRAWS more forwards, a half-precision PRC-02 probe STORE_DRAWS storage-model draws besides
        forwards = (len(group) + (1 + LAYER_DRAWS) * sum(p.kind == "cancel" for p in group)
                    + COND_DRAWS * sum(measures_floor(p) for p in group)
                    + STORE_DRAWS * sum(stores_in_dtype(p) for p in group))
        why = _refusal(coster, (name, v), LONG_LEN, long_pool, held, forwards, len(group), base_largest,
                       interpret, budget, costs)
        if why:
            P[first:] = [replace(p, skip=why) for p in group]
            continue
        n_long += 1
    if coster.base is None:
        return P
    at_base = (base_s, coster.base.mb)
    return [p if p.skip else _with_estimate(p, *(costs.get(p.patch[0], at_base) if p.patch else at_base))
            for p in P]


def _with_estimate(probe: Probe, seconds: float, mb: float) -> Probe:
    """``probe`` carrying the plan's estimate of one float64 forward at its shape (``extra["est_s"]``, seconds
    at the fixed rates of :class:`Budget`; ``extra["est_mb"]``, its peak): what the reference charges its optional
    floors against (:func:`forwards_run`, ``reference._Budget.floor_refusal``), so that whether a floor is
    measured depends on the plan alone, never on how fast or how loaded the machine is."""
    return replace(probe, extra={**probe.extra, "est_s": round(float(seconds), 6), "est_mb": round(float(mb), 3)})


def forwards_run(probe: Probe) -> int:
    """About how many float64 forwards of the reference running ``probe`` costs without its optional floor
    (counted in forwards of the probe's own shape, a backward as two): one; the backward probe's backward and
    its finite-difference check (two forwards at each of FD_POSITIONS positions); ORD-03's cancellation rows'
    run on |x|; the offset probe's sensitivity draws and invariance check."""
    n = 1
    if probe.action == "backward":
        n += 2 + 2 * FD_POSITIONS
    if probe.kind == "cancel":
        n += 1
    if probe.kind == "offset":
        n += 2 * OFFSET_DRAWS
    return n


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


def offset_condition(run, x64: list[Any], outs: list[torch.Tensor], probe: Probe, seed: int,
                     draws: int = OFFSET_DRAWS) -> dict:
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
       elementwise by one relative eps of the probe dtype, with signs drawn from this probe's own generator
       (``draws`` of them; more only in the reference's second pass, reference.SECOND_PASS_MULT: the first
       OFFSET_DRAWS are the same draws, so the maximum never falls).
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
        sens = eps_sensitivity(run, x64, outs, tol.EPS[probe.dtype], gen, draws=draws)
    except ValueError as exc:
        return {"applies": False, "reason": f"offset probe: {exc}"}
    return {"applies": True, "sens": sens, "invariance_dev": dev, "offset": OFFSET, "draws": draws}


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
                # Drawn on the CPU (the generator's device) and moved to the input's: the same signs wherever the
                # reference runs.
                d = torch.where(torch.rand(x.shape, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
                d = d.to(x.device)
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
