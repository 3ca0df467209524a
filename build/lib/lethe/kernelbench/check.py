"""KernelBench's correctness check, re-implemented faithfully, quirks included.

Two variants:

* ``paper`` -- the check at KernelBench commit ``48642c5c`` (``src/eval.py``, unchanged on main from 2025-01-13
  to 2025-10-22), which is the one behind the KernelBench paper and the one the corpora we audit were filtered
  with: ``torch.allclose(ref, new, atol=1e-2, rtol=1e-2)`` on five trials, fp32, no casting.
* ``hardened`` -- the newest main (``423217d``): inputs, init inputs and both models cast to ``precision``, and
  atol = rtol from a per-dtype table (fp32 1e-4, fp16 1e-2, bf16 1e-2). Everything else is unchanged.

The point of this module is to reproduce what the field's standard check *accepts*, so that the differential
against the battery measures the check as people ran it. Every behaviour below therefore copies KernelBench,
including the ones that look like bugs (see ``docs/kernelbench.md`` for each place where the source admits two
readings and which one we took):

* reference and candidate are ``exec``'d into ONE shared globals dict, so a candidate that redefines a module
  constant (``batch_size``, ``N``) changes the inputs both models see;
* seed 42 for init inputs and for both constructors; weights are never copied, so a ``ModelNew`` that draws its
  parameters in another order than ``Model`` fails;
* trial seeds are ``torch.manual_seed(42)`` then ``torch.randint(0, 2**32 - 1, (1,)).item()`` per trial, taken
  from the installed torch (the values differ between torch <= 2.6 and newer, exactly as they do for KernelBench);
* the reference runs first, on the very input objects the candidate then receives (nothing cloned);
* neither model is put in ``.eval()`` mode (BatchNorm uses batch statistics, Dropout is live);
* shape check first (returns at once), then ``allclose`` per trial, all trials run, correct only if all pass;
* a custom-source exception whose text contains ``"lock"`` or ``"No such file or directory"`` returns ``None``
  ("retry"), which KernelBench's driver drops from its results;
* a ``SyntaxError`` or a non-``RuntimeError`` raised by the ``ModelNew`` constructor escapes the eval function and
  the driver's outer catch records it as ``compiled=False`` (``other_error`` or ``cuda_error``).

The core functions run in-process (the tests drive them directly); :func:`check_isolated` runs one sample in a
child process, as KernelBench's driver does, through ``lethe.sandbox.run_isolated`` when it is available.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import torch

PAPER_COMMIT = "48642c5c4ff616e1a2339f7e84b72eea0ac1a6a8"
HARDENED_COMMIT = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"

#: atol = rtol of the paper-era check (commit 8826f36 "Add rtol", unchanged through 48642c5c).
PAPER_TOL = 1e-2
#: Per-precision atol = rtol of the hardened check (PR #80, commit 2c3dbda).
HARDENED_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
#: The benchmark scripts' settings (``eval_from_generations.EvalConfig``), not the function defaults.
NUM_CORRECT_TRIALS = 5
SEED = 42
TIMEOUT_S = 180.0
#: ``register_and_format_exception(..., truncate=True)`` keeps this many characters of a forward exception.
TRUNCATE_AT = 200

VARIANTS = ("paper", "hardened")
OUTCOMES = (
    "correct",
    "output_mismatch",
    "shape_mismatch",
    "runtime_error",
    "compilation_error",
    "cuda_error",
    "other_error",
    "dropped_retry",
    "timeout",
)

_PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class KernelExecResult:
    """KernelBench's result record (a pydantic model there, a dataclass here; same fields and defaults)."""

    compiled: bool = False
    correctness: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    runtime: float = -1.0
    runtime_stats: dict[str, Any] = field(default_factory=dict)


def tolerance_for(variant: str, precision: torch.dtype = torch.float32) -> float:
    """atol (= rtol) the given variant applies; other precisions raise ``ValueError`` as KernelBench's table does."""
    if variant == "paper":
        return PAPER_TOL
    if variant == "hardened":
        if precision not in HARDENED_TOL:
            raise ValueError(f"no tolerance for precision {precision}")
        return HARDENED_TOL[precision]
    raise ValueError(f"unknown variant {variant!r} (expected one of {VARIANTS})")


def parse_precision(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return _PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision {name!r} (expected one of {sorted(_PRECISIONS)})") from None


def _is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def set_seed(seed: int, device: str | torch.device = "cpu") -> None:
    """KernelBench's ``set_seed``: torch's CPU generator and the current CUDA generator only (not numpy/random)."""
    torch.manual_seed(seed)
    if _is_cuda(device) and torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def trial_seeds(seed: int = SEED, n: int = NUM_CORRECT_TRIALS) -> list[int]:
    """The per-trial seeds exactly as ``run_and_check_correctness`` draws them, from the installed torch.

    Hard-coding the values would be wrong: torch changed ``randint``'s sampling for ranges >= 2**28, so the
    seeds (and hence the inputs) depend on the torch version just as they do for KernelBench itself.
    """
    torch.manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(n)]


def _synchronize(device: str | torch.device) -> None:
    if _is_cuda(device):
        torch.cuda.synchronize(device=device)


def _move(x: Any, device: str | torch.device, precision: torch.dtype | None) -> Any:
    """Move a tensor to the device (``.cuda(device=...)`` in KernelBench), casting it in the hardened variant.

    The hardened cast applies to every tensor, integer tensors included: that is KernelBench main's
    ``_process_input_tensor`` (issue #151, PR #152 unmerged), reproduced on purpose.
    """
    if not isinstance(x, torch.Tensor):
        return x
    if precision is not None:
        x = x.to(dtype=precision)
    return x.to(device=device)


def _hardware(device: str | torch.device) -> str:
    if _is_cuda(device) and torch.cuda.is_available():
        return torch.cuda.get_device_name(device=device)
    return "cpu"


def load_original_model_and_inputs(model_original_src: str, context: dict[str, Any]):
    """Syntax-check and ``exec`` the reference into ``context``; ``None`` on a syntax error (as KernelBench)."""
    try:
        compile(model_original_src, "<string>", "exec")
    except SyntaxError as e:
        print(f"Syntax Error in original code {e}")
        return None
    exec(model_original_src, context)
    return context.get("Model"), context.get("get_init_inputs"), context.get("get_inputs")


def load_custom_model(model_custom_src: str, context: dict[str, Any], build_directory: str | None = None):
    """``exec`` the candidate into the SAME ``context`` as the reference and return ``context.get("ModelNew")``.

    Only a ``SyntaxError`` is swallowed (returns ``None``); anything else, including a ``load_inline`` build
    failure, propagates to the caller, which classifies it.
    """
    if build_directory:
        context["BUILD_DIRECTORY"] = build_directory
        model_custom_src = (
            "import os\n" f"os.environ['TORCH_EXTENSIONS_DIR'] = '{build_directory}'\n"
        ) + model_custom_src
    try:
        compile(model_custom_src, "<string>", "exec")
        exec(model_custom_src, context)
    except SyntaxError as e:
        print(f"Syntax Error in custom generated code or Compilation Error {e}")
        return None
    return context.get("ModelNew")


def _register(key: str, value: Any, metadata: dict[str, Any], truncate: bool = False) -> dict[str, Any]:
    text = str(value)
    if truncate and len(text) > TRUNCATE_AT:
        text = text[: TRUNCATE_AT - 3] + "..."
    metadata[key] = text
    return metadata


def run_and_check_correctness(
    original_model_instance,
    new_model_instance,
    get_inputs_fn,
    metadata: dict[str, Any],
    num_correct_trials: int,
    seed: int = SEED,
    device: str | torch.device = "cpu",
    atol: float = PAPER_TOL,
    rtol: float = PAPER_TOL,
    precision: torch.dtype | None = None,
) -> KernelExecResult:
    """The trial loop: reference first on the same inputs, shape check, ``allclose``, all trials run.

    An exception in the reference forward is deliberately *not* caught here (KernelBench runs it outside the
    ``try``); the caller records it as a runtime error.
    """
    pass_count = 0
    seeds = trial_seeds(seed, num_correct_trials)
    with torch.no_grad():
        for trial_seed in seeds:
            set_seed(trial_seed, device)
            inputs = get_inputs_fn()
            inputs = [_move(x, device, precision) for x in inputs]

            set_seed(trial_seed, device)
            model = original_model_instance.to(device=device, dtype=precision) if precision else \
                original_model_instance.to(device=device)
            set_seed(trial_seed, device)
            model_new = new_model_instance.to(device=device, dtype=precision) if precision else \
                new_model_instance.to(device=device)

            output = model(*inputs)
            _synchronize(device)
            try:
                output_new = model_new(*inputs)
                _synchronize(device)
                if output.shape != output_new.shape:
                    _register(
                        "correctness_issue",
                        f"Output shape mismatch: Expected {output.shape}, got {output_new.shape}",
                        metadata,
                    )
                    return KernelExecResult(compiled=True, correctness=False, metadata=metadata)
                # input=reference, other=candidate: the rtol term scales with |candidate|, as in KernelBench.
                if not torch.allclose(output, output_new, atol=atol, rtol=rtol):
                    diff = torch.abs(output - output_new)
                    metadata.setdefault("max_difference", []).append(f"{torch.max(diff).item():f}")
                    metadata.setdefault("avg_difference", []).append(f"{torch.mean(diff).item():f}")
                    metadata["correctness_issue"] = "Output mismatch"
                else:
                    pass_count += 1
            except Exception as e:  # noqa: BLE001 - KernelBench catches everything from the candidate forward
                _register("runtime_error", e, metadata, truncate=True)
                return KernelExecResult(compiled=True, correctness=False, metadata=metadata)

    metadata["correctness_trials"] = f"({pass_count} / {num_correct_trials})"
    return KernelExecResult(
        compiled=True, correctness=pass_count == num_correct_trials, metadata=metadata
    )


def eval_kernel_against_ref(
    original_model_src: str,
    custom_model_src: str,
    seed_num: int = SEED,
    num_correct_trials: int = NUM_CORRECT_TRIALS,
    build_dir: str | None = None,
    device: str | torch.device = "cpu",
    variant: str = "paper",
    precision: str | torch.dtype = "fp32",
) -> KernelExecResult | None:
    """KernelBench's ``eval_kernel_against_ref`` (correctness only; timing is out of scope).

    Returns ``None`` for the "lock" / "No such file or directory" retry case. May raise: a syntax error in the
    candidate or a non-``RuntimeError`` from ``ModelNew(...)`` escapes, as in KernelBench, and is classified by
    :func:`evaluate_single_sample`.
    """
    prec = parse_precision(precision)
    tol = tolerance_for(variant, prec)
    cast = prec if variant == "hardened" else None

    context: dict[str, Any] = {}
    Model, get_init_inputs, get_inputs = load_original_model_and_inputs(original_model_src, context)

    set_seed(seed_num, device)
    init_inputs = get_init_inputs()
    init_inputs = [_move(x, device, cast) for x in init_inputs]
    with torch.no_grad():
        set_seed(seed_num, device)
        original_model = Model(*init_inputs)
        assert hasattr(original_model, "forward")

    metadata: dict[str, Any] = {"hardware": _hardware(device), "device": str(device)}
    try:
        os.environ["TORCH_USE_CUDA_DSA"] = "1"
        ModelNew = load_custom_model(custom_model_src, context, build_dir)
        _synchronize(device)
    except Exception as e:  # noqa: BLE001
        if "lock" in str(e) or "No such file or directory" in str(e):
            return None
        _register("compilation_error", e, metadata)
        return KernelExecResult(compiled=False, metadata=metadata)

    try:
        with torch.no_grad():
            set_seed(seed_num, device)
            custom_model = ModelNew(*init_inputs)
            assert hasattr(custom_model, "forward")
            _synchronize(device)
    except RuntimeError as e:
        _register("runtime_error", e, metadata)
        return KernelExecResult(compiled=True, correctness=False, metadata=metadata)

    try:
        return run_and_check_correctness(
            original_model, custom_model, get_inputs, metadata, num_correct_trials,
            seed=seed_num, device=device, atol=tol, rtol=tol, precision=cast,
        )
    except Exception as e:  # noqa: BLE001 - e.g. the reference forward raised
        _register("runtime_error", e, metadata)
        return KernelExecResult(compiled=True, correctness=False, metadata=metadata)


def evaluate_single_sample(original_model_src: str, custom_model_src: str, **kwargs: Any) -> KernelExecResult | None:
    """The driver's wrapper (``eval_from_generations.evaluate_single_sample``): its outer catch-all.

    Whatever escapes ``eval_kernel_against_ref`` becomes ``compiled=False``: ``cuda_error`` when the text says
    "CUDA error", ``other_error`` otherwise. This is how a candidate syntax error ends up "not compiled".
    """
    device = kwargs.get("device", "cpu")
    try:
        return eval_kernel_against_ref(original_model_src, custom_model_src, **kwargs)
    except Exception as e:  # noqa: BLE001
        key, text = ("cuda_error", f"CUDA Error: {e}") if "CUDA error" in str(e) else ("other_error", f"error: {e}")
        metadata = {key: text, "hardware": _hardware(device), "device": str(device)}
        return KernelExecResult(compiled=False, correctness=False, metadata=metadata)


def _trials_passed(metadata: dict[str, Any]) -> int | None:
    text = metadata.get("correctness_trials")
    if not text:
        return None
    return int(text.strip("()").split("/")[0])


def classify(result: KernelExecResult | None) -> str:
    """Map a KernelBench result onto one of :data:`OUTCOMES`."""
    if result is None:
        return "dropped_retry"
    md = result.metadata
    if not result.compiled:
        for key in ("compilation_error", "cuda_error", "other_error"):
            if key in md:
                return key
        return "other_error"
    if result.correctness:
        return "correct"
    if "runtime_error" in md:
        return "runtime_error"
    if str(md.get("correctness_issue", "")).startswith("Output shape mismatch"):
        return "shape_mismatch"
    return "output_mismatch"


def to_row(result: KernelExecResult | None, variant: str, num_correct_trials: int = NUM_CORRECT_TRIALS,
           outcome: str | None = None) -> dict[str, Any]:
    """A flat, JSON/parquet-friendly record of one check.

    ``correct`` is ``None`` for a sample KernelBench's driver would not record (retry drop, timeout), so a
    differential never counts a dropped sample as either accepted or rejected.
    """
    outcome = outcome or classify(result)
    dropped = outcome in ("dropped_retry", "timeout")
    md = {} if result is None else {k: (v if isinstance(v, (list, str)) else str(v))
                                     for k, v in result.metadata.items()}
    max_diffs = [float(x) for x in md.get("max_difference", [])]
    return {
        "variant": variant,
        "outcome": outcome,
        "compiled": None if result is None else bool(result.compiled),
        "correct": None if dropped else bool(result.correctness),
        "dropped": dropped,
        "trials_passed": None if result is None else _trials_passed(result.metadata),
        "n_trials": num_correct_trials,
        "max_difference": max(max_diffs) if max_diffs else None,
        "detail": next((md[k] for k in ("correctness_issue", "runtime_error", "compilation_error",
                                         "cuda_error", "other_error") if k in md), ""),
    }


def check(original_model_src: str, custom_model_src: str, variant: str = "paper", device: str = "cpu",
          seed: int = SEED, num_correct_trials: int = NUM_CORRECT_TRIALS, precision: str = "fp32",
          build_dir: str | None = None) -> dict[str, Any]:
    """One sample, in-process, as a row (see :func:`to_row`). Use :func:`check_isolated` for untrusted code."""
    result = evaluate_single_sample(
        original_model_src, custom_model_src, seed_num=seed, num_correct_trials=num_correct_trials,
        build_dir=build_dir, device=device, variant=variant, precision=precision,
    )
    return to_row(result, variant, num_correct_trials)


def sandbox_entry(payload: dict[str, Any], arrays: dict[str, Any] | None = None,
                  workdir: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Child-side entry point (``lethe.kernelbench.check:sandbox_entry``) in ``lethe.sandbox``'s calling
    convention: returns ``(row, {})``."""
    return _check_payload(payload), {}


def _check_payload(payload: dict[str, Any]) -> dict[str, Any]:
    return check(
        payload["ref_src"], payload["cand_src"], variant=payload.get("variant", "paper"),
        device=payload.get("device", "cpu"), seed=int(payload.get("seed", SEED)),
        num_correct_trials=int(payload.get("num_correct_trials", NUM_CORRECT_TRIALS)),
        precision=payload.get("precision", "fp32"), build_dir=payload.get("build_dir"),
    )


def _timeout_row(variant: str, n: int, detail: str) -> dict[str, Any]:
    row = to_row(None, variant, n, outcome="timeout")
    row["detail"] = detail
    return row


def check_isolated(original_model_src: str, custom_model_src: str, variant: str = "paper", device: str = "cpu",
                   seed: int = SEED, num_correct_trials: int = NUM_CORRECT_TRIALS, precision: str = "fp32",
                   timeout_s: float = TIMEOUT_S, memory_mb: int = 8192) -> dict[str, Any]:
    """One sample in a child process with a wall-clock limit, like KernelBench's spawned pool.

    A sample that runs past ``timeout_s`` is reported as ``timeout`` and, as in KernelBench, counts as neither
    accepted nor rejected. A child that dies without answering (segfault, OOM kill) is reported as
    ``other_error`` / not compiled: KernelBench's pool would also yield no accepted result for it.
    """
    payload = {"ref_src": original_model_src, "cand_src": custom_model_src, "variant": variant,
               "device": device, "seed": seed, "num_correct_trials": num_correct_trials,
               "precision": precision}
    try:
        from lethe.sandbox import run_isolated  # type: ignore[attr-defined]
    except ImportError:
        run_isolated = None
    if run_isolated is not None:
        res = run_isolated("lethe.kernelbench.check:sandbox_entry", payload, None, timeout_s=timeout_s,
                           memory_mb=memory_mb, device="cuda" if _is_cuda(device) else "cpu")
        status = getattr(res, "status", None)
        if status == "ok" and isinstance(getattr(res, "result", None), dict):
            return res.result
        if status == "timeout":
            return _timeout_row(variant, num_correct_trials, f"no result within {timeout_s:g} s")
        tail = str(getattr(res, "detail", "") or "")[-TRUNCATE_AT:]
        return to_row(KernelExecResult(metadata={"other_error": f"sandbox: {status} {tail}".strip()}), variant,
                      num_correct_trials)
    return _check_subprocess(payload, timeout_s)


def _check_subprocess(payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Fallback isolation while ``lethe.sandbox`` is absent: a fresh interpreter, JSON in, JSON file out."""
    variant, n = payload["variant"], payload["num_correct_trials"]
    with tempfile.TemporaryDirectory(prefix="lethe-kb-") as tmp:
        inp, out = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
        with open(inp, "w") as f:
            json.dump(payload, f)
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        try:
            proc = subprocess.run([sys.executable, "-m", "lethe.kernelbench.check", inp, out], cwd=tmp,
                                  capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
        except subprocess.TimeoutExpired:
            return _timeout_row(variant, n, f"no result within {timeout_s:g} s")
        if not os.path.exists(out):
            tail = (proc.stderr or "")[-TRUNCATE_AT:]
            return to_row(KernelExecResult(metadata={"other_error": f"child exited {proc.returncode}: {tail}"}),
                          variant, n)
        with open(out) as f:
            return json.load(f)


def _main(argv: list[str]) -> int:
    inp, out = argv
    with open(inp) as f:
        payload = json.load(f)
    row = _check_payload(payload)
    with open(out, "w") as f:
        json.dump(row, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
