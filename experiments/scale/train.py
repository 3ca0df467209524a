"""The scale run (issue 27): train a named ByteLM config on the standard library's sources through our kernels.

    python experiments/scale/train.py --config 1b --path ours --steps 2000 --out .build/runs/scale_train/run \
        --time-budget-s 540 --check-steps 3

A device call lasts at most 10 minutes: run again with the same --out to resume from the last checkpoint (the
default; --no-resume starts over). --check-steps N first runs the reference-path comparison
(lethe.scale.train.compare_paths, N steps at --check-batch-size) into reference_check.json, once per run folder,
and refuses to train when the paths disagree. --dry-run: the tiny config, a few steps on the CPU.
Under torchrun (WORLD_SIZE > 1) the run is data-parallel (nccl on GPUs, gloo on the CPU; --batch-size is per
rank) and rank 0 alone writes the folder.
Writes into --out: log.jsonl, checkpoint.pt, dispatch_proof.json, run.json, corpus_manifest.json,
reference_check.json, provenance.json (lethe.scale.train's module docstring says what each holds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from lethe import provenance
from lethe.scale.data import stdlib_corpus
from lethe.scale.model import CONFIGS, MIXERS, PATHS, analytic_parameters, get_config
from lethe.scale.train import PRECISIONS, TrainConfig, compare_paths, train


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="1b", choices=sorted(CONFIGS))
    ap.add_argument("--mixer", choices=MIXERS, default=None, help="override the config's mixer")
    ap.add_argument("--path", choices=PATHS, default="ours")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--time-budget-s", type=float, default=None)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--precision", choices=PRECISIONS, default="bf16")
    ap.add_argument("--val-every", type=int, default=100)
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--ckpt-every-s", type=float, default=240.0)
    ap.add_argument("--ckpt-dir", default=None, help="where checkpoint.pt lives (default: --out)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto: cuda when available, else cpu")
    ap.add_argument("--check-steps", type=int, default=0, help="reference-path comparison steps before training")
    ap.add_argument("--check-batch-size", type=int, default=1)
    ap.add_argument("--print-params", action="store_true", help="print the parameter count and exit")
    ap.add_argument("--dry-run", action="store_true", help="tiny config, 3 steps, CPU")
    args = ap.parse_args(argv)
    if args.dry_run:
        args.config, args.steps, args.device, args.batch_size, args.seq_len = "tiny", 3, "cpu", 2, 32
        args.warmup, args.val_every, args.val_batches, args.ckpt_every = 1, 2, 1, 2
        args.precision = "fp32"
        args.check_steps = args.check_steps or 1
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    overrides = {"mixer": args.mixer} if args.mixer else {}
    model_cfg = get_config(args.config, **overrides)
    n_params = analytic_parameters(model_cfg)
    print(f"config {args.config} ({model_cfg.mixer}): {n_params:,} parameters", flush=True)
    if args.print_params:
        return 0
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo")
        if device == "cuda":
            device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            torch.cuda.set_device(device)
    try:
        return _run(args, model_cfg, device, rank)
    finally:
        if world > 1:
            torch.distributed.destroy_process_group()


def _run(args, model_cfg, device: str, rank: int) -> int:
    out = Path(args.out)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    corpus = stdlib_corpus()
    if rank == 0:
        (out / "corpus_manifest.json").write_text(json.dumps(corpus.manifest, indent=2, sort_keys=True) + "\n")
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                      warmup=args.warmup, precision=args.precision, seed=args.seed, val_every=args.val_every,
                      val_batches=args.val_batches, ckpt_every=args.ckpt_every, ckpt_every_s=args.ckpt_every_s,
                      time_budget_s=args.time_budget_s)
    check_path = out / "reference_check.json"
    # every rank runs the check (it has no collectives) and so takes the same decision; rank 0 writes it, once
    # every rank has looked for it
    need_check = bool(args.check_steps) and not (args.resume and check_path.exists())
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    if need_check:
        check_cfg = TrainConfig(**{**cfg.to_dict(), "batch_size": args.check_batch_size, "precision": "fp32",
                                   "betas": cfg.betas})
        check = compare_paths(model_cfg, check_cfg, corpus, steps=args.check_steps, device=device)
        if rank == 0:
            check_path.write_text(json.dumps(check, indent=2, sort_keys=True) + "\n")
        print(f"reference check: loss rel {check['max_loss_rel']:.2e} (tol {check['loss_rtol']:.0e}), grad norm rel "
              f"{check['max_grad_norm_rel']:.2e} (tol {check['grad_norm_rtol']:.0e}): "
              f"{'agree' if check['agree'] else 'DISAGREE'}", flush=True)
        if not check["agree"]:
            print("the paths disagree: not training", file=sys.stderr)
            return 1
    result = train(model_cfg, cfg, corpus, out, path=args.path, device=device, resume=args.resume,
                   ckpt_dir=args.ckpt_dir)
    if rank == 0:
        provenance.write(out / "provenance.json", command=" ".join(sys.argv), config=args.config,
                         kernel_path=args.path, status=result["status"], step=result["step"],
                         n_parameters=result["n_parameters"], world_size=result["world_size"])
    print(f"status {result['status']} at step {result['step']}/{args.steps}", flush=True)
    return 0 if result["status"] in ("done", "stopped", "budget") else 1


if __name__ == "__main__":
    raise SystemExit(main())
