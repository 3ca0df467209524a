"""Rebuild the failing probes of the trusted corpus on this CPU and say where each error comes from.

    python experiments/trusted/explain_checks.py [--only SUBSTRING] [--out FILE]

For every check (a trusted problem and one of its failing probes, from the committed rows at seed 20260829) the
driver grades, with the verifier's own comparison and tolerance, the trusted candidate (torch's own code in the
probe's dtype) and the op-by-op correctly rounded forward (lethe.trusted.explain.RoundEveryOp), plus what each
check asks for: named operators computed ideally (``ops``), the conditioning floor measured on that probe
(``floor``), the bound at another reduction length (``n``). Writes results/trusted/explain_checks/checks.json
(one entry per check; ``--only`` updates the named entries of an existing file) and provenance.json beside it:
what the ``why`` lines of data/trusted/explanations.yaml quote. Single-threaded (torch.set_num_threads(1)); the
whole set takes a few minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from lethe import provenance
from lethe.trusted import explain as E

ROOT = Path(__file__).resolve().parents[2]
SEED = 20260829
OUT = ROOT / "results" / "trusted" / "explain_checks" / "checks.json"

# (kernel id, probe id, options). ``batch``: grade the first samples of the probe only (models without batch
# statistics: every sample is computed alone). ``ops``: lists of aten operators to compute ideally in the
# candidate. ``floor``: also grade against max(bound, conditioning floor). ``n``: also grade with this N.
CHECKS = [
    ("L2/93_ConvTranspose2d_Add_Min_GELU_Multiply", "rand2",
     {"ops": [["gelu"], ["convolution"]], "floor": True, "terms": "conv_transpose", "spread_at": [127, 4, 61, 52]}),
    ("L2/93_ConvTranspose2d_Add_Min_GELU_Multiply", "rand0",
     {"ops": [["convolution"]], "floor": True, "terms": "conv_transpose"}),
    ("L2/93_ConvTranspose2d_Add_Min_GELU_Multiply", "ord01", {"ops": [["convolution"]], "floor": True}),
    ("L2/93_ConvTranspose2d_Add_Min_GELU_Multiply", "nonfinite", {"ops": [["convolution"]]}),
    ("L2/93_ConvTranspose2d_Add_Min_GELU_Multiply", "accb_fp16", {"ops": [["gelu"], ["convolution"]]}),
    ("L2/93_ConvTranspose2d_Add_Min_GELU_Multiply", "prc_bf16", {"floor": True}),
    ("L2/93_ConvTranspose2d_Add_Min_GELU_Multiply", "prc_fp16", {"floor": True}),
    ("L2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling", "large",
     {"ops": [["convolution"]], "floor": True, "terms": "conv_transpose", "spread_at": [118, 12, 15, 9]}),
    ("L2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling", "cancel", {"floor": True, "terms": "conv_transpose"}),
    ("L1/69_conv_transposed_2D__asymmetric_input__asymmetric_kernel", "cancel",
     {"n": 480, "floor": True, "terms": "conv_transpose2d"}),
    ("L2/14_Gemm_Divide_Sum_Scaling", "accb_fp16", {}),
    ("L2/14_Gemm_Divide_Sum_Scaling", "accb_bf16", {}),
    ("L2/41_Gemm_BatchNorm_GELU_GroupNorm_Mean_ReLU", "zeros", {"floor": True}),
    ("L2/41_Gemm_BatchNorm_GELU_GroupNorm_Mean_ReLU", "rand0", {"floor": True}),
    ("L2/41_Gemm_BatchNorm_GELU_GroupNorm_Mean_ReLU", "cancel", {"floor": True}),
    ("L2/41_Gemm_BatchNorm_GELU_GroupNorm_Mean_ReLU", "prc_bf16", {"floor": True}),
    ("L2/41_Gemm_BatchNorm_GELU_GroupNorm_Mean_ReLU", "accb_bf16", {"floor": True}),
    ("L2/94_Gemm_BiasAdd_Hardtanh_Mish_GroupNorm", "cancel", {"floor": True, "terms": "gemm"}),
    ("L2/33_Gemm_Scale_BatchNorm", "ord01_batch_size", {"floor": True, "ops": [["addmm"], ["native_batch_norm"]]}),
    ("L2/33_Gemm_Scale_BatchNorm", "cancel", {"floor": True, "ops": [["addmm"]], "terms": "gemm"}),
    ("L2/33_Gemm_Scale_BatchNorm", "acc_bf16", {"floor": True}),
    ("L2/84_Gemm_BatchNorm_Scaling_Softmax", "cancel", {"floor": True, "terms": "gemm"}),
    ("L2/84_Gemm_BatchNorm_Scaling_Softmax", "accb_bf16_batch_size", {"floor": True}),
    ("L2/84_Gemm_BatchNorm_Scaling_Softmax", "accb_fp16_batch_size", {}),
    ("L2/97_Matmul_BatchNorm_BiasAdd_Divide_Swish", "ord01_batch_size",
     {"floor": True, "ops": [["addmm"], ["native_batch_norm"]]}),
    ("L2/97_Matmul_BatchNorm_BiasAdd_Divide_Swish", "cancel", {"floor": True, "terms": "matmul"}),
    ("L2/97_Matmul_BatchNorm_BiasAdd_Divide_Swish", "offset", {"floor": True}),
    ("L2/52_Conv2d_Activation_BatchNorm", "ord01", {"floor": True, "ops": [["convolution"], ["native_batch_norm"]]}),
    ("L2/52_Conv2d_Activation_BatchNorm", "acc_bf16", {"floor": True}),
    ("L2/73_Conv2d_BatchNorm_Scaling", "offset",
     {"n": 128 * 30 * 30, "ops": [["convolution"], ["native_batch_norm"]], "terms": "conv"}),
    ("L2/73_Conv2d_BatchNorm_Scaling", "acc_bf16", {"floor": True}),
    ("L2/17_Conv2d_InstanceNorm_Divide", "acc_bf16", {"floor": True}),
    ("L3/1_MLP", "accb_bf16_batch_size", {"floor": True}),
    ("L3/1_MLP", "accb_fp16_batch_size", {}),
    ("L3/46_NetVladWithGhostClusters", "accb_bf16",
     {"ops": [["mm"], ["bmm"], ["native_batch_norm"], ["_softmax"], ["sum"], ["linalg_vector_norm"], ["sub"]]}),
    ("L3/46_NetVladWithGhostClusters", "accb_fp16", {"ops": [["mm"], ["bmm"], ["linalg_vector_norm"], ["sub"]]}),
    ("L3/24_EfficientNetB2", "rand0", {"floor": True}),
    ("L3/24_EfficientNetB2", "ord01", {"floor": True}),
    ("L3/24_EfficientNetB2", "cancel", {"floor": True}),
    ("L3/24_EfficientNetB2", "prc_fp16", {"floor": True}),
    ("L2/79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max", "small", {"batch": 8, "floor": True, "serial": True}),
    ("L2/79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max", "small", {"batch": 8, "floor": True, "n": 14 * 30 * 30,
                                                                         "key": "small n=12600"}),
    ("L2/79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max", "offset", {"batch": 8}),
    ("L2/79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max", "ord01",
     {"batch": 8, "floor": True, "n": 14 * 30 * 30, "ops": [["convolution"], ["native_batch_norm"]]}),
    ("L2/79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max", "acc_bf16", {"batch": 8, "floor": True}),
    ("L2/23_Conv3d_GroupNorm_Mean", "rand0", {"batch": 8, "floor": True}),
    ("L2/61_ConvTranspose3d_ReLU_GroupNorm", "subnormal", {"batch": 2, "floor": True}),
]
# CMP-02 (the ``grad`` probe). ``flips``: leaves whose output signs (a ReLU's kink) are compared;
# ``argext``: (leaf, axis, "min"|"max") whose arg-extremum is compared.
GRAD_CHECKS = [
    ("L2/36_ConvTranspose2d_Min_Sum_GELU_Add", {}),
    ("L2/97_Matmul_BatchNorm_BiasAdd_Divide_Swish", {}),
    ("L2/24_Conv3d_Min_Softmax", {"batch": [92, 96], "argext": ["conv", 2, "min"]}),
    ("L2/23_Conv3d_GroupNorm_Mean", {"batch": 4}),
    ("L3/9_ResNet18", {"flips": ["layer2.1.bn1", "layer3.1.bn1"]}),
]


def short(s: dict) -> dict:
    """What the JSON keeps of one comparison."""
    out = {k: s[k] for k in ("n", "n_bad", "max_abs_err", "max_err_over_tol") if k in s}
    for k in ("new_nonfinite", "lost_nonfinite", "wrong_nonfinite"):
        if s.get(k):
            out[k] = s[k]
    if s.get("n_bad"):
        out["first_bad"] = s["first_bad"][:3]
        out["first_bad_values"] = s["first_bad_values"][:3]
    return out


def _batch(opts: dict) -> slice | None:
    b = opts.get("batch")
    return None if b is None else slice(*b) if isinstance(b, list) else slice(0, b)


def forward_check(kernel: str, pid: str, opts: dict) -> dict:
    batch = _batch(opts)
    c = E.Case(E.problem_source(kernel), SEED, pid, batch=batch)
    d = c.dtype
    ref, tol = c.ref()[0], c.bound()
    res = {"kernel": kernel, "probe": pid, "dtype": d, "N": c.N, "batch": opts.get("batch"),
           "cand": short(E.grade(ref, c.cand()[0], tol, d)), "ideal": short(E.grade(ref, c.ideal()[0], tol, d))}
    if c.probe.kind in ("cancel", "accum"):
        res["abs_scale"] = c.abs_scale()
    for names in opts.get("ops", []):
        res["ops:" + ",".join(names)] = short(E.grade(ref, c.cand(names)[0], tol, d))
    # the op-by-op correctly rounded forward's own error, four times over, as a floor (a proposal, not the verifier)
    res["ideal4"] = short(E.grade(ref, c.cand()[0], np.maximum(tol, 4 * (c.ideal()[0] - ref).abs().numpy()), d))
    if "n" in opts:
        res[f"n={opts['n']}"] = short(E.grade(ref, c.cand()[0], c.bound(n=opts["n"]), d))
    if opts.get("floor"):
        fl = np.maximum(tol, c.cond_floor(n=opts.get("n")))
        res["floor"] = short(E.grade(ref, c.cand()[0], fl, d))
        res["ideal_floor"] = short(E.grade(ref, c.ideal()[0], fl, d))
        if opts.get("serial"):  # the same candidate with each norm statistic one serial fp32 pass
            with E.serial_norm():
                res["serial_norm_floor"] = short(E.grade(ref, E.outputs(c.candidate(), c.inputs)[0], fl, d))
    if "terms" in opts:
        res["terms"] = E.terms_ratio(c, opts["terms"])
    if "spread_at" in opts:  # the floor's spread at the failing element under other sign draws
        res["spread_at"] = {"index": opts["spread_at"], "seeds": [SEED + i for i in range(4)],
                            "spread": c.spread_at(opts["spread_at"], [SEED + i for i in range(4)])}
    if c.probe.kind == "offset":  # the measured sensitivity where the candidate fails
        bad = res["cand"].get("first_bad", [])
        res["sens_at_first_bad"] = [float(c.offset_sens()[tuple(i)]) for i in bad]
    return res


def grad_check(kernel: str, opts: dict) -> dict:
    batch = _batch(opts)
    c = E.Case(E.problem_source(kernel), SEED, "grad", batch=batch)
    ref, cand = c.grads("ref"), c.grads("cand")
    bounds = c.grad_bounds(ref)
    per = {k: short(E.grade(ref[k], cand[k], bounds[k], c.dtype)) for k in ref}
    bad = {k: v for k, v in per.items() if v.get("n_bad")}
    res = {"kernel": kernel, "probe": "grad", "batch": opts.get("batch"), "n_checked": len(per), "failing": bad,
           "passing": sorted(set(per) - set(bad))}
    if "flips" in opts:
        res["flips"] = [E.sign_flips(c, m) for m in opts["flips"]]
    if "argext" in opts:
        res["argext"] = E.argext_flips(c, *opts["argext"])
    return res


def special_checks() -> dict:
    """Facts that are not a graded probe: torch's fp32 GELU tails, the cumprod and transposed-convolution
    non-finite probes (what an fp32 accumulator returns, where the exact answer is not finite)."""
    return {"gelu_tails": E.gelu_tails(),
            "L1/90_cumprod nonfinite": E.cumprod_underflow(E.Case(E.problem_source("L1/90_cumprod"), SEED,
                                                                   "nonfinite")),
            "L1/69 nonfinite footprint": E.nonfinite_footprint(E.Case(E.problem_source(
                "L1/69_conv_transposed_2D__asymmetric_input__asymmetric_kernel"), SEED, "nonfinite")),
            "half_batch_norm_stats": E.half_batch_norm_stats(), "cuda_matmul_defaults": E.cuda_matmul_defaults()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the checks whose kernel or probe contains this text")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    torch.set_num_threads(1)
    out_path = Path(a.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = json.loads(out_path.read_text()) if out_path.exists() else {}

    def save() -> None:
        out_path.write_text(json.dumps(done, indent=1, sort_keys=True, allow_nan=False) + "\n")

    for kernel, pid, opts in CHECKS:
        key = f"{kernel} {opts.get('key', pid)}"
        if a.only and a.only not in key:
            continue
        t = time.time()
        done[key] = {**forward_check(kernel, pid, opts), "seconds": round(time.time() - t, 1)}
        print(json.dumps(done[key])[:2000], flush=True)
        save()
    for kernel, opts in GRAD_CHECKS:
        if a.only and a.only not in f"{kernel} grad":
            continue
        t = time.time()
        done[f"{kernel} grad"] = {**grad_check(kernel, opts), "seconds": round(time.time() - t, 1)}
        print(json.dumps(done[f"{kernel} grad"])[:2000], flush=True)
        save()
    if not a.only or a.only == "special":
        done["special"] = special_checks()
        save()
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "") if Path("/proc/cpuinfo").exists() else ""
    provenance.write(out_path.parent / "provenance.json", command="python experiments/trusted/explain_checks.py"
                     + (f" --only {a.only!r}" if a.only else ""), seed=SEED, checks=len(done), cpu=cpu,
                     threads=torch.get_num_threads())


if __name__ == "__main__":
    main()
