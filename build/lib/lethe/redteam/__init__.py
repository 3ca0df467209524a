"""The verifier judged from both sides: a red team of broken kernels and a positive control of trusted ones.

A checker that flags everything is as useless as one that flags nothing. ``data/red_team/`` holds kernels that
are wrong in the ways generated kernels are wrong yet plausibly pass KernelBench's loose check; each must be
caught by the gates it targets. ``data/positive_control/`` holds kernels verified against hand-derived float64
formulas; each must pass every applicable gate. This package loads their manifests (:mod:`.manifest`), runs
the battery and the loose check over them (:mod:`.run`) and builds the tables (:mod:`.tables`).
"""
