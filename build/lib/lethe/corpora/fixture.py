"""Build the fixture corpus: a small Dr. Kernel cold-start look-alike from this project's own kernels.

``data/fixture_corpus/drkernel_fixture.parquet`` has the exact upstream parquet schema (:data:`SCHEMA`) and
trajectories shaped like the real ones (10 messages, user/assistant alternating, KernelGYM-style feedback), so
that extraction, classification, the funnel and the audit run on it exactly as they would on the real corpus.
Every row is one entry of :data:`MANIFEST`: a task (folder under ``data/fixture_corpus/kernels/``, holding
``reference.py``), a candidate variant (a file beside it), the corpus's final_speedup, and the conversation
layout. The manifest is chosen so that every operator class and every funnel branch occurs.

Run ``python -m lethe.corpora.fixture`` to rebuild; the output is byte-identical for the same pyarrow.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
KERNELS = REPO / "data" / "fixture_corpus" / "kernels"
OUT = REPO / "data" / "fixture_corpus" / "drkernel_fixture.parquet"
FENCE = "```"


def schema():
    """The upstream column types, in upstream order (hkust-nlp/drkernel-coldstart-8k)."""
    import pyarrow as pa

    return pa.schema([
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("uuid", pa.int64()),
        ("entry_point", pa.string()),
        ("repo_name", pa.string()),
        ("module_name", pa.string()),
        ("final_speedup", pa.float64()),
        ("num_rounds", pa.int64()),
        ("original_python_code", pa.string()),
        ("best_round", pa.int64()),
        ("timestamp", pa.float64()),
        ("conversion_mode", pa.string()),
        ("enable_thinking", pa.bool_()),
    ])


@dataclass(frozen=True)
class Entry:
    """One fixture row. ``layout``: where the ModelNew answer sits in the conversation.

    final   - in the last assistant turn, followed by a helper block without ModelNew;
    earlier - in turn 3; turns 4-5 answer in prose only (extraction must scan backwards);
    revised - an older, different variant in turn 1 and the chosen one in turn 5 (the last one must win);
    none    - no assistant turn ever produced ModelNew (the row has no candidate).
    ``intent`` is what the variant was written to exercise; it is documentation, not an expected verdict.
    """

    task: str
    variant: str
    final_speedup: float
    layout: str
    intent: str


MANIFEST: tuple[Entry, ...] = (
    # faithful rewrites, one per class (and one whose reference is broken)
    Entry("attention", "good_torch", 1.31, "final", "correct"),
    Entry("scan", "good_torch", 1.12, "final", "correct"),
    Entry("matmul", "good_torch", 1.05, "final", "correct"),
    Entry("conv", "good_torch", 1.02, "final", "correct"),
    Entry("norm", "good_torch", 1.44, "final", "correct"),
    Entry("softmax", "good_torch", 1.27, "final", "correct"),
    Entry("reduction", "good_torch", 1.09, "final", "correct"),
    Entry("elementwise", "good_torch", 1.18, "final", "correct"),
    Entry("other", "good_torch", 1.01, "final", "correct (class not audited)"),
    Entry("broken_ref", "good_torch", 2.10, "final", "reference not executable"),
    # Triton kernels the CPU interpreter can run (constexpr bounds)
    Entry("scan", "triton_blocked", 1.63, "final", "correct Triton"),
    Entry("softmax", "triton_row", 1.88, "final", "correct Triton"),
    Entry("reduction", "triton_constexpr", 1.74, "final", "correct Triton"),
    # red-team: accepted by the corpus, wrong under the contract
    Entry("attention", "unstable_exp", 1.52, "final", "overflow to inf/NaN on large scores"),
    Entry("scan", "exclusive", 1.21, "final", "wrong values (exclusive scan)"),
    Entry("matmul", "half_precision", 1.93, "final", "precision loss (fp16 compute)"),
    Entry("conv", "unfold_matmul", 1.07, "final", "correct alternative formulation"),
    Entry("norm", "hardcoded_shape", 1.66, "final", "rejects non-native shapes"),
    Entry("softmax", "nan_squash", 1.14, "final", "hides NaN/inf instead of propagating"),
    Entry("reduction", "cached_output", 3.40, "final", "stale memoised output across calls"),
    Entry("reduction", "fp16_accumulate", 1.58, "final", "half-precision accumulation"),
    Entry("elementwise", "inplace_alias", 1.36, "final", "writes into and returns the input"),
    Entry("other", "view_alias", 5.20, "final", "returns a view aliasing the input (class not audited)"),
    Entry("scan", "inplace_out", 1.45, "final", "scans into its input and returns it (aliasing)"),
    # funnel and pipeline branches
    Entry("matmul", "aot_compile_error", 1.22, "final", "toolchain artifact (Triton CompilationError)"),
    Entry("conv", "syntax_error", 1.10, "final", "fails to load (not an artifact)"),
    Entry("norm", "init_fail", 1.19, "final", "fails to construct (not an artifact)"),
    Entry("reduction", "triton_runtime_loop", 1.47, "final", "CPU interpreter limitation (not auditable on CPU)"),
    Entry("elementwise", "cuda_inline", 1.73, "final", "CUDA source (not auditable on a CPU-only machine)"),
    Entry("other", "good_torch", 1.03, "none", "no ModelNew in any assistant turn"),
    Entry("broken_ref", "good_torch", 1.40, "earlier", "reference not executable"),
    # not accepted by the corpus (final_speedup <= 0): dropped before auditing
    Entry("scan", "good_torch", 0.0, "final", "not accepted"),
    Entry("matmul", "half_precision", -1.0, "final", "not accepted"),
    Entry("softmax", "nan_squash", 0.0, "revised", "not accepted"),
    Entry("conv", "good_torch", 0.0, "earlier", "not accepted"),
    Entry("attention", "good_torch", -1.0, "final", "not accepted"),
    Entry("reduction", "cached_output", 0.0, "final", "not accepted"),
    # the same kernels in other conversation layouts (extraction must still find the right block)
    Entry("attention", "good_torch", 1.29, "earlier", "correct"),
    Entry("norm", "good_torch", 1.41, "revised", "correct"),
    Entry("softmax", "good_torch", 1.25, "revised", "correct"),
    Entry("elementwise", "good_torch", 1.16, "earlier", "correct"),
    Entry("matmul", "good_torch", 1.04, "revised", "correct"),
    Entry("other", "good_torch", 1.02, "earlier", "correct (class not audited)"),
    Entry("conv", "unfold_matmul", 1.06, "earlier", "correct alternative formulation"),
)

# For "revised" rows, the older variant shown in turn 1 (a different file of the same task when one exists).
_OLDER = {"norm": "hardcoded_shape", "softmax": "nan_squash", "matmul": "half_precision"}

_TASK_PROMPT = (
    "You write custom Triton kernels to replace the PyTorch operators in the given architecture and make it "
    "faster. Here is an example of the format: an architecture `Model` and its optimised `ModelNew`.\n\n"
    f"{FENCE}python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n"
    f"        return a + b  # example only\n{FENCE}\n\n"
    "Optimise the following architecture. Output the new code as `ModelNew` in a single python block.\n\n"
)


def _code(task: str, variant: str) -> str:
    return (KERNELS / task / f"{variant}.py").read_text()


def _feedback(turn: int, speedup: float) -> str:
    return (f"Server feedback (round {turn}):\n  compiled: true\n  correctness: passed on 5 random inputs\n"
            f"  speedup: {max(speedup, 0.0):.2f}x\nImprove the implementation further if you can.")


def messages(entry: Entry) -> tuple[list[dict[str, str]], int]:
    """The 10-message trajectory and the 1-based round holding the chosen candidate (best_round)."""
    ref = _code(entry.task, "reference")
    cand = _code(entry.task, entry.variant)
    answer = (f"The main cost is memory traffic, so I fuse the operations into one pass.\n\n"
              f"{FENCE}python\n{cand}{FENCE}\n")
    helper = f"\nQuick check I used locally:\n\n{FENCE}python\nprint('shapes ok')\n{FENCE}\n"
    prose = "The previous version is already close to the bandwidth limit; I keep it unchanged."
    turns = {r: f"Round {r}: still profiling, no code change yet." for r in range(1, 6)}
    best = 5
    if entry.layout == "final":
        turns[5] = answer + helper
    elif entry.layout == "earlier":
        turns[3] = answer
        turns[4] = turns[5] = prose
        best = 3
    elif entry.layout == "revised":
        older = _OLDER.get(entry.task, entry.variant)
        turns[1] = f"First attempt:\n\n{FENCE}python\n{_code(entry.task, older)}{FENCE}\n"
        turns[5] = answer
    elif entry.layout == "none":
        turns[5] = "I could not find a faster formulation than the PyTorch one.\n\n" + helper
    else:
        raise ValueError(f"unknown layout {entry.layout!r}")
    msgs = []
    for r in range(1, 6):
        user = _TASK_PROMPT + f"{FENCE}python\n{ref}{FENCE}\n" if r == 1 else _feedback(r - 1, entry.final_speedup)
        msgs.append({"role": "user", "content": user})
        msgs.append({"role": "assistant", "content": turns[r]})
    return msgs, best


def rows() -> list[dict]:
    out = []
    for uuid, e in enumerate(MANIFEST):
        msgs, best = messages(e)
        out.append({
            "messages": msgs, "uuid": uuid, "entry_point": "Model", "repo_name": "", "module_name": "",
            "final_speedup": float(e.final_speedup), "num_rounds": 5,
            "original_python_code": _code(e.task, "reference"), "best_round": best,
            "timestamp": 1_780_000_000.0 + uuid, "conversion_mode": "full_conversation_enhanced",
            "enable_thinking": False,
        })
    return out


def build(out: Path = OUT) -> Path:
    """Write the fixture parquet (temp file + rename, so a reader never sees half of it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows(), schema=schema())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Rebuild the fixture corpus parquet.")
    ap.add_argument("--out", type=Path, default=OUT)
    print(build(ap.parse_args(argv).out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
