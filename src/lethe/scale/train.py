"""The training loop of the scale run and the reference-path check.

:func:`train` runs AdamW on a :class:`lethe.scale.model.ByteLM` over a byte corpus
(:class:`lethe.scale.data.ByteCorpus`) with gradient clipping, fp32 or bf16 autocast, a linear warm-up and cosine
decay. Run folder:

* ``log.jsonl``: one row per step (``kind: "train"``: loss, grad norm before clipping, lr, seconds, tokens/s,
  peak memory) and per validation (``kind: "val"``);
* ``checkpoint.pt``: model, optimiser, step and configs, written atomically every ``ckpt_every`` steps or
  ``ckpt_every_s`` seconds and when the run stops; a run started again on the same folder resumes from it and
  produces exactly the loss sequence an uninterrupted run would (the batch of a step depends on (seed, step)
  only; log rows past the checkpoint are dropped);
* ``dispatch_proof.json``: what the forward and backward called, one entry per process that trained (a segment
  of steps), and whether every block ran through our autograd Function on every step (:mod:`lethe.scale.dispatch`);
* ``stop.json``: why the run stopped when a loss or gradient norm was not finite (the run stops at once and
  keeps the last good checkpoint);
* ``run.json``: configs, parameter count, corpus manifest hash, final status.

:func:`compare_paths` runs the first steps of the same model through ``path="torch"`` and ``path="ours"`` on
the same batches and reports the relative differences of the losses and gradient norms against a stated
tolerance.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from .data import ByteCorpus, train_batch, val_batches
from .dispatch import DispatchLog
from .model import ModelConfig, build, count_parameters

PRECISIONS = ("fp32", "bf16")
# Reference-path agreement in fp32: the kernels reorder the scan's sums (chunks, checkpoints), so the two paths
# differ by rounding that Adam's update then carries into later steps.
LOSS_RTOL = 1e-4
GRAD_NORM_RTOL = 1e-3


@dataclass(frozen=True)
class TrainConfig:
    """One run's optimisation and bookkeeping settings (seconds are wall clock)."""

    steps: int = 100
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup: int = 10
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0
    precision: str = "fp32"
    seed: int = 0
    val_every: int = 50
    val_batches: int = 4
    ckpt_every: int = 50
    ckpt_every_s: float = 300.0
    time_budget_s: float | None = None
    stop_after: int | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr_ratio * lr`` at ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def make_optimizer(model, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (norm weights, biases, A_log, D and the conv taps undecayed)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "conv" not in n and "A_log" not in n]
    ids = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=tuple(cfg.betas))


def _autocast(device: torch.device, precision: str):
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def lm_loss(model, x, y, device, precision) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats), the logits taken in float32."""
    with _autocast(device, precision):
        logits = model(x.to(device))
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.to(device).reshape(-1))


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: the allocator's peak since the last reset; CPU: the process's peak resident set."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _atomic_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def save_checkpoint(path: Path, model, opt, step: int, extra: dict) -> None:
    """Model, optimiser and step to ``path`` through a temporary file and a rename (never half written).

    A failed write (a full disk: the 1.1e9-parameter checkpoint is ~13 GB) removes its temporary file, so the
    space it took is free for the run's own records, and re-raises."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, **extra}, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def _trim_log(log_path: Path, step: int) -> None:
    """Keep only the log rows a resume from ``step`` completed steps will not write again."""
    if not log_path.exists():
        return
    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    keep = [r for r in rows if r["step"] <= step]
    tmp = log_path.with_name(log_path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
    os.replace(tmp, log_path)


@torch.no_grad()
def validate(model, batches, device, precision) -> float:
    """Mean loss over the fixed validation batches (the dispatch log is left out of it)."""
    model.eval()
    kept, model.dispatch = model.dispatch, DispatchLog()
    try:
        losses = [lm_loss(model, x, y, device, precision).item() for x, y in batches]
    finally:
        model.dispatch = kept
        model.train()
    return sum(losses) / len(losses)


def _grad_norm(params) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.float()) for p in params
                                                 if p.grad is not None]))


def dispatch_summary(model, steps_run: int) -> dict:
    """The dispatch proof of a segment: counts, and whether every block's mixer ran forward and backward
    through our autograd Function on every step (``all_dispatched``; ``kernel_backends`` names the backends)."""
    d = model.dispatch.as_dict()
    want = model.cfg.n_layers * steps_run
    keys = set(d["forward"]) | set(d["backward"])
    ours = [k for k in keys if k.endswith(("FusedBlockFunctionBackward", "ChunkGDNFunctionBackward"))]
    ok = (model.path == "ours" and steps_run > 0 and len(ours) == len(keys) == 1
          and d["forward"].get(ours[0]) == want and d["backward"].get(ours[0]) == want)
    return {**d, "path": model.path, "mixer": model.cfg.mixer, "n_layers": model.cfg.n_layers,
            "steps_counted": steps_run, "expected_calls": want, "all_dispatched": bool(ok),
            "kernel_backends": sorted({k.split("|")[1] for k in keys})}


def _world() -> tuple[int, int]:
    """(rank, world size) of the initialised process group, (0, 1) without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _mean_over_ranks(t: torch.Tensor, world: int) -> float:
    if world > 1:
        t = t.clone()
        torch.distributed.all_reduce(t)
        t /= world
    return t.item()


def _any_rank(flag: bool, world: int, device) -> bool:
    """True when ``flag`` holds on any rank (so that every rank stops at the same step)."""
    if world == 1:
        return flag
    t = torch.tensor([int(flag)], device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item())


def _write_proof(path: Path, summary: dict, start: int, step: int) -> None:
    """Append this segment's dispatch summary to the run's proof; segments past ``start`` (a killed process's,
    whose steps are being redone) are dropped. ``all_dispatched`` holds for the run when it holds for every
    segment and the segments cover steps 0 to the last one without a gap; ``kernel_backends`` says which of the
    ops' backends ran (``["triton"]`` for the Triton kernels alone)."""
    segs = json.loads(path.read_text())["segments"] if path.exists() else []
    segs = [s for s in segs if s["segment"][1] <= start]
    if step > start:
        segs.append({**summary, "segment": [start, step]})
    covered = [0] + [s["segment"][1] for s in segs]
    contiguous = all(s["segment"][0] == c for s, c in zip(segs, covered, strict=False))
    _atomic_json(path, {"all_dispatched": bool(segs) and contiguous and all(s["all_dispatched"] for s in segs),
                        "kernel_backends": sorted({b for s in segs for b in s["kernel_backends"]}),
                        "steps": covered[-1], "segments": segs})


def train(model_cfg: ModelConfig, cfg: TrainConfig, corpus: ByteCorpus, out_dir, path: str = "ours",
          device: str | torch.device = "cpu", resume: bool = True, model_hook=None, ckpt_dir=None) -> dict:
    """Train (or resume) a run in ``out_dir`` (module docstring); returns ``run.json``'s content.

    ``status``: ``"done"`` (``cfg.steps`` reached), ``"stopped"`` (``stop_after`` reached), ``"budget"``
    (``time_budget_s`` spent), ``"nonfinite"`` (see ``stop.json``), ``"checkpoint_failed"`` (a checkpoint could not
    be written: ``checkpoint_error``; the log, the dispatch proof and ``run.json`` are still written).
    ``model_hook(model)`` runs once after the model is built (tests use it to inject faults). ``ckpt_dir``
    (default ``out_dir``) holds ``checkpoint.pt``: at 1.1e9 parameters it is ~13 GB with AdamW's moments, too
    large to travel with a device call's results.

    Under an initialised ``torch.distributed`` process group (torchrun; gloo on the CPU, nccl on GPUs) the model is
    wrapped in DistributedDataParallel: a step's global batch is ``batch_size * world_size`` windows (the batch a
    single process with that batch size would draw), each rank takes its slice, the logged loss is the mean over
    ranks, the stop decisions are agreed by all ranks, and rank 0 alone writes the run folder."""
    device = torch.device(device)
    rank, world = _world()
    out = Path(out_dir)
    writer = rank == 0
    if writer:
        out.mkdir(parents=True, exist_ok=True)
    ckpt_path, log_path = Path(ckpt_dir or out) / "checkpoint.pt", out / "log.jsonl"
    if writer:
        ckpt_path.parent.mkdir(parents=True, exist_ok=True)
    model = build(model_cfg, path, seed=cfg.seed, device=device)
    if model_hook is not None:
        model_hook(model)
    opt = make_optimizer(model, cfg)
    start = 0
    if resume and ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=device, weights_only=False)
        if state["manifest_sha256"] != corpus.manifest_sha256 or state["model_cfg"] != model_cfg.to_dict():
            raise ValueError(f"{ckpt_path} belongs to another corpus or model; use another folder or resume=False")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
    elif not resume and writer:
        for p in (ckpt_path, log_path, out / "stop.json"):
            p.unlink(missing_ok=True)
    if writer:
        _trim_log(log_path, start)
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    vbatches = val_batches(corpus.val, cfg.batch_size, cfg.seq_len, cfg.val_batches)
    extra = {"model_cfg": model_cfg.to_dict(), "train_cfg": cfg.to_dict(), "manifest_sha256": corpus.manifest_sha256,
             "path": path}
    params = [p for p in model.parameters() if p.requires_grad]
    info = {**extra, "n_parameters": count_parameters(model), "device": str(device), "world_size": world,
            "resumed_from": start,
            "corpus": {k: v for k, v in corpus.manifest.items() if k != "files"}}
    t_start = t_ckpt = time.monotonic()
    step, status, stop, ckpt_error = start, "done", None, None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with log_path.open("a") if writer else contextlib.nullcontext() as log:
        def emit(row):
            if writer:
                log.write(json.dumps(row, sort_keys=True) + "\n")
                log.flush()

        while step < cfg.steps:
            x, y = train_batch(corpus.train, step, cfg.batch_size * world, cfg.seq_len, cfg.seed)
            x, y = x[rank * cfg.batch_size:(rank + 1) * cfg.batch_size], y[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
            for g in opt.param_groups:
                g["lr"] = lr_at(cfg, step)
            t0 = time.perf_counter()
            loss = lm_loss(net, x, y, device, cfg.precision)
            lval = _mean_over_ranks(loss.detach(), world)
            if not math.isfinite(lval):
                stop = {"step": step, "reason": "non-finite loss", "loss": repr(lval)}
                break
            loss.backward()
            gnorm = _grad_norm(params).item()
            if not math.isfinite(gnorm):
                stop = {"step": step, "reason": "non-finite gradient norm", "loss": lval, "grad_norm": repr(gnorm),
                        "parameters": [n for n, p in model.named_parameters()
                                       if p.grad is not None and not torch.isfinite(p.grad).all()]}
                break
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            dt = time.perf_counter() - t0
            step += 1
            emit({"kind": "train", "step": step, "loss": lval, "grad_norm": gnorm, "lr": lr_at(cfg, step - 1),
                  "seconds": dt, "tokens_per_s": cfg.batch_size * world * cfg.seq_len / dt,
                  "peak_memory_bytes": peak_memory_bytes(device)})
            if cfg.val_every and (step % cfg.val_every == 0 or step == cfg.steps):
                emit({"kind": "val", "step": step, "loss": validate(model, vbatches, device, cfg.precision)})
            now = time.monotonic()
            over_budget = _any_rank(cfg.time_budget_s is not None and now - t_start >= cfg.time_budget_s, world,
                                    device)
            halt = cfg.stop_after is not None and step >= cfg.stop_after
            if writer and (step % cfg.ckpt_every == 0 or now - t_ckpt >= cfg.ckpt_every_s or halt or over_budget
                           or step == cfg.steps):
                try:
                    save_checkpoint(ckpt_path, model, opt, step, extra)
                except (OSError, RuntimeError) as exc:
                    # The steps trained are real and logged; what is lost is only the ability to resume from
                    # here. Stop and say so rather than lose the run record (dispatch proof, run.json) too.
                    ckpt_error = {"step": step, "error": f"{type(exc).__name__}: {exc}"[:500]}
                    emit({"kind": "checkpoint_error", **ckpt_error})
                t_ckpt = now
            if _any_rank(ckpt_error is not None, world, device):
                status = "checkpoint_failed"
                break
            if halt or over_budget:
                status = "stopped" if halt else "budget"
                break
    if stop is not None:
        status = "nonfinite"
    result = {**info, "status": status, "step": step, "stop": stop, "checkpoint_error": ckpt_error}
    if writer:
        if stop is not None:
            _atomic_json(out / "stop.json", stop)
        _write_proof(out / "dispatch_proof.json", dispatch_summary(model, step - start), start, step)
        _atomic_json(out / "run.json", result)
    if world > 1:
        torch.distributed.barrier()
    return result


def compare_paths(model_cfg: ModelConfig, cfg: TrainConfig, corpus: ByteCorpus, steps: int = 3,
                  device: str | torch.device = "cpu", loss_rtol: float = LOSS_RTOL,
                  grad_norm_rtol: float = GRAD_NORM_RTOL) -> dict:
    """The first ``steps`` optimiser steps of one model (same seed, same batches, fp32 unless ``cfg`` says
    otherwise) through the torch reference path and through our kernels: per-step loss and gradient norm of
    each, their relative differences, and ``agree`` (every difference within its tolerance)."""
    device = torch.device(device)
    runs = {}
    for path in ("torch", "ours"):
        model = build(model_cfg, path, seed=cfg.seed, device=device)
        opt = make_optimizer(model, cfg)
        params = [p for p in model.parameters() if p.requires_grad]
        rows = []
        for step in range(steps):
            x, y = train_batch(corpus.train, step, cfg.batch_size, cfg.seq_len, cfg.seed)
            for g in opt.param_groups:
                g["lr"] = lr_at(cfg, step)
            loss = lm_loss(model, x, y, device, cfg.precision)
            loss.backward()
            rows.append({"loss": loss.item(), "grad_norm": _grad_norm(params).item()})
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
        runs[path] = {"rows": rows, "dispatch": dispatch_summary(model, steps) if path == "ours" else None}
    rel = lambda a, b: abs(a - b) / max(abs(b), 1e-30)
    diffs = [{"step": i + 1, "loss_torch": t["loss"], "loss_ours": o["loss"],
              "grad_norm_torch": t["grad_norm"], "grad_norm_ours": o["grad_norm"],
              "loss_rel": rel(o["loss"], t["loss"]), "grad_norm_rel": rel(o["grad_norm"], t["grad_norm"])}
             for i, (t, o) in enumerate(zip(runs["torch"]["rows"], runs["ours"]["rows"], strict=True))]
    max_loss = max(d["loss_rel"] for d in diffs)
    max_gn = max(d["grad_norm_rel"] for d in diffs)
    return {"model_cfg": model_cfg.to_dict(), "train_cfg": replace(cfg, steps=steps).to_dict(),
            "manifest_sha256": corpus.manifest_sha256, "steps": diffs, "max_loss_rel": max_loss,
            "max_grad_norm_rel": max_gn, "loss_rtol": loss_rtol, "grad_norm_rtol": grad_norm_rtol,
            "agree": max_loss <= loss_rtol and max_gn <= grad_norm_rtol, "dispatch": runs["ours"]["dispatch"]}
