"""Train each of the five family members through the chunked backward on synthetic associative recall (MQAR).

For every member the same model (fixed seed) is trained twice on the same batches:

* fast path      -- ``chunk_family(..., backend="triton")`` with the recurrence inputs in bfloat16 (the kernels
                    accumulate in float32, dS is carried in float32);
* reference path -- ``chunk_family(..., backend="torch")`` entirely in float32.

Checks, stated before the runs: zero non-finite losses or gradients; the loss goes down (mean of the last
window below 0.9x the mean of the first window); the fast curve matches the reference curve: the window means
(window = ``--window`` steps) never differ by more than ``--curve-tol`` x the reference's first-window mean.

Task (Zoology's MQAR): ``n_pairs`` key/value tokens, then ``n_queries`` keys drawn from them; the target at each
query is its value. One mixer layer sees a one-step token shift (the short convolution of GLA/GDN layers), which
is what lets a single recurrent layer bind a key to the value that follows it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


def mqar_batch(gen, batch, n_keys, n_pairs, n_queries, device):
    """Tokens [B, T] and targets [B, T] (-100 where nothing is asked). Keys 1..n_keys, values after them."""
    keys = torch.stack([torch.randperm(n_keys, generator=gen)[:n_pairs] for _ in range(batch)]) + 1
    vals = torch.randint(0, n_keys, (batch, n_pairs), generator=gen) + n_keys + 1
    ctx = torch.stack([keys, vals], dim=-1).reshape(batch, 2 * n_pairs)
    pick = torch.randint(0, n_pairs, (batch, n_queries), generator=gen)
    qk = torch.gather(keys, 1, pick)
    qv = torch.gather(vals, 1, pick)
    tokens = torch.cat([ctx, qk], dim=1)
    targets = torch.cat([torch.full_like(ctx, -100), qv], dim=1)
    return tokens.to(device), targets.to(device)


class Mixer(nn.Module):
    """One recurrent mixer: q, k, v and the member's own gates from the current and the previous token."""

    def __init__(self, member, d_model, H, K, V):
        super().__init__()
        self.member, self.H, self.K, self.V = member, H, K, V
        d_in = 2 * d_model
        self.qkv = nn.Linear(d_in, H * (2 * K + V), bias=False)
        self.gate = None
        if member in ("gla", "kda", "gdn"):
            self.gate = nn.Linear(d_in, H * K)
        elif member == "ssd":
            self.gate = nn.Linear(d_in, H)
        if self.gate is not None:
            nn.init.constant_(self.gate.bias, -3.0)  # start with slow decay (~0.05 per step)
        self.erase = nn.Linear(d_in, H * K) if member == "gdn" else (nn.Linear(d_in, H) if member == "kda" else None)
        self.write = nn.Linear(d_in, H * V) if member == "gdn" else None
        self.out = nn.Linear(H * V, d_model, bias=False)

    def forward(self, x, backend, lowp, chunk):
        from lethe.kernels.gdn.autograd import chunk_family

        B, T, _ = x.shape
        H, K, V = self.H, self.K, self.V
        xs = torch.cat([x, F.pad(x, (0, 0, 1, 0))[:, :T]], dim=-1)
        q, k, v = self.qkv(xs).split([H * K, H * K, H * V], dim=-1)
        q = F.normalize(q.view(B, T, H, K), dim=-1)
        k = F.normalize(k.view(B, T, H, K), dim=-1)
        v = v.view(B, T, H, V)
        args = dict(q=q, k=k, v=v)
        if self.gate is not None:
            # lower-bounded log-decay in (-1, 0): a chunk's cumulative decay stays above the float32 floor
            g = -torch.sigmoid(self.gate(xs))
            args["g"] = g.view(B, T, H) if self.member == "ssd" else g.view(B, T, H, K)
        if self.member == "kda":
            args["b"] = torch.sigmoid(self.erase(xs)).view(B, T, H)
        if self.member == "gdn":
            args["b"] = 2.0 * torch.sigmoid(self.erase(xs)).view(B, T, H, K)
            args["w"] = torch.sigmoid(self.write(xs)).view(B, T, H, V)
        args = {n: t.to(lowp) for n, t in args.items()}
        o, _ = chunk_family(member=self.member, backend=backend, chunk=chunk, **args)
        return self.out(o.float().reshape(B, T, H * V))


class Model(nn.Module):
    def __init__(self, member, vocab, d_model, H, K, V):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.mixer = Mixer(member, d_model, H, K, V)
        self.norm2 = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens, backend, lowp, chunk):
        x = self.emb(tokens)
        x = x + self.mixer(self.norm1(x), backend, lowp, chunk)
        return self.head(self.norm2(x))


def train(member, backend, lowp, cfg, device):
    torch.manual_seed(cfg["seed"])
    model = Model(member, 2 * cfg["n_keys"] + 1, cfg["d_model"], cfg["H"], cfg["K"], cfg["V"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    losses, accs, nonfinite = [], [], 0
    for _ in range(cfg["steps"]):
        tokens, targets = mqar_batch(gen, cfg["batch"], cfg["n_keys"], cfg["n_pairs"], cfg["n_queries"], device)
        logits = model(tokens, backend, lowp, cfg["chunk"])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        finite = bool(torch.isfinite(loss)) and all(
            bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
        if not finite:
            nonfinite += 1
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        losses.append(float(loss.detach()))
        mask = targets != -100
        accs.append(float((logits.argmax(-1)[mask] == targets[mask]).float().mean()))
    return losses, accs, nonfinite


def window_means(xs, w):
    return [sum(xs[i:i + w]) / len(xs[i:i + w]) for i in range(0, len(xs), w)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "results" / "gdn"))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--curve-tol", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--members", default="la,gla,ssd,kda,gdn")
    ap.add_argument("--launch", action="append", default=[], metavar="KERNEL:KEY=VAL[,KEY=VAL]",
                    help="train the fast path with a launch-table entry changed (as ladder.py), e.g. "
                         "state_fwd_kernel:PREC=tf32x3; recorded in the summary (launch_overrides)")
    ap.add_argument("--name", default=None, help="result file name (default train_family.json)")
    ap.add_argument("--fast-dtype", choices=("bfloat16", "float32"), default="bfloat16",
                    help="dtype of the fast path's recurrence inputs on the GPU; float32 is the control that "
                         "separates the rounding of the inputs from the kernels' own precision")
    ap.add_argument("--repeat", action="store_true",
                    help="train both paths of every member a second time and record whether the loss curves "
                         "repeat bit for bit (fast_repeat_bitwise, ref_repeat_bitwise)")
    args = ap.parse_args(argv)
    # Deterministic kernels everywhere, so that a verdict near the tolerance is the same verdict on every run:
    # without this the float32 reference's own curve differed between two runs of one commit (PyTorch's default
    # CUDA kernels may use cuBLAS workspaces or atomics), enough to move the GDN window deviation by 2-5 points.
    # CUBLAS_WORKSPACE_CONFIG must be set before the first cuBLAS handle exists, i.e. before any CUDA matmul.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if args.cpu_smoke:  # before the kernels are imported (the launch tables live beside them)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from lethe.kernels.gdn.launch_tables import overridden, overrides_from_cli

    launch = overrides_from_cli(args.launch)
    with overridden(launch), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # warn_only: an op without a deterministic implementation is named in the summary instead of killing
        # the run; the --repeat check then shows whether it mattered
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            return _run(args, launch, caught)
        finally:
            torch.use_deterministic_algorithms(False)


def _run(args, launch: dict, caught: list):
    """The training runs with the parsed arguments, inside ``launch``'s overrides of the launch tables."""
    if args.cpu_smoke:  # TRITON_INTERPRET was set by main()
        device = "cpu"
        # bf16 is not trustworthy under the interpreter (pitfalls.md): the smoke run's fast path is float32
        lowp = torch.float32
        cfg = dict(steps=min(args.steps, 8), batch=4, n_keys=8, n_pairs=4, n_queries=8, d_model=32, H=1, K=16,
                   V=16, chunk=16, lr=3e-3, seed=args.seed)
        window = 4
    else:
        if not torch.cuda.is_available():
            raise SystemExit("the full training run needs a CUDA GPU; use --cpu-smoke on the CPU")
        device, lowp = "cuda", getattr(torch, args.fast_dtype)
        cfg = dict(steps=args.steps, batch=64, n_keys=64, n_pairs=32, n_queries=64, d_model=128, H=2, K=32,
                   V=32, chunk=64, lr=2e-3, seed=args.seed)
        window = args.window
    members = args.members.split(",")
    results = {}
    t0 = time.time()
    for member in members:
        t = time.time()
        fast, fast_acc, fast_nf = train(member, "triton", lowp, cfg, device)
        t_fast = time.time() - t
        t = time.time()
        ref, ref_acc, ref_nf = train(member, "torch", torch.float32, cfg, device)
        t_ref = time.time() - t
        repeat = {}
        if args.repeat:
            repeat["fast_repeat_bitwise"] = train(member, "triton", lowp, cfg, device)[0] == fast
            repeat["ref_repeat_bitwise"] = train(member, "torch", torch.float32, cfg, device)[0] == ref
        wf, wr = window_means(fast, window), window_means(ref, window)
        scale = wr[0]
        curve_dev = max(abs(a - b) for a, b in zip(wf, wr, strict=True)) / scale
        row = {
            "member": member,
            "loss_fast": fast, "loss_ref": ref, "acc_fast": fast_acc, "acc_ref": ref_acc,
            "nonfinite_fast": fast_nf, "nonfinite_ref": ref_nf,
            "first_window_loss_fast": wf[0], "last_window_loss_fast": wf[-1],
            "first_window_loss_ref": wr[0], "last_window_loss_ref": wr[-1],
            "last_window_acc_fast": window_means(fast_acc, window)[-1],
            "last_window_acc_ref": window_means(ref_acc, window)[-1],
            "max_window_curve_dev_rel": curve_dev,
            "max_step_curve_dev_rel": max(abs(a - b) for a, b in zip(fast, ref, strict=True)) / scale,
            "loss_goes_down": wf[-1] < 0.9 * wf[0],
            "zero_nan": fast_nf == 0 and ref_nf == 0 and all(map(math.isfinite, fast + ref)),
            "curve_match": curve_dev <= args.curve_tol,
            "seconds_fast": round(t_fast, 1), "seconds_ref": round(t_ref, 1),
            **repeat,
        }
        row["pass"] = row["loss_goes_down"] and row["zero_nan"] and row["curve_match"]
        results[member] = row
        print(member, {k: row[k] for k in ("first_window_loss_fast", "last_window_loss_fast", "last_window_acc_fast",
                                           "max_window_curve_dev_rel", "pass", *repeat)}, flush=True)
    summary = {
        "mode": "cpu-smoke" if args.cpu_smoke else "gpu",
        "config": {**cfg, "window": window, "curve_tol": args.curve_tol, "fast_dtype": str(lowp).replace("torch.", ""),
                   "ref_dtype": "float32"},
        "all_pass": all(r["pass"] for r in results.values()),
        "launch_overrides": launch,
        "deterministic_algorithms": True,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        # PyTorch's warnings about ops without a deterministic implementation, one entry per distinct message
        "nondeterministic_ops": sorted({str(w.message).splitlines()[0] for w in caught
                                        if "deterministic" in str(w.message)}),
        "repeat_checked": bool(args.repeat),
        "seconds": round(time.time() - t0, 1),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or ("train_family_smoke.json" if args.cpu_smoke else "train_family.json")
    (out / name).write_text(json.dumps({"summary": summary, "members": results}, indent=1, sort_keys=True) + "\n")
    from lethe import provenance

    provenance.write(out / name.replace(".json", ".provenance.json"), experiment="gdn_train_family")
    print(json.dumps(summary, indent=1, sort_keys=True))
    return summary, results


if __name__ == "__main__":
    main()
