"""Reproductions behind ``data/trusted/explanations.yaml``: a failing probe of a trusted kernel, rebuilt on the CPU.

A trusted kernel is KernelBench's own ``Model`` run in float32 (or fp16/bf16), so every failure is either a real
property of that code or a verifier defect. Deciding which needs the failing probe's numbers, not the gate's
summary alone. :class:`Case` rebuilds one probe exactly as the verifier does (the plan, the seed, the inputs of
``lethe.verifier.probes.make_inputs``, the reference's float64 weights and their fp16/bf16 roundings) and
computes, on the same inputs:

* ``ref``: the float64 reference, as ``lethe.verifier.reference`` computes it;
* ``cand``: the trusted candidate, the same ``Model`` in the probe's dtype (torch on this CPU);
* ``ideal``: the float64 forward with every aten operator's floating result rounded to the probe's dtype
  (:class:`RoundEveryOp`): an implementation whose every operator is correctly rounded, op by op. It is the
  yardstick for "legitimate": no implementation in that dtype that stores each operator's result does better.
  If ``ideal`` fails a bound, the bound demands more than correctly rounded operators can give (a verifier
  defect); if ``ideal`` passes and ``cand`` fails, the excess is in torch's own arithmetic, which
  :func:`ideal_ops` then narrows down to one operator by computing only that operator ideally.

:func:`grade` compares with the verifier's own ``lethe.verifier.gates.compare`` and the tolerances of
``lethe.verifier.tolerance``; :meth:`Case.cond_floor` measures the conditioning floor with the verifier's own
``lethe.verifier.reference.conditioning_spread`` on any probe, to show what the floor would do on gates that do
not read it. Nothing here changes the verifier; ``experiments/trusted/explain_checks.py`` is the driver.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lethe.trusted.corpus import DEFAULT_KB_ROOT, kb_levels_root
from lethe.verifier import gates as G
from lethe.verifier import probes as P
from lethe.verifier import profiles as PR
from lethe.verifier import reference as REF
from lethe.verifier import tolerance as T

TDT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
_ID = re.compile(r"^L(\d)/(\d+)_(.+)$")


def problem_source(kernel_id: str, root: str | Path = DEFAULT_KB_ROOT) -> str:
    """The KernelBench problem file of a trusted row id (``L2/93_ConvTranspose2d_Add_Min_GELU_Multiply``)."""
    m = _ID.match(kernel_id.split(":")[0])
    if not m:
        raise ValueError(f"not a KernelBench row id: {kernel_id!r}")
    path = kb_levels_root(root) / f"level{m.group(1)}" / f"{m.group(2)}_{m.group(3)}.py"
    return path.read_text(encoding="utf-8")


def _round(t: torch.Tensor, dtype: str) -> torch.Tensor:
    return t if dtype == "float64" else t.to(TDT[dtype]).to(t.dtype)


class RoundEveryOp(TorchDispatchMode):
    """Every non-view aten operator's floating result rounded, in place, to ``dtype``. Run inside it, a float64
    forward whose inputs and weights are already representable in ``dtype`` is the op-by-op correctly rounded
    implementation (each operator exact, then its result stored in ``dtype``). Rounding is idempotent on values
    already representable, so operators that return an input (in-place, views that are not marked) are safe."""

    def __init__(self, dtype: str):
        super().__init__()
        self.dtype = dtype

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        for t in P._tensors(out):
            if t.is_floating_point() and t.dtype == torch.float64:
                t.copy_(_round(t, self.dtype))
        return out


class ideal_ops(TorchDispatchMode):  # noqa: N801 - used as a context manager, like torch's own modes
    """The aten operators whose name (``func.overloadpacket.__name__``, e.g. ``"gelu"``) is in ``names`` computed
    in float64 on widened arguments and rounded back to their own dtype; every other operator runs as it is.
    Inside it, a float32 forward shows how much of its error one operator contributes."""

    def __init__(self, names: Iterable[str]):
        super().__init__()
        self.names = set(names)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket.__name__ not in self.names:
            return func(*args, **kwargs)

        def wide(x):
            return x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

        low = next(x.dtype for x in P._tensors(list(args)) if x.is_floating_point())
        out = func(*[wide(a) for a in args], **{k: wide(v) for k, v in kwargs.items()})
        if isinstance(out, torch.Tensor):
            return out.to(low) if out.is_floating_point() else out
        return type(out)(o.to(low) if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out)


def outputs(model, xs: Sequence[Any]) -> list[torch.Tensor]:
    """The floating results of one forward, detached, as float64 (no autograd graph)."""
    with torch.no_grad():
        return [o.detach().to(torch.float64) for o in REF.flatten(model(*xs)) if o.is_floating_point()]


def grade(ref: torch.Tensor, out: torch.Tensor, tol: np.ndarray | float, dtype: str) -> dict:
    """The verifier's elementwise comparison (``lethe.verifier.gates.compare``, strict profile): n_bad, max
    err/tol, the first bad positions and values."""
    s = G.compare(ref.numpy(), out.to(torch.float64).numpy(), dtype, tol, PR.get("strict"))
    keep = ("n", "n_bad", "max_abs_err", "max_err_over_tol", "new_nonfinite", "lost_nonfinite", "wrong_nonfinite",
            "first_bad", "first_bad_values")
    return {k: s[k] for k in keep if k in s}


class Case:
    """One probe of one trusted problem, rebuilt as the verifier builds it (module docstring)."""

    def __init__(self, src: str, seed: int, probe_id: str, *, batch: slice | None = None):
        self.ns = REF.load_source(src, "lethe_trusted_case")
        self.seed = int(seed)
        plan = {p.id: p for p in P.build_plan(self.ns, self.seed)}
        if probe_id not in plan:
            raise KeyError(f"probe {probe_id!r} is not in this problem's plan: {sorted(plan)}")
        self.probe = plan[probe_id]
        self.dtype = self.probe.dtype
        xs = P.make_inputs(self.ns, self.probe, self.seed)
        full = [tuple(x.shape) for x in xs if isinstance(x, torch.Tensor)] or [()]
        if batch is not None:  # the first samples of the very probe inputs, for models with no batch statistics
            xs = [x[batch] if isinstance(x, torch.Tensor) and x.dim() else x for x in xs]
        self.inputs = xs
        torch.manual_seed(self.seed)
        init = list(self.ns["get_init_inputs"]())
        torch.manual_seed(self.seed)
        model = self.ns["Model"](*init)
        self.state32 = copy.deepcopy(model.state_dict())
        self.model64 = copy.deepcopy(model).double()
        state64 = {k: v.detach().clone() for k, v in self.model64.state_dict().items()}
        self.state64 = REF._round_state(state64, self.dtype) if self.dtype != "float32" else state64
        self.x64 = REF.reference_inputs(xs)
        # N as the verifier has it, from the unsliced shapes (a slice keeps every axis but the batch)
        nb = full[0][0] if full[0] else 1
        outs = [(nb, *o.shape[1:]) if batch is not None and o.dim() else tuple(o.shape) for o in self.ref()]
        self.N = T.reduction_length(full, outs)

    def reference(self):
        """The float64 model with this probe's weights (fp16/bf16 probes: rounded through that dtype)."""
        self.model64.load_state_dict(self.state64)
        return REF.Float64Reference(self.model64)

    def ref(self) -> list[torch.Tensor]:
        if not hasattr(self, "_ref"):
            self._ref = outputs(self.reference(), self.x64)
        return self._ref

    def candidate(self):
        """The trusted candidate: the same Model in float32 with the reference's weights, cast to the dtype."""
        torch.manual_seed(self.seed)
        model = self.ns["Model"](*list(self.ns["get_init_inputs"]()))
        model.load_state_dict(self.state32)
        return model if self.dtype == "float32" else model.to(TDT[self.dtype])

    def cand(self, names: Iterable[str] = ()) -> list[torch.Tensor]:
        """The candidate's outputs; with ``names``, those aten operators computed ideally (:class:`ideal_ops`)."""
        model = self.candidate()
        if not names:
            return outputs(model, self.inputs)
        with ideal_ops(names):
            return outputs(model, self.inputs)

    def ideal(self) -> list[torch.Tensor]:
        """The op-by-op correctly rounded forward in the probe's dtype (:class:`RoundEveryOp`)."""
        ref = self.reference()
        xs = [_round(x, self.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in self.x64]
        with RoundEveryOp(self.dtype):
            return outputs(ref, xs)

    def abs_scale(self) -> float:
        """sum|terms| as ORD-03 and PRC-02's bracketed rows measure it: the reference run on |x| (weights as
        they are), the largest RMS over the floating outputs."""
        xa = [x.abs() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in self.x64]
        return max(T.output_scale(o.numpy()) for o in outputs(self.reference(), xa))

    def cond_floor(self, k: int = 0, n: int | None = None) -> np.ndarray:
        """The conditioning floor K_COND * sqrt(N) * spread of output k, the spread measured by the verifier's
        own ``conditioning_spread`` on this probe (whatever its gate) with reduction length ``n`` (default N)."""
        arrays = {f"p/{self.probe.id}/ref{j}": o.numpy() for j, o in enumerate(self.ref())}
        REF.conditioning_spread(self.model64, self.state64, self.x64, self.probe, self.seed, arrays)
        return T.cond_floor(arrays[f"p/{self.probe.id}/cond{k}"], n or self.N)

    def offset_sens(self, k: int = 0) -> np.ndarray:
        """ORD-03's offset sensitivity of output k, drawn as lethe.verifier.probes.offset_condition draws it."""
        if not hasattr(self, "_sens"):
            gen = torch.Generator().manual_seed(self.probe.rng_seed(self.seed) + 2)
            self._sens = P.eps_sensitivity(lambda *xs: REF.flatten(self.reference()(*xs)), self.x64, self.ref(),
                                           T.EPS[self.dtype], gen)
        return self._sens[k].numpy()

    def spread_at(self, index: Sequence[int], seeds: Sequence[int], k: int = 0) -> list[float]:
        """The conditioning spread of output k at one element for several plan seeds: the same inputs and
        weights, only the random signs of the perturbation draws differ (the first seed is the verifier's)."""
        out = []
        for s in seeds:
            arrays = {f"p/{self.probe.id}/ref{j}": o.numpy() for j, o in enumerate(self.ref())}
            REF.conditioning_spread(self.model64, self.state64, self.x64, self.probe, int(s), arrays)
            out.append(float(arrays[f"p/{self.probe.id}/cond{k}"][tuple(index)]))
        return out

    def bound(self, k: int = 0, n: int | None = None) -> np.ndarray:
        """The tolerance the probe's gate grades output k with, as lethe.verifier.gates computes it (the
        conditioning floor of CMP-01 excepted: :meth:`cond_floor`), with reduction length ``n`` (default N)."""
        r, d, n = self.ref()[k].numpy(), self.dtype, n or self.N
        kind = self.probe.kind
        if kind == "cancel":
            return T.ord03_bound(r, max(self.abs_scale(), T.output_scale(r)), d, n)
        if kind == "accum":
            return T.prc02_bracket_tol(r, self.abs_scale(), d, n)
        if kind == "offset":
            return T.ord03_offset_bound(r, self.offset_sens(k), d, n)
        if kind == "positive":
            return T.ord01_bound(r, d, n)
        return T.value_tol(r, d, n)

    def _ups(self, outs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The upstream gradients of the backward probe, drawn as the reference draws them (float32 values)."""
        gen = torch.Generator().manual_seed(self.probe.rng_seed(self.seed) + 1)
        return [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(torch.float64) for o in outs]

    def grads(self, which: str = "cand") -> dict[str, torch.Tensor]:
        """Input and parameter gradients of ``which`` ("ref" in float64, "cand" in the probe's dtype) for the
        backward probe's upstream gradients, keyed as CMP-02's evidence is (``input<j>``, ``param:<name>``)."""
        model = self.reference().model if which == "ref" else self.candidate()
        src = self.x64 if which == "ref" else self.inputs
        xs = [x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point()
              else x for x in src]
        fouts = [o for o in REF.flatten(model(*xs)) if o.is_floating_point()]
        ups = self._ups(fouts)
        model.zero_grad(set_to_none=True)
        torch.autograd.backward(fouts, [u.to(o.dtype) for u, o in zip(ups, fouts, strict=True)])
        out = {f"input{j}": x.grad.detach().to(torch.float64) for j, x in enumerate(xs)
               if isinstance(x, torch.Tensor) and x.grad is not None}
        out.update({f"param:{n}": p.grad.detach().to(torch.float64) for n, p in model.named_parameters()
                    if p.grad is not None})
        return out

    def grad_bounds(self, ref: dict[str, torch.Tensor], floor: bool = True) -> dict[str, np.ndarray]:
        """CMP-02's tolerance per gradient (``tolerance.grad_tol`` with the gradient's own N), raised to the
        gradient conditioning floor of ``conditioning_spread`` when ``floor``, as lethe.verifier.gates.cmp_02
        computes them."""
        n_all = [tuple(x.shape) for x in self.inputs if isinstance(x, torch.Tensor)] + \
            [tuple(o.shape) for o in self.ref()]
        spread: dict[str, np.ndarray] = {}
        if floor:
            pid = self.probe.id
            arrays = {f"p/{pid}/gin{k[5:]}" if k.startswith("input") else f"p/{pid}/gpar/{k[6:]}": v.numpy()
                      for k, v in ref.items()}
            xs = [x.detach() if isinstance(x, torch.Tensor) else x for x in self.x64]
            outs = [o for o in REF.flatten(self.reference()(*xs)) if o.is_floating_point()]
            REF.conditioning_spread(self.model64, self.state64, xs, self.probe, self.seed, arrays, self._ups(outs))
            spread = {("input" + k.rsplit("gcond", 1)[1]) if "/gcond" in k and "gcondpar" not in k
                      else "param:" + k.split("/gcondpar/", 1)[1]: v for k, v in arrays.items() if "/gcond" in k}
        out = {}
        for k, r in ref.items():
            n = T.reduction_length(n_all, [tuple(r.shape)])
            out[k] = T.with_cond_floor(T.grad_tol(r.numpy(), self.dtype, n), spread.get(k), n)
        return out


def terms_ratio(case: Case, module: str) -> dict:
    """How the candidate's own rounding in one linear leaf (``module``: a Linear or convolution of the model, by
    its attribute path) compares with what fp32 summation allows, on the input that leaf receives in the
    candidate's forward: per output element, err = |leaf32(x) - leaf64(x)|, sum|terms| = leaf on |x| with |w|
    and |b| (exactly what is summed), K = the number of terms (leaf on ones with unit weights). Reports the
    largest err / (u * sum|terms|) (u = 2^-24), the largest err / (gamma_K * sum|terms|) (the any-order worst
    case, lethe.verifier.tolerance.sum_gamma), the largest K, and the RMS of sum|terms| beside the verifier's
    ``abs_scale`` for the same probe (the scale ORD-03's and PRC-02's bracketed bounds use)."""
    cand = case.candidate()
    leaf32 = cand.get_submodule(module)
    seen: list[torch.Tensor] = []
    h = leaf32.register_forward_hook(lambda m, inp, out: seen.append(inp[0].detach()))
    outputs(cand, case.inputs)
    h.remove()
    x = seen[0]
    leaf64 = copy.deepcopy(leaf32).double()
    with torch.no_grad():
        y32 = leaf32(x).double()
        y64 = leaf64(x.double())
        for p in leaf64.parameters():
            p.abs_()
        terms = leaf64(x.double().abs())
        for p in leaf64.parameters():
            p.fill_(1.0)
        count = leaf64(torch.ones_like(x, dtype=torch.float64))
    err = (y32 - y64).abs()
    u = T.acc_eps(case.dtype) / 2
    k = int(count.max())
    return {"module": module, "K": k, "max_err_over_u_terms": float((err / (u * terms)).max()),
            "max_err_over_gamma_K_terms": float((err / (T.sum_gamma(k, case.dtype) * terms)).max()),
            "rms_sum_terms": T.output_scale(terms.numpy()), "abs_scale": case.abs_scale()}


def _leaf_outputs(model, xs: Sequence[Any], module: str) -> torch.Tensor:
    """The float64 copy of what the leaf ``module`` (attribute path) returns in one forward of ``model``."""
    seen: list[torch.Tensor] = []
    leaf = getattr(model, "model", model).get_submodule(module)  # a Float64Reference wraps its model
    h = leaf.register_forward_hook(lambda m, inp, out: seen.append(out.detach().clone()))
    try:
        outputs(model, xs)
    finally:
        h.remove()
    return seen[0].to(torch.float64)


def sign_flips(case: Case, module: str) -> dict:
    """Where the candidate's output of one leaf (a norm before a ReLU, say) lies on the other side of zero from
    the reference's: the count, the channels (axis 1) with the most flips and the largest |reference| among
    them. A flipped sign at a ReLU's kink sends the gradient down the other branch: a valid subgradient of the
    candidate's own forward that differs pointwise from the reference's."""
    r = _leaf_outputs(case.reference(), case.x64, module)
    c = _leaf_outputs(case.candidate(), case.inputs, module)
    flip = (r > 0) != (c > 0)
    per = flip.transpose(0, 1).reshape(flip.shape[1], -1).sum(1) if flip.dim() > 1 else flip.reshape(1, -1).sum(1)
    top = torch.argsort(per, descending=True)[:5]
    return {"module": module, "n_flips": int(flip.sum()), "n": int(flip.numel()),
            "top_channels": {int(k): int(per[k]) for k in top if per[k] > 0},
            "max_abs_ref_at_flip": float(r[flip].abs().max()) if flip.any() else 0.0,
            "rms_ref": T.output_scale(r.numpy())}


def argext_flips(case: Case, module: str, dim: int, op: str = "min") -> dict:
    """Where the candidate's arg-min (or arg-max) over axis ``dim`` of one leaf's output differs from the
    reference's, and how close the reference's two smallest (largest) values are there: a near-tie within the
    candidate's rounding sends the gradient to another element, a valid subgradient graded pointwise."""
    r = _leaf_outputs(case.reference(), case.x64, module)
    c = _leaf_outputs(case.candidate(), case.inputs, module)
    sign = 1.0 if op == "min" else -1.0
    ra, ca = torch.argmin(sign * r, dim=dim), torch.argmin(sign * c, dim=dim)
    flip = ra != ca
    two = torch.topk(sign * r, 2, dim=dim, largest=False).values
    gap = (two.select(dim, 1) - two.select(dim, 0)).abs()
    return {"module": module, "dim": dim, "n_flips": int(flip.sum()), "n": int(flip.numel()),
            "max_gap_at_flip": float(gap[flip].max()) if flip.any() else 0.0,
            "max_err_at_flip": float((r - c).abs().amax(dim=dim)[flip].max()) if flip.any() else 0.0,
            "rms_ref": T.output_scale(r.numpy())}


def _serial_sum(v: torch.Tensor) -> torch.Tensor:
    """Column sums of a (n, C) float32 matrix in one serial pass per column, every partial sum rounded to
    float32: the least accurate order a correct fp32 reduction may use (its error bound is gamma_n)."""
    acc = torch.zeros(v.shape[1], dtype=v.dtype)
    for row in v:
        acc = acc + row
    return acc


class serial_norm(TorchDispatchMode):  # noqa: N801 - used as a context manager, like torch's own modes
    """Training-mode batch/instance norm (aten ``native_batch_norm`` with ``training=True``) whose mean and
    variance are each one serial float32 pass (two-pass variance), the rest as torch computes it: an honest
    fp32 implementation, only in the worst summation order. Inside it, a float32 forward shows how far a
    correct statistic can legitimately drift over a long reduction (D*H*W or N*H*W elements per channel)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket.__name__ != "native_batch_norm" or not args[5] or args[0].dtype != torch.float32:
            return func(*args, **kwargs)
        x, w, b, eps = args[0], args[1], args[2], args[7]
        c = x.shape[1]
        v = x.transpose(0, 1).reshape(c, -1).t().contiguous()
        n = v.shape[0]
        mean = _serial_sum(v) / n
        var = _serial_sum((v - mean) * (v - mean)) / n
        invstd = 1.0 / torch.sqrt(var + eps)
        shape = [1, c] + [1] * (x.dim() - 2)
        out = (x - mean.reshape(shape)) * invstd.reshape(shape)
        if w is not None:
            out = out * w.reshape(shape)
        if b is not None:
            out = out + b.reshape(shape)
        return out, mean, invstd


def gelu_tails() -> dict:
    """torch's float32 GELU (this CPU) where the float64 one is exact enough to grade it: the forward at +-inf,
    and the backward on the negative tail x = -4 .. -14, beside the float64 derivative."""
    f = torch.nn.functional.gelu
    inf = torch.tensor([float("inf"), float("-inf")])
    xs = torch.arange(-14.0, -3.0, 1.0)
    x32, x64 = xs.clone().requires_grad_(True), xs.double().requires_grad_(True)
    f(x32).sum().backward()
    f(x64).sum().backward()
    return {"forward_fp32": dict(zip(["+inf", "-inf"], [str(v) for v in f(inf).tolist()], strict=True)),
            "forward_fp64": dict(zip(["+inf", "-inf"], [str(v) for v in f(inf.double()).tolist()], strict=True)),
            "backward": [{"x": float(a), "fp32": float(b), "fp64": float(c)}
                         for a, b, c in zip(xs.tolist(), x32.grad.tolist(), x64.grad.tolist(), strict=True)]}


def cumprod_underflow(case: Case) -> list[dict]:
    """For each injected +-inf of a cumprod probe: the float64 running product just before it, what one serial
    float32 running product (an fp32 accumulator) holds there and returns at the inf, and torch's own CPU
    float32 cumprod at the inf."""
    x = case.inputs[0]
    out = []
    for i, p in torch.nonzero(torch.isinf(x)).tolist():
        row = x[i]
        acc = torch.tensor(1.0, dtype=torch.float32)
        for v in row[:p]:
            acc = acc * v
        out.append({"row": i, "at": p, "value": str(float(row[p])),
                    "fp64_prefix": float(torch.prod(row[:p].double())), "fp32_serial_prefix": float(acc),
                    "fp32_serial_at_inf": str(float(acc * row[p])),
                    "torch_cpu_fp32_at_inf": str(float(torch.cumprod(row, 0)[p]))})
    return out


def nonfinite_footprint(case: Case) -> dict:
    """Where the exact answer of a non-finite probe is not finite: the injected positions and, per batch
    element holding one, how many of its outputs the float64 reference makes non-finite."""
    x, r = case.inputs[0], case.ref()[0]
    sp = torch.nonzero(~torch.isfinite(x)).tolist()
    return {"specials": [{"at": p, "value": str(float(x[tuple(p)]))} for p in sp],
            "outputs_per_batch_element": int(r[0].numel()),
            "ref_nonfinite_per_batch_element": {str(b): int((~torch.isfinite(r[b])).sum())
                                                for b in sorted({p[0] for p in sp})}}


def half_batch_norm_stats() -> dict:
    """torch's training-mode batch norm (aten native_batch_norm, this CPU) on one fp16/bf16 column +128,
    2^-14 x 4097, -128: the dtype it returns its batch mean in and the value, beside the exact mean. A mean that
    keeps the small terms was accumulated wider than the data dtype; its dtype says where it is stored."""
    x = torch.full((4099, 1), 2.0**-14, dtype=torch.float64)
    x[0], x[-1] = 128.0, -128.0
    out = {"exact_mean": float(x.mean())}
    for name in ("float16", "bfloat16"):
        mean = torch.native_batch_norm(x.to(TDT[name]), None, None, None, None, True, 0.1, 1e-5)[1]
        out[name] = {"mean": float(mean), "mean_dtype": str(mean.dtype).replace("torch.", "")}
    return out


def cuda_matmul_defaults() -> dict:
    """torch's process-wide CUDA matmul settings as a fresh process has them (readable without a GPU)."""
    m = torch.backends.cuda.matmul
    return {"torch": torch.__version__, "allow_tf32": bool(m.allow_tf32),
            "allow_fp16_reduced_precision_reduction": bool(m.allow_fp16_reduced_precision_reduction),
            "allow_bf16_reduced_precision_reduction": bool(m.allow_bf16_reduced_precision_reduction)}
