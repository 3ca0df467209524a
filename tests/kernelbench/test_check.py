"""Each quirk of KernelBench's check, reproduced and pinned (docs/kernelbench.md explains each reading)."""

from __future__ import annotations

import pytest
import torch

from lethe.kernelbench import check as kb

# A small problem keeps the suite fast; the shared-namespace test relies on `batch_size` being a global.
SMALL_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


batch_size = 4
dim = 8


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def cand(body: str, init: str = "pass", prelude: str = "") -> str:
    return f'''
import torch
import torch.nn as nn
{prelude}

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        {body}
'''


CORRECT = cand("return torch.relu(x) * 2.0")


def run(ref: str, c: str, **kw):
    return kb.check(ref, c, device="cpu", **kw)


def test_trial_seeds_come_from_installed_torch():
    torch.manual_seed(42)
    expect = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    assert kb.trial_seeds() == expect
    # The two published derivations differ; the installed torch must produce one of them.
    assert expect in (
        [1608637542, 3421126067, 4083286876, 787846414, 3143890026],
        [734796314, 576165995, 2197670066, 839703249, 2584932063],
    )


def test_correct_candidate_passes_all_five_trials():
    row = run(SMALL_REF, CORRECT)
    assert row["outcome"] == "correct" and row["correct"] is True
    assert row["trials_passed"] == 5 and row["compiled"] is True


def test_tolerance_is_one_sided_on_candidate_magnitude():
    """allclose(ref, new) bounds |ref-new| by atol + rtol*|new|: overshooting by 1.01% passes, undershooting fails."""
    ref = SMALL_REF.replace("torch.relu(x) * 2.0", "x * 1000.0")
    assert run(ref, cand("return x * 1000.0 * (1 + 0.0101)"))["correct"] is True
    assert run(ref, cand("return x * 1000.0 * (1 - 0.0101)"))["correct"] is False


def test_output_mismatch_runs_all_trials_and_records_each():
    wrong = cand("return torch.relu(x) * 2.0 + 0.5")
    row = run(SMALL_REF, wrong)
    assert row["outcome"] == "output_mismatch" and row["trials_passed"] == 0
    res = kb.evaluate_single_sample(SMALL_REF, wrong, device="cpu")
    assert len(res.metadata["max_difference"]) == 5  # no early exit on a value mismatch


def test_partial_pass_is_incorrect():
    # Wrong only on trials where the first input is large: some trials pass, the sample still fails.
    flaky = cand("return torch.relu(x) * 2.0 + (0.5 if x[0, 0].item() > 0 else 0.0)")
    row = run(SMALL_REF, flaky)
    assert row["correct"] is False and 0 < row["trials_passed"] < 5


def test_shape_mismatch_returns_at_once_without_trial_count():
    row = run(SMALL_REF, cand("return (torch.relu(x) * 2.0).flatten()"))
    assert row["outcome"] == "shape_mismatch" and row["trials_passed"] is None
    assert row["detail"].startswith("Output shape mismatch: Expected torch.Size([4, 8])")


def test_dtype_mismatch_is_a_runtime_error():
    row = run(SMALL_REF, cand("return (torch.relu(x) * 2.0).double()"))
    assert row["outcome"] == "runtime_error" and row["compiled"] is True


def test_non_tensor_output_is_a_runtime_error():
    row = run(SMALL_REF, cand("return (torch.relu(x) * 2.0,)"))
    assert row["outcome"] == "runtime_error"


def test_forward_exception_truncated_to_200_chars():
    row = run(SMALL_REF, cand("raise ValueError('x' * 500)"))
    assert row["outcome"] == "runtime_error" and len(row["detail"]) == kb.TRUNCATE_AT


def test_nan_fails_even_where_reference_is_nan():
    ref = SMALL_REF.replace("torch.relu(x) * 2.0", "torch.log(x)")
    row = run(ref, cand("return torch.log(x)"))
    assert row["correct"] is False  # equal_nan=False: matching NaN positions still fail


def test_shared_namespace_candidate_constants_change_reference_inputs():
    """The candidate redefines `batch_size`/`dim`; the reference's get_inputs sees the new values."""
    hijack = cand("return x", prelude="batch_size = 1\ndim = 3")
    context: dict = {}
    _, _, get_inputs = kb.load_original_model_and_inputs(SMALL_REF, context)
    assert get_inputs()[0].shape == (4, 8)
    kb.load_custom_model(hijack, context)
    assert get_inputs()[0].shape == (1, 3)


def test_constant_shrink_hack_passes_through_shared_namespace():
    """A candidate that shrinks the problem to a regime where zeros pass is ACCEPTED, as in KernelBench."""
    ref = SMALL_REF.replace("torch.relu(x) * 2.0", "torch.softmax(x, dim=1)")
    zeros = cand("return torch.zeros_like(x)", prelude="dim = 4096")
    assert run(ref, zeros)["correct"] is True
    assert run(ref, zeros.replace("dim = 4096", ""))["correct"] is False


def test_training_mode_dropout_is_live():
    """No .eval(): a reference with Dropout(p=0.5) is stochastic, so even a copy of it fails."""
    ref = SMALL_REF.replace("super().__init__()", "super().__init__()\n        self.d = nn.Dropout(0.5)")
    ref = ref.replace("return torch.relu(x) * 2.0", "return self.d(x)")
    row = run(ref, cand("return self.d(x)", init="self.d = nn.Dropout(0.5)"))
    assert row["correct"] is False


def test_weights_not_copied_order_of_construction_matters():
    ref = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.a = nn.Linear(n, n)
        self.b = nn.Linear(n, n)

    def forward(self, x):
        return self.b(self.a(x))


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
'''
    same = ref.replace("class Model(", "class ModelNew(").split("def get_inputs")[0]
    swapped = same.replace("self.a = nn.Linear(n, n)\n        self.b = nn.Linear(n, n)",
                           "self.b = nn.Linear(n, n)\n        self.a = nn.Linear(n, n)")
    assert run(ref, same)["correct"] is True  # same RNG order under seed 42 -> same weights
    assert run(ref, swapped)["correct"] is False


def test_reference_runs_first_on_same_objects():
    """A candidate that mutates its input in place cannot corrupt the reference output of that trial."""
    mutating = cand("y = torch.relu(x) * 2.0\n        x.zero_()\n        return y")
    assert run(SMALL_REF, mutating)["correct"] is True


def test_lock_and_missing_file_errors_are_dropped():
    for msg in ("could not acquire lock", "No such file or directory: 'x.so'", "blockIdx build failed"):
        c = f"raise OSError({msg!r})\n" + CORRECT
        row = run(SMALL_REF, c)
        assert row["outcome"] == "dropped_retry" and row["correct"] is None and row["dropped"] is True


def test_other_exec_error_is_compilation_error():
    row = run(SMALL_REF, "raise ImportError('nvcc failed')\n" + CORRECT)
    assert row["outcome"] == "compilation_error" and row["compiled"] is False


def test_syntax_error_becomes_other_error_not_compiled():
    row = run(SMALL_REF, "def broken(:\n" + CORRECT)
    assert row["outcome"] == "other_error" and row["compiled"] is False


def test_constructor_runtime_error_counts_as_compiled():
    row = run(SMALL_REF, cand("return x", init="raise RuntimeError('bad init')"))
    assert row["outcome"] == "runtime_error" and row["compiled"] is True


def test_constructor_other_exception_counts_as_not_compiled():
    row = run(SMALL_REF, cand("return x", init="raise ValueError('bad init')"))
    assert row["outcome"] == "other_error" and row["compiled"] is False
    row = run(SMALL_REF, cand("return x", init="raise ValueError('CUDA error: device-side assert')"))
    assert row["outcome"] == "cuda_error" and row["compiled"] is False


def test_missing_modelnew_is_other_error():
    row = run(SMALL_REF, "import torch\n")
    assert row["outcome"] == "other_error" and row["compiled"] is False


def test_reference_forward_exception_is_runtime_error():
    ref = SMALL_REF.replace("return torch.relu(x) * 2.0", "raise RuntimeError('ref broke')")
    row = run(ref, CORRECT)
    assert row["outcome"] == "runtime_error" and row["compiled"] is True


def test_hardened_tolerance_table():
    assert kb.tolerance_for("paper") == 1e-2
    assert kb.tolerance_for("hardened", torch.float32) == 1e-4
    assert kb.tolerance_for("hardened", torch.float16) == 1e-2
    assert kb.tolerance_for("hardened", torch.bfloat16) == 1e-2


def test_hardened_rejects_what_paper_era_accepts():
    off = cand("return torch.relu(x) * 2.0 * (1 + 1e-3)")
    assert run(SMALL_REF, off, variant="paper")["correct"] is True
    assert run(SMALL_REF, off, variant="hardened")["correct"] is False


def test_hardened_casts_inputs_and_models_to_precision():
    half = cand("assert x.dtype == torch.float16\n        return torch.relu(x) * 2.0")
    assert run(SMALL_REF, half, variant="hardened", precision="fp16")["correct"] is True
    assert run(SMALL_REF, half, variant="paper")["outcome"] == "runtime_error"


def test_hardened_casts_integer_inputs_too():
    """KernelBench main casts every tensor input (issue #151): an integer index input becomes float."""
    ref = SMALL_REF.replace("return torch.relu(x) * 2.0", "return torch.zeros(3)[x]").replace(
        "torch.randn(batch_size, dim)", "torch.randint(0, 3, (batch_size, dim))")
    assert run(ref, cand("return torch.zeros(3)[x]"), variant="paper")["correct"] is True
    assert run(ref, cand("return torch.zeros(3)[x]"), variant="hardened")["outcome"] == "runtime_error"


def test_isolated_child_matches_in_process():
    row = kb.check_isolated(SMALL_REF, CORRECT, timeout_s=120)
    assert row == run(SMALL_REF, CORRECT)


@pytest.mark.slow
def test_isolated_timeout_is_dropped():
    slow = cand("import time; time.sleep(60); return x")
    row = kb.check_isolated(SMALL_REF, slow, timeout_s=8)
    assert row["outcome"] == "timeout" and row["correct"] is None
