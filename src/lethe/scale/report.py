"""The scale run's table and curve, from a committed run folder (``results/scale/<run>/``).

A run folder holds ``log.jsonl`` (one row per train step and per validation, lethe.scale.train),
``reference_check.json`` (the reference-path agreement and the dispatch proof of the checked steps),
``provenance.json`` (device, versions, commit, dataset, and how the call ended) and, when the trainer finished
its segment, ``run.json`` and ``dispatch_proof.json``. :func:`summarise` reduces it to one record; nothing here
assumes the run reached its step target or finished cleanly: the table says what the folder shows.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

# Paper's run (data/published/ptbxl_results.json): what differs is stated in the table's note.
PAPER_RUN = "paper: 1.1e9-parameter Mamba-1 stack on PTB-XL, 8x B200 DDP, fp32, 2,000 steps"


def _train_and_val(run_dir: Path) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == "train"], [r for r in rows if r["kind"] == "val"]


def summarise(run_dir: str | Path) -> dict:
    """One record of a run folder: parameters, steps trained, train/validation loss at the first and last
    validation, median step time and tokens/s (first two steps left out: Triton compilation and autotuning),
    peak memory, the reference check and the dispatch proof of its checked steps, and the run's outcome
    (``run.json``'s status, or ``"cut"`` when the trainer never closed its segment)."""
    run_dir = Path(run_dir)
    train, val = _train_and_val(run_dir)
    if not train:
        raise ValueError(f"{run_dir}/log.jsonl has no train rows")
    ref = json.loads((run_dir / "reference_check.json").read_text())
    prov = json.loads((run_dir / "provenance.json").read_text())
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else None
    steady = train[2:] or train
    return {
        "run": prov.get("run", run_dir.name),
        "mixer": ref["model_cfg"].get("mixer"),
        "parameters": prov["parameters"],
        "steps": train[-1]["step"],
        "first_val": val[0] if val else None,
        "last_val": val[-1] if val else None,
        "val_falling": bool(len(val) >= 2 and all(b["loss"] < a["loss"] for a, b in zip(val, val[1:]))),
        "median_step_s": statistics.median(r["seconds"] for r in steady),
        "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in steady),
        "peak_memory_gib": max(r["peak_memory_bytes"] for r in train) / 2**30,
        "reference_agree": bool(ref["agree"]),
        "max_loss_rel": ref["max_loss_rel"],
        "max_grad_norm_rel": ref["max_grad_norm_rel"],
        "dispatch_checked": bool(ref["dispatch"]["all_dispatched"]),
        "dispatch_backends": ref["dispatch"]["kernel_backends"],
        "status": run["status"] if run else "cut",
        "outcome": prov.get("outcome", ""),
        # the standard provenance block (lethe.provenance) plus what the run adds: precision, dataset, outcome
        "gpu": prov["gpu"],
        "driver": prov.get("driver"),
        "precision": prov["precision"],
        "dataset": prov["dataset"],
        "torch": prov["torch"],
        "triton": prov["triton"],
        "git_sha": prov["git_sha"],
    }


def table_rows(s: dict) -> list[dict]:
    def val(v):
        return f"{v['loss']:.3f} (step {v['step']})" if v else "-"
    return [{"run": s["run"], "parameters": s["parameters"], "steps": s["steps"], "val_first": val(s["first_val"]),
             "val_last": val(s["last_val"]), "step_s": s["median_step_s"], "tok_s": s["median_tokens_per_s"],
             "mem": s["peak_memory_gib"], "ref": f"{s['max_loss_rel']:.2g} / {s['max_grad_norm_rel']:.2g}",
             "dispatch": ("yes (" + ", ".join(s["dispatch_backends"]) + ")") if s["dispatch_checked"] else "no",
             "status": s["status"]}]


COLUMNS = [("run", "Run"), ("parameters", "Parameters", "{:,}"), ("steps", "Steps"),
           ("val_first", "Val. loss, first"), ("val_last", "Val. loss, last"), ("step_s", "Step (s)", "{:.2f}"),
           ("tok_s", "Tokens/s", "{:.0f}"), ("mem", "Peak memory (GiB)", "{:.1f}"),
           ("ref", "Ref. path rel. diff. (loss / grad norm)"), ("dispatch", "Our kernels"), ("status", "Status")]


def render(run_dir: str | Path, md_path, tex_path, fig_dir, fig_stem: str = "scale_curve") -> dict:
    """Write the table (md, tex) and the loss curve (png, pdf); returns the summary."""
    from lethe.render import render_table
    from lethe.render.style import new_figure, save_figure, style

    s = summarise(run_dir)
    caption = (f"Scale run: a {s['parameters'] / 1e9:.2f}e9-parameter {s['mixer']} model trained through our "
               f"kernels for {s['steps']} steps on one H200; validation loss "
               + ("falls" if s["val_falling"] else "does not fall monotonically") + " over the run.")
    notes = [
        f"Differs from the {PAPER_RUN}: {s['dataset']}; one GPU ({s['gpu']}, driver {s['driver']}); {s['precision']}; "
        f"{s['steps']} steps, not 2,000 (device time: 30 minutes per session, 10 per call).",
        f"Run outcome: {s['outcome']}.",
        "Step time and tokens/s: median over steps 3 onwards. Ref. path: the same model through the torch "
        "reference path and through our kernels for the first steps (fp32), largest relative difference; "
        "Our kernels: every block's forward and backward went through our autograd Function on the checked steps.",
        f"torch {s['torch']}, triton {s['triton']}, commit {s['git_sha'][:12]}.",
    ]
    render_table(table_rows(s), COLUMNS, caption, "tab:scale", md_path, tex_path, notes=notes)
    train, val = _train_and_val(Path(run_dir))
    with style():
        fig, ax = new_figure()
        ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train (per step)")
        ax.plot([r["step"] for r in val], [r["loss"] for r in val], marker="o", label="validation")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats per byte)")
        ax.legend()
        save_figure(fig, fig_stem, fig_dir)
    return s
