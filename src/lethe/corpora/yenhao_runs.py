"""Corpus ``yenhao-runs``: all KernelBench levels by GPT-5.5 (Codex), Gemma 4 and Qwen3.6, with verdicts.

yenhao-huang/KernelBench (a KernelBench fork, MIT licence file) commits, at :data:`SPEC`'s commit, runs over
every problem of its own KernelBench/ folder (``dataset_src: local``), one CUDA sample per problem, in the layout
``runs/<run>/generated_kernels/level_<L>/problem_<P>.py`` with ``results.jsonl`` holding KernelBench's check as
run upstream on an RTX 4090 (compiled, correctness per kernel). Three complete runs are taken: Codex with
gpt-5.5, Gemma 4 26B-A4B (4-bit GGUF) and the isolated-server Qwen3.6 run (its config names only
``/workspace/llm_model``; the model is named from the run folder). A problem whose generation failed has no
kernel file and so is not listed. The fork's other folders are left out: the ``*_retime_*`` runs hold links
to these same files, the other ``ralph_qwen36_*`` runs are incomplete or extracted nothing, the ``openrouter_*``
runs are small or partial. Level-4 kernels (Hugging Face models) are listed and dropped with their reason.
Pinning, pairing and layout: :mod:`lethe.corpora.kbruns`.
"""

from __future__ import annotations

import sys

from lethe.corpora import kbruns
from lethe.corpora.kbruns import Run, RunsCorpus

SPEC = RunsCorpus(
    name="yenhao-runs",
    repo="yenhao-huang/KernelBench",
    commit="62472a673baf4540af8129fa0e531505f4e62c7d",
    license="MIT (the fork's LICENSE, KernelBench's; it does not say whether it covers the generated kernels, so "
            "they are measured, never committed)",
    runs=(
        Run("runs/ralph_codex_cuda_all", "codex-gpt-5.5", "cuda", "results.jsonl", "per_problem"),
        Run("runs/ralph_gemma4_cuda_all", "gemma-4-26B-A4B-it-Q4_K_XL", "cuda", "results.jsonl", "per_problem"),
        Run("runs/ralph_qwen36_cuda_all_gpu1_server_isolated", "qwen3.6 (run name)", "cuda", "results.jsonl",
            "per_problem"),
    ),
    manifest="yenhao_runs.json",
)


def main(argv: list[str] | None = None) -> int:
    return kbruns.main(SPEC, argv)


if __name__ == "__main__":
    sys.exit(main())
