"""Agreement between KernelBench's own check (from a local checkout) and :mod:`lethe.kernelbench.check`.

The re-implementation is only worth citing if it decides like the original. This module imports
``eval_kernel_against_ref`` from a user-provided KernelBench checkout (never vendored, never fetched by us),
runs it on the same kernels as the re-implementation, wraps it in the same driver-level catch
(``eval_from_generations.evaluate_single_sample``) and reports the 2x2 agreement table.

KernelBench's check asserts CUDA, so the agreement rule needs a GPU; every failure to set it up (no path, a
path that is not a KernelBench checkout, no CUDA) stops with a message that says what to do.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lethe.kernelbench import check as kb

#: Where ``eval_kernel_against_ref`` lives: the paper-era layout first, then the post-2025-12 package layout.
EVAL_MODULES = (("src/eval.py", "src.eval"), ("src/kernelbench/eval.py", "kernelbench.eval"))


class AgreementSetupError(RuntimeError):
    """The agreement study cannot run as configured; the message says why and how to fix it."""


def missing_checkout_message() -> str:
    return (
        "the KernelBench agreement rule needs a local KernelBench checkout: clone "
        "https://github.com/ScalingIntelligence/KernelBench, check out commit "
        f"{kb.PAPER_COMMIT[:8]} (the paper-era check), and set `kernelbench: {{checkout: /path/to/KernelBench}}` "
        "in config/config.yaml or pass `--config kernelbench='{checkout: /path/to/KernelBench}'`. "
        "Lethe does not vendor or download KernelBench."
    )


def locate_eval(checkout: str | Path | None) -> tuple[Path, str]:
    """(root to put on sys.path, module name) of the checkout's eval; raises AgreementSetupError."""
    if not checkout or not str(checkout).strip():
        raise AgreementSetupError(missing_checkout_message())
    root = Path(checkout).expanduser().resolve()
    if not root.is_dir():
        raise AgreementSetupError(f"kernelbench.checkout={checkout!r} is not a directory. " + missing_checkout_message())
    for rel, module in EVAL_MODULES:
        if (root / rel).is_file():
            sys_root = root if module.startswith("src.") else root / "src"
            return sys_root, module
    raise AgreementSetupError(
        f"{root} does not look like a KernelBench checkout (neither src/eval.py nor src/kernelbench/eval.py). "
        + missing_checkout_message()
    )


def load_eval(checkout: str | Path | None):
    """Import the checkout's ``eval_kernel_against_ref``."""
    sys_root, module = locate_eval(checkout)
    if str(sys_root) not in sys.path:
        sys.path.insert(0, str(sys_root))
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - an import failure of third-party code is a setup problem
        raise AgreementSetupError(f"importing {module} from {sys_root} failed: {type(e).__name__}: {e}") from e
    fn = getattr(mod, "eval_kernel_against_ref", None)
    if fn is None:
        raise AgreementSetupError(f"{module} has no eval_kernel_against_ref")
    return fn


def run_theirs(eval_fn, ref_src: str, cand_src: str, device: Any, seed: int = kb.SEED,
               num_correct_trials: int = kb.NUM_CORRECT_TRIALS) -> dict[str, Any]:
    """Their eval with the benchmark script's settings and the driver's outer catch, as a row."""
    try:
        res = eval_fn(ref_src, cand_src, seed_num=seed, num_correct_trials=num_correct_trials,
                      measure_performance=False, verbose=False, device=device)
    except Exception as e:  # noqa: BLE001 - mirrors evaluate_single_sample
        key = "cuda_error" if "CUDA error" in str(e) else "other_error"
        res = kb.KernelExecResult(compiled=False, correctness=False, metadata={key: str(e)})
    return kb.to_row(res, "paper", num_correct_trials)


def sandbox_entry(payload: dict[str, Any], arrays: Any = None, workdir: Any = None):
    """Child-side: their check on one kernel (``lethe.kernelbench.agreement:sandbox_entry``)."""
    import torch

    eval_fn = load_eval(payload["checkout"])
    device = torch.cuda.current_device() if torch.cuda.is_available() else payload.get("device", "cpu")
    return run_theirs(eval_fn, payload["ref_src"], payload["cand_src"], device), {}


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise AgreementSetupError("KernelBench's own check asserts CUDA (`assert torch.cuda.is_available()`); "
                                  "run the agreement rule on a GPU machine (workflow profile `gpu`).")


def agreement(theirs: Iterable[Mapping[str, Any]], ours: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """2x2 of their verdict vs ours on ids both recorded; samples either side dropped are counted apart."""
    t = {str(r["id"]): r for r in theirs}
    o = {str(r["id"]): r for r in ours}
    cells = {"their_pass_our_pass": 0, "their_pass_our_fail": 0, "their_fail_our_pass": 0, "their_fail_our_fail": 0}
    disagreements, skipped = [], 0
    for i in sorted(set(t) & set(o), key=lambda s: (len(s), s)):
        a, b = t[i].get("correct"), o[i].get("correct")
        if a is None or b is None:
            skipped += 1
            continue
        cells[f"their_{'pass' if a else 'fail'}_our_{'pass' if b else 'fail'}"] += 1
        if a != b:
            disagreements.append({"id": i, "their_correct": a, "our_correct": b,
                                  "their_outcome": t[i].get("outcome"), "our_outcome": o[i].get("outcome"),
                                  "their_detail": str(t[i].get("detail", ""))[:200],
                                  "our_detail": str(o[i].get("detail", ""))[:200]})
    n = sum(cells.values())
    return {"joined_rows": n, "skipped_dropped": skipped,
            "only_theirs": len(set(t) - set(o)), "only_ours": len(set(o) - set(t)),
            "cells_their_vs_our_replica": cells,
            "agreement_rate": (cells["their_pass_our_pass"] + cells["their_fail_our_fail"]) / n if n else None,
            "n_disagreements": len(disagreements), "disagreements": disagreements}
