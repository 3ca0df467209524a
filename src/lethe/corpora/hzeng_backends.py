"""Corpus ``hzeng-backends``: KernelBench level 2 written by two models for four kernel languages.

hzeng2000/KernelBench (a KernelBench fork, MIT licence file) commits eight run folders at :data:`SPEC`'s
commit: ``runs/level_2_backend_<backend>_model_<model>/``, one sample per level-2 problem, for backends CUDA,
Triton, CuTe and TileLang and models Kimi-K2-0905 and grok-code-fast-1 (each folder's generation_config.yaml
names them; generation read the fork's own KernelBench/ folder, ``dataset_src: local``). No evaluation results
are committed, so every kernel is unjudged upstream. The Triton folders are the ones that need no nvcc build.
The TileLang runs were generated for fp16 (``precision: fp16`` in their configs), the others for fp32.
Pinning, pairing and layout: :mod:`lethe.corpora.kbruns`.
"""

from __future__ import annotations

import sys

from lethe.corpora import kbruns
from lethe.corpora.kbruns import Run, RunsCorpus

_MODELS = (("Kimi-K2-0905", "Kimi-K2-0905"), ("grok-code-fast-1", "grok-code-fast-1"))
SPEC = RunsCorpus(
    name="hzeng-backends",
    repo="hzeng2000/KernelBench",
    commit="833e16d179fa5fd2ea8c69f4134658880b841517",
    license="MIT (the fork's LICENSE, KernelBench's; it does not say whether it covers the generated kernels, so "
            "they are measured, never committed)",
    runs=tuple(Run(folder=f"runs/level_2_backend_{b}_model_{tag}", model=model, backend=b)
               for b in ("cuda", "cute", "tilelang", "triton") for tag, model in _MODELS),
    manifest="hzeng_backends.json",
)


def main(argv: list[str] | None = None) -> int:
    return kbruns.main(SPEC, argv)


if __name__ == "__main__":
    sys.exit(main())
