"""Corpus ``technoabsurdist-runs``: KernelBench levels 1-3 by Gemini 2.5 Pro and Qwen3-Coder, with verdicts.

technoabsurdist/KernelBench (a KernelBench fork, MIT licence file) commits seven KernelBench-layout run folders
at :data:`SPEC`'s commit, one CUDA sample per problem, each with the ``eval_results.json`` of KernelBench's own
check run upstream on an A100 (compiled, correctness per problem). Generation read the problems from the Hub
(``dataset_src: huggingface``); the fork's KernelBench/ folder at that commit is the July 2025 revision, and
kernels that restate their problem's sizes restate that revision's, so that folder is the pairing. The two
Claude Opus runs of the same repository use another layout (``problem_<P>_kernel.py``, ``detailed_results.json``)
and are not part of this corpus. Pinning, pairing and layout: :mod:`lethe.corpora.kbruns`.
"""

from __future__ import annotations

import sys

from lethe.corpora import kbruns
from lethe.corpora.kbruns import Run, RunsCorpus

_QWEN = "Qwen3-Coder-480B-A35B-Instruct-FP8"
SPEC = RunsCorpus(
    name="technoabsurdist-runs",
    repo="technoabsurdist/KernelBench",
    commit="9202a5c5786ab959fcaa3b4ce0356348bb87c86a",
    license="MIT (the fork's LICENSE, KernelBench's; it does not say whether it covers the generated kernels, so "
            "they are measured, never committed)",
    runs=(
        Run("runs/gemini_level1_run", "gemini-2.5-pro", "cuda", "eval_results.json"),
        Run("runs/gemini_level2_run", "gemini-2.5-pro", "cuda", "eval_results.json"),
        Run("runs/gemini_level3_run", "gemini-2.5-pro", "cuda", "eval_results.json"),
        Run("runs/qwen3_level1_run", _QWEN, "cuda", "eval_results.json"),
        Run("runs/qwencoder_level1_run", _QWEN, "cuda", "eval_results.json"),
        Run("runs/qwencoder_level2_run", _QWEN, "cuda", "eval_results.json"),
        Run("runs/qwencoder_level3_run", _QWEN, "cuda", "eval_results.json"),
    ),
    manifest="technoabsurdist_runs.json",
)


def main(argv: list[str] | None = None) -> int:
    return kbruns.main(SPEC, argv)


if __name__ == "__main__":
    sys.exit(main())
