"""fla #640 on the H200: is fla's gated chunk backward miscompiled with the guard bypassed, and does the battery
catch it?

Two measurements, in one priority-ordered task list cut by a wall-clock budget (fla autotunes every new
(kernel, dtype, K) on first call, which can take a minute each):

* direct: fla's forward and backward against float64 autograd of the oracle (lethe.kernels.gdn.reference) on the
  same rounded inputs and the same upstream gradient, per tensor (o, dq, dk, dv, dg, dbeta), first with fla's
  guard in place (records the refusal), then with it bypassed (lethe.foreign.fla640.bypass), three times
  (bitwise determinism). A spy on ``chunk_bwd_kernel_dqkwg`` records the tile (BK) each backward launched.
* verifier: lethe.verifier.api.verify(ref, cand, device="cuda", profile="strict") on generated pairs
  (lethe.foreign.fla640.pairs), recording which gates fire and CMP-02's evidence per input.

Every exposed configuration (head dim K=64, tile BK=64) has a control at K=128 (BK=128) with everything else
equal. See docs/fla640.md for the device command and for what counts as a catch.

    python3 experiments/fla640/run.py --out $OUT/fla640 [--quick] [--budget-s 330]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
import traceback
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Before torch/triton/fla are imported: pure-Triton fla, and one Triton cache shared with the verifier's
# candidate processes (so they reuse the kernels and autotune choices this process already made).
os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
SHARED_TRITON_CACHE = os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/fla640-triton-cache")

import torch

from lethe import provenance
from lethe.foreign import fla640 as F

SCHEMA = "lethe.fla640.direct/1"
# Labels for one gradient's relative Frobenius error against the float64 oracle. fla's own chunk_gdn tests accept
# rmse ratios up to 0.02 in half precision; #640's corrupted dk had errors of the order of the values
# themselves. A cell is "wrong" at 0.1 (five times fla's own allowance), "ok" at or under 0.02.
OK_REL, WRONG_REL = 0.02, 0.1
# An exposed tensor is a miscompile signature when it is wrong AND at least this many times its control's error.
CONTROL_FACTOR = 10.0
DT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
GRAD_NAMES = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta"}


def log(msg: str) -> None:
    print(f"[fla640 {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------------------------------
# observation of the kernel under test


class DqkwgSpy:
    """Stands in for ``chunk_o.chunk_bwd_kernel_dqkwg`` (read as a module global at call time) and records the
    tile and gate flags of every launch, then launches the real kernel unchanged."""

    def __init__(self, real):
        self.real = real
        self.calls: list[dict] = []

    def __getitem__(self, grid):
        launch = self.real[grid]

        def run(*args, **kw):
            q = kw.get("q")
            self.calls.append({"BK": kw.get("BK"), "BV": kw.get("BV"), "K": kw.get("K"), "V": kw.get("V"),
                               "g": kw.get("g") is not None, "g_gamma": kw.get("g_gamma") is not None,
                               "dw": kw.get("dw") is not None,
                               "dtype": str(q.dtype).replace("torch.", "") if q is not None else None})
            return launch(*args, **kw)

        return run

    def __getattr__(self, name):
        return getattr(self.real, name)

    def best_config(self) -> str | None:
        bc = getattr(self.real, "best_config", None)
        return str(bc) if bc is not None else None


def install_spy():
    chunk_o = F._chunk_o()
    real = getattr(chunk_o, F.GUARD_KERNEL)
    spy = DqkwgSpy(real)
    setattr(chunk_o, F.GUARD_KERNEL, spy)
    return spy


# ----------------------------------------------------------------------------------------------------------
# direct check


def errors(got: torch.Tensor | None, ref: torch.Tensor) -> dict:
    """Relative Frobenius and max errors of one tensor against its float64 reference (both moved to CPU)."""
    if got is None:
        return {"missing": True}
    r = ref.detach().double().cpu()
    g = got.detach().double().cpu()
    fin = torch.isfinite(g)
    d = torch.where(fin, g - r, torch.zeros_like(r))
    rn = float(r.norm())
    return {"rel_fro": float(d.norm()) / rn if rn > 0 else float(d.norm()),
            "max_abs": float(d.abs().max()) if d.numel() else 0.0,
            "max_ref": float(r.abs().max()) if r.numel() else 0.0,
            "nonfinite": int((~fin).sum())}


def label(rel: float | None) -> str:
    if rel is None:
        return "n/a"
    return "ok" if rel <= OK_REL else ("wrong" if rel >= WRONG_REL else "suspect")


def _cell_seed(seed: int, op: str, K: int, dtype: str, T: int) -> int:
    return (seed * 1_000_003 + zlib.crc32(f"{op}/{K}/{dtype}/{T}".encode())) % (2**31)


def run_fla(op: str, xk: dict, up: torch.Tensor, scale: float, device: str):
    """One fla forward+backward on fresh leaves; returns (o, {name: grad}) on CPU-detached copies."""
    leaves = {n: t.to(device).clone().requires_grad_(True) for n, t in xk.items()}
    o = F.fla_call(op, leaves, scale)
    o.backward(up.to(device=device, dtype=o.dtype))
    if device == "cuda":
        torch.cuda.synchronize()
    return o.detach().cpu(), {n: (t.grad.detach().cpu() if t.grad is not None else None)
                              for n, t in leaves.items()}


def direct_cell(op: str, K: int, dtype: str, T: int, *, B: int, H: int, seed: int, device: str,
                oracle_device: str, spy: DqkwgSpy | None, repeats: int = 3) -> dict:
    """See the module docstring: guard in place, then bypassed x repeats, each against the float64 oracle."""
    t0 = time.perf_counter()
    cell = {"op": op, "K": K, "V": K, "BK_expected": F.expected_bk(K), "dtype": dtype, "T": T, "B": B, "H": H,
            "guarded_op": F.OPS[op].guarded, "seed": _cell_seed(seed, op, K, dtype, T)}
    gen = torch.Generator().manual_seed(cell["seed"])
    raw = F.raw_inputs(op, B, T, H, K, K, gen)
    with torch.no_grad():
        mapped = F.domain_map(op, raw)
    # Kernel inputs: q, k, v, beta in the cell dtype; g in fp32 as fla's layers pass it.
    xk = {n: t.to(torch.float32 if n == "g" else DT[dtype]) for n, t in mapped.items()}
    up = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64).to(DT[dtype])
    scale = K ** -0.5

    # float64 oracle on exactly the rounded values fla receives
    xo = {n: t.to(torch.float64).to(oracle_device).requires_grad_(True) for n, t in xk.items()}
    o_ref = F.oracle(op, xo, scale)
    o_ref.backward(up.to(torch.float64).to(oracle_device))
    ref = {"o": o_ref.detach().cpu(), **{GRAD_NAMES[n]: t.grad.detach().cpu() for n, t in xo.items()}}
    cell["oracle_seconds"] = round(time.perf_counter() - t0, 2)

    # 1) guard in place
    state = F.guard_state()
    cell["guard_state"] = state
    n_before = len(spy.calls) if spy else 0
    try:
        o, grads = run_fla(op, xk, up, scale, device)
        cell["guarded"] = {"refused": False, "errors": _all_errors(o, grads, ref)}
    except RuntimeError as exc:
        msg = str(exc)
        cell["guarded"] = {"refused": F.GUARD_MESSAGE_MARK in msg, "error": msg[:400]}
    except Exception as exc:  # noqa: BLE001 - any other failure is this cell's finding
        cell["guarded"] = {"refused": False, "error": f"{type(exc).__name__}: {exc}"[:400]}

    # 2) guard bypassed, repeated for bitwise determinism
    runs = []
    try:
        with F.bypass():
            for _ in range(repeats):
                runs.append(run_fla(op, xk, up, scale, device))
    except Exception as exc:  # noqa: BLE001
        cell["bypassed"] = {"error": f"{type(exc).__name__}: {exc}"[:600], "trace": traceback.format_exc()[-1500:]}
    if runs:
        o, grads = runs[0]
        errs = _all_errors(o, grads, ref)
        det = all(torch.equal(o, o2) and all(
            (grads[n] is None and g2[n] is None) or (grads[n] is not None and g2[n] is not None
                                                     and torch.equal(grads[n], g2[n]))
            for n in grads) for o2, g2 in runs[1:])
        worst = max(((k, v["rel_fro"]) for k, v in errs.items() if k != "o" and "rel_fro" in v),
                    key=lambda kv: kv[1], default=(None, None))
        cell["bypassed"] = {"errors": errs, "bitwise_deterministic": det, "repeats": len(runs),
                            "worst_grad": worst[0], "worst_grad_rel": worst[1], "label": label(worst[1]),
                            "forward_label": label(errs["o"].get("rel_fro"))}
        # later repeats against the oracle too: a miscompile may be intermittent
        cell["bypassed"]["worst_grad_rel_all_repeats"] = max(
            (v["rel_fro"] for o2, g2 in runs for k, v in _all_errors(o2, g2, ref).items()
             if k != "o" and "rel_fro" in v), default=None)
    if spy is not None:
        calls = spy.calls[n_before:]
        cell["dqkwg_launches"] = sorted({json.dumps(c, sort_keys=True) for c in calls})
        cell["dqkwg_launches"] = [json.loads(c) for c in cell["dqkwg_launches"]]
        cell["dqkwg_best_config"] = spy.best_config()
    cell["seconds"] = round(time.perf_counter() - t0, 2)
    return cell


def _all_errors(o, grads, ref) -> dict:
    out = {"o": errors(o, ref["o"])}
    for n, g in grads.items():
        out[GRAD_NAMES[n]] = errors(g, ref[GRAD_NAMES[n]])
    return out


# ----------------------------------------------------------------------------------------------------------
# verifier


def shared_cache_runner(target, **kw):
    """lethe.sandbox.run_isolated with the Triton cache shared (compiled binaries and autotune results keyed by
    source hash): the candidate process still runs isolated, it only skips recompiling fla's kernels."""
    from lethe.sandbox import run_isolated

    env = dict(kw.pop("env", None) or {})
    env.setdefault("TRITON_CACHE_DIR", SHARED_TRITON_CACHE)
    env.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    return run_isolated(target, env=env, **kw)


def verify_pair(pair: F.Pair, *, seed: int, device: str, timeout_s: float) -> tuple[dict, dict]:
    from lethe.verifier import api

    ref, cand = pair.sources()
    row = api.verify(ref, cand, profile="strict", device=device, seed=seed, timeout_s=timeout_s,
                     memory_mb=16384, kernel_id=pair.id, corpus="fla640", op_class=pair.op,
                     sources={"generator": "lethe.foreign.fla640", "pair": pair.id, "fla": F.FLA_VERSION},
                     runner=shared_cache_runner)
    summary = {"id": pair.id, "op": pair.op, "K": pair.K, "T": pair.T, "BK_expected": F.expected_bk(pair.K),
               "compute_dtype": pair.compute_dtype or "native", "exposed": pair.exposed,
               "status": row["status"], "verdict": api.verdict(row), "error": row.get("error", "")[:400],
               "failing_gates": api.failed_gates(row) if row["status"] == "gated" else [],
               "gates": {g: v["status"] for g, v in row["gates"].items()}, "seconds": row["seconds"]}
    ev = json.loads(row["gates"]["CMP-02"]["evidence"] or "{}")
    gp = (ev.get("probes") or {}).get("grad") or {}
    names = F.OPS[pair.op].inputs
    summary["cmp02"] = {"status": row["gates"]["CMP-02"]["status"], "reason": row["gates"]["CMP-02"]["reason"],
                        "inputs": {names[int(k[5:])] if k.startswith("input") and int(k[5:]) < len(names) else k:
                                   {"max_err_over_tol": v.get("max_err_over_tol"), "n_bad": v.get("n_bad"),
                                    "n": v.get("n"), "max_abs_err": v.get("max_abs_err")}
                                   for k, v in (gp.get("checks") or {}).items()}}
    errs = [v["max_err_over_tol"] for v in summary["cmp02"]["inputs"].values()
            if v.get("max_err_over_tol") is not None]
    summary["cmp02"]["worst_err_over_tol"] = max(errs) if errs else None
    return row, summary


# ----------------------------------------------------------------------------------------------------------
# plan


def plan(quick: bool) -> list[dict]:
    """Priority order: the exposed cell and its control first, then the verifier on them, then breadth."""
    def d(op, K, dtype, T):
        return {"kind": "direct", "op": op, "K": K, "dtype": dtype, "T": T}

    def v(op, K, cd, T=64):
        return {"kind": "verify", "pair": F.Pair(F.pair_id(op, K, cd, T), op, K, cd, T=T)}

    if quick:
        return [d("gdn", 64, "bfloat16", 64), d("gdn", 128, "bfloat16", 64),
                v("gdn", 64, "bfloat16"), v("gdn", 128, "bfloat16")]
    tasks = [d("gdn", 64, "bfloat16", 256), d("gdn", 128, "bfloat16", 256),
             v("gdn", 64, "bfloat16"), v("gdn", 128, "bfloat16"),
             d("sgla", 64, "bfloat16", 256), d("sgla", 128, "bfloat16", 256)]
    tasks += [d(op, K, "bfloat16", T) for op in ("gdn", "sgla") for T in (64, 1024) for K in (64, 128)]
    tasks += [v("sgla", 64, "bfloat16"), v("sgla", 128, "bfloat16")]
    tasks += [d("sgla_gamma", 64, "bfloat16", 256), d("la", 64, "bfloat16", 256),
              d("sgla_gamma", 128, "bfloat16", 256), d("la", 128, "bfloat16", 256)]
    tasks += [d("gdn", K, "float16", 256) for K in (64, 128)]
    tasks += [v("gdn", 64, None), v("gdn", 128, None)]
    tasks += [d("gdn", K, "float32", 256) for K in (64, 128)]
    tasks += [d("sgla", K, "float16", 256) for K in (64, 128)]
    # a longer base sequence (4 chunks) for the verifier: its own shape probes then vary T around 256
    tasks += [v("gdn", 64, "bfloat16", 256), v("gdn", 128, "bfloat16", 256)]
    return tasks


def _kernel_key(task: dict) -> tuple:
    """What makes fla autotune afresh: the op's kernels, K and the kernel dtype(s)."""
    if task["kind"] == "direct":
        return (task["op"], task["K"], task["dtype"])
    p: F.Pair = task["pair"]
    return (p.op, p.K, p.compute_dtype or "native")


def estimate_s(task: dict, seen: set) -> float:
    if task["kind"] == "direct":
        return 20.0 if _kernel_key(task) in seen else 90.0
    p: F.Pair = task["pair"]
    # a native pair autotunes fp32 fwd+bwd and fp16/bf16 forwards in its own process
    return 60.0 if (p.compute_dtype and _kernel_key({"kind": "direct", "op": p.op, "K": p.K,
                                                      "dtype": p.compute_dtype}) in seen) else 180.0


# ----------------------------------------------------------------------------------------------------------
# summary


def comparisons(cells: list[dict]) -> list[dict]:
    """Exposed (K=64) vs control (K=128) per (op, dtype, T) and gradient: the miscompile signature."""
    by = {(c["op"], c["dtype"], c["T"], c["K"]): c for c in cells if "errors" in c.get("bypassed", {})}
    out = []
    for (op, dt, T, K), c in sorted(by.items()):
        if K != 64 or (op, dt, T, 128) not in by:
            continue
        ctl = by[(op, dt, T, 128)]
        for name, e in c["bypassed"]["errors"].items():
            ce = ctl["bypassed"]["errors"].get(name, {})
            if "rel_fro" not in e or "rel_fro" not in ce:
                continue
            ratio = e["rel_fro"] / max(ce["rel_fro"], 1e-30)
            out.append({"op": op, "dtype": dt, "T": T, "tensor": name, "exposed_rel": e["rel_fro"],
                        "control_rel": ce["rel_fro"], "ratio": ratio,
                        "signature": bool(e["rel_fro"] >= WRONG_REL and ratio >= CONTROL_FACTOR)})
    return out


def outcome(cells: list[dict], verifs: list[dict], comps: list[dict]) -> list[dict]:
    """Per verifier pair with an exposed configuration: ground truth (direct) and the battery's answer."""
    res = []
    for v in verifs:
        if not v["exposed"]:
            continue
        cd = v["compute_dtype"]
        dts = [cd] if cd != "native" else ["float32"]
        sig = [c for c in comps if c["op"] == v["op"] and c["dtype"] in dts and c["signature"]]
        measured = [c for c in comps if c["op"] == v["op"] and c["dtype"] in dts]
        ctl = next((w for w in verifs if w["op"] == v["op"] and w["compute_dtype"] == cd and w["K"] == 128
                    and w.get("T") == v.get("T")), None)
        truth = "miscompiled" if sig else ("clean" if measured else "unmeasured")
        fired = v["cmp02"]["status"] == "fail"
        ctl_fired = ctl is not None and ctl["cmp02"]["status"] == "fail"
        we, ce = v["cmp02"].get("worst_err_over_tol"), (ctl or {}).get("cmp02", {}).get("worst_err_over_tol")
        sep = (we / ce) if (we is not None and ce) else None
        if truth == "miscompiled":
            if fired and ctl is not None and not ctl_fired:
                battery = "catch (CMP-02 fails, control passes)"
            elif fired and sep is not None and sep >= CONTROL_FACTOR:
                battery = f"flagged, control also fails CMP-02 (err/tol {sep:.1f}x the control's)"
            elif fired:
                battery = "flagged, not separable from the control"
            else:
                battery = f"MISS (CMP-02 {v['cmp02']['status']})"
        elif truth == "clean":
            battery = "nothing to catch" + (" (CMP-02 fails anyway: precision)" if fired else "")
        else:
            battery = "ground truth not measured in this run"
        res.append({"pair": v["id"], "ground_truth": truth, "battery": battery, "cmp02_exposed": we,
                    "cmp02_control": ce, "separation": sep, "cmp02_reason": v["cmp02"].get("reason", ""),
                    "control_cmp02_reason": (ctl or {}).get("cmp02", {}).get("reason", "")})
    return res


def _fmt(x, spec=".2e"):
    return "-" if x is None else format(x, spec)


def print_summary(doc: dict) -> None:
    print("\n=== fla #640: direct check (guard bypassed; relative Frobenius error vs float64 oracle) ===")
    cols = ["o", "dq", "dk", "dv", "dg", "dbeta"]
    print(f"{'op':<11}{'K':>4}{'BK':>4} {'dtype':<9}{'T':>5} {'refused':<8}" + "".join(f"{c:>9}" for c in cols)
          + "  det   label")
    for c in doc["cells"]:
        by = c.get("bypassed", {})
        errs = by.get("errors", {})
        ref = c.get("guarded", {}).get("refused")
        vals = "".join(f"{_fmt(errs.get(k, {}).get('rel_fro'), '.1e'):>9}" for k in cols)
        det = {True: "yes", False: "NO"}.get(by.get("bitwise_deterministic"), "-")
        if "errors" in by:
            lab = by["label"]
        else:
            lab = "error: " + (by.get("error") or c.get("error") or "")[:60]
        print(f"{c['op']:<11}{c['K']:>4}{c['BK_expected']:>4} {c['dtype']:<9}{c['T']:>5} {str(ref):<8}{vals}"
              f"  {det:<5} {lab}")
    if doc["comparisons"]:
        print("\n--- exposed (K=64, BK=64) vs control (K=128, BK=128): signature = rel >= "
              f"{WRONG_REL} and >= {CONTROL_FACTOR:g}x control ---")
        for r in doc["comparisons"]:
            if r["tensor"] == "o" and not r["signature"]:
                continue
            print(f"{r['op']:<11}{r['dtype']:<9}T={r['T']:<5}{r['tensor']:<6} exposed {_fmt(r['exposed_rel'])}  "
                  f"control {_fmt(r['control_rel'])}  x{r['ratio']:.1f}  {'SIGNATURE' if r['signature'] else ''}")
    print("\n=== verifier (profile strict) ===")
    print(f"{'pair':<32}{'status':<15}{'verdict':<15}{'CMP-02':<7}{'worst err/tol':>14}  failing gates")
    for v in doc["verifier"]:
        print(f"{v['id']:<32}{v['status']:<15}{v['verdict']:<15}{v['cmp02']['status']:<7}"
              f"{_fmt(v['cmp02'].get('worst_err_over_tol')):>14}  {','.join(v['failing_gates']) or '-'}"
              + (f"  [{v['error'][:80]}]" if v["status"] != "gated" else ""))
    if doc["skipped"]:
        print(f"\nskipped for the time budget: {len(doc['skipped'])} task(s): "
              + "; ".join(s["task"] for s in doc["skipped"][:8]))
    print("\n=== outcome ===")
    if not doc["outcome"]:
        print("no exposed verifier pair finished")
    for o in doc["outcome"]:
        print(f"{o['pair']:<32} ground truth: {o['ground_truth']:<12} battery: {o['battery']}")


# ----------------------------------------------------------------------------------------------------------


def _task_name(t: dict) -> str:
    if t["kind"] == "direct":
        return f"direct {t['op']} K={t['K']} {t['dtype']} T={t['T']}"
    return f"verify {t['pair'].id}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="gdn only, T=64, bf16: exposed + control, 2 pairs")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting tasks past this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=2)
    # H is in most of fla's autotune keys: the verifier pairs use H=2 too, so their candidate processes reuse
    # the autotune results of the direct cells (shared Triton cache) instead of tuning again.
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--oracle-device", choices=("cuda", "cpu"), default=None,
                    help="where the float64 oracle runs (default: cuda when available)")
    ap.add_argument("--skip-verifier", action="store_true")
    ap.add_argument("--only-verifier", action="store_true", help="run only the verifier pairs of the plan")
    ap.add_argument("--max-tasks", type=int, default=0, help="keep the first N tasks of the plan (0: all)")
    ap.add_argument("--task", action="append", default=[],
                    help="keep only tasks whose name contains this text (repeatable), e.g. "
                         "--task 'verify fla640/gdn/K128/bfloat16' for the control pair alone")
    ap.add_argument("--ignore-estimates", action="store_true",
                    help="start a task whenever budget is left (the caller's hard timeout bounds it)")
    ap.add_argument("--cpu-plumbing", action="store_true",
                    help="no GPU: run one direct cell and one pair on the CPU to exercise the plumbing only")
    ap.add_argument("--verify-timeout-s", type=float, default=300.0)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.cpu_plumbing:
        raise SystemExit("fla640 needs the GPU (pass --cpu-plumbing to exercise the script on a CPU)")
    oracle_device = args.oracle_device or device
    try:
        import fla
        import triton
    except Exception as exc:  # noqa: BLE001
        raise SystemExit(f"fla is not importable ({exc}); install the carried wheel, see docs/fla640.md") from exc
    F.check_guard_target()
    fla_info = {"version": getattr(fla, "__version__", None), "path": str(Path(fla.__file__).parent),
                "triton": triton.__version__, "torch": torch.__version__,
                "dispatch_disabled": bool(importlib.import_module("fla.backends")._DISPATCH_DISABLED),
                "guard_state": F.guard_state(), "guard": {"module": F.GUARD_MODULE, "function": F.GUARD_FUNCTION,
                                                          "flag": F.GUARD_FLAG},
                "triton_cache": SHARED_TRITON_CACHE, "oracle_device": oracle_device, "device": device}
    if device == "cuda":
        fla_info["gpu"] = torch.cuda.get_device_name(0)
        fla_info["capability"] = list(torch.cuda.get_device_capability(0))
    log(f"fla {fla_info['version']} triton {fla_info['triton']} torch {fla_info['torch']} on {device}; "
        f"guard {fla_info['guard_state']}")
    prov_extra = {"experiment": "fla640", "fla": fla_info["version"], "quick": args.quick,
                  "budget_s": args.budget_s, "seed": args.seed}
    provenance.write(out / "provenance.json", **prov_extra)
    spy = install_spy()

    tasks = plan(args.quick)
    if args.cpu_plumbing:
        tasks = [{"kind": "direct", "op": "gdn", "K": 64, "dtype": "float32", "T": 16},
                 {"kind": "verify", "pair": F.Pair(F.pair_id("sgla", 64, None, 16), "sgla", 64, None, T=16)}]
    if args.skip_verifier:
        tasks = [t for t in tasks if t["kind"] != "verify"]
    if args.only_verifier:
        tasks = [t for t in tasks if t["kind"] == "verify"]
    if args.task:
        tasks = [t for t in tasks if any(sub in _task_name(t) for sub in args.task)]
    if args.max_tasks:
        tasks = tasks[: args.max_tasks]
    doc = {"schema": SCHEMA, "fla": fla_info, "thresholds": {"ok_rel": OK_REL, "wrong_rel": WRONG_REL,
                                                             "control_factor": CONTROL_FACTOR},
           "shapes": {"B": args.batch, "H": args.heads}, "cells": [], "verifier": [], "skipped": [],
           "comparisons": [], "outcome": []}
    rows: list[dict] = []
    seen: set = set()

    def flush():
        doc["comparisons"] = comparisons(doc["cells"])
        doc["outcome"] = outcome(doc["cells"], doc["verifier"], doc["comparisons"])
        doc["seconds"] = round(time.perf_counter() - t_start, 1)
        (out / "direct.json").write_text(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
        if rows:
            from lethe.verifier.records import write_rows

            write_rows(rows, out / "verdicts.parquet")

    for t in tasks:
        name = _task_name(t)
        left = args.budget_s - (time.perf_counter() - t_start)
        est = estimate_s(t, seen)
        if left < est and not (args.ignore_estimates and left > 0):
            doc["skipped"].append({"task": name, "left_s": round(left, 1), "estimate_s": est})
            log(f"skip {name}: {left:.0f}s left < estimate {est:.0f}s")
            continue
        log(f"start {name} ({left:.0f}s left)")
        t0 = time.perf_counter()
        if t["kind"] == "direct":
            try:
                cell = direct_cell(t["op"], t["K"], t["dtype"], t["T"], B=args.batch, H=args.heads, seed=args.seed,
                                   device=device, oracle_device=oracle_device, spy=spy)
            except Exception as exc:  # noqa: BLE001 - a broken cell is recorded, the run goes on
                cell = {"op": t["op"], "K": t["K"], "BK_expected": F.expected_bk(t["K"]), "dtype": t["dtype"],
                        "T": t["T"], "error": f"{type(exc).__name__}: {exc}"[:600],
                        "trace": traceback.format_exc()[-1500:]}
            doc["cells"].append(cell)
            seen.add(_kernel_key(t))
            by = cell.get("bypassed", {})
            log(f"done {name} in {time.perf_counter() - t0:.0f}s: refused={cell.get('guarded', {}).get('refused')} "
                f"worst={by.get('worst_grad')} {_fmt(by.get('worst_grad_rel'))} {by.get('label', by.get('error', ''))}")
        else:
            if device == "cuda":
                torch.cuda.empty_cache()
            try:
                row, summ = verify_pair(t["pair"], seed=args.seed, device=device, timeout_s=args.verify_timeout_s)
                rows.append(row)
                doc["verifier"].append(summ)
                log(f"done {name} in {time.perf_counter() - t0:.0f}s: {summ['status']} {summ['verdict']} "
                    f"failing={summ['failing_gates']} CMP-02 worst err/tol "
                    f"{_fmt(summ['cmp02'].get('worst_err_over_tol'))}")
            except Exception as exc:  # noqa: BLE001
                doc["verifier"].append({"id": t["pair"].id, "op": t["pair"].op, "K": t["pair"].K, "T": t["pair"].T,
                                        "BK_expected": F.expected_bk(t["pair"].K),
                                        "compute_dtype": t["pair"].compute_dtype or "native",
                                        "exposed": t["pair"].exposed, "status": "harness_error",
                                        "verdict": "-", "error": f"{type(exc).__name__}: {exc}"[:400],
                                        "failing_gates": [], "gates": {}, "cmp02": {"status": "-"}})
                log(f"harness error in {name}: {exc}")
            seen.add(_kernel_key(t))
        flush()

    flush()
    provenance.write(out / "provenance.json", **prov_extra, seconds=doc["seconds"],
                     tasks_run=len(doc["cells"]) + len(doc["verifier"]), tasks_skipped=len(doc["skipped"]))
    print_summary(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
