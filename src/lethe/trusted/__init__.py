"""Trusted corpus: correct kernels run through the verifier to measure its false-fail rate per gate.

* :mod:`lethe.trusted.corpus` -- the members (every KernelBench problem's own code as ``ModelNew = Model``, and
  the hand-written kernels of ``data/trusted/kernels/``), their sizes and the budget that excludes a problem;
* :mod:`lethe.trusted.run` -- the resumable runner (one command, see its docstring);
* :mod:`lethe.trusted.table` -- the false-fail table and the list of every failure with its explanation;
* :mod:`lethe.trusted.explain` -- a failing probe rebuilt on the CPU, the evidence behind each explanation.
"""
